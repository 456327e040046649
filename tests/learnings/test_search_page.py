"""Issue 23.2: memory-search builds only the hits a page can show. The learnings' hits of a page of ``limit``
are the first ``limit`` of the whole ranked pool in memory-search's order (score, newest, id), on both
candidate paths, and the page says it was truncated exactly when more hits exist."""

from __future__ import annotations

import pytest

from learnings import retrieval
from memory.sessions import learning_scope_keys
from tests.factories import ProjectFactory, SessionFactory
from tests.support.learnings import learning

pytestmark = pytest.mark.django_db


def _order(hit: dict) -> tuple:
    return (-hit["score"], -hit["timestamp_ms"], hit["source_id"])


def test_a_limited_search_is_the_head_of_the_unlimited_one(vectors):
    project = ProjectFactory(project_id="shelf")
    for n in range(30):
        learning(f"Sneakers pair {n} sits on shelf {n % 4} in the hall cupboard.", scope=("project", "shelf"))
    session = SessionFactory(projects=[project])
    keys = learning_scope_keys(session)
    whole = sorted(retrieval.search_hits(session=session, scope_keys=keys, query="where are my sneakers"), key=_order)
    assert len(whole) == 30
    for limit in (1, 5, 29, 30, 31):
        page = retrieval.search_hits(session=session, scope_keys=keys, query="where are my sneakers", limit=limit)
        assert sorted(page, key=_order) == whole[:limit]


def test_the_page_is_truncated_exactly_when_more_hits_exist(api_client, agent):
    project = ProjectFactory(project_id="hall")
    for n in range(6):
        learning(f"The umbrella number {n} hangs in the hall.", scope=("project", "hall"))
    session = SessionFactory(owner=agent, projects=[project])
    url = f"/v1/sessions/{session.public_id}/memory-search"
    everything = api_client.get(url, {"query": "umbrella", "limit": 50}).json()
    learned = [hit for hit in everything["results"] if hit["kind"] == "learning"]
    assert len(learned) == 6 and not everything["truncated"]
    total = len(everything["results"])
    for limit in (total - 1, total):
        page = api_client.get(url, {"query": "umbrella", "limit": limit}).json()
        assert page["results"] == everything["results"][:limit]
        assert page["truncated"] is (limit < total)
