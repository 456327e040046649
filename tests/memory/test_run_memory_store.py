"""The hand-written SQL of the terminal-run record path agrees with the ORM and the pure rules."""

from __future__ import annotations

import pytest
from django.db import transaction

from memory import run_memory_store as store
from memory.models import Run, RunMemoryRecord, RunMemoryScope
from memory.run_memory import prune_session, record_terminal_run
from memory.run_memory_policy import RunMemoryPolicy
from memory.sessions import bound_scope_keys, learning_scope_keys, session_scope_keys
from tests.factories import AgentGrantFactory, PersonaFactory, ProjectFactory, SessionFactory, TerminalRunFactory

pytestmark = pytest.mark.django_db


def test_session_scope_keys_match_bound_scope_keys_and_reads_narrow_them_to_grants():
    bare = SessionFactory()
    assert (
        session_scope_keys(bare.pk)
        == bound_scope_keys(bare)
        == learning_scope_keys(bare)
        == [f"session:{bare.public_id}", "workspace:default"]
    )
    session = SessionFactory(persona=PersonaFactory(persona_id="ops"), granted=False)
    projects = [ProjectFactory(project_id=pid) for pid in ("zeta", "alpha", "mid")]
    session.projects.set(projects)
    assert (
        session_scope_keys(session.pk)
        == bound_scope_keys(session)
        == [
            f"session:{session.public_id}",
            "persona:ops",
            "project:alpha",
            "project:mid",
            "project:zeta",
            "workspace:default",
        ]
    )
    # what the session reads is its bindings intersected with its owner's current grants (issue 19.2)
    assert learning_scope_keys(session) == [f"session:{session.public_id}", "workspace:default"]
    AgentGrantFactory(user=session.owner, projects=projects[1:], personas=[session.persona])
    assert learning_scope_keys(session) == [
        f"session:{session.public_id}",
        "persona:ops",
        "project:alpha",
        "project:mid",
        "workspace:default",
    ]


def _terminal_run(session, n: int, *, finished_at_ms: int) -> Run:
    return TerminalRunFactory(
        session=session,
        submitted_at_ms=finished_at_ms,
        finished_at_ms=finished_at_ms,
        input={"content": f"question {n} about disks"},
        outputs=[{"content": f"answer {n}"}],
    )


def test_record_insert_scopes_and_overflow_prune():
    session = SessionFactory()
    session.projects.set([ProjectFactory(project_id="p1")])
    policy = RunMemoryPolicy(max_tracked_per_session=3)
    base = 1_900_000_000_000
    runs = [_terminal_run(session, n, finished_at_ms=base + n) for n in range(5)]
    for run in runs:
        with transaction.atomic():
            record = record_terminal_run(run, policy=policy)
        assert record is not None
        assert RunMemoryRecord.objects.get(pk=record.pk).summary == record.summary
    kept = list(RunMemoryRecord.objects.order_by("recorded_at_ms").values_list("run_id", flat=True))
    assert kept == [r.pk for r in runs[2:]]  # the newest three
    keys = {(s.record.run_id, s.scope_key) for s in RunMemoryScope.objects.select_related("record")}
    assert keys == {(r.pk, key) for r in runs[2:] for key in bound_scope_keys(session)}
    # an older run than everything kept is dropped at once and never written
    late = _terminal_run(session, 9, finished_at_ms=base - 10)
    with transaction.atomic():
        assert record_terminal_run(late, policy=policy) is None
    assert not RunMemoryRecord.objects.filter(run=late).exists()
    assert {pk for pk, _ in store.record_pairs(session.pk)} == {r.pk for r in runs[2:]}


def test_prune_and_delete_remove_scope_rows_too():
    session = SessionFactory()
    base = 1_900_000_000_000
    runs = [_terminal_run(session, n, finished_at_ms=base + n) for n in range(4)]
    for run in runs:
        with transaction.atomic():
            record_terminal_run(run, policy=RunMemoryPolicy())
    with transaction.atomic():
        outcome = prune_session(session.pk, policy=RunMemoryPolicy(max_tracked_per_session=1))
    assert sorted(outcome.overflow) == sorted(f"run-{r.pk}" for r in runs[:3]) and outcome.ttl == []
    assert list(RunMemoryRecord.objects.values_list("run_id", flat=True)) == [runs[3].pk]
    assert set(RunMemoryScope.objects.values_list("record__run_id", flat=True)) == {runs[3].pk}
    with transaction.atomic():
        assert store.delete_records_of_runs([runs[3].pk]) == 1
    assert not RunMemoryRecord.objects.exists() and not RunMemoryScope.objects.exists()
