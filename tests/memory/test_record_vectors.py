"""Issue 23.2: a run open ranks the session's run-memory records against its input with their stored
embeddings, which the process holds by (record, ranked text) once read or written - the same vectors, the same
order, without reading the 2 KB arrays again on every open; a record rewritten meanwhile is ranked with what it
holds now."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from django.db import connection

from memory import run_memory, sql
from memory.models import RunMemoryRecord
from tests.factories import SessionFactory
from tests.support.learnings import terminal_run

pytestmark = pytest.mark.django_db

QUERY = "when does the certificate expire"


@pytest.fixture
def session(agent):
    session = SessionFactory(owner=agent)
    terminal_run(session, "Rotate the TLS certificate on web-3 before Friday.")
    terminal_run(session, "Summarise the quarterly sales figures for the board.")
    terminal_run(session, "Renew the certificate of the mail gateway.")
    return session


def _embedding_reads(func) -> tuple[object, int]:
    statements: list[str] = []

    def record(execute, sql_text, params, many, context):
        statements.append(sql_text)
        return execute(sql_text, params, many, context)

    with connection.execute_wrapper(record):
        result = func()
    return result, sum('array_send("embedding")' in text for text in statements)


def _stored(pk: int) -> np.ndarray:
    (row,) = sql.select(RunMemoryRecord, 'WHERE "id" = %s', [pk], fields=("embedding",), float_arrays=("embedding",))
    return row[0]


def test_the_vectors_are_the_stored_ones_read_once(session, monkeypatch):
    monkeypatch.setattr(run_memory, "_RECORD_VECTORS", run_memory.BoundedLRU(100))  # a process that wrote none
    first, reads = _embedding_reads(lambda: run_memory.recovered_bundle(session, QUERY, ranker="hybrid"))
    assert reads == 1  # the records' vectors, in one statement
    again, reads = _embedding_reads(lambda: run_memory.recovered_bundle(session, QUERY, ranker="hybrid"))
    assert reads == 0
    assert [e.run_id for e in again.entries] == [e.run_id for e in first.entries]
    assert "certificate" in first.entries[0].request_preview.lower()
    records = list(RunMemoryRecord.objects.filter(session=session).order_by("-recorded_at_ms", "-run_id"))
    entries = [run_memory.entry_of(r) for r in records]
    held = run_memory._record_vectors([r.pk for r in records], entries)
    for record, vector in zip(records, held, strict=True):
        assert np.array_equal(vector, _stored(record.pk))


def test_a_record_written_here_is_never_read_back(agent, monkeypatch):
    monkeypatch.setattr(run_memory, "_RECORD_VECTORS", run_memory.BoundedLRU(100))
    session = SessionFactory(owner=agent)
    terminal_run(session, "Rotate the TLS certificate on web-3 before Friday.")
    bundle, reads = _embedding_reads(lambda: run_memory.recovered_bundle(session, QUERY, ranker="hybrid"))
    assert reads == 0 and bundle.entries


def test_a_rewritten_record_is_ranked_with_its_new_vector(session):
    run_memory.recovered_bundle(session, QUERY, ranker="hybrid")  # every vector held
    record = RunMemoryRecord.objects.filter(session=session).order_by("recorded_at_ms").first()
    replacement = [round(float(x), 6) for x in np.linspace(-1, 1, len(record.embedding))]
    RunMemoryRecord.objects.filter(pk=record.pk).update(summary="A new summary.", embedding=replacement)
    records = list(RunMemoryRecord.objects.filter(session=session))
    entries = [run_memory.entry_of(r) for r in records]
    held = dict(zip([r.pk for r in records], run_memory._record_vectors([r.pk for r in records], entries), strict=True))
    assert np.array_equal(held[record.pk], np.asarray(replacement))


@pytest.mark.parametrize("visibility", ["session_only", "workspace", "learning_scopes"])
def test_memory_search_reads_the_vectors_once_too(session, monkeypatch, visibility):
    monkeypatch.setattr(run_memory, "_RECORD_VECTORS", run_memory.BoundedLRU(100))
    policy = dataclasses.replace(run_memory.current_policy(), search_visibility=visibility)

    def hits():
        statements: list[str] = []

        def record(execute, sql_text, params, many, context):
            statements.append(sql_text)
            return execute(sql_text, params, many, context)

        with connection.execute_wrapper(record):
            found = run_memory.search_hits(session=session, scope_keys=[], query=QUERY, ranker="hybrid", policy=policy)
        return found, statements

    first, statements = hits()
    assert first and "certificate" in first[0]["excerpt"].lower()
    assert sum('array_send("embedding")' in text for text in statements) == 1
    again, statements = hits()
    assert [h["source_id"] for h in again] == [h["source_id"] for h in first]
    assert [h["score"] for h in again] == [h["score"] for h in first]
    assert not any('array_send("embedding")' in text or '"embedding"' in text for text in statements)
