"""The pool's vectors come back in PostgreSQL's binary format and are decoded together
(``recall_sql.vectors_of``): the same floats as pgvector's own text output, zeros where a row has none."""

from __future__ import annotations

import numpy as np
import pytest
from django.db import connection

from learnings import recall_sql
from memory.embedding import DIMENSIONS

pytestmark = pytest.mark.django_db


def test_binary_vectors_decode_to_the_stored_floats():
    if not recall_sql.has_vectors():
        pytest.skip("no pgvector on this server")
    rng = np.random.default_rng(7)
    stored = [rng.standard_normal(DIMENSIONS).astype(np.float32) for _ in range(3)]
    literals = [recall_sql.vector_literal(v.astype(np.float64)) for v in stored]
    sql = (
        "SELECT v, v::text FROM (VALUES (%s::vector), (NULL::vector), (%s::vector), (%s::vector)) t(v) "
        "ORDER BY v IS NULL, v::text"
    )
    with recall_sql.memory_sql.prepared_cursor() as cursor:
        recall_sql.binary_results(cursor)
        cursor.execute(sql, literals)
        binary = [row[0] for row in cursor.fetchall()]
    with connection.cursor() as cursor:
        cursor.execute(sql, literals)
        texts = [row[1] for row in cursor.fetchall()]
    decoded = recall_sql.vectors_of(binary)
    assert decoded.shape == (4, DIMENSIONS) and decoded.dtype == np.float64
    for row, text in zip(decoded, texts, strict=True):
        if text is None:
            assert not row.any()
        else:
            expected = np.array([float(x) for x in text.strip("[]").split(",")], dtype=np.float32)
            assert np.array_equal(row, expected.astype(np.float64))


def test_no_rows_is_an_empty_matrix():
    assert recall_sql.vectors_of([]).shape == (0, DIMENSIONS)
