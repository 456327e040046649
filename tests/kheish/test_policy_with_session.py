"""Issue 23.2: a session-scoped read (memory-search, memory-context, a run's prompt) gets the policies in force
from the session's own statement, never from one of its own, and a policy change is seen by the next call."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.factories import SessionFactory
from tests.support.learnings import set_policy

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("route", ["memory-search", "memory-context"])
def test_the_policies_come_with_the_session(api_client, agent, route):
    session = SessionFactory(owner=agent)
    with CaptureQueriesContext(connection) as queries:
        assert api_client.get(f"/v1/sessions/{session.public_id}/{route}", {"query": "umbrella"}).status_code == 200
    policy_reads = [q["sql"] for q in queries.captured_queries if "memory_policyrevision" in q["sql"]]
    assert len(policy_reads) == 1 and "memory_session" in policy_reads[0]  # in the session's own statement


def test_a_policy_change_is_seen_by_the_next_call(api_client, agent):
    session = SessionFactory(owner=agent)
    url = f"/v1/sessions/{session.public_id}/memory-context"
    before = api_client.get(url).json()["retrieval"]
    set_policy({"mode": "shadow", "retrieval": {"ranker": "lexical", "max_tokens": 700, "max_entries": 5}})
    after = api_client.get(url).json()["retrieval"]
    assert before["ranker"] == "hybrid" and after["ranker"] == "lexical" and after["max_entries"] == 5
    run = api_client.post(f"/v1/sessions/{session.public_id}/runs", {"input": {"content": "hi"}}, format="json")
    assert run.status_code == 202
