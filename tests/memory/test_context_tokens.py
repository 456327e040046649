"""Issue 23.2: a prompt assembly reads the live context's token estimate in one statement
(``compaction.context_tokens``): always what ``live_context(...).estimated_tokens`` says - with and without a
checkpoint, over several pages, cut by the budget."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from memory.compaction import CONTEXT_PAGE, compact, context_tokens, live_context
from memory.journal import append_event
from tests.factories import SessionFactory

pytestmark = pytest.mark.django_db


def _append(session, count: int, start: int = 0) -> None:
    with transaction.atomic():
        for n in range(start, start + count):
            message = {"role": "user" if n % 2 else "assistant", "content": f"message {n} " + "é" * (n % 7)}
            append_event(session_id=session.pk, event={"type": "message_appended", "message": message})


def test_context_tokens_is_the_live_context_estimate():
    session = SessionFactory()
    assert context_tokens(session) == live_context(session).estimated_tokens == 0
    _append(session, 12)
    with CaptureQueriesContext(connection) as context:
        tokens = context_tokens(session)
    assert len(context.captured_queries) == 1
    assert tokens == live_context(session).estimated_tokens > 0
    for budget in (0, 1, 40, 10_000):
        assert (
            context_tokens(session, budget_tokens=budget)
            == live_context(session, budget_tokens=budget).estimated_tokens
        )


def test_context_tokens_over_several_pages_and_cut_by_the_budget():
    session = SessionFactory()
    _append(session, CONTEXT_PAGE * 2 + 13)
    whole = live_context(session)
    assert context_tokens(session) == whole.estimated_tokens and not whole.truncated
    for budget in (whole.estimated_tokens // 3, whole.estimated_tokens - 5, whole.estimated_tokens // 2 + 1):
        cut = live_context(session, budget_tokens=budget)
        assert cut.truncated and context_tokens(session, budget_tokens=budget) == cut.estimated_tokens


def test_context_tokens_after_a_checkpoint():
    session = SessionFactory()
    _append(session, 40)
    with transaction.atomic():
        checkpoint = compact(session=session, strategy="autocompact")
    assert checkpoint.compacted_until_offset > 0
    _append(session, 9, start=40)
    live = live_context(session)
    assert live.checkpoint is not None and live.checkpoint.pk == checkpoint.pk
    assert context_tokens(session) == live.estimated_tokens
    for budget in (3, 50, 400):
        assert (
            context_tokens(session, budget_tokens=budget)
            == live_context(session, budget_tokens=budget).estimated_tokens
        )


@pytest.mark.parametrize("earlier", [0, 5, CONTEXT_PAGE + 3])
@pytest.mark.parametrize("checkpointed", [False, True])
def test_the_context_an_open_reads_with_its_writes_is_the_live_context_after_it(earlier, checkpointed):
    from memory.runs import OpenedContext, RunInput, run_open

    session = SessionFactory()
    _append(session, earlier)
    if checkpointed and earlier:
        with transaction.atomic():
            compact(session=session, strategy="autocompact")
    context = OpenedContext()
    with transaction.atomic():
        run, created = run_open(
            session=session, run_input=RunInput(content="é new input", attachments=[], metadata={}), context=context
        )
        assert (
            created
            and context.read is not None
            and [e["type"] for e in context.newest]
            == [
                "input_received",
                "run_lifecycle",
            ]
        )
        assert (
            context_tokens(session, read=context.read, newest=context.newest) == live_context(session).estimated_tokens
        )
        assert context_tokens(session, read=context.read, newest=context.newest) == context_tokens(session)


def test_each_stored_event_is_decoded_once_and_the_estimate_stays_exact(monkeypatch):
    from memory import compaction

    monkeypatch.setattr(compaction, "_EVENT_TOKENS", compaction._EventTokens(1000))
    session = SessionFactory()
    _append(session, 30)
    decoded = []
    real = compaction.entry_tokens
    monkeypatch.setattr(compaction, "entry_tokens", lambda entry: decoded.append(1) or real(entry))
    first = context_tokens(session)
    assert len(decoded) == 30
    decoded.clear()
    again = context_tokens(session)
    assert decoded == []  # the second read decodes nothing
    assert again == first == live_context(session).estimated_tokens
    _append(session, 3, start=30)
    decoded.clear()
    after = context_tokens(session)
    assert len(decoded) == 3  # only the three new events
    assert after == live_context(session).estimated_tokens > first


def test_the_event_cache_is_bounded():
    from memory import compaction

    cache = compaction._EventTokens(3)
    for n in range(10):
        cache.of(f'{{"type": "message_appended", "n": {n}}}', connection)
    assert len(cache._tokens) == 3


def test_older_pages_are_decoded_once_too(monkeypatch):
    from memory import compaction

    monkeypatch.setattr(compaction, "_EVENT_TOKENS", compaction._EventTokens(10_000))
    session = SessionFactory()
    _append(session, CONTEXT_PAGE * 2 + 13)
    first = context_tokens(session)
    decoded = []
    real = compaction.entry_tokens
    monkeypatch.setattr(compaction, "entry_tokens", lambda entry: decoded.append(1) or real(entry))
    assert context_tokens(session) == first
    assert decoded == []
    assert first == live_context(session).estimated_tokens
