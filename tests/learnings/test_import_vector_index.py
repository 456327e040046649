"""Issue 23.3, the bulk path's speed: a big import loads with the learnings' HNSW index dropped and builds it
again at the end (``--vector-index``), however it ends; a missing or half-built index (a killed import) is
built again by the next import and by ``repair``; searches stay exact meanwhile. And a batch's rows are each
written once, in their final state (no UPDATE of the candidates it publishes), in a bounded number of
statements."""

from __future__ import annotations

import json
from io import StringIO

import numpy as np
import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from kheish import maintenance
from learnings.models import CandidateState, Learning, LearningCandidate
from learnings.services import imports
from learnings.services.imports import (
    VECTOR_INDEX,
    ImportItem,
    ensure_vector_index,
    import_batch,
    prepare_batch,
    rebuilds_vector_index,
    write_batch,
)
from learnings.validation import LearningScope
from memory.models import AuditEvent

ATLAS = LearningScope("project", "atlas")


@pytest.fixture(autouse=True)
def atlas():
    from tests.factories import ProjectFactory

    return ProjectFactory(project_id="atlas")


def state() -> str | None:
    with connection.cursor() as cursor:
        return imports._vector_index_state(cursor)


def write(path, count: int, prefix: str = "m") -> None:
    with path.open("w", encoding="utf-8") as handle:
        for i in range(count):
            record = {"external_id": f"{prefix}-{i}", "content": f"Service {i} runs on host node-{i} in rack {i % 7}."}
            handle.write(json.dumps(record) + "\n")


def run(path, *args: str) -> str:
    out = StringIO()
    call_command("import_memories", str(path), "--scope", "project:atlas", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def nearest_by_sql(vector: list[float], k: int) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM learnings_learning ORDER BY embedding_vec <=> %s::vector, id LIMIT %s",
            [str(vector), k],
        )
        return [row[0] for row in cursor.fetchall()]


def nearest_exactly(vector: list[float], k: int) -> list[int]:
    rows = list(Learning.objects.order_by("id").values_list("id", "embedding"))
    ids = np.array([pk for pk, _ in rows])
    matrix = np.array([e for _, e in rows], dtype=np.float32)
    query = np.array(vector, dtype=np.float32)
    distance = 1 - (matrix @ query) / (np.linalg.norm(matrix, axis=1) * np.linalg.norm(query))
    order = np.lexsort((ids, np.round(distance, 5)))
    return [int(pk) for pk in ids[order][:k]]


@pytest.fixture
def pgvector_only():
    if state() is None:
        pytest.skip("no pgvector on this server")


@pytest.mark.django_db(transaction=True)
def test_a_rebuilding_import_loads_without_the_index_answers_searches_exactly_and_ends_with_it(
    tmp_path, monkeypatch, pgvector_only
):
    write(tmp_path / "m.jsonl", 30)
    during = []
    original = imports.write_batch

    def spy(prepared, *, actor):
        outcome = original(prepared, actor=actor)
        query = prepared.built[0][1].embedding
        during.append((state(), nearest_by_sql(query, 5) == nearest_exactly(query, 5)))
        return outcome

    monkeypatch.setattr(imports, "write_batch", spy)
    output = run(tmp_path / "m.jsonl", "--vector-index", "rebuild", "--batch", "10")
    assert "loading without the vector index" in output
    assert "30 published" in output
    assert during == [("missing", True)] * 3  # searches exact (a scan) while the index is away
    assert state() == "valid"
    assert Learning.objects.count() == 30


@pytest.mark.django_db(transaction=True)
def test_an_interrupted_import_still_ends_with_the_index_and_keeps_its_batches(tmp_path, monkeypatch, pgvector_only):
    write(tmp_path / "m.jsonl", 30)
    original = imports.write_batch
    calls = []

    def interrupted(prepared, *, actor):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # Ctrl-C while the second batch is written
        return original(prepared, actor=actor)

    monkeypatch.setattr(imports, "write_batch", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "m.jsonl", "--vector-index", "rebuild", "--batch", "10")
    assert state() == "valid"
    assert Learning.objects.count() == 10
    monkeypatch.setattr(imports, "write_batch", original)
    assert "20 published, 0 reused, 10 already there" in run(tmp_path / "m.jsonl", "--vector-index", "rebuild")
    assert state() == "valid"


@pytest.mark.django_db(transaction=True)
def test_a_missing_or_half_built_index_is_built_again_by_repair_and_by_the_next_import(tmp_path, pgvector_only):
    with connection.cursor() as cursor:
        cursor.execute(f"DROP INDEX {VECTOR_INDEX}")  # what a killed import leaves
    assert ensure_vector_index(apply=False) == "missing"
    assert maintenance.repair_all(apply=False, source="test")["learnings"] == {"vector_index": "missing"}
    assert maintenance.repair_all(apply=True, source="test")["learnings"] == {"vector_index": "created"}
    assert state() == "valid"
    with connection.cursor() as cursor:  # a concurrent build interrupted half-way leaves an invalid index
        cursor.execute(
            "UPDATE pg_index SET indisvalid = false WHERE indexrelid = %s::regclass",
            [VECTOR_INDEX],
        )
    assert state() == "invalid"
    assert ensure_vector_index() == "rebuilt"
    assert state() == "valid"
    with connection.cursor() as cursor:
        cursor.execute(f"DROP INDEX {VECTOR_INDEX}")
    write(tmp_path / "m.jsonl", 3)
    assert "vector index created" in run(tmp_path / "m.jsonl")  # a small import keeps (so first restores) it
    assert state() == "valid"
    assert ensure_vector_index() == "ok"


@pytest.mark.django_db(transaction=True)
def test_the_repair_leaves_the_index_to_an_import_that_is_loading_without_it(pgvector_only):
    other = connection.get_new_connection(connection.get_connection_params())
    try:
        other.autocommit = True
        other.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", [imports.VECTOR_INDEX_LOCK])
        with connection.cursor() as cursor:
            cursor.execute(f"DROP INDEX {VECTOR_INDEX}")
        assert ensure_vector_index() == "busy"
        assert state() == "missing"
        other.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [imports.VECTOR_INDEX_LOCK])
        assert ensure_vector_index() == "created"
    finally:
        other.close()


@pytest.mark.django_db(transaction=True)
def test_auto_rebuilds_only_for_an_import_big_against_the_table():
    assert rebuilds_vector_index(1000) is True  # an empty table
    assert rebuilds_vector_index(999) is False
    assert rebuilds_vector_index(None) is False
    assert rebuilds_vector_index(10, "rebuild") is True
    assert rebuilds_vector_index(10**6, "keep") is False
    with pytest.raises(ValueError):
        rebuilds_vector_index(10, "sometimes")
    seed = [
        ImportItem(external_id=f"x-{i}", content=f"Seed fact number {i}.", kind="fact", scope=ATLAS) for i in range(5)
    ]
    import_batch(seed, actor="operator:tests")
    monkey_bound = imports.REBUILD_MIN_ITEMS
    try:
        imports.REBUILD_MIN_ITEMS = 1
        assert rebuilds_vector_index(3) is True  # 5 rows, at most twice 3
        assert rebuilds_vector_index(2) is False  # 5 rows, more than twice 2
    finally:
        imports.REBUILD_MIN_ITEMS = monkey_bound


@pytest.mark.django_db
def test_auto_keeps_the_index_inside_a_transaction():
    assert rebuilds_vector_index(10**6) is False


@pytest.mark.django_db
def test_a_batch_writes_each_row_once_in_its_final_state_in_bounded_statements():
    import_batch(
        [ImportItem(external_id="old", content="The deploy window is Tuesday.", kind="fact", scope=ATLAS)],
        actor="operator:tests",
    )
    batch = [
        ImportItem(external_id="a", content="The cat is called Miso.", kind="fact", scope=ATLAS),
        ImportItem(external_id="b", content="The cat is called Miso.", kind="fact", scope=ATLAS),  # in-batch twin
        ImportItem(external_id="c", content="The deploy window is Tuesday.", kind="fact", scope=ATLAS),  # live twin
        ImportItem(external_id="d", content="The deploy window is Friday.", kind="fact", scope=ATLAS),  # conflict
        *(
            ImportItem(external_id=f"n{i}", content=f"Host {i} is in rack {i}.", kind="fact", scope=ATLAS)
            for i in range(20)
        ),
    ]
    prepared = prepare_batch(batch)
    with CaptureQueriesContext(connection) as queries:
        outcome = write_batch(prepared, actor="operator:tests")
    assert (outcome.published, outcome.reused, outcome.held) == (21, 2, 1)
    statements = [q["sql"] for q in queries.captured_queries]
    assert not [sql for sql in statements if sql.lstrip().upper().startswith("UPDATE")]
    # locks, already imported, live equivalents, live subjects, 2 key draws, the audit rows' keys (the COPYs
    # themselves go through the driver's copy protocol), the savepoint/transaction bookkeeping
    assert len(statements) <= 9, statements
    by_id = {c.external_id: c for c in LearningCandidate.objects.filter(external_id__in=["a", "b", "c", "d"])}
    miso = Learning.objects.get(content="The cat is called Miso.")
    tuesday = Learning.objects.get(content="The deploy window is Tuesday.")
    assert miso.source_candidate_id == by_id["a"].pk
    assert [by_id[x].state for x in "abcd"] == [CandidateState.PUBLISHED] * 3 + [CandidateState.PENDING]
    assert [by_id[x].published_learning_id for x in "abcd"] == [miso.pk, miso.pk, tuesday.pk, None]
    assert all(by_id[x].updated_at_ms == by_id[x].created_at_ms for x in "abcd")
    for c in by_id.values():  # each candidate: its create row, and its publish row when it was published
        actions = list(
            AuditEvent.objects.filter(subject_id=c.public_id).order_by("id").values_list("action", "to_state")
        )
        expected = [("create", "pending")] + ([("publish", "published")] if c.state == "published" else [])
        assert actions == expected
    assert AuditEvent.objects.filter(subject_type="learning", action="publish").count() == 22


@pytest.mark.django_db(transaction=True)
def test_an_import_leaves_the_text_index_without_a_pending_list(tmp_path):
    def pending_pages() -> int:
        with connection.cursor() as cursor:  # what is left to merge (merging it, the second call finds none)
            cursor.execute("SELECT gin_clean_pending_list(%s::regclass)", [imports.TEXT_INDEX])
            return cursor.fetchone()[0]

    pending_pages()
    write(tmp_path / "m.jsonl", 30)
    assert "30 published" in run(tmp_path / "m.jsonl", "--vector-index", "keep")
    assert pending_pages() == 0  # lexical searches do not scan the rows just loaded one by one


@pytest.mark.django_db(transaction=True)
def test_a_big_import_beside_another_one_leaves_the_index_to_it(tmp_path, monkeypatch, pgvector_only):
    other = connection.get_new_connection(connection.get_connection_params())
    try:
        other.autocommit = True  # another big import holds the lock: it dropped the index and builds it
        other.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", [imports.VECTOR_INDEX_LOCK])
        during = []
        original = imports.write_batch

        def spy(prepared, *, actor):
            during.append(state())
            return original(prepared, actor=actor)

        monkeypatch.setattr(imports, "write_batch", spy)
        write(tmp_path / "m.jsonl", 20)
        assert "20 published" in run(tmp_path / "m.jsonl", "--vector-index", "rebuild", "--batch", "10")
        assert during == ["valid", "valid"]  # not dropped: loaded beside it
    finally:
        other.close()
    assert state() == "valid"
