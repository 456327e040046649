"""Issue 23.2: the lexical arm's work is bounded in rows, not in the table's size. In a scope above
``EXACT_LIMIT`` live learnings, a term the statistics expect in more than ``LARGE_SCOPE_TERM_ROWS`` rows is left
out of the arm's query (the statement chooses, from its own count); a smaller scope keeps it. The query is
parsed once per statement, whatever the plan."""

from __future__ import annotations

import re

import numpy as np
import pytest
from django.db import connection, transaction

from learnings import recall_sql
from learnings.models import Learning
from memory import embedding
from memory.clock import now_ms
from tests.support.learnings import bulk_learnings

pytestmark = pytest.mark.django_db

ROWS = 300
LANTERN_ROWS = 5  # 1.7% of the table: not common by share (2%), common by rows once the cut is 3 rows
KEYS = ["project:big", "workspace:default"]


@pytest.fixture
def stored(monkeypatch):
    if not recall_sql.has_vectors():
        pytest.skip("pgvector is not installed on this server")
    texts = [f"plain note number{i} about item{i}" for i in range(ROWS)]
    for i in range(LANTERN_ROWS):
        texts[i] = f"the lantern hangs by door{i}"
    texts[ROWS - 1] = "the violin lies in its case"
    Learning.objects.bulk_create(bulk_learnings("big", texts))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE learnings_learning")
    monkeypatch.setattr(recall_sql, "_common", {})  # statistics read afresh
    monkeypatch.setattr(recall_sql, "_large", {})
    monkeypatch.setattr(recall_sql, "LARGE_SCOPE_TERM_ROWS", 3)


def _statement() -> tuple[str, dict]:
    vector = embedding.embed_many(["lantern violin"])[0].astype(np.float64)
    sql, params, _ = recall_sql.pool_statement(
        "search", scope_keys=KEYS, at_ms=now_ms(), words=["lantern", "violin"], query_vector=vector
    )
    return sql, params


def _lexical_query() -> str:
    """The text query the statement chose for its lexical arm (its own CTEs, evaluated by the server)."""
    sql, params = _statement()
    head = sql[: sql.index(" SELECT pool.*")]
    with connection.cursor() as cursor:
        cursor.execute(head + " SELECT q::text FROM lexical_query", params)
        return cursor.fetchone()[0]


def _plan(plan_mode: str) -> str:
    """The pool's plan as a prepared statement runs it under ``plan_mode`` (executed, so it is the real one)."""
    sql, params = _statement()
    names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", sql)))
    numbered = re.sub(r"%\((\w+)\)s", lambda m: f"${names.index(m.group(1)) + 1}", sql)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL plan_cache_mode = {plan_mode}")
        cursor.execute("PREPARE lexical_bound AS " + numbered)
        try:
            cursor.execute(
                "EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE lexical_bound("
                + ", ".join(["%s"] * len(names))
                + ")",
                [params[name] for name in names],
            )
            return "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("DEALLOCATE lexical_bound")


def test_a_large_scope_leaves_out_a_term_common_in_rows(stored, monkeypatch):
    monkeypatch.setattr(recall_sql, "EXACT_LIMIT", 50)  # 300 rows: a large scope
    common = recall_sql.common_terms()
    assert "lantern" in common.large and "lantern" not in common.small
    assert _lexical_query() == "'violin'"  # the lantern's rows are not read


def test_a_small_scope_keeps_every_term(stored):
    assert _lexical_query() == "'lantern' | 'violin'"  # EXACT_LIMIT 2000: 300 rows are a small scope


@pytest.mark.parametrize("plan_mode", ["force_generic_plan", "force_custom_plan"])
def test_the_query_is_parsed_once_under_any_plan(stored, monkeypatch, plan_mode):
    monkeypatch.setattr(recall_sql, "EXACT_LIMIT", 50)
    rank = next(line for line in _plan(plan_mode).splitlines() if "Sort Key" in line and "ts_rank(" in line)
    assert "to_tsquery" not in rank  # ranked against the initplan's value, not a query parsed per row
