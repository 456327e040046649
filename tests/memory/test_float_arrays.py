"""memory.sql's binary read of ``double precision[]`` columns (``float_arrays``): the stored embeddings of run
records come back as numpy arrays (tuples) or lists (instances) equal, float for float, to what the ORM reads."""

from __future__ import annotations

import numpy as np
import pytest
from django.db import connection

from memory import embedding, sql
from memory.models import RunMemoryRecord
from tests.factories import RunMemoryRecordFactory

pytestmark = pytest.mark.django_db

TAIL = 'WHERE "session_id" = %s ORDER BY "id"'


def _sent(literal: str) -> bytes:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT array_send({literal})")
        return bytes(cursor.fetchone()[0])


def test_stored_embeddings_read_in_binary_equal_the_orm_read():
    first = RunMemoryRecordFactory(embedding=embedding.embed("Deploys happen on Tuesdays."))
    RunMemoryRecordFactory(session=first.session, run__session=first.session, embedding=None)
    orm = list(RunMemoryRecord.objects.filter(session=first.session).order_by("id").values_list("embedding", flat=True))
    assert len(orm) == 2 and len(orm[0]) == embedding.DIMENSIONS and orm[1] is None

    rows = sql.select(RunMemoryRecord, TAIL, [first.session.pk], fields=("embedding",), float_arrays=("embedding",))
    assert isinstance(rows[0][0], np.ndarray) and rows[0][0].dtype == np.float64
    assert rows[0][0].tolist() == orm[0] and rows[1][0] is None

    instances = sql.select_instances(RunMemoryRecord, TAIL, [first.session.pk], float_arrays=("embedding",))
    assert [r.embedding for r in instances] == orm and isinstance(instances[0].embedding, list)
    plain = sql.select_instances(RunMemoryRecord, TAIL, [first.session.pk])
    assert [r.embedding for r in plain] == orm


def test_the_binary_form_is_decoded_for_every_shape_postgresql_sends():
    assert sql.float_array(_sent("ARRAY[1.5, -2.25, 1e-300]::float8[]")).tolist() == [1.5, -2.25, 1e-300]
    assert sql.float_array(_sent("'{}'::float8[]")).tolist() == []
    with_null = sql.float_array(_sent("ARRAY[1.0, NULL, 3.0]::float8[]"))
    assert with_null[0] == 1.0 and np.isnan(with_null[1]) and with_null[2] == 3.0
    assert sql.float_array(None) is None
    with pytest.raises(ValueError, match="one-dimensional"):
        sql.float_array(_sent("ARRAY[[1.0, 2.0], [3.0, 4.0]]::float8[]"))


def test_only_a_double_precision_array_can_be_read_so():
    with pytest.raises(TypeError, match="double precision"):
        sql.select(RunMemoryRecord, "LIMIT 0", [], fields=("summary",), float_arrays=("summary",))
