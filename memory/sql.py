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


def insert_statement(instance: models.Model) -> tuple[str, list[Any]]:
    """The ``INSERT … RETURNING pk`` of a new instance and its prepared parameters (to run, or to embed in a
    larger statement such as a PostgreSQL data-modifying CTE)."""
    conn = transaction.get_connection()
    fields, sql = _insert_plan(type(instance))
    return sql, [field.get_db_prep_save(field.pre_save(instance, True), connection=conn) for field in fields]


def mark_saved(instance: M, pk: Any) -> M:
    """What ``save()`` leaves on an instance it inserted: its primary key and a 'stored' state."""
    instance.pk = pk
    instance._state.adding = False
    instance._state.db = transaction.get_connection().alias
    return instance


def create(model: type[M], **values: Any) -> M:
    """``model.objects.create(**values)`` as one hand-written INSERT … RETURNING (inside the current connection)."""
    instance = model(**values)
    sql, params = insert_statement(instance)
    with transaction.get_connection().cursor() as cursor:
        cursor.execute(sql, params)
        return mark_saved(instance, cursor.fetchone()[0])


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


@lru_cache(maxsize=256)
def _select_plan(model: type[models.Model], fields: tuple[str, ...] | None, alias: str):
    meta = model._meta
    chosen = meta.concrete_fields if fields is None else [meta.get_field(name) for name in fields]
    conn = transaction.get_connection(alias)
    plan = []
    for field in chosen:
        col = field.get_col(meta.db_table)
        plan.append((col, conn.ops.get_db_converters(col) + col.get_db_converters(conn)))
    columns = ", ".join(f'"{field.column}"' for field in chosen)
    return [field.attname for field in chosen], f'SELECT {columns} FROM "{meta.db_table}" ', plan  # noqa: S608


def select(model: type[models.Model], tail: str, params: list[Any], *, fields: tuple[str, ...] | None = None,
           alias: str = "default") -> list[tuple]:
    """``SELECT <columns> FROM <table> <tail>`` as tuples of Python values (each column through the converters
    the ORM applies: JSON decoded, and so on). ``fields`` by name (every concrete field by default); ``tail``
    is hand-written SQL - quoted column names, ``%s`` parameters - for the WHERE / ORDER BY / LIMIT of a hot
    read, which then never meets the query compiler."""
    _, head, plan = _select_plan(model, fields, alias)
    conn = transaction.get_connection(alias)
    with conn.cursor() as cursor:
        cursor.execute(head + tail, params)
        rows = cursor.fetchall()
    converted = [(index, col, converters) for index, (col, converters) in enumerate(plan) if converters]
    if not converted:
        return rows
    out = []
    for row in rows:
        values = list(row)
        for index, col, converters in converted:
            value = values[index]
            for converter in converters:
                value = converter(value, col, conn)
            values[index] = value
        out.append(tuple(values))
    return out


def select_instances(model: type[M], tail: str, params: list[Any], *, alias: str = "default") -> list[M]:
    """:func:`select` of every concrete field, as model instances in their stored state."""
    attnames, _, _ = _select_plan(model, None, alias)
    return [model.from_db(alias, attnames, values) for values in select(model, tail, params, alias=alias)]
