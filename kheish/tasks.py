"""Cross-plane background work: the hourly repair (beat) and the repair a starting worker runs.

Both call ``kheish.maintenance.repair_all`` (run memory, then skills). Idempotent; overlap is harmless.
"""

from __future__ import annotations

import logging

from celery import shared_task
from celery.signals import worker_ready

from kheish import maintenance

logger = logging.getLogger(__name__)


# The registered name predates the move from memory/tasks.py: CELERY_BEAT_SCHEDULE ("repair-run-memory") and
# messages already queued name it so.
@shared_task(name="memory.tasks.repair_run_memory", acks_late=True)
def repair_run_memory() -> dict:
    return maintenance.repair_all(apply=True, source="beat_repair")


@worker_ready.connect
def repair_on_worker_start(sender=None, **kwargs) -> None:
    try:
        summary = maintenance.repair_all(apply=True, source="startup")
        logger.info("startup repair finished", extra={"summary": summary})
    except Exception:  # noqa: BLE001 - a failed repair is reported by doctor, it must not kill the worker
        logger.exception("startup repair failed")
