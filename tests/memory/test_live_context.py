"""Live context (plane 1): the newest events within the budget, read page by page."""

from __future__ import annotations

import pytest
from django.db import transaction

from memory.compaction import CONTEXT_PAGE, entry_tokens, live_context
from memory.journal import append_event
from tests.factories import SessionFactory

pytestmark = pytest.mark.django_db


def test_live_context_pages_through_a_long_journal():
    session = SessionFactory()
    total = CONTEXT_PAGE * 2 + 37
    with transaction.atomic():
        for n in range(total):
            append_event(
                session_id=session.pk,
                event={"type": "message_appended", "message": {"role": "assistant", "content": f"m{n}"}},
            )
    whole = live_context(session)
    assert [e["offset"] for e in whole.entries] == list(range(1, total + 1)) and not whole.truncated
    assert whole.estimated_tokens == sum(entry_tokens(e) for e in whole.entries)
    budget = sum(entry_tokens(e) for e in whole.entries[-(CONTEXT_PAGE + 5) :])
    tail = live_context(session, budget_tokens=budget)
    assert [e["offset"] for e in tail.entries] == list(range(total - CONTEXT_PAGE - 4, total + 1)) and tail.truncated
