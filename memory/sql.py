"""The memory plane's hand-written SQL: every statement that bypasses the query compiler lives here (or in the
two hot-path stores, ``memory.journal`` and ``memory.run_memory_store``), each with a test that it answers what
the ORM query it replaces answers (tests/memory/test_sql.py).

On this class of machine compiling one ORM statement costs more than the database round trip itself, and the
run and journal writes happen several times per API call. ``create`` and ``update`` do what ``Model.objects.create``
and ``QuerySet.update`` do for plain column values - the same ``pre_save``/``get_db_prep_save`` preparation,
defaults included - with the SQL text built once per model and column set. No signals are sent (this codebase
connects none to these models). Expressions (``F()``) are not supported: write those statements by hand.
``select``/``select_instances`` read with a hand-written tail through the ORM's own column converters. Below
them, the named reads of the hot paths: the key of a request with its user, a run action's locked run, the
policy in force, a session's scope parts, the counters' increment. Table and column names come from the models'
``_meta`` (constants of this codebase, never input).
"""

from __future__ import annotations

import copy
import json
import struct
import threading
from contextlib import contextmanager
from datetime import datetime
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, cast

import numpy as np
from django.contrib.auth import get_user_model
from django.contrib.postgres.fields import ArrayField
from django.db import models, transaction
from psycopg import pq
from psycopg.abc import Buffer
from psycopg.adapt import Dumper

from memory.models import (
    ACTIVE_STATUSES,
    AgentGrant,
    ApiKey,
    Counter,
    Persona,
    PolicyKind,
    PolicyRevision,
    Project,
    Run,
    Session,
)

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

    class _ReadAnnotations(TypedDict):
        """What ``memory.sessions.with_read_annotations`` adds to a session (``visible_session`` sets them)."""

        project_id_list: list[str]
        active_run_pk: int | None
        granted_scope_keys: frozenset[str]
        policies_read: dict[str, tuple[int, dict]]


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


def insert(instance: M) -> M:
    """``instance.save()`` of a new instance (no custom ``save``, no signals) as one hand-written INSERT …
    RETURNING (inside the current connection); the instance comes back with its key, in its stored state."""
    sql, params = insert_statement(instance)
    with prepared_cursor(transaction.get_connection().alias) as cursor:
        cursor.execute(sql, params)
        return mark_saved(instance, cursor.fetchone()[0])


def insert_many(instances: list[M]) -> list[M]:
    """:func:`insert` of a few new instances of one model as one ``INSERT … VALUES (…), (…) RETURNING pk``
    (PostgreSQL returns the rows in the order of the VALUES list, as ``bulk_create`` relies on)."""
    if not instances:
        return instances
    conn = transaction.get_connection()
    fields, sql = _insert_plan(type(instances[0]))
    head, _, _ = sql.partition(" VALUES ")
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    params = [
        field.get_db_prep_save(field.pre_save(instance, True), connection=conn)
        for instance in instances
        for field in fields
    ]
    pk = type(instances[0])._meta.pk.column
    with conn.cursor() as cursor:
        cursor.execute(f'{head} VALUES {", ".join([row] * len(instances))} RETURNING "{pk}"', params)
        keys = [found[0] for found in cursor.fetchall()]
    for instance, key in zip(instances, keys, strict=True):
        mark_saved(instance, key)
    return instances


def create(model: type[M], **values: Any) -> M:
    """``model.objects.create(**values)`` as one hand-written INSERT … RETURNING (inside the current connection)."""
    return insert(model(**values))


def update(model: type[models.Model], pk: Any, *, where: dict[str, Any] | None = None, **values: Any) -> int:
    """``model.objects.filter(pk=pk, **where).update(**values)`` for plain values (attnames as keys); returns the
    number of rows changed (0 when ``where`` no longer holds: a compare-and-swap)."""
    conn = transaction.get_connection()
    meta = model._meta
    fields = cast("list[models.Field[Any, Any]]", [meta.get_field(name) for name in values])  # concrete: attnames
    conditions = {meta.pk.attname: pk, **(where or {})}
    condition_fields = cast("list[models.Field[Any, Any]]", [meta.get_field(name) for name in conditions])
    sql = _update_sql(model, tuple(f.column for f in fields), tuple(f.column for f in condition_fields))
    params = [f.get_db_prep_save(v, connection=conn) for f, v in zip(fields, values.values(), strict=True)]
    params += [
        f.get_db_prep_value(v, connection=conn) for f, v in zip(condition_fields, conditions.values(), strict=True)
    ]
    with prepared_cursor(conn.alias) as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


_PLAIN_FIELDS = (models.CharField, models.TextField, models.IntegerField, models.BooleanField, models.ForeignKey)
_PLAIN_VALUES = (str, int, bool, type(None))
_NOT_LOADED = object()  # an attribute not in the instance's __dict__ (deferred): read through the descriptor


@cache
def _copy_plan(model: type[models.Model]) -> list[tuple[models.Field, str]]:
    """Per concrete field (the primary key left out) how :func:`copy_instances` writes its value: ``plain`` (a
    text, number, boolean or key field whose prepared value is the attribute itself when that is already a str,
    int, bool or None), ``floats`` (an array of floats: an embedding) or ``prepared`` (everything else, such as
    JSON and dates: ``get_db_prep_save`` of ``pre_save``)."""
    meta = model._meta
    plan: list[tuple[models.Field, str]] = []
    for field in meta.concrete_fields:
        if field is meta.auto_field:
            continue
        if isinstance(field, ArrayField) and isinstance(field.base_field, models.FloatField):
            plan.append((field, "floats"))
        elif (
            isinstance(field, _PLAIN_FIELDS)
            and not isinstance(field, models.JSONField)
            and not getattr(field, "auto_now", False)
            and not getattr(field, "auto_now_add", False)
        ):
            plan.append((field, "plain"))
        else:
            plan.append((field, "prepared"))
    return plan


def _copy_value(field: models.Field, how: str, instance: models.Model, conn) -> Any:
    """A field's value as COPY's text format takes it: the prepared value (``get_db_prep_save`` of
    ``pre_save``), with the work skipped where it changes nothing (see :func:`_copy_plan`); a list of floats for
    an array of floats is written as its array literal at once, rather than adapted element by element."""
    if how == "plain":
        value = getattr(instance, field.attname)
        if type(value) in _PLAIN_VALUES:
            return value
    value = field.pre_save(instance, True)
    if how == "floats" and isinstance(value, list) and value:
        try:  # float.__repr__ refuses anything that is not a float (an int, a bool, None): prepared below
            return "{" + ",".join(map(float.__repr__, value)) + "}"
        except TypeError:
            pass
    return field.get_db_prep_save(value, connection=conn)


def _copy_row(plan: list[tuple[models.Field, str]], instance: models.Model, conn) -> list[Any]:
    """:func:`_copy_value` of every field of ``plan``, with a plain field's value taken at once when it is
    already what COPY takes (the common case, a loop without a call per field)."""
    stored = instance.__dict__
    row = []
    for field, how in plan:
        if how == "plain":
            value = stored.get(field.attname, _NOT_LOADED)
            if type(value) in _PLAIN_VALUES:
                row.append(value)
                continue
        row.append(_copy_value(field, how, instance, conn))
    return row


def copy_instances(model: type[M], instances: list[M]) -> list[M]:
    """``model.objects.bulk_create(instances)`` as PostgreSQL does bulk loads: the primary keys drawn from the
    table's sequence in one statement, then the rows streamed with ``COPY … FROM STDIN`` (no statement text to
    build, no parameters to bind). Values get the same ``pre_save``/``get_db_prep_save`` preparation as
    :func:`create`; the instances come back with their keys, in their stored state. For the bulk paths
    (``learnings.services.imports``); inside the current transaction."""
    if not instances:
        return instances
    conn = transaction.get_connection()
    meta = model._meta
    plan = _copy_plan(model)
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
            [meta.db_table, meta.pk.column, len(instances)],
        )
        keys = [row[0] for row in cursor.fetchall()]
        columns = ", ".join(f'"{f.column}"' for f in [meta.pk, *(field for field, _ in plan)])
        with conn.wrap_database_errors, cursor.cursor.copy(f'COPY "{meta.db_table}" ({columns}) FROM STDIN') as copy:
            for pk, instance in zip(keys, instances, strict=True):
                copy.write_row([pk, *_copy_row(plan, instance, conn)])
    for pk, instance in zip(keys, instances, strict=True):
        mark_saved(instance, pk)
    return instances


@lru_cache(maxsize=256)
def _select_plan(
    model: type[models.Model], fields: tuple[str, ...] | None, alias: str, float_arrays: tuple[str, ...] = ()
):
    meta = model._meta
    chosen = (
        meta.concrete_fields
        if fields is None
        else cast("list[models.Field[Any, Any]]", [meta.get_field(name) for name in fields])  # concrete fields
    )
    conn = transaction.get_connection(alias)
    plan = []
    columns = []
    for field in chosen:
        col = field.get_col(meta.db_table)
        if field.name in float_arrays:
            if not (isinstance(field, ArrayField) and isinstance(field.base_field, models.FloatField)):
                raise TypeError(f"{meta.label}.{field.name} is not a double precision[] column")
            plan.append((col, [_float_array_converter]))
            columns.append(f'array_send("{field.column}")')
        else:
            plan.append((col, conn.ops.get_db_converters(col) + col.get_db_converters(conn)))
            columns.append(f'"{field.column}"')
    return [field.attname for field in chosen], f'SELECT {", ".join(columns)} FROM "{meta.db_table}" ', plan  # noqa: S608


_FLOAT8_ELEMENT = np.dtype([("length", ">i4"), ("value", ">f8")])


def float_array(data: bytes | memoryview | None) -> np.ndarray | None:
    """A ``double precision[]`` in PostgreSQL's binary form (``array_send``) as a one-dimensional float64
    array: five int32s (dimensions, has-nulls flag, element type, length, lower bound), then each element as
    its int32 length and big-endian value. The text form (``{0.1,0.2,…}``) costs psycopg ~0.15 ms to parse
    per 256 floats; this is a view of the bytes. NULL elements (never stored by this project) read as NaN."""
    if data is None:
        return None
    raw = bytes(data)
    dimensions, has_nulls = np.frombuffer(raw, dtype=">i4", count=2)
    if dimensions == 0:
        return np.zeros(0)
    if dimensions != 1:
        raise ValueError(f"expected a one-dimensional array, got {dimensions} dimensions")
    if not has_nulls:
        return np.frombuffer(raw, dtype=_FLOAT8_ELEMENT, offset=20)["value"].astype(np.float64)
    values, at = [], 20
    while at < len(raw):
        (length,) = np.frombuffer(raw, dtype=">i4", count=1, offset=at)
        at += 4
        if length < 0:
            values.append(np.nan)
        else:
            values.append(float(np.frombuffer(raw, dtype=">f8", count=1, offset=at)[0]))
            at += int(length)
    return np.array(values, dtype=np.float64)


def _float_array_converter(value, expression, connection):
    return float_array(value)


def select(
    model: type[models.Model],
    tail: str,
    params: list[Any],
    *,
    fields: tuple[str, ...] | None = None,
    float_arrays: tuple[str, ...] = (),
    alias: str = "default",
) -> list[tuple]:
    """``SELECT <columns> FROM <table> <tail>`` as tuples of Python values (each column through the converters
    the ORM applies: JSON decoded, and so on). ``fields`` by name (every concrete field by default); ``tail``
    is hand-written SQL - quoted column names, ``%s`` parameters - for the WHERE / ORDER BY / LIMIT of a hot
    read, which then never meets the query compiler. ``float_arrays``: fields among them (``double
    precision[]``, such as stored embeddings) read in binary as numpy float64 arrays (:func:`float_array`)
    rather than as lists. Parameters are bound on the server (``prepared_cursor``): each such read is parsed and
    planned once per connection rather than on every call (measured: 0.3 ms of a memory-search, ~1 ms of a
    run open over its reads)."""
    _, head, plan = _select_plan(model, fields, alias, float_arrays)
    conn = transaction.get_connection(alias)
    with prepared_cursor(alias) as cursor:  # the hot reads: planned once per connection
        cursor.execute(head + tail, params)
        rows = cursor.fetchall()
    return [_converted(plan, row, conn) for row in rows]


def _converted(plan, row, conn) -> tuple:
    """``row`` (one value per entry of ``plan``) through the ORM's column converters."""
    if not any(converters for _, converters in plan):
        return tuple(row)
    values = list(row)
    for index, (col, converters) in enumerate(plan):
        for converter in converters:
            values[index] = converter(values[index], col, conn)
    return tuple(values)


def select_instances(
    model: type[M], tail: str, params: list[Any], *, float_arrays: tuple[str, ...] = (), alias: str = "default"
) -> list[M]:
    """:func:`select` of every concrete field, as model instances in their stored state. ``float_arrays`` are
    read in binary as :func:`select` does, then set on the instances as the lists the ORM would give."""
    attnames, _, _ = _select_plan(model, None, alias)
    rows = select(model, tail, params, float_arrays=float_arrays, alias=alias)
    if float_arrays:
        at = [attnames.index(name) for name in float_arrays]  # plain columns: a field's attname is its name
        rows = [_listed(row, at) for row in rows]
    return [model.from_db(alias, attnames, values) for values in rows]


def _listed(row: tuple, at: list[int]) -> tuple:
    values = list(row)
    for index in at:
        if values[index] is not None:
            values[index] = values[index].tolist()
    return tuple(values)


def _instance(model: type[M], row: tuple, alias: str) -> M:
    """A complete, stored instance from the values of every concrete field (in ``_meta`` order)."""
    attnames, _, plan = _select_plan(model, None, alias)
    return model.from_db(alias, attnames, _converted(plan, row, transaction.get_connection(alias)))


def _columns(model: type[models.Model], table_alias: str) -> str:
    return ", ".join(f'{table_alias}."{field.column}"' for field in model._meta.concrete_fields)


def prepared_cursor(alias: str = "default"):
    """A cursor of the current connection that binds parameters on the server (Django's default cursor merges
    them into the text client-side), so psycopg prepares a statement it has run ``prepare_threshold`` times
    (``DATABASES["default"]["OPTIONS"]``, ``KHEISH_DB_PREPARE_THRESHOLD``) and PostgreSQL plans it once per
    connection instead of on every call (its generic plan: ``plan_cache_mode``, kheish/settings.py; a statement
    run here must be right and quick under one plan for every value). For the hot reads whose text is stable
    and whose values are all parameters (``learnings.recall_sql``); use it like ``connection.cursor()`` (query
    logging and execute wrappers included)."""
    from django.db import connections
    from django.db.backends.postgresql.base import ServerBindingCursor  # type: ignore[attr-defined]  # not in stubs

    conn = connections[alias]
    conn.close_if_health_check_failed()
    conn.ensure_connection()
    with conn.wrap_database_errors:
        return conn._prepare_cursor(ServerBindingCursor(conn.connection))  # type: ignore[attr-defined]  # private API


# --------------------------------------------------------------------------------------------------------
# Named reads of the hot paths


@lru_cache(maxsize=4)
def _key_sql(user_model: type[models.Model]) -> str:
    return (
        f"SELECT {_columns(ApiKey, 'k')}, {_columns(user_model, 'u')}, "  # noqa: S608
        "k.last_used_at IS NULL OR k.last_used_at < %s "
        f'FROM "{ApiKey._meta.db_table}" k JOIN "{user_model._meta.db_table}" u ON u.id = k.user_id '
        "WHERE k.prefix = %s AND k.revoked_at IS NULL"
    )


def active_key_with_user(prefix: str, *, stale_before: datetime) -> tuple[ApiKey, bool] | None:
    """``ApiKey.objects.select_related("user").get(prefix=prefix, revoked_at__isnull=True)`` - complete
    instances of both - and whether its ``last_used_at`` is older than ``stale_before`` (or unset); None when
    there is no such key. Every /v1 request passes here."""
    user_model = get_user_model()
    conn = transaction.get_connection()
    with prepared_cursor(conn.alias) as cursor:
        cursor.execute(_key_sql(user_model), [stale_before, prefix])
        row = cursor.fetchone()
    if row is None:
        return None
    width = len(ApiKey._meta.concrete_fields)
    key = _instance(ApiKey, row[:width], conn.alias)
    key.user = _instance(user_model, row[width:-1], conn.alias)
    return key, bool(row[-1])


@lru_cache(maxsize=4)
def _locked_run_sql(user_model: type[models.Model], by_owner: bool) -> str:
    return (
        f"SELECT {_columns(Run, 'r')}, {_columns(Session, 's')}, {_columns(user_model, 'u')} "  # noqa: S608
        f'FROM "{Run._meta.db_table}" r JOIN "{Session._meta.db_table}" s ON s.id = r.session_id '
        f'JOIN "{user_model._meta.db_table}" u ON u.id = s.owner_id '
        f"WHERE r.id = %s {'AND s.owner_id = %s ' if by_owner else ''}FOR UPDATE OF r"
    )


def locked_run(pk: int, *, owner_pk: int | None = None) -> Run | None:
    """``Run.objects.select_for_update(of=("self",)).select_related("session__owner").get(pk=pk)`` (with
    ``owner_pk``: only if the session belongs to that user) - complete instances of the three rows; the run row
    is locked until the transaction ends. None when there is no such (visible) run."""
    user_model = get_user_model()
    conn = transaction.get_connection()
    params = [pk] if owner_pk is None else [pk, owner_pk]
    with prepared_cursor(conn.alias) as cursor:
        cursor.execute(_locked_run_sql(user_model, owner_pk is not None), params)
        row = cursor.fetchone()
    if row is None:
        return None
    runs, sessions = len(Run._meta.concrete_fields), len(Session._meta.concrete_fields)
    run = _instance(Run, row[:runs], conn.alias)
    run.session = _instance(Session, row[runs : runs + sessions], conn.alias)
    run.session.owner = _instance(user_model, row[runs + sessions :], conn.alias)
    return run


_ACTIVE = ", ".join(f"'{status}'" for status in sorted(ACTIVE_STATUSES))  # constants of the model
_LOCK_SESSION_SQL = (  # params: [session_id]
    f'SELECT s.id, (SELECT r.id FROM "{Run._meta.db_table}" r WHERE r.session_id = s.id '  # noqa: S608
    f"AND r.status IN ({_ACTIVE}) ORDER BY r.id LIMIT 1) "
    f'FROM "{Session._meta.db_table}" s WHERE s.id = %s FOR UPDATE OF s'
)


def lock_session(pk: int) -> tuple[bool, int | None]:
    """``Session.objects.select_for_update().filter(pk=pk)`` and, read under that lock, the session's run in
    flight (``Run.objects.filter(session=pk, status__in=ACTIVE_STATUSES)``'s first pk) in one statement: whether
    the session exists, and that run's pk or None. The session row is locked until the transaction ends."""
    with prepared_cursor(transaction.get_connection().alias) as cursor:
        cursor.execute(_LOCK_SESSION_SQL, [pk])
        row = cursor.fetchone()
    return (False, None) if row is None else (True, row[1])


def insert_unless_conflict(instance: M) -> M | None:
    """:func:`create` of a built instance as ``INSERT … ON CONFLICT DO NOTHING``: None when a unique constraint
    already holds the row (no savepoint needed to survive it, the transaction stays usable)."""
    sql, params = insert_statement(instance)
    head, _, returning = sql.rpartition(" RETURNING ")
    with prepared_cursor(transaction.get_connection().alias) as cursor:
        cursor.execute(f"{head} ON CONFLICT DO NOTHING RETURNING {returning}", params)
        row = cursor.fetchone()
    return None if row is None else mark_saved(instance, row[0])


@lru_cache(maxsize=4)
def _visible_session_sql(user_model: type[models.Model], by_owner: bool) -> str:
    links = Session.projects.through._meta.db_table
    grants = AgentGrant._meta.db_table
    grant_personas, grant_projects = (
        AgentGrant.personas.through._meta.db_table,
        AgentGrant.projects.through._meta.db_table,
    )
    statuses = ", ".join(f"'{status}'" for status in sorted(ACTIVE_STATUSES))  # constants of the model
    return (
        f"SELECT {_columns(Session, 's')}, {_columns(user_model, 'u')}, "  # noqa: S608
        f"p.id IS NOT NULL, {_columns(Persona, 'p')}, "
        f'ARRAY(SELECT pr.project_id FROM "{links}" l JOIN "{Project._meta.db_table}" pr '
        "ON pr.id = l.project_id WHERE l.session_id = s.id ORDER BY pr.project_id), "
        f'(SELECT r.id FROM "{Run._meta.db_table}" r WHERE r.session_id = s.id AND r.status IN ({statuses}) '
        "ORDER BY r.id DESC LIMIT 1), "
        # the bound persona and projects its owner is granted now (memory.sessions.learning_scope_keys_many)
        f'ARRAY(SELECT \'persona:\' || p.persona_id FROM "{grants}" g JOIN "{grant_personas}" gp '
        "ON gp.agentgrant_id = g.id WHERE g.user_id = s.owner_id AND gp.persona_id = s.persona_id "
        f'UNION ALL SELECT \'project:\' || pr.project_id FROM "{links}" l JOIN "{Project._meta.db_table}" pr '
        f'ON pr.id = l.project_id JOIN "{grant_projects}" gq ON gq.project_id = pr.id JOIN "{grants}" g '
        "ON g.id = gq.agentgrant_id WHERE l.session_id = s.id AND g.user_id = s.owner_id), "
        # the policies in force (one_policy_read(session.policies_read)): a read of this session needs no other
        f"({_POLICIES_AS_JSON_SQL}) "
        f'FROM "{Session._meta.db_table}" s JOIN "{user_model._meta.db_table}" u ON u.id = s.owner_id '
        f'LEFT JOIN "{Persona._meta.db_table}" p ON p.id = s.persona_id '
        f"WHERE s.id = %s{' AND s.owner_id = %s' if by_owner else ''}"
    )


def visible_session(pk: int, *, owner_pk: int | None = None) -> Session | None:
    """``memory.sessions.with_read_annotations(Session.objects.select_related("persona", "owner")).filter(pk=pk)
    .first()`` (with ``owner_pk``: only the sessions of that user) - complete instances of the session, its
    owner and its persona, with ``project_id_list`` and ``active_run_pk`` - in one statement that never meets
    the query compiler: every session-scoped /v1 call starts here. None when there is no such session."""
    user_model = get_user_model()
    conn = transaction.get_connection()
    params = [pk] if owner_pk is None else [pk, owner_pk]
    with prepared_cursor(conn.alias) as cursor:  # planned once per connection (three joins, two subqueries)
        cursor.execute(_visible_session_sql(user_model, owner_pk is not None), params)
        row = cursor.fetchone()
    if row is None:
        return None
    sessions, users = len(Session._meta.concrete_fields), len(user_model._meta.concrete_fields)
    personas = len(Persona._meta.concrete_fields)
    session = cast("WithAnnotations[Session, _ReadAnnotations]", _instance(Session, row[:sessions], conn.alias))
    session.owner = _instance(user_model, row[sessions : sessions + users], conn.alias)
    has_persona = row[sessions + users]
    start = sessions + users + 1
    session.persona = _instance(Persona, row[start : start + personas], conn.alias) if has_persona else None
    session.project_id_list = list(row[start + personas] or [])
    session.active_run_pk = row[start + personas + 1]
    session.granted_scope_keys = frozenset(row[start + personas + 2] or ())
    session.policies_read = _policies_of(row[start + personas + 3])
    return session


_CURRENT_POLICY_SQL = (
    f'SELECT revision, policy FROM "{PolicyRevision._meta.db_table}" '  # noqa: S608
    "WHERE kind = %s ORDER BY revision DESC LIMIT 1"
)


_ALL_POLICIES_SQL = (  # params: [kinds]
    "SELECT k.kind, p.revision, p.policy FROM unnest(%s::text[]) AS k(kind) CROSS JOIN LATERAL "  # noqa: S608
    f'(SELECT revision, policy FROM "{PolicyRevision._meta.db_table}" r WHERE r.kind = k.kind '
    "ORDER BY revision DESC LIMIT 1) p"
)


_KINDS_ARRAY = "ARRAY[" + ", ".join(f"'{kind}'" for kind in PolicyKind.values) + "]::text[]"  # the model's
_POLICIES_AS_JSON_SQL = (  # the same, as one JSON text: [[kind, revision, policy], ...]
    f"SELECT json_agg(json_build_array(k.kind, p.revision, p.policy))::text FROM unnest({_KINDS_ARRAY}) "  # noqa: S608
    f'AS k(kind) CROSS JOIN LATERAL (SELECT revision, policy FROM "{PolicyRevision._meta.db_table}" r '
    "WHERE r.kind = k.kind ORDER BY revision DESC LIMIT 1) p"
)


def _policies_of(text: str | None) -> dict[str, tuple[int, dict]]:
    """``_POLICIES_AS_JSON_SQL``'s text by kind (the policy column is a plain JSONField: ``json.loads`` is
    what its ``from_db_value`` does)."""
    return {kind: (revision, policy) for kind, revision, policy in json.loads(text or "[]")}


class _PolicyReads(threading.local):
    depth = 0
    read: dict[str, tuple[int, dict]] | None = None


_POLICY_READS = _PolicyReads()


@contextmanager
def one_policy_read(read: dict[str, tuple[int, dict]] | None = None):
    """Within this block (of this thread), :func:`current_policy` of any kind comes from one statement that
    reads the newest revision of every policy kind at its first use: a prompt assembly or a memory-search
    reads the learning and the run-memory policies together, as fresh as at the start of the call. ``read``:
    the policies as a statement of this call already read them (``visible_session``'s ``policies_read``),
    which the block then uses instead of reading them again."""
    if not _POLICY_READS.depth and read is not None:
        _POLICY_READS.read = read
    _POLICY_READS.depth += 1
    try:
        yield
    finally:
        _POLICY_READS.depth -= 1
        if not _POLICY_READS.depth:
            _POLICY_READS.read = None


def current_policy(kind: str) -> tuple[int, dict] | None:
    """``PolicyRevision.objects.filter(kind=kind).order_by("-revision").values_list("revision", "policy")
    .first()``: the newest revision of a policy, read fresh on every terminal run and prompt assembly (inside
    :func:`one_policy_read`, once per block for every kind)."""
    conn = transaction.get_connection()
    field = PolicyRevision._meta.get_field("policy")
    # from_db_value(value, None, conn) below: JSONField reads ``expression`` only to pass a KeyTransform's value
    # through, which a whole column is not; the stubs require an expression there
    if _POLICY_READS.depth:
        if _POLICY_READS.read is None:
            with prepared_cursor(conn.alias) as cursor:
                cursor.execute(_ALL_POLICIES_SQL, [list(PolicyKind.values)])
                _POLICY_READS.read = {
                    name: (revision, field.from_db_value(policy, None, conn))  # type: ignore[arg-type]  # see above
                    for name, revision, policy in cursor.fetchall()
                }
        found = _POLICY_READS.read.get(kind)
        return None if found is None else (found[0], copy.deepcopy(found[1]))
    with prepared_cursor(conn.alias) as cursor:
        cursor.execute(_CURRENT_POLICY_SQL, [kind])
        row = cursor.fetchone()
    if row is None:
        return None
    return row[0], field.from_db_value(row[1], None, conn)  # type: ignore[arg-type]  # see above


_PROJECT_LINKS = Session.projects.through._meta.db_table
SCOPE_PARTS_SQL = (  # params: [session_id, session_id]
    f"SELECT 'persona' AS part, p.persona_id AS value FROM \"{Session._meta.db_table}\" s "  # noqa: S608
    f'JOIN "{Persona._meta.db_table}" p ON p.id = s.persona_id WHERE s.id = %s UNION ALL '
    f"SELECT 'project' AS part, pr.project_id AS value FROM \"{_PROJECT_LINKS}\" l "
    f'JOIN "{Project._meta.db_table}" pr ON pr.id = l.project_id WHERE l.session_id = %s'
)
"""The rows (part, value) that a session's learning scope keys are made of: its persona and its projects -
``session.persona.persona_id`` and ``session.projects.values_list("project_id")``."""


def session_scope_parts(session_id: int) -> list[tuple[str, str]]:
    """The rows of :data:`SCOPE_PARTS_SQL` for one session."""
    with prepared_cursor(transaction.get_connection().alias) as cursor:
        cursor.execute(SCOPE_PARTS_SQL, [session_id, session_id])
        return cursor.fetchall()


def counters_add_statement(amounts: dict[str, int]) -> tuple[str, list]:
    """``Counter.objects.filter(name__in=amounts).update(value=F("value") + Case(When(name=..., then=amount)
    ...))`` as SQL and parameters (existing rows only), to run or to embed in a larger statement."""
    names = list(amounts)
    cases = " ".join(["WHEN %s THEN %s"] * len(names))
    marks = ", ".join(["%s"] * len(names))
    params = [item for name in names for item in (name, amounts[name])] + names
    return (
        f'UPDATE "{Counter._meta.db_table}" SET value = value + CASE name {cases} ELSE 0 END '  # noqa: S608
        f"WHERE name IN ({marks})"
    ), params


# --------------------------------------------------------------------------------------------------------
# Writes combined into one statement (issue 23.3): a row and its audit row, keys drawn ahead, several
# data-modifying statements as the CTEs of one. PostgreSQL runs each CTE exactly once, in one snapshot, whether
# the outer SELECT reads it or not; the foreign keys of this codebase are deferred (checked at commit).


def next_key_sql(model: type[models.Model]) -> str:
    """The SQL expression that draws the next primary key of ``model`` from its sequence (a key that a later
    :func:`insert_with_key_statement` then uses; a key drawn and not used is a gap, as after any rollback)."""
    meta = model._meta
    return f"nextval(pg_get_serial_sequence('{meta.db_table}', '{meta.pk.column}'))"


def insert_select_statement(
    instance: models.Model, source: str, expressions: dict[str, tuple[str, list[Any]]]
) -> tuple[str, list[Any]]:
    """The INSERT of a new instance as ``INSERT … SELECT <values> FROM <source> RETURNING pk``: the fields named in
    ``expressions`` (attnames) take that SQL expression over ``source`` (with its parameters) instead of the
    instance's value - an audit row whose subject id is made of the key a CTE ``source`` has just inserted."""
    conn = transaction.get_connection()
    fields, sql = _insert_plan(type(instance))
    head, _, _ = sql.partition(" VALUES ")
    values: list[str] = []
    params: list[Any] = []
    for field in fields:
        if field.attname in expressions:
            expression, extra = expressions[field.attname]
            values.append(expression)
            params.extend(extra)
        else:
            values.append("%s")
            params.append(field.get_db_prep_save(field.pre_save(instance, True), connection=conn))
    pk = type(instance)._meta.pk.column
    return f'{head} SELECT {", ".join(values)} FROM {source} RETURNING "{pk}"', params  # noqa: S608


def insert_audited(
    instance: M, audit: models.Model, *, subject_prefix: str, also: str = "", also_params: list[Any] | None = None
) -> tuple[Any, ...]:
    """:func:`insert` of a new instance and of its audit row in one statement: the audit's ``subject_id`` is
    ``<subject_prefix>-<the new key>`` (``public_ids.format_id``). ``also``: more expressions of the same
    SELECT list (``, expr, …``: a transaction lock, a key drawn with :func:`next_key_sql`), run in the same
    statement after the inserts' values are known; their values are returned. Both instances come back in
    their stored state."""
    sql, params = insert_statement(instance)
    pk = type(instance)._meta.pk.column
    audit_sql, audit_params = insert_select_statement(
        audit, "s0", {"subject_id": (f'%s || s0."{pk}"', [f"{subject_prefix}-"])}
    )
    with transaction.get_connection().cursor() as cursor:
        cursor.execute(
            f'WITH s0 AS ({sql}), s1 AS ({audit_sql}) SELECT s0."{pk}", (SELECT "id" FROM s1){also} FROM s0',  # noqa: S608
            [*params, *audit_params, *(also_params or [])],
        )
        row = cursor.fetchone()
    mark_saved(instance, row[0])
    audit.subject_id = f"{subject_prefix}-{row[0]}"  # type: ignore[attr-defined]  # an AuditEvent
    mark_saved(audit, row[1])
    return tuple(row[2:])


def insert_with_key_statement(instance: models.Model, *, unless: str | None = None) -> tuple[str, list[Any]]:
    """The ``INSERT … RETURNING pk`` of a new instance whose primary key is already set (drawn with
    :func:`next_key_sql`), and its parameters - prepared as :func:`copy_instances` prepares them (an embedding as
    its array literal at once, plain values as they are). ``unless``: the name of a CTE of the same statement
    (:func:`run_together`); the row is inserted only when that CTE has no row."""
    conn = transaction.get_connection()
    fields, sql = _insert_plan(type(instance))
    meta = type(instance)._meta
    head, _, _ = sql.partition(" (")
    marks = ", ".join(["%s"] * (len(fields) + 1))
    columns = ", ".join(f'"{f.column}"' for f in fields)
    params = [instance.pk] + [_copy_value(field, how, instance, conn) for field, how in _copy_plan(type(instance))]
    values = f"VALUES ({marks})" if unless is None else f"SELECT {marks} WHERE NOT EXISTS (SELECT 1 FROM {unless})"  # noqa: S608
    return f'{head} ("{meta.pk.column}", {columns}) {values} RETURNING "{meta.pk.column}"', params


def insert_many_statement(instances: list[M]) -> tuple[str, list[Any]]:
    """:func:`insert_many`'s statement and parameters (to embed in a larger one)."""
    conn = transaction.get_connection()
    fields, sql = _insert_plan(type(instances[0]))
    head, _, _ = sql.partition(" VALUES ")
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    params = [
        field.get_db_prep_save(field.pre_save(instance, True), connection=conn)
        for instance in instances
        for field in fields
    ]
    pk = type(instances[0])._meta.pk.column
    return f'{head} VALUES {", ".join([row] * len(instances))} RETURNING "{pk}"', params


def update_statement(
    model: type[models.Model],
    pk: Any,
    *,
    where: dict[str, Any] | None = None,
    only_if: str | None = None,
    **values: Any,
) -> tuple[str, list[Any]]:
    """:func:`update`'s statement (``… RETURNING pk``: one row per row changed) and parameters. ``only_if``: the
    name of a CTE of the same statement (:func:`run_together`); the row is changed only when that CTE has a row."""
    conn = transaction.get_connection()
    meta = model._meta
    fields = cast("list[models.Field[Any, Any]]", [meta.get_field(name) for name in values])
    conditions = {meta.pk.attname: pk, **(where or {})}
    condition_fields = cast("list[models.Field[Any, Any]]", [meta.get_field(name) for name in conditions])
    sql = _update_sql(model, tuple(f.column for f in fields), tuple(f.column for f in condition_fields))
    params = [f.get_db_prep_save(v, connection=conn) for f, v in zip(fields, values.values(), strict=True)]
    params += [
        f.get_db_prep_value(v, connection=conn) for f, v in zip(condition_fields, conditions.values(), strict=True)
    ]
    condition = "" if only_if is None else f" AND EXISTS (SELECT 1 FROM {only_if})"  # noqa: S608
    return f'{sql}{condition} RETURNING "{meta.pk.column}"', params


def run_together(statements: list[tuple[str, list[Any]]], *, also: str = "") -> list[Any]:
    """Statements (each a SELECT, or data-modifying with ``… RETURNING``) as the CTEs ``s0``, ``s1``, … of one
    statement, a later one free to read an earlier one by its name; per statement, how many rows it returned
    (an UPDATE: how many it changed), then the values of ``also`` (``, expr, …`` over the CTEs)."""
    ctes = ", ".join(f"s{i} AS ({sql})" for i, (sql, _) in enumerate(statements))
    counts = ", ".join(f"(SELECT count(*) FROM s{i})" for i in range(len(statements)))  # noqa: S608
    params = [param for _, statement_params in statements for param in statement_params]
    with transaction.get_connection().cursor() as cursor:
        cursor.execute(f"WITH {ctes} SELECT {counts}{also}", params)
        row = cursor.fetchone()
    return [int(count) for count in row[: len(statements)]] + list(row[len(statements) :])


def draw_keys(model: type[models.Model], count: int) -> list[int]:
    """``count`` primary keys drawn from ``model``'s table sequence in one statement (what
    :func:`copy_instances` does first), for rows that must know each other's keys before either is written
    (two tables whose foreign keys point at each other: PostgreSQL checks them at commit, Django creating
    them ``DEFERRABLE INITIALLY DEFERRED``)."""
    if count <= 0:
        return []
    meta = model._meta
    with transaction.get_connection().cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
            [meta.db_table, meta.pk.column, count],
        )
        return [row[0] for row in cursor.fetchall()]


FLOAT8_OID = 701
FLOAT8_ARRAY_OID = 1022


class PackedFloat8Array(bytes):
    """A ``double precision[]`` value in PostgreSQL's binary format (``array_send``), made by
    :func:`packed_float8_arrays`, written as it is by a binary ``COPY`` (:func:`copy_keyed_instances`)."""


class _PackedFloat8ArrayDumper(Dumper):
    format = pq.Format.BINARY
    oid = FLOAT8_ARRAY_OID

    def dump(self, obj: Buffer) -> Buffer:
        return obj


def packed_float8_arrays(vectors: np.ndarray) -> list[PackedFloat8Array]:
    """Each row of ``vectors`` (a 2-D array of floats) as a one-dimensional ``double precision[]`` in the
    binary format the server reads without parsing a digit: a header (one dimension, no nulls, element type
    ``float8``, the length, lower bound 1), then each value as its length (8) and its big-endian IEEE double -
    the very doubles of ``vectors``, made for the whole batch by numpy (a text literal costs a ``%`` format per
    value here and a parse per value on the server: ~40 us a row each for 256 values). :func:`float_array`
    reads one back."""
    rows, width = vectors.shape
    header = struct.pack(">iiiii", 1, 0, FLOAT8_OID, width, 1)
    body = np.empty((rows, width), dtype=_FLOAT8_ELEMENT)
    body["length"] = 8
    body["value"] = vectors
    raw = body.tobytes()
    step = width * _FLOAT8_ELEMENT.itemsize
    return [PackedFloat8Array(header + raw[i * step : (i + 1) * step]) for i in range(rows)]


_column_types_lock = threading.Lock()
_column_types: dict[tuple[str, str], dict[str, int]] = {}


def _column_type_oids(conn, table: str) -> dict[str, int]:
    """The type of each column of ``table`` (its oid), read from the catalog once per database and table, for
    a binary ``COPY`` (whose values carry no type of their own)."""
    key = (str(conn.settings_dict.get("NAME")), table)
    found = _column_types.get(key)
    if found is None:
        with conn.cursor() as cursor:
            cursor.execute(
                "SELECT attname, atttypid::int FROM pg_attribute WHERE attrelid = %s::regclass "
                "AND attnum > 0 AND NOT attisdropped",
                [table],
            )
            found = dict(cursor.fetchall())
        with _column_types_lock:
            _column_types[key] = found
    return found


def copy_keyed_instances(
    model: type[M], instances: list[M], *, packed: dict[str, list[PackedFloat8Array]] | None = None
) -> list[M]:
    """:func:`copy_instances` of instances whose primary keys are already set (from :func:`draw_keys`): the
    rows streamed with ``COPY … FROM STDIN``, each with its own key; the instances come back in their stored
    state. ``packed``: for each array-of-floats field (by attribute name), each instance's value already in
    binary form (:func:`packed_float8_arrays`); the rows are then written in ``COPY``'s binary format, every
    other value by psycopg's binary dumper of its column's type. Inside the current transaction."""
    if not instances:
        return instances
    conn = transaction.get_connection()
    meta = model._meta
    plan = _copy_plan(model)
    keys = [instance.pk for instance in instances]
    if any(key is None for key in keys):
        raise ValueError("copy_keyed_instances: every instance needs its primary key")
    given = packed or {}
    positions = [i for i, (field, _) in enumerate(plan) if field.attname in given]
    if len(positions) != len(given) or any(len(values) != len(instances) for values in given.values()):
        raise ValueError("copy_keyed_instances: a packed value for each instance of a field of the model")
    if given and any(how == "floats" for i, (_, how) in enumerate(plan) if i not in positions):
        raise ValueError("copy_keyed_instances: a binary COPY needs every array of floats packed")
    columns = [meta.pk, *(field for field, _ in plan)]
    names = ", ".join(f'"{f.column}"' for f in columns)
    copy_sql = f'COPY "{meta.db_table}" ({names}) FROM STDIN' + (" (FORMAT BINARY)" if given else "")
    types = _column_type_oids(conn, meta.db_table) if given else {}
    with conn.cursor() as cursor, conn.wrap_database_errors:
        if given:
            cursor.cursor.adapters.register_dumper(PackedFloat8Array, _PackedFloat8ArrayDumper)
        with cursor.cursor.copy(copy_sql) as copy:
            if not given:
                for pk, instance in zip(keys, instances, strict=True):
                    copy.write_row([pk, *_copy_row(plan, instance, conn)])
            else:
                copy.set_types([types[f.column] for f in columns])
                rest = [entry for i, entry in enumerate(plan) if i not in positions]
                values = [given[plan[i][0].attname] for i in positions]  # positions ascend: each insert in place
                for n, (pk, instance) in enumerate(zip(keys, instances, strict=True)):
                    row = _copy_row(rest, instance, conn)
                    for position, column in zip(positions, values, strict=True):
                        row.insert(position, column[n])
                    copy.write_row([pk, *row])
    for pk, instance in zip(keys, instances, strict=True):
        mark_saved(instance, pk)
    return instances
