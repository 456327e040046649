"""Issue 23.2: memory-search reranks a smaller pool than the prompt does (``recall_sql.SEARCH_POOL`` candidates
per arm, not ``POOL``), one size for every page, so that any page is the head of the largest one, hit for hit."""

from __future__ import annotations

import numpy as np
import pytest

from learnings import recall_sql
from memory import embedding
from memory.clock import now_ms
from tests.factories import ProjectFactory, SessionFactory
from tests.support.learnings import learning

pytestmark = pytest.mark.django_db

COUNT = 150  # more than one search arm holds, fewer than one prompt arm holds


@pytest.fixture
def shelf():
    project = ProjectFactory(project_id="shelf")
    for n in range(COUNT):
        learning(f"Sneakers pair {n} sits on shelf {n % 7} of cupboard {n % 5}.", scope=("project", "shelf"))
    return project


def test_the_search_pool_is_smaller_than_the_prompt_pool(shelf):
    assert recall_sql.SEARCH_POOL < recall_sql.POOL < COUNT + recall_sql.SEARCH_POOL
    vector = embedding.embed_query("where are my sneakers")
    keys = ["project:shelf"]
    sizes = {}
    for shape in ("search", "prompt"):
        found = recall_sql.pool(shape, scope_keys=keys, at_ms=now_ms(), words=[], query_vector=vector)
        sizes[shape] = len(found.rows)
        assert found.cosines is not None and len(found.cosines) == len(found.rows)
    assert sizes == {"search": recall_sql.SEARCH_POOL, "prompt": recall_sql.POOL}
    found = recall_sql.pool("search", scope_keys=keys, at_ms=now_ms(), words=[], query_vector=vector)
    every = recall_sql.pool("search", scope_keys=keys, at_ms=now_ms(), words=[], query_vector=vector, size=COUNT)
    assert len(every.rows) == COUNT
    if recall_sql.has_vectors():
        # pgvector: the search arm's rows are the nearest SEARCH_POOL of the scope (small scope: exact neighbours).
        nearest = np.argsort(-every.cosines, kind="stable")[: recall_sql.SEARCH_POOL]
        assert np.isclose(np.sort(found.cosines), np.sort(every.cosines[nearest])).all()
    else:
        # A server without pgvector: the semantic arm is the SEARCH_POOL newest visible learnings.
        at = recall_sql.SEARCH_COLUMNS.index("published_at_ms")
        newest = sorted(every.rows, key=lambda row: (-row[at], row[0]))[: recall_sql.SEARCH_POOL]
        assert sorted(row[0] for row in found.rows) == sorted(row[0] for row in newest)


def test_every_page_is_the_head_of_the_largest_page(shelf, api_client, agent):
    session = SessionFactory(owner=agent, projects=[shelf])
    url = f"/v1/sessions/{session.public_id}/memory-search"
    largest = api_client.get(url, {"query": "which shelf holds my sneakers", "limit": 50}).json()
    assert len(largest["results"]) == 50 and largest["truncated"]
    for limit in (1, 10, 12, 49):
        page = api_client.get(url, {"query": "which shelf holds my sneakers", "limit": limit}).json()
        assert page["results"] == largest["results"][:limit]
        assert page["truncated"]
