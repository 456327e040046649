"""A session's live-context estimate reads only the events this process has not counted yet
(``compaction.KnownPrefix``): opening the hundredth run of a session reads that run's new events, not the
hundred runs before it, and the estimate stays exactly ``live_context(...).estimated_tokens`` - after new
events, a checkpoint, under a budget that cuts into the counted events, after a rolled-back append, and for the
context a run's open reads with its writes.

Committed journals, so these tests use real transactions (``transaction=True``)."""

from __future__ import annotations

import pytest
from django.db import transaction

from memory import compaction
from memory.compaction import CONTEXT_PAGE, compact, context_tokens, live_context
from memory.journal import append_event
from memory.runs import OpenedContext, RunInput, run_open, run_transition
from tests.factories import SessionFactory

pytestmark = pytest.mark.django_db(transaction=True)


def _append(session, count: int, start: int = 0) -> None:
    with transaction.atomic():
        for n in range(start, start + count):
            message = {"role": "user" if n % 2 else "assistant", "content": f"message {n} " + "é" * (n % 7)}
            append_event(session_id=session.pk, event={"type": "message_appended", "message": message})


@pytest.fixture
def events_read(monkeypatch):
    """How many stored events each estimate read (fresh caches: nothing is known before the test)."""
    monkeypatch.setattr(compaction, "_KNOWN", compaction._KnownPrefixes(100))
    monkeypatch.setattr(compaction, "_EVENT_TOKENS", compaction._EventTokens(10_000))
    read: list[int] = []
    real = compaction._EVENT_TOKENS.of
    monkeypatch.setattr(compaction._EVENT_TOKENS, "of", lambda payload, conn: read.append(1) or real(payload, conn))
    return read


def exact(session, budget=None) -> int:
    return live_context(session, budget_tokens=budget).estimated_tokens


def test_counted_events_are_not_read_again(events_read):
    session = SessionFactory()
    _append(session, CONTEXT_PAGE + 40)
    assert context_tokens(session) == exact(session)
    assert len(events_read) == CONTEXT_PAGE + 40
    events_read.clear()
    assert context_tokens(session) == exact(session)
    assert events_read == []  # all known
    _append(session, 3, start=CONTEXT_PAGE + 40)
    events_read.clear()
    assert context_tokens(session) == exact(session)
    assert len(events_read) == 3  # only the new ones
    _append(session, CONTEXT_PAGE + 7, start=CONTEXT_PAGE + 43)  # more new events than a page
    events_read.clear()
    assert context_tokens(session) == exact(session)
    assert len(events_read) == CONTEXT_PAGE + 7


def test_a_budget_that_cuts_into_the_counted_events_is_exact(events_read):
    session = SessionFactory()
    _append(session, 60)
    whole = context_tokens(session)
    _append(session, 4, start=60)
    for budget in (0, 7, whole // 2, whole - 1, whole + 3, whole * 3):
        assert context_tokens(session, budget_tokens=budget) == exact(session, budget)


def test_a_checkpoint_starts_a_new_prefix(events_read):
    session = SessionFactory()
    _append(session, 40)
    assert context_tokens(session) == exact(session)
    with transaction.atomic():
        checkpoint = compact(session=session, strategy="autocompact")
    assert checkpoint.compacted_until_offset > 0
    _append(session, 9, start=40)
    assert context_tokens(session) == exact(session)
    _append(session, 2, start=49)
    events_read.clear()
    assert context_tokens(session) == exact(session)
    assert len(events_read) == 2


def test_events_a_transaction_rolled_back_are_never_counted(events_read):
    session = SessionFactory()
    _append(session, 10)
    assert context_tokens(session) == exact(session)
    with pytest.raises(RuntimeError), transaction.atomic():
        _append(session, 5, start=100)  # the same offsets, other texts, are appended below once this is undone
        assert context_tokens(session) == exact(session)  # sees its own appends...
        raise RuntimeError("undo")
    _append(session, 5, start=10)  # ...which are not remembered: these reuse their offsets
    assert context_tokens(session) == exact(session)


def test_the_context_an_open_reads_is_the_live_context_run_after_run(events_read):
    session = SessionFactory()
    _append(session, 30)
    known = []
    for n in range(4):
        context = OpenedContext()
        with transaction.atomic():
            run, created = run_open(
                session=session, run_input=RunInput(content=f"input {n}", attachments=[], metadata={}), context=context
            )
            assert created
            estimate = context_tokens(session, read=context.read, newest=context.newest, known=context.known)
            assert estimate == exact(session)
        assert context.known is not None
        known.append(context.known.upto)
        run_transition(run=run, to_status="cancelled")
    assert known[0] == 0 and 30 <= known[1] < known[2] < known[3]  # each open knew what the ones before read


def test_a_session_key_reused_elsewhere_is_not_the_same_session(events_read):
    session = SessionFactory()
    _append(session, 12)
    assert context_tokens(session) == exact(session)
    stranger = SessionFactory()
    stranger.pk = session.pk  # the same key, another session (another creation time): nothing known of it
    stranger.created_at_ms = session.created_at_ms + 1
    assert compaction.known_prefix(stranger) is compaction._UNKNOWN
