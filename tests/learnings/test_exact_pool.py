"""Issue 23.2: the plan the server chooses never changes the pool. A scope of at most ``EXACT_LIMIT`` live
learnings gets its exact nearest neighbours as the semantic arm, whether the prepared statement runs from a
generic plan or a custom one, and however loose the HNSW index's own settings are; a larger scope asks the
index. The choice is the statement's own (a bounded count), so the result does not depend on the planner."""

from __future__ import annotations

import numpy as np
import pytest
from django.db import connection, transaction

from learnings import recall_sql
from learnings.models import Learning
from memory import embedding
from memory.clock import now_ms
from tests.support.learnings import bulk_learnings

pytestmark = pytest.mark.django_db

WORDS = [
    "sneakers",
    "deploy",
    "window",
    "editor",
    "guitar",
    "trip",
    "garden",
    "invoice",
    "kitten",
    "harbour",
    "violin",
    "ledger",
    "rocket",
    "pepper",
    "lantern",
    "meadow",
]
K = 10


def _rows(scope_id: str, count: int, seed: int) -> list[Learning]:
    rng = np.random.default_rng(seed)
    return bulk_learnings(scope_id, [f"{' '.join(rng.choice(WORDS, size=6))} note {seed}-{i}" for i in range(count)])


@pytest.fixture
def stored():
    """A small scope (40 learnings) among 400 others: its rows are a tenth of the HNSW index."""
    if not recall_sql.has_vectors():
        pytest.skip("pgvector is not installed on this server")
    small = Learning.objects.bulk_create(_rows("small", 40, 1))
    Learning.objects.bulk_create(_rows("crowd", 400, 2))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE learnings_learning")
    return small


def _exact_top(scope_key: str, vector: np.ndarray) -> set[int]:
    """The K nearest rows of a scope as the server computes distances, read without any index."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_indexscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute(
            "SELECT id FROM learnings_learning WHERE scope_key = %s ORDER BY embedding_vec <=> %s::vector, id LIMIT %s",
            [scope_key, recall_sql.vector_literal(vector), K],
        )
        return {row[0] for row in cursor.fetchall()}


def _semantic_pool(keys: list[str], vector: np.ndarray, plan_mode: str) -> set[int]:
    """The pool's rows for a query with no words (only the semantic arm), under a plan mode and HNSW settings
    loose enough that the index alone could not find a selective scope's neighbours."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL plan_cache_mode = {plan_mode}")
        cursor.execute("SET LOCAL hnsw.ef_search = 10")
        cursor.execute("SET LOCAL hnsw.iterative_scan = off")
        found = recall_sql.pool("search", scope_keys=keys, at_ms=now_ms(), words=[], query_vector=vector, size=K)
    return {row[0] for row in found.rows}


@pytest.mark.parametrize("plan_mode", ["force_generic_plan", "force_custom_plan"])
def test_a_small_scope_gets_its_exact_neighbours_under_any_plan(stored, plan_mode):
    keys = ["project:small", "workspace:default"]
    for query in ["sneakers deploy window", "violin lantern meadow", "an invoice for the rocket"]:
        vector = embedding.embed_many([query])[0].astype(np.float64)
        for _ in range(3):  # past psycopg's prepare threshold: the statement runs prepared
            assert _semantic_pool(keys, vector, plan_mode) == _exact_top("project:small", vector)


def test_a_scope_above_the_limit_asks_the_index(stored, monkeypatch):
    monkeypatch.setattr(recall_sql, "EXACT_LIMIT", 20)  # the small scope is now "large"
    keys = ["project:small", "workspace:default"]
    sql, params, _ = recall_sql.pool_statement(
        "search", scope_keys=keys, at_ms=now_ms(), words=[], query_vector=np.ones(embedding.DIMENSIONS) / 16, size=K
    )
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF) " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    lines = plan.splitlines()
    gates = {line.strip(): lines[i + 1] for i, line in enumerate(lines) if "One-Time Filter" in line}
    exact = next(below for gate, below in gates.items() if "<= 20" in gate)
    index = next(below for gate, below in gates.items() if "> 20" in gate)
    assert "never executed" in exact  # the exact arm did not run
    assert "never executed" not in index  # the nearest-neighbour arm did
    vector = embedding.embed_many(["violin lantern meadow"])[0].astype(np.float64)
    found = recall_sql.pool("search", scope_keys=keys, at_ms=now_ms(), words=[], query_vector=vector, size=K)
    assert found.rows and {row[0] for row in found.rows} <= {row.pk for row in stored}


def test_a_scope_counted_large_is_not_counted_again_for_a_while(stored, monkeypatch):
    monkeypatch.setattr(recall_sql, "EXACT_LIMIT", 20)  # the small scope (40 rows) is now "large"
    monkeypatch.setattr(recall_sql, "_large", {})
    keys = ["project:small", "workspace:default"]
    vector = embedding.embed_many(["violin lantern meadow"])[0].astype(np.float64)
    assert not recall_sql.scope_seen_large(keys)
    first = recall_sql.pool("search", scope_keys=keys, at_ms=now_ms(), words=[], query_vector=vector, size=K)
    assert recall_sql.scope_seen_large(keys)  # counted above the limit once
    sql, params, _ = recall_sql.pool_statement(
        "search", scope_keys=keys, at_ms=now_ms(), words=[], query_vector=vector, size=K
    )
    assert params["large"] is True

    def counting(large: bool) -> list[str]:
        with connection.cursor() as cursor:
            cursor.execute(
                "EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF) " + sql, {**params, "large": large}
            )
            plan = [row[0] for row in cursor.fetchall()]
        return [line for line in plan if " on learnings_learning c" in line and "never executed" not in line]

    assert counting(False)  # a scope not known to be large is counted
    assert not counting(True)  # this one is not, this time
    again = recall_sql.pool("search", scope_keys=keys, at_ms=now_ms(), words=[], query_vector=vector, size=K)
    assert [row[0] for row in again.rows] == [row[0] for row in first.rows]
    later = recall_sql.time.monotonic() + recall_sql.LARGE_SCOPE_SECONDS + 1
    monkeypatch.setattr(recall_sql.time, "monotonic", lambda: later)
    assert not recall_sql.scope_seen_large(keys)  # counted again after a while
    assert not recall_sql.scope_seen_large(["project:small"])  # another set of scopes is its own entry


@pytest.mark.parametrize("shape", ["search", "prompt"])
def test_the_index_arm_reads_with_its_shapes_candidate_list(stored, monkeypatch, shape):
    """Whatever the connection's ``hnsw.ef_search``, the statement sets its shape's before the index is read:
    with a list of 1 and no iterative scan the index would return one row at most (the scope's share of the
    shape's list comes back instead)."""
    monkeypatch.setattr(recall_sql, "EXACT_LIMIT", 20)  # the small scope (40 rows) is now "large"
    keys = ["project:small", "workspace:default"]
    vector = embedding.embed_many(["violin lantern meadow"])[0].astype(np.float64)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL hnsw.ef_search = 1")
        cursor.execute("SET LOCAL hnsw.iterative_scan = off")
        found = recall_sql.pool(shape, scope_keys=keys, at_ms=now_ms(), words=[], query_vector=vector, size=K)
        cursor.execute("SELECT current_setting('hnsw.ef_search')")
        assert cursor.fetchone()[0] == str(recall_sql.EF_SEARCH[shape])
    assert len(found.rows) > 1
