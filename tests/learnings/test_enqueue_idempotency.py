"""Idempotent enqueue (issue 14.12): the capture replay, the on-commit capture and review, a starting worker and
the shadow sweep queue at most one task per run / candidate at a time. A task is queued only by the call that
claims the row (``capture_queued_at_ms``, ``review_lease_until_ms``); the task clears the claim when it ends, and
a claim whose task was lost lapses after ``KHEISH_QUEUE_LEASE_S``.

Messages are counted with a spy on the task's ``apply_async`` (what ``.delay`` and ``signature(...).delay``
both end in), which records the message instead of running it."""

from __future__ import annotations

import functools
import threading

import pytest
from django.db import connection

from learnings import capture, tasks
from learnings.models import LearningCandidate
from learnings.services import queue
from memory import run_memory
from memory.clock import now_ms
from memory.models import RunMemoryRecord
from tests.factories import SessionFactory
from tests.support.learnings import candidate, set_policy, terminal_run

PREFERENCE = "Preference: always report sizes in gigabytes, not gibibytes."


class Spy:
    """Replaces ``task.apply_async``: records each message's first argument, runs nothing."""

    def __init__(self, monkeypatch, task):
        self.ids: list = []
        self._lock = threading.Lock()
        monkeypatch.setattr(task, "apply_async", self)

    def __call__(self, args=None, kwargs=None, **options):
        with self._lock:
            self.ids.append(args[0] if args else None)


@pytest.fixture
def captures(monkeypatch):
    return Spy(monkeypatch, tasks.capture_run)


@pytest.fixture
def reviews(monkeypatch):
    return Spy(monkeypatch, tasks.review_candidate)


@pytest.fixture
def sweeps(monkeypatch):
    """The sweep a policy change queues, recorded, not run (the transactional tests commit every write)."""
    return Spy(monkeypatch, tasks.shadow_review_sweep)


def capture_on(mode="manual_only"):
    set_policy({"mode": mode, "capture": {"semantic_candidates": {"enabled": True}}})


def pending_runs(count: int) -> list[int]:
    return [terminal_run(SessionFactory(), f"{PREFERENCE} ({n})").pk for n in range(count)]


def claim_of(run_pk: int) -> int | None:
    return RunMemoryRecord.objects.get(run_id=run_pk).capture_queued_at_ms


# ---- capture ----------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_replaying_twice_queues_each_pending_run_once(captures, llm_unconfigured):
    capture_on()
    runs = pending_runs(3)
    assert tasks.replay_pending_captures() == {"queued": 3}
    assert sorted(captures.ids) == sorted(runs)
    assert all(claim_of(pk) is not None for pk in runs)
    assert tasks.replay_pending_captures() == {"queued": 0}
    tasks.queue_on_worker_start()  # a (re)started worker replays too, eagerly here
    assert sorted(captures.ids) == sorted(runs)
    assert sorted(capture.pending_capture_run_ids()) == sorted(runs)


@pytest.mark.django_db
def test_a_backlog_beyond_one_batch_is_queued_batch_by_batch(captures, llm_unconfigured, monkeypatch):
    """Claimed runs are left out of the replay's selection, so the next replay takes the next batch instead
    of finding the same (queued) batch again."""
    monkeypatch.setattr(capture, "pending_capture_run_ids", functools.partial(capture.pending_capture_run_ids, 2))
    capture_on()
    runs = pending_runs(5)
    assert [tasks.replay_pending_captures()["queued"] for _ in range(4)] == [2, 2, 1, 0]
    assert sorted(captures.ids) == sorted(runs)


@pytest.mark.django_db
def test_the_terminal_runs_capture_is_claimed_so_a_replay_does_not_repeat_it(
    captures, llm_unconfigured, django_capture_on_commit_callbacks
):
    capture_on()
    with django_capture_on_commit_callbacks(execute=True):
        run = terminal_run(SessionFactory(), PREFERENCE)
    assert captures.ids == [run.pk] and claim_of(run.pk) is not None
    assert tasks.replay_pending_captures() == {"queued": 0}
    assert captures.ids == [run.pk]


@pytest.mark.django_db
def test_a_lapsed_claim_is_queued_again(captures, llm_unconfigured, settings):
    """A task that was lost (worker killed, message dropped) never clears its claim: after the lease the
    replay queues the run again, and not before."""
    settings.KHEISH_QUEUE_LEASE_S = 60
    capture_on()
    [run] = pending_runs(1)
    assert tasks.replay_pending_captures() == {"queued": 1}
    RunMemoryRecord.objects.filter(run_id=run).update(capture_queued_at_ms=now_ms() - 59_000)
    assert tasks.replay_pending_captures() == {"queued": 0}
    RunMemoryRecord.objects.filter(run_id=run).update(capture_queued_at_ms=now_ms() - 61_000)
    assert tasks.replay_pending_captures() == {"queued": 1}
    assert captures.ids == [run, run]
    assert tasks.replay_pending_captures() == {"queued": 0}  # claimed afresh


@pytest.mark.django_db
def test_the_capture_task_clears_its_claim_so_a_failed_capture_is_replayed(fake_model):
    """The task ends with the receipt still pending (the extractor failed): the claim is cleared at once, so the
    next replay queues it again rather than waiting for the lease."""
    set_policy({"mode": "manual_only", "capture": {"semantic_candidates": {"enabled": True, "timeout_ms": 500}}})
    fake_model.reply_text("not json at all")
    run = terminal_run(SessionFactory(), "Codename agreed for the project: Atlas.")
    assert run_memory.claim_captures([run.pk]) == [run.pk]
    assert tasks.capture_run.apply(args=[run.pk]).result["error"]
    record = RunMemoryRecord.objects.get(run_id=run.pk)
    assert record.semantic_capture == "pending" and record.capture_queued_at_ms is None
    assert run_memory.claim_captures([run.pk]) == [run.pk]


@pytest.mark.django_db
def test_a_run_without_a_record_is_never_claimed():
    assert run_memory.claim_captures([]) == []
    assert run_memory.claim_captures([987654321]) == []


def _race(count: int, work) -> list:
    """Run ``work(index)`` in ``count`` threads (each its own database connection); their results."""
    results: list = [None] * count
    errors: list[BaseException] = []

    def target(index: int) -> None:
        try:
            results[index] = work(index)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    return results


@pytest.mark.django_db(transaction=True)
def test_concurrent_replays_never_queue_a_run_twice(captures, sweeps, llm_unconfigured, monkeypatch):
    """Two replays on two connections both read the same pending runs before either claims any (a barrier
    after the selection): the claim alone decides, and each run is queued by one of them only."""
    capture_on()
    runs = pending_runs(6)
    RunMemoryRecord.objects.update(capture_queued_at_ms=None)  # autocommit: each terminal run queued its capture
    captures.ids.clear()
    barrier = threading.Barrier(2, timeout=30)
    real = capture.pending_capture_run_ids

    def selected_together(*args, **kwargs):
        ids = real(*args, **kwargs)
        barrier.wait()
        return ids

    monkeypatch.setattr(capture, "pending_capture_run_ids", selected_together)
    results = _race(2, lambda index: tasks.replay_pending_captures())
    assert sum(result["queued"] for result in results) == len(runs)
    assert sorted(captures.ids) == sorted(runs)  # every run once, none twice


@pytest.mark.django_db(transaction=True)
def test_concurrent_claims_of_the_same_runs_split_them(captures, sweeps, llm_unconfigured):
    """Many claimers of one list at once (no waiting on each other's locks, so no deadlock): disjoint shares
    that add up to the list."""
    capture_on()
    runs = pending_runs(8)
    RunMemoryRecord.objects.update(capture_queued_at_ms=None)
    barrier = threading.Barrier(4, timeout=30)

    def claim(index):  # half of them in the other order
        barrier.wait()
        return run_memory.claim_captures(list(reversed(runs)) if index % 2 else runs)

    shares = _race(4, claim)
    claimed = [pk for share in shares for pk in share]
    assert sorted(claimed) == sorted(runs)


# ---- review -----------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_new_candidates_review_is_queued_once(reviews, django_capture_on_commit_callbacks):
    set_policy({"mode": "shadow"})
    with django_capture_on_commit_callbacks(execute=True):
        cand = candidate()
    assert reviews.ids == [cand.pk]
    cand.refresh_from_db()
    assert cand.review_lease_until_ms is not None
    assert queue.queue_reviews([cand.pk]) == []  # already queued
    assert tasks.shadow_review_sweep() == {"reviewed": 0, "failed": 0}  # the sweep leaves it to its task
    assert reviews.ids == [cand.pk]


@pytest.mark.django_db
def test_policy_change_and_worker_start_do_not_repeat_a_queued_review(reviews, django_capture_on_commit_callbacks):
    set_policy({"mode": "shadow"})
    with django_capture_on_commit_callbacks(execute=True):
        queued = candidate()
    with django_capture_on_commit_callbacks(execute=True):
        set_policy({"mode": "shadow", "judge": {"enabled": False}})  # re-queue: the sweep runs (eagerly)
    tasks.queue_on_worker_start()
    queued.refresh_from_db()
    assert reviews.ids == [queued.pk] and queued.automation_review is None  # left to its own task


@pytest.mark.django_db
def test_a_lapsed_review_lease_is_taken_again(reviews, settings, django_capture_on_commit_callbacks):
    settings.KHEISH_QUEUE_LEASE_S = 60
    set_policy({"mode": "shadow"})
    with django_capture_on_commit_callbacks(execute=True):
        cand = candidate()
    LearningCandidate.objects.filter(pk=cand.pk).update(review_lease_until_ms=now_ms() + 1_000)
    assert queue.queue_reviews([cand.pk]) == []
    LearningCandidate.objects.filter(pk=cand.pk).update(review_lease_until_ms=now_ms() - 1)
    assert queue.queue_reviews([cand.pk]) == [cand.pk]
    assert reviews.ids == [cand.pk, cand.pk]
    cand.refresh_from_db()
    assert cand.review_lease_until_ms > now_ms() + 50_000  # the lease is the setting
    LearningCandidate.objects.filter(pk=cand.pk).update(review_lease_until_ms=now_ms() - 1)
    assert tasks.shadow_review_sweep()["reviewed"] == 1  # a lost task: the sweep reviews it


@pytest.mark.django_db
def test_the_review_task_clears_the_lease_when_it_ends(django_capture_on_commit_callbacks):
    """Run for real: a review clears the lease (shadow), and so does a task that reviewed nothing
    (manual_only), so that a later policy's sweep is not kept waiting for the lease."""
    set_policy({"mode": "manual_only"})
    first = candidate()
    assert queue.claim_reviews([first.pk]) == [first.pk]
    assert tasks.review_candidate.apply(args=[first.pk]).result is None
    first.refresh_from_db()
    assert first.review_lease_until_ms is None and first.automation_review is None
    set_policy({"mode": "shadow"})
    assert queue.claim_reviews([first.pk]) == [first.pk]
    assert tasks.review_candidate.apply(args=[first.pk]).result["mode"] == "shadow"
    first.refresh_from_db()
    assert first.review_lease_until_ms is None and first.automation_review["mode"] == "shadow"


@pytest.mark.django_db
def test_only_pending_candidates_are_claimed():
    set_policy({"mode": "manual_only"})
    cand = candidate()
    LearningCandidate.objects.filter(pk=cand.pk).update(state="rejected")
    assert queue.claim_reviews([cand.pk]) == []


@pytest.mark.django_db(transaction=True)
def test_concurrent_review_claims_never_queue_a_candidate_twice(reviews, sweeps):
    set_policy({"mode": "shadow"})
    pks = [candidate(f"Fact number {n} is true.").pk for n in range(6)]  # outside on_commit capture: unclaimed
    LearningCandidate.objects.filter(pk__in=pks).update(review_lease_until_ms=None)
    reviews.ids.clear()  # autocommit: the creations queued their own reviews; count only the race's
    barrier = threading.Barrier(3, timeout=30)

    def requeue(index):
        barrier.wait()
        return queue.queue_reviews(pks)

    shares = _race(3, requeue)
    assert sorted(pk for share in shares for pk in share) == sorted(pks)
    assert sorted(reviews.ids) == sorted(pks)
