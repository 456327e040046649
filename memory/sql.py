"""Single-row writes without the query compiler, for the service's hottest paths.

On this class of machine compiling one ORM statement costs more than the database round trip itself, and the
run and journal writes happen several times per API call. ``create`` and ``update`` do what ``Model.objects.create``
and ``QuerySet.update`` do for plain column values - the same ``pre_save``/``get_db_prep_save`` preparation,
defaults included - with the SQL text built once per model and column set. No signals are sent (this codebase
connects none to these models). Expressions (``F()``) are not supported: write those statements by hand.
"""

from __future__ import annotations

from functools import cache, lru_cache
from typing import Any, TypeVar

from django.db import models, transaction

M = TypeVar("M", bound=models.Model)


@cache
def _insert_plan(model: type[models.Model]) -> tuple[list[models.Field], str]:
    meta = model._meta
    fields = [f for f in meta.concrete_fields if f is not meta.auto_field]
    columns = ", ".join(f'"{f.column}"' for f in fields)
    marks = ", ".join(["%s"] * len(fields))
    sql = f'INSERT INTO "{meta.db_table}" ({columns}) VALUES ({marks}) RETURNING "{meta.pk.column}"'  # noqa: S608
    return fields, sql


@lru_cache(maxsize=1024)
def _update_sql(model: type[models.Model], columns: tuple[str, ...], where: tuple[str, ...]) -> str:
    assignments = ", ".join(f'"{column}" = %s' for column in columns)
    conditions = " AND ".join(f'"{column}" = %s' for column in where)
    return f'UPDATE "{model._meta.db_table}" SET {assignments} WHERE {conditions}'  # noqa: S608


def create(model: type[M], **values: Any) -> M:
    """``model.objects.create(**values)`` as one hand-written INSERT … RETURNING (inside the current connection)."""
    conn = transaction.get_connection()
    instance = model(**values)
    fields, sql = _insert_plan(model)
    params = [field.get_db_prep_save(field.pre_save(instance, True), connection=conn) for field in fields]
    with conn.cursor() as cursor:
        cursor.execute(sql, params)
        instance.pk = cursor.fetchone()[0]
    instance._state.adding = False
    instance._state.db = conn.alias
    return instance


def update(model: type[models.Model], pk: Any, *, where: dict[str, Any] | None = None, **values: Any) -> int:
    """``model.objects.filter(pk=pk, **where).update(**values)`` for plain values (attnames as keys); returns the
    number of rows changed (0 when ``where`` no longer holds: a compare-and-swap)."""
    conn = transaction.get_connection()
    meta = model._meta
    fields = [meta.get_field(name) for name in values]
    conditions = {meta.pk.attname: pk, **(where or {})}
    condition_fields = [meta.get_field(name) for name in conditions]
    sql = _update_sql(model, tuple(f.column for f in fields), tuple(f.column for f in condition_fields))
    params = [f.get_db_prep_save(v, connection=conn) for f, v in zip(fields, values.values(), strict=True)]
    params += [f.get_db_prep_value(v, connection=conn) for f, v in zip(condition_fields, conditions.values(),
                                                                        strict=True)]
    with conn.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount
