"""Issue 23.2: opening a run writes the run, its two journal events and its audit row in one statement, and
the prompt with every counter the assembly moves in one more; a session read by ``memory.sql.visible_session``
with no run in flight is opened without locking it first. Each against what the former path wrote or
decided (``sql.insert_unless_conflict``, two ``append_event``, ``record_audit``, ``increment_many`` calls)."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from kheish import composition
from memory import metrics, public_ids, run_memory, sql
from memory.audit import record_audit
from memory.errors import Conflict
from memory.journal import append_event
from memory.models import AuditEvent, Counter, JournalEvent, Run, RunMemoryRecord, RunStatus, Session
from memory.run_records import RecoveredEntry
from memory.runs import RunInput, _insert_opened, canonical_input, run_complete, run_open, run_start
from memory.sessions import session_create

pytestmark = pytest.mark.django_db

CONTENT = "where did I leave the sneakers"


def _run(session: Session, content: str = CONTENT) -> Run:
    run_input = RunInput(content=content, attachments=[{"kind": "note"}], metadata={"k": "v"})
    return Run(
        session=session,
        kind="input",
        status=RunStatus.QUEUED,
        submitted_at_ms=1,
        updated_at_ms=1,
        request={"source_plugin": "api", "text_preview": content},
        input=canonical_input(run_input),
        idempotency_key=None,
        request_fingerprint="f",
        model=None,
    )


def _former_path(run: Run, actor: object) -> Run | None:
    """What ``run_open`` wrote before, statement by statement."""
    stored = sql.insert_unless_conflict(run)
    if stored is None:
        return None
    append_event(session_id=run.session_id, run=run, event={"type": "input_received", "input": run.input})
    append_event(
        session_id=run.session_id,
        run=run,
        event={"type": "run_lifecycle", "run_event": {"type": "accepted"}, "to_status": run.status},
    )
    record_audit(subject_type="run", subject_id=run.public_id, action="open", actor=actor, to_state=RunStatus.QUEUED)
    return stored


def _written(session: Session, run: Run) -> dict:
    session.refresh_from_db()
    events = list(JournalEvent.objects.filter(session=session).order_by("offset"))
    audit = AuditEvent.objects.get(subject_type="run", subject_id=run.public_id)
    stored = Run.objects.get(pk=run.pk)
    return {
        "last_offset": session.last_offset,
        "events": [(e.offset, e.run_id == run.pk, e.type, e.event) for e in events],
        "event_ids_ascend_with_offsets": [e.id for e in events] == sorted(e.id for e in events),
        "audit": (audit.subject_type, audit.action, audit.from_state, audit.to_state, audit.actor, audit.reason),
        "audit_data": audit.data,
        "run": (stored.kind, stored.status, stored.request, stored.input, stored.request_fingerprint, stored.prompt),
    }


def test_the_one_statement_writes_what_the_former_path_wrote(agent):
    former, single = session_create(owner=agent), session_create(owner=agent)
    for session in (former, single):  # an event already there: offsets continue from it
        with transaction.atomic():
            append_event(session_id=session.pk, event={"type": "message_appended", "message": {"content": "hi"}})
    with transaction.atomic():
        old = _former_path(_run(former), agent)
    with transaction.atomic(), CaptureQueriesContext(connection) as context:
        new = _run(single)
        assert _insert_opened(new, actor=agent)
    assert old is not None and new.pk is not None and not new._state.adding
    assert len([q for q in context.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]) <= 3
    assert _written(former, old) == _written(single, new)
    assert [e.offset for e in JournalEvent.objects.filter(session=single)] == [1, 2, 3]
    assert AuditEvent.objects.get(subject_id=new.public_id).actor == agent.username


def test_a_run_a_constraint_refuses_writes_nothing(agent):
    session = session_create(owner=agent)
    run, _ = run_open(session=session, run_input=RunInput(content="first", attachments=[], metadata={}), actor=agent)
    session.refresh_from_db()
    before = (session.last_offset, JournalEvent.objects.count(), AuditEvent.objects.count(), Run.objects.count())
    with transaction.atomic():
        assert not _insert_opened(_run(session), actor=agent)  # one run in flight a session
    session.refresh_from_db()
    after = (session.last_offset, JournalEvent.objects.count(), AuditEvent.objects.count(), Run.objects.count())
    assert after == before


def test_a_stale_session_read_still_answers_session_busy_with_the_run_in_flight(agent):
    session = session_create(owner=agent)
    stale = sql.visible_session(session.pk)  # read while nothing is in flight: the open takes no lock first
    assert stale is not None and stale.active_run_pk is None
    first, _ = run_open(session=session, run_input=RunInput(content="one", attachments=[], metadata={}), actor=agent)
    events = JournalEvent.objects.count()
    with pytest.raises(Conflict) as caught, transaction.atomic():
        run_open(session=stale, run_input=RunInput(content="two", attachments=[], metadata={}), actor=agent)
    assert caught.value.code == "session_busy"
    assert first.public_id in str(caught.value)  # the run in flight named, as under the lock
    assert JournalEvent.objects.count() == events and Run.objects.filter(session=session).count() == 1


def test_a_fresh_session_read_opens_without_locking_first_and_a_busy_one_locks(agent):
    session = session_create(owner=agent)
    fresh = sql.visible_session(session.pk)
    with CaptureQueriesContext(connection) as context:
        run, created = run_open(session=fresh, run_input=RunInput(content="one", attachments=[], metadata={}))
    assert created
    assert not any("FOR UPDATE OF s" in q["sql"] for q in context.captured_queries)
    busy = sql.visible_session(session.pk)
    assert busy.active_run_pk == run.pk
    with CaptureQueriesContext(connection) as context, pytest.raises(Conflict), transaction.atomic():
        run_open(session=busy, run_input=RunInput(content="two", attachments=[], metadata={}))
    assert any("FOR UPDATE OF s" in q["sql"] for q in context.captured_queries)


def test_counters_with_a_statement_update_existing_create_missing_and_run_the_statement(agent):
    session = session_create(owner=agent)
    run, _ = run_open(session=session, run_input=RunInput(content="one", attachments=[], metadata={}))
    Counter.objects.create(name="test.existing", value=5)
    with transaction.atomic():
        metrics.increment_many_with(
            {"test.existing": 2, "test.missing": 3, "test.zero": 0},
            *sql.update_statement(Run, run.pk, prompt={"sections": [], "estimated_tokens": 7}),
        )
    assert metrics.read(["test.existing", "test.missing", "test.zero"]) == {
        "test.existing": 7,
        "test.missing": 3,
        "test.zero": 0,
    }
    assert not Counter.objects.filter(name="test.zero").exists()
    assert Run.objects.get(pk=run.pk).prompt == {"sections": [], "estimated_tokens": 7}
    with transaction.atomic():  # no counter to move: the statement alone
        metrics.increment_many_with({"test.zero": 0}, *sql.update_statement(Run, run.pk, prompt=None))
    assert Run.objects.get(pk=run.pk).prompt is None


def _finished_runs(session: Session, count: int) -> None:
    for i in range(count):
        run, _ = run_open(
            session=session, run_input=RunInput(content=f"sneakers question {i}", attachments=[], metadata={})
        )
        run = run_start(run=run)
        run_complete(run=run, output=f"the sneakers are under bed {i}")


NAMES = [
    "run_memory.injected_total",
    "run_memory.prompt_limit_omitted_total",
    "run_memory.ranked_candidates_total",
    "session_memory.prompt_limit_omitted_total",
]


def test_an_open_moves_the_counters_as_the_separate_increments_did(agent):
    session = session_create(owner=agent)
    _finished_runs(session, 5)
    assert RunMemoryRecord.objects.filter(session=session).count() == 5
    before = metrics.read(NAMES)
    run = composition.open_run(
        session=sql.visible_session(session.pk),
        run_input=RunInput(content="where are the sneakers", attachments=[], metadata={}),
        kind="input",
        idempotency_key=None,
        model=None,
        actor=agent,
    )
    moved = {name: value - before[name] for name, value in metrics.read(NAMES).items()}
    recovered = next(s for s in run.prompt["sections"] if s["name"] == "recovered_memory")
    policy = run_memory.current_policy()
    taken = min(5, policy.max_prompt_entries)
    assert moved["run_memory.ranked_candidates_total"] == 5
    assert moved["run_memory.injected_total"] == len(recovered["entries"])
    # the bundle's limit (5 valid, max_prompt_entries taken) plus what packing left out of those taken
    assert moved["run_memory.prompt_limit_omitted_total"] == (5 - taken) + (taken - len(recovered["entries"]))
    assert moved["session_memory.prompt_limit_omitted_total"] == 0
    assert Run.objects.get(pk=run.pk).prompt == run.prompt


@pytest.mark.parametrize("ranker", ["lexical", "hybrid"])
def test_the_bundle_read_matches_the_complete_records(agent, ranker):
    session = session_create(owner=agent)
    _finished_runs(session, 6)
    for query in ("sneakers bed 3", None, ""):
        bundle = run_memory.recovered_bundle(session, query, ranker=ranker)
        records = list(RunMemoryRecord.objects.filter(session=session).order_by("-recorded_at_ms", "-run_id"))
        valid = [run_memory.entry_of(r) for r in records]
        if ranker == "hybrid":
            expected = run_memory.rank_hybrid(valid, query, [r.embedding for r in records])
        else:
            expected = [entry for _, entry in run_memory.rank_entries(valid, query)]
        policy = run_memory.current_policy()
        assert bundle.entries == expected[: policy.max_prompt_entries]
        assert all(isinstance(e, RecoveredEntry) for e in bundle.entries)
        assert bundle.valid == len(valid) and bundle.truncated == (len(valid) > policy.max_prompt_entries)
        assert bundle.entries[0].run_id.startswith(public_ids.RUN)


@pytest.mark.django_db(transaction=True)
def test_concurrent_opens_of_sessions_read_before_admit_exactly_one_run(agent):
    from tests.memory.test_concurrency_pg import run_threads

    session = session_create(owner=agent)
    conflicts = []

    def open_one(i: int) -> None:
        read = sql.visible_session(session.pk)  # each request's own read: nothing in flight yet, no lock first
        try:
            run_open(session=read, run_input=RunInput(content=f"input {i}", attachments=[], metadata={}))
        except Conflict as exc:
            conflicts.append(exc)

    assert run_threads(8, open_one) == []
    assert Run.objects.filter(session=session).count() == 1
    assert len(conflicts) == 7 and all(c.code == "session_busy" for c in conflicts)
    session.refresh_from_db()
    assert session.last_offset == 2 == JournalEvent.objects.filter(session=session).count()
