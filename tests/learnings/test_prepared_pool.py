"""Issue 23.2: the recall pool is a server-side prepared statement - its text is stable (every value a
parameter), it is planned once per connection and then run from its plan, also right after a write."""

from __future__ import annotations

import numpy as np
import pytest
from django.db import connection

from learnings import recall_sql, retrieval
from memory.clock import now_ms
from memory.sessions import learning_scope_keys
from tests.factories import ProjectFactory, SessionFactory
from tests.support.learnings import learning

pytestmark = pytest.mark.django_db

QUERIES = ["where are my old sneakers", "what did we decide about the deploy window", "my cat"]


@pytest.fixture
def session():
    project = ProjectFactory(project_id="atlas")
    for text in [
        "My old sneakers are stored under the bed.",
        "We decided the deploy window is Tuesday.",
        "I adopted a grey cat called Miso.",
    ]:
        learning(text, scope=("project", "atlas"))
    return SessionFactory(projects=[project])


def prepared_pool_plans() -> dict[str, tuple[int, int]]:
    """The pool statements prepared on this connection: statement prefix → (generic plans, custom plans)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
        return {
            statement: (generic, custom)
            for statement, generic, custom in cursor.fetchall()
            if "FROM learnings_learning" in statement
        }


def test_the_pool_text_holds_no_values():
    vector = np.ones(256) / 16
    first = recall_sql.pool_statement(
        "prompt",
        scope_keys=["project:atlas", "workspace:default"],
        at_ms=123456789,
        words=["sneakers"],
        query_vector=vector,
    )
    second = recall_sql.pool_statement(
        "prompt", scope_keys=["project:other"], at_ms=987654321, words=["deploy", "window"], query_vector=-vector
    )
    assert first[0] == second[0]  # one text for every query of a shape (and its arms)
    for value in ("project:atlas", "123456789", "sneakers", "0.0625"):
        assert value not in first[0]


def test_the_pool_is_prepared_and_runs_from_its_plan(session):
    keys = learning_scope_keys(session)
    for i in range(8):
        retrieval.learned_records(session=session, scope_keys=keys, query=QUERIES[i % len(QUERIES)])
    plans = prepared_pool_plans()
    assert plans, "the pool statement was not prepared"
    pool = [counts for statement, counts in plans.items() if "UNION" in statement]
    assert pool and sum(generic for generic, _ in pool) >= 1  # planned once, then run from the generic plan
    assert all(custom == 0 for _, custom in pool)  # never planned again for its values (plan_cache_mode)


def test_a_write_does_not_cost_the_next_query_a_plan(session):
    keys = learning_scope_keys(session)
    for i in range(8):
        retrieval.learned_records(session=session, scope_keys=keys, query=QUERIES[i % len(QUERIES)])
    start = prepared_pool_plans()
    retrieval.learned_records(session=session, scope_keys=keys, query="staging database")
    before = prepared_pool_plans()
    per_call = sum(g for g, _ in before.values()) - sum(g for g, _ in start.values())
    assert per_call >= 1  # the pool (and the standing rows) from their cached plans
    learning("The staging database moved to db-7 on Monday.", scope=("project", "atlas"))
    records, _ = retrieval.learned_records(session=session, scope_keys=keys, query="staging database")
    assert any("db-7" in record.content for record in records)  # the new learning is found at once
    after = prepared_pool_plans()
    assert set(after) == set(before)  # the same prepared statements, no new text
    assert sum(g for g, _ in after.values()) == sum(g for g, _ in before.values()) + per_call  # cached plans
    assert sum(c for _, c in after.values()) == sum(c for _, c in before.values())  # and not re-planned


def test_recent_rows_are_prepared_too(session):
    keys = learning_scope_keys(session)
    for _ in range(3):
        assert recall_sql.recent("prompt", scope_keys=keys, at_ms=now_ms(), limit=5)
    assert any("ORDER BY CASE l.scope_kind" in statement for statement in prepared_pool_plans())
