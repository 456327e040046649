"""Issue 23.2: the full-text index keeps a short pending list and the learnings table is vacuumed and analysed
soon after inserts (learnings/0008), so freshly written rows do not slow every read down."""

from __future__ import annotations

import json

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db


def _options(relation: str) -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = %s", [relation])
        (options,) = cursor.fetchone()
    return dict(option.split("=", 1) for option in options or [])


def test_the_full_text_index_keeps_a_short_pending_list():
    assert _options("learning_search_tsv_idx") == {"gin_pending_list_limit": "256"}


def test_the_learnings_table_is_vacuumed_and_analysed_soon_after_inserts():
    options = _options("learnings_learning")
    assert float(options["autovacuum_vacuum_insert_scale_factor"]) <= 0.02
    assert int(options["autovacuum_vacuum_insert_threshold"]) <= 500
    assert float(options["autovacuum_analyze_scale_factor"]) <= 0.02


def test_a_full_text_lookup_reads_a_bounded_pending_list():
    """Thousands of fresh rows (no vacuum in between: autovacuum may not have run yet): a lookup reads at most
    the pending list's pages (32 of 8 kB) and a few more, through the full-text index."""
    from learnings.models import Learning
    from tests.support.learnings import learning

    learning("The umbrella hangs in the hall.", scope=("project", "hall"))
    template = Learning.objects.get()
    rows = [
        Learning(
            **{
                f.attname: getattr(template, f.attname)
                for f in Learning._meta.concrete_fields
                if f.attname not in ("id", "content", "content_key", "embedding", "source_candidate_id")
            },
            content=f"Note {n}: the invoice {n} for the harbour lantern and the meadow ledger number {n * 7}.",
            content_key=f"k{n}",
        )
        for n in range(3000)
    ]
    Learning.objects.bulk_create(rows, batch_size=1000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE learnings_learning")  # a manual ANALYZE leaves the pending list as it is
        cursor.execute("SET LOCAL enable_seqscan = off")  # the plan a larger table gets (inside the test's transaction)
        cursor.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT id FROM learnings_learning "
            "WHERE status IN ('active', 'provisional') AND search_tsv @@ to_tsquery('english', 'umbrella')"
        )
        plan = cursor.fetchone()[0][0]["Plan"]

    def nodes(node):
        yield node
        for child in node.get("Plans", []):
            yield from nodes(child)

    scans = [n for n in nodes(plan) if n.get("Index Name") == "learning_search_tsv_idx"]
    assert scans, json.dumps(plan)[:1500]  # the lookup goes through the full-text index
    read = plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]
    assert read <= 48, json.dumps(plan)[:1500]  # (with a 4 MB pending list: 150 and more)
