"""Issue 23.2: a memory-search under ``session_only`` visibility reads the session's run-memory records once for
both the prompt-eligibility bundle and the hits (``run_memory._own_records_for_search``): the same hits as the
two separate reads (``recovered_bundle`` then ``search_records``), lexical and hybrid, expired records pruned
and counted once."""

from __future__ import annotations

import dataclasses

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory import metrics, run_memory
from memory.models import RunMemoryRecord
from memory.run_memory_policy import RunMemoryPolicy
from memory.runs import RunInput, run_complete, run_open, run_start
from memory.sessions import learning_scope_keys, session_create

pytestmark = pytest.mark.django_db

QUERIES = ["sneakers bed", "deploy tuesday", "nothing matches zzz", None, ""]


def _finished(session, count: int) -> None:
    for i in range(count):
        run, _ = run_open(
            session=session, run_input=RunInput(content=f"question {i} sneakers", attachments=[], metadata={})
        )
        run_complete(run=run_start(run=run), output=f"answer {i}: under the bed" if i % 2 else f"deploy day {i}")


def _separate(session, query, ranker, policy, monkeypatch):
    with monkeypatch.context() as patch:
        patch.setattr(run_memory, "_own_records_for_search", lambda *args, **kwargs: None)
        return run_memory.search_hits(
            session=session, scope_keys=learning_scope_keys(session), query=query, ranker=ranker, policy=policy
        )


@pytest.mark.parametrize("ranker", ["lexical", "hybrid"])
def test_one_read_gives_the_hits_of_the_two_reads(agent, ranker, monkeypatch):
    session = session_create(owner=agent)
    _finished(session, 7)
    policy = RunMemoryPolicy()
    for query in QUERIES:
        with CaptureQueriesContext(connection) as context:
            shared = run_memory.search_hits(
                session=session, scope_keys=learning_scope_keys(session), query=query, ranker=ranker, policy=policy
            )
        assert sum("memory_runmemoryrecord" in q["sql"] for q in context.captured_queries) == 1
        assert shared == _separate(session, query, ranker, policy, monkeypatch)
    assert any(hit["prompt_eligible"] for hit in shared) and not all(hit["prompt_eligible"] for hit in shared)
    tight = dataclasses.replace(policy, max_prompt_entries=0)
    assert run_memory.search_hits(
        session=session, scope_keys=[], query="sneakers", ranker=ranker, policy=tight
    ) == _separate(session, "sneakers", ranker, tight, monkeypatch)


def test_expired_records_are_pruned_and_counted_once(agent, monkeypatch):
    session = session_create(owner=agent)
    _finished(session, 6)
    policy = RunMemoryPolicy()
    oldest = list(RunMemoryRecord.objects.filter(session=session).order_by("recorded_at_ms")[:2])
    RunMemoryRecord.objects.filter(pk__in=[r.pk for r in oldest]).update(recorded_at_ms=1)
    before = metrics.read(["run_memory.pruned_ttl_total"])["run_memory.pruned_ttl_total"]
    shared = run_memory.search_hits(session=session, scope_keys=[], query="sneakers", ranker="hybrid", policy=policy)
    assert metrics.read(["run_memory.pruned_ttl_total"])["run_memory.pruned_ttl_total"] == before + 2
    assert RunMemoryRecord.objects.filter(session=session).count() == 4
    assert shared == _separate(session, "sneakers", "hybrid", policy, monkeypatch)


def test_other_visibilities_read_as_before(agent, monkeypatch):
    session = session_create(owner=agent)
    _finished(session, 3)
    policy = dataclasses.replace(RunMemoryPolicy(), search_visibility="workspace")
    called = []
    original = run_memory.search_records
    monkeypatch.setattr(run_memory, "search_records", lambda *a, **k: called.append(1) or original(*a, **k))
    run_memory.search_hits(session=session, scope_keys=[], query="sneakers", ranker="lexical", policy=policy)
    assert called == [1]
