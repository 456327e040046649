"""How the learning plane's services queue background work: by task name, after commit.

``learnings.tasks`` imports the services (a task fetches by id and calls one); the services never import the
tasks module. They look a task up by its registered name through Celery's ``current_app.signature``, which
resolves to the registered task (so eager mode in tests and ``acks_late`` routing apply as for ``.delay``)."""

from __future__ import annotations

from celery import current_app
from django.db import transaction

REVIEW_CANDIDATE_TASK = "learnings.tasks.review_candidate"
SHADOW_REVIEW_SWEEP_TASK = "learnings.tasks.shadow_review_sweep"


def send_task(task_name: str, *args: object) -> None:
    """Queue ``task_name(*args)`` now."""
    current_app.signature(task_name, args=args).delay()


def enqueue_on_commit(task_name: str, *args: object) -> None:
    """Queue ``task_name(*args)`` once the current transaction commits (at once outside one)."""
    transaction.on_commit(lambda: send_task(task_name, *args))
