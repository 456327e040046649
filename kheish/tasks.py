"""Cross-plane background work: the hourly repair (beat) and the repair a starting worker runs.

Both call ``kheish.maintenance.repair_all`` (run memory, then skills). Idempotent; overlap is harmless.
"""

from __future__ import annotations

import logging

from celery import shared_task
from celery.signals import worker_ready

from kheish import maintenance

logger = logging.getLogger(__name__)


REPAIR_TASK = "kheish.tasks.repair_all_planes"
LEGACY_REPAIR_TASK = "memory.tasks.repair_run_memory"
"""The name this task had before it moved out of memory/tasks.py (it repairs every plane, not run memory only).
Still registered, as an alias, so that a message queued under it before an upgrade is still run."""


@shared_task(name=REPAIR_TASK, acks_late=True)
def repair_all_planes() -> dict:
    """The hourly repair (CELERY_BEAT_SCHEDULE "repair-all-planes"): run memory, then skills."""
    return maintenance.repair_all(apply=True, source="beat_repair")


@shared_task(name=LEGACY_REPAIR_TASK, acks_late=True)
def repair_under_legacy_name() -> dict:
    return repair_all_planes()


@worker_ready.connect
def repair_on_worker_start(sender=None, **kwargs) -> None:
    try:
        summary = maintenance.repair_all(apply=True, source="startup")
        logger.info("startup repair finished", extra={"summary": summary})
    except Exception:  # a failed repair is reported by doctor, it must not kill the worker
        logger.exception("startup repair failed")
