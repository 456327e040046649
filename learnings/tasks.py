"""Celery tasks of the learning plane. Tasks take ids, are idempotent and ``acks_late``.

* ``learnings.tasks.capture_run`` — capture from a terminal run (queued on commit of the transition);
* ``learnings.tasks.review_candidate`` — automation review of one candidate (queued on commit of creation);
* ``learnings.tasks.shadow_review_sweep`` (beat) — re-review pending candidates the policy in force has not
  reviewed yet, in leased batches claimed with ``select_for_update(skip_locked=True)``;
* ``learnings.tasks.replay_pending_captures`` (beat) — re-queue captures left ``pending``.

Queueing is idempotent per id (issue 14.12): a capture is queued only by the call that claims the run's record
(``memory.run_memory.claim_captures``), a review only by the call that leases the candidate
(``learnings.services.queue.claim_reviews``; the sweep's batch lease is the same column). A task clears its
claim when it ends; a lost task's claim lapses after ``KHEISH_QUEUE_LEASE_S`` and the next replay or sweep
takes the id again. Tasks still run whatever the claim says (a redelivered message is honoured), and stay
idempotent.
"""

from __future__ import annotations

import logging

from celery import shared_task
from celery.signals import worker_ready
from django.db import transaction

from learnings import capture, policy_in_force, review
from learnings.models import LearningCandidate
from learnings.services.queue import REVIEW_CANDIDATE_TASK, SHADOW_REVIEW_SWEEP_TASK, release_review
from memory import run_memory
from memory.clock import now_ms

logger = logging.getLogger(__name__)

SWEEP_BATCH = 100
REVIEW_RETRIES = 5
REVIEW_RETRY_DELAY_S = 0.5


@shared_task(name="learnings.tasks.capture_run", acks_late=True)
def capture_run(run_pk: int) -> dict | None:
    try:
        outcome = capture.capture_run(int(run_pk))
    finally:  # ended, done or not: a receipt still pending may be queued by the next replay
        run_memory.release_capture(int(run_pk))
    return (
        None
        if outcome is None
        else {
            "run_id": outcome.run_id,
            "receipt": outcome.receipt,
            "created": outcome.created,
            "error": outcome.error,
        }
    )


@shared_task(name=REVIEW_CANDIDATE_TASK, acks_late=True, bind=True, max_retries=REVIEW_RETRIES)
def review_candidate(self, candidate_pk: int) -> dict | None:
    """On an error the review (one transaction, so nothing half-done) is queued again after half a second
    (§4.20); after ``REVIEW_RETRIES`` the beat sweep is what tries again (once the
    candidate's lease has lapsed, so a review that keeps failing is not retried at every sweep). A review
    clears the lease; so does a task that found nothing to review."""
    try:
        outcome = review.review_candidate(int(candidate_pk))
    except Exception as exc:
        logger.warning("review of learning-candidate-%s failed (retrying): %s", candidate_pk, exc)
        raise self.retry(exc=exc, countdown=REVIEW_RETRY_DELAY_S) from exc
    if outcome is None:
        release_review(int(candidate_pk))
    return (
        None
        if outcome is None
        else {
            "candidate_id": outcome.candidate_id,
            "mode": outcome.mode,
            "action": outcome.action,
            "state": outcome.state,
            "learning_id": outcome.learning_id,
        }
    )


def claim_review_batch(*, after_pk: int = 0, batch: int = SWEEP_BATCH) -> list[int]:
    """Lease up to ``batch`` pending candidates that need a review under the current policy revision.
    Rows another sweep holds are skipped (``skip_locked``); the lease keeps them out of the next claim, and
    out of ``claim_reviews``, while this sweep reviews them."""
    revision = policy_in_force.policy_revision()
    now = now_ms()
    with transaction.atomic():
        ids = list(
            LearningCandidate.objects.needing_review(revision, now)
            .filter(pk__gt=after_pk)
            .order_by("pk")
            .select_for_update(skip_locked=True)
            .values_list("pk", flat=True)[:batch]
        )
        if ids:
            LearningCandidate.objects.filter(pk__in=ids).update(review_lease_until_ms=now + run_memory.queue_lease_ms())
    return ids


@shared_task(name=SHADOW_REVIEW_SWEEP_TASK, acks_late=True)
def shadow_review_sweep(after_pk: int = 0) -> dict:
    """Review pending candidates in batches; a full batch queues the next one (a cursor, so a candidate
    that keeps failing cannot loop)."""
    if not policy_in_force.current_policy().reviews_candidates:
        return {"reviewed": 0, "failed": 0, "mode": "manual_only"}
    ids = claim_review_batch(after_pk=int(after_pk))
    reviewed = failed = 0
    renewed_at = now_ms()
    for index, pk in enumerate(ids):
        if now_ms() - renewed_at > run_memory.queue_lease_ms() // 3:  # a long batch keeps what it has not reviewed
            renewed_at = now_ms()
            LearningCandidate.objects.filter(pk__in=ids[index:], review_lease_until_ms__isnull=False).update(
                review_lease_until_ms=renewed_at + run_memory.queue_lease_ms()
            )
        try:
            review.review_candidate(pk)
            reviewed += 1
        except Exception:  # one bad candidate must not stop the sweep; the lease expires
            failed += 1
            logger.exception("review of learning-candidate-%s failed", pk)
    if len(ids) == SWEEP_BATCH:
        shadow_review_sweep.delay(ids[-1])
    return {"reviewed": reviewed, "failed": failed}


def queue_captures(run_pks: list[int], *, at_ms: int | None = None) -> list[int]:
    """Queue one capture task for each run this call claims (the on-commit capture of a terminal run, the
    replay); returns those runs."""
    claimed = run_memory.claim_captures(run_pks, at_ms=at_ms)
    for index, run_pk in enumerate(claimed):
        try:
            capture_run.delay(run_pk)
        except Exception:
            for unsent in claimed[index:]:  # a broker failure: the next replay may take them at once
                run_memory.release_capture(unsent)
            raise
    return claimed


@shared_task(name="learnings.tasks.replay_pending_captures", acks_late=True)
def replay_pending_captures() -> dict:
    """Queue the captures left unfinished that no queued task covers: each run at most once, however often
    the replay runs (beat, a starting worker) and however long the backlog."""
    now = now_ms()
    run_ids = capture.pending_capture_run_ids(among=run_memory.capture_claimable(now))
    return {"queued": len(queue_captures(run_ids, at_ms=now))}


@worker_ready.connect
def queue_on_worker_start(sender=None, **kwargs) -> None:
    """At boot, re-queue what a stopped worker may have left: pending reviews and pending captures."""
    try:
        shadow_review_sweep.delay()
        replay_pending_captures.delay()
    except Exception:  # the beat schedule retries; a broker hiccup must not kill the worker
        logger.exception("could not queue the learning plane's start-up work")
