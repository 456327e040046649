"""Beat jobs for Plane 2: pruning and repair. Idempotent; overlap is harmless (row deletes)."""

from __future__ import annotations

import logging

from celery import shared_task
from celery.signals import worker_ready

logger = logging.getLogger(__name__)


@shared_task(name="memory.tasks.prune_run_memory", acks_late=True)
def prune_run_memory() -> dict:
    from memory import run_memory

    report = run_memory.enforce_policy(source="beat")
    return {k: report[k] for k in ("pruned_ttl_count", "pruned_overflow_count", "pruned_orphan_file_count")}


@shared_task(name="memory.tasks.repair_run_memory", acks_late=True)
def repair_run_memory() -> dict:
    from kheish import maintenance

    return maintenance.repair_all(apply=True, source="beat_repair")


@worker_ready.connect
def repair_on_worker_start(sender=None, **kwargs) -> None:
    try:
        from kheish import maintenance

        summary = maintenance.repair_all(apply=True, source="startup")
        logger.info("startup repair finished", extra={"summary": summary})
    except Exception:  # noqa: BLE001 - a failed repair is reported by doctor, it must not kill the worker
        logger.exception("startup repair failed")
