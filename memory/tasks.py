"""Beat job for Plane 2: pruning. Idempotent; overlap is harmless (row deletes).

The cross-plane repair (beat and worker start) lives in kheish/tasks.py.
"""

from __future__ import annotations

from celery import shared_task

from memory import run_memory


@shared_task(name="memory.tasks.prune_run_memory", acks_late=True)
def prune_run_memory() -> dict:
    report = run_memory.enforce_policy(source="beat")
    return {k: report[k] for k in ("pruned_ttl_count", "pruned_overflow_count", "pruned_orphan_file_count")}
