"""Concurrency, locking and constraints on PostgreSQL (skipped on SQLite)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections, transaction
from django.db.utils import IntegrityError

from memory import run_memory
from memory.journal import append_event
from memory.models import JournalEvent, Run, RunMemoryRecord
from memory.runs import RunInput, run_open
from tests.factories import SessionFactory, TerminalRunFactory

pytestmark = pytest.mark.django_db(transaction=True)


def run_threads(count: int, target) -> list[BaseException]:
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def wrapper(i: int) -> None:
        try:
            barrier.wait()
            target(i)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=wrapper, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_fifty_concurrent_appends_get_offsets_one_to_fifty():
    session = SessionFactory()

    def append(i: int) -> None:
        with transaction.atomic():
            append_event(
                session_id=session.pk,
                event={"type": "message_appended", "message": {"role": "user", "content": f"m{i}"}},
            )

    assert run_threads(50, append) == []
    offsets = sorted(JournalEvent.objects.filter(session=session).values_list("offset", flat=True))
    assert offsets == list(range(1, 51))


def test_journal_rejects_update_and_delete_at_the_database():
    session = SessionFactory()
    with transaction.atomic():
        event = append_event(session_id=session.pk, event={"type": "message_appended", "message": {}})
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
        JournalEvent.objects.filter(pk=event.pk).update(type="input_received")
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM memory_journalevent WHERE id = %s", [event.pk])
    assert JournalEvent.objects.filter(pk=event.pk, type="message_appended").exists()


def test_concurrent_opens_on_one_session_admit_exactly_one_run():
    session = SessionFactory()
    from memory.errors import Conflict

    conflicts = []

    def open_one(i: int) -> None:
        try:
            run_open(session=session, run_input=RunInput(content=f"input {i}", attachments=[], metadata={}))
        except Conflict as exc:
            conflicts.append(exc)

    assert run_threads(8, open_one) == []
    assert Run.objects.filter(session=session).count() == 1
    assert len(conflicts) == 7 and all(c.code == "session_busy" for c in conflicts)


def test_forty_runs_completing_concurrently_keep_the_newest_32():
    """One session admits one run in flight, so the race that matters is the terminal recording: forty
    terminal runs of one session record and prune at the same moment."""
    session = SessionFactory()
    runs = [
        TerminalRunFactory(
            session=session,
            finished_at_ms=1_000_000 + i,
            input={"content": f"task {i}"},
            outputs=[{"content": f"done {i}"}],
        )
        for i in range(40)
    ]
    from memory import clock

    real_now = clock.now_ms

    def record(i: int) -> None:
        with transaction.atomic():
            run_memory.record_terminal_run(Run.objects.get(pk=runs[i].pk))

    import memory.run_memory as rm

    rm.now_ms = lambda: 1_000_100  # all records are fresh at this clock
    try:
        assert run_threads(40, record) == []
    finally:
        rm.now_ms = real_now
    kept = set(RunMemoryRecord.objects.filter(session=session).values_list("run_id", flat=True))
    assert kept == {r.pk for r in runs[8:]}
    status = run_memory.status_view()
    assert status["metrics"]["stored_total"] == 40
    assert status["metrics"]["pruned_overflow_total"] == 8
