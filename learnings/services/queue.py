"""How the learning plane's services queue background work: by task name, after commit.

``learnings.tasks`` imports the services (a task fetches by id and calls one); the services never import the
tasks module. They look a task up by its registered name through Celery's ``current_app.signature``, which
resolves to the registered task (so eager mode in tests and ``acks_late`` routing apply as for ``.delay``).

A candidate's review is queued only by the call that claims it (issue 14.12): the claim is the candidate's
``review_lease_until_ms`` — the same lease the shadow sweep takes on the batch it reviews — set by one
conditional UPDATE … RETURNING, so the on-commit review of a new candidate, a sweep and a replay never handle
the same candidate at once, and nothing is queued twice for one id. The review clears the lease; a lost task's
lease lapses (``KHEISH_QUEUE_LEASE_S``) and the sweep reviews the candidate then."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from celery import current_app
from django.db import connection, transaction

from learnings.models import CandidateState, LearningCandidate
from memory.clock import now_ms
from memory.run_memory import queue_lease_ms

logger = logging.getLogger(__name__)

REVIEW_CANDIDATE_TASK = "learnings.tasks.review_candidate"
SHADOW_REVIEW_SWEEP_TASK = "learnings.tasks.shadow_review_sweep"

_CANDIDATES_TABLE = LearningCandidate._meta.db_table
_CLAIM_REVIEWS = (  # the table name is a model constant, never input
    f'WITH picked AS (SELECT "id" FROM "{_CANDIDATES_TABLE}" WHERE "id" = ANY(%s) AND "state" = %s '  # noqa: S608
    'AND ("review_lease_until_ms" IS NULL OR "review_lease_until_ms" < %s) FOR UPDATE SKIP LOCKED) '
    f'UPDATE "{_CANDIDATES_TABLE}" AS c SET "review_lease_until_ms" = %s FROM picked WHERE c."id" = picked."id" '
    'RETURNING c."id"'
)


def send_task(task_name: str, *args: object) -> None:
    """Queue ``task_name(*args)`` now."""
    current_app.signature(task_name, args=args).delay()


def enqueue_on_commit(task_name: str, *args: object) -> None:
    """Queue ``task_name(*args)`` once the current transaction commits (at once outside one). A failure to
    queue is logged, never raised: the write committed (its caller answers success) and the beat schedule runs
    the same work again."""
    transaction.on_commit(lambda: send_task(task_name, *args), robust=True)


def claim_reviews(candidate_pks: Iterable[int], *, at_ms: int | None = None) -> list[int]:
    """Lease the pending candidates among ``candidate_pks`` that nobody holds; returns those this call
    leased, in the given order. One statement: rows are locked as they are picked and the lease re-checked on
    the row's latest version; a row another transaction holds (a sweep claiming it, a review writing it) is
    skipped, so claimers never wait on each other and never both return a candidate."""
    wanted = list(dict.fromkeys(int(pk) for pk in candidate_pks))
    if not wanted:
        return []
    at_ms = now_ms() if at_ms is None else at_ms
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM_REVIEWS, [wanted, CandidateState.PENDING, at_ms, at_ms + queue_lease_ms()])
        claimed = {row[0] for row in cursor.fetchall()}
    return [pk for pk in wanted if pk in claimed]


def release_review(candidate_pk: int) -> None:
    """The review task of ``candidate_pk`` ended without reviewing it (or could not be queued): free the
    lease so that the next sweep may take it."""
    LearningCandidate.objects.filter(pk=candidate_pk, review_lease_until_ms__isnull=False).update(
        review_lease_until_ms=None
    )


def queue_reviews(candidate_pks: Iterable[int]) -> list[int]:
    """Queue one review task for each candidate this call claims; returns them."""
    claimed = claim_reviews(candidate_pks)
    for index, pk in enumerate(claimed):
        try:
            send_task(REVIEW_CANDIDATE_TASK, pk)
        except Exception:
            for unsent in claimed[index:]:  # a broker failure: the sweep may take them at once
                release_review(unsent)
            raise
    return claimed


def enqueue_review_on_commit(candidate_pk: int) -> None:
    """Queue the review of a new candidate once its transaction commits (claiming it first). A failure to
    claim or queue is logged, never raised (the candidate is stored): the shadow sweep reviews it."""
    transaction.on_commit(lambda: queue_reviews([candidate_pk]), robust=True)
