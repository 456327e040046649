"""The run-memory writes of a terminal run, as hand-written SQL.

Every terminal run records (and usually prunes) in its own transaction, so these few statements are the
plane's hottest write path: plain ``INSERT``/``DELETE`` with parameters (data-modifying CTEs: one statement per
step) instead of compiled ORM queries and the deletion collector. Table and column names are constants of this codebase,
never input. The rules (what to store, what to prune) stay in ``memory.run_memory`` and ``memory.run_records``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db import transaction

from memory import metrics, sql
from memory.models import RunMemoryRecord, RunMemoryScope, Session
from memory.sessions import scope_keys_from_parts
from memory.sql import SCOPE_PARTS_SQL

_RECORDS = RunMemoryRecord._meta.db_table
_SCOPES = RunMemoryScope._meta.db_table
_SESSIONS = Session._meta.db_table


def _marks(count: int) -> str:
    return ", ".join(["%s"] * count)


def lock_session(session_id: int) -> None:
    """Take the session row lock for this transaction."""
    with sql.prepared_cursor(transaction.get_connection().alias) as cursor:
        cursor.execute(f"SELECT id FROM {_SESSIONS} WHERE id = %s FOR UPDATE", [session_id])  # noqa: S608


@dataclass(frozen=True)
class SessionSnapshot:
    scope_keys: list[str]
    pairs: list[tuple[int, int]]
    """(run pk, recorded_at_ms) of every record of the session: what retention decides on."""


def session_snapshot(session_id: int) -> SessionSnapshot:
    """The session's learning scope keys and its records' (run pk, recorded_at_ms), in one query."""
    with sql.prepared_cursor(transaction.get_connection().alias) as cursor:  # planned once per connection
        cursor.execute(
            f"SELECT part, value, NULL, NULL FROM ({SCOPE_PARTS_SQL}) parts UNION ALL "  # noqa: S608
            f"SELECT 'record', NULL, run_id, recorded_at_ms FROM {_RECORDS} WHERE session_id = %s",
            [session_id, session_id, session_id],
        )
        rows = cursor.fetchall()
    parts = [(part, value) for part, value, _, _ in rows if part != "record"]
    return SessionSnapshot(
        scope_keys=scope_keys_from_parts(session_id, parts),
        pairs=[(run_pk, ts) for part, _, run_pk, ts in rows if part == "record"],
    )


def write_new_record(
    *, delete_run_pks: list[int], counters: dict[str, int], record: RunMemoryRecord | None, scope_keys: list[str]
) -> RunMemoryRecord | None:
    """The writes of a fresh terminal run, in order: prune ``delete_run_pks``, add to the counters, insert the
    record (if any) and its scope rows, as one statement (data-modifying CTEs; foreign keys are checked at
    commit)."""
    counters = {name: amount for name, amount in counters.items() if amount > 0}
    conn = transaction.get_connection()
    parts: list[str] = []
    params: list = []
    if delete_run_pks:
        marks = _marks(len(delete_run_pks))
        parts += [
            f"gone AS (DELETE FROM {_RECORDS} WHERE run_id IN ({marks}) RETURNING id)",  # noqa: S608
            f"gone_scopes AS (DELETE FROM {_SCOPES} WHERE record_id IN (SELECT id FROM gone))",  # noqa: S608
        ]
        params += delete_run_pks
    if counters:
        update, update_params = metrics.add_statement(counters)
        parts.append(f"counted AS ({update} RETURNING 1)")
        params += update_params
    if record is not None:
        insert, insert_params = sql.insert_statement(record)
        parts += [
            f"rec AS ({insert})",
            f"scoped AS (INSERT INTO {_SCOPES} (record_id, scope_key, recorded_at_ms) "  # noqa: S608
            "SELECT rec.id, key, %s FROM rec CROSS JOIN unnest(%s::text[]) AS key)",
        ]
        params += [*insert_params, record.recorded_at_ms, list(dict.fromkeys(scope_keys))]
    if not parts:
        return None
    final = "SELECT {}, {}".format(
        "(SELECT id FROM rec)" if record is not None else "NULL", "(SELECT count(*) FROM counted)" if counters else "0"
    )
    with conn.cursor() as cursor:
        cursor.execute(f"WITH {', '.join(parts)} {final}", params)
        pk, counted = cursor.fetchone()
    if counted < len(counters):
        metrics.create_missing(counters)  # first use of a counter: the UPDATE had no row to add to
    return sql.mark_saved(record, pk) if record is not None else None


def record_pairs(session_id: int) -> list[tuple[int, int]]:
    """(run pk, recorded_at_ms) of every record of the session: what retention decides on."""
    with transaction.get_connection().cursor() as cursor:
        cursor.execute(
            f"SELECT run_id, recorded_at_ms FROM {_RECORDS} WHERE session_id = %s",  # noqa: S608
            [session_id],
        )
        return [(run_id, ts) for run_id, ts in cursor.fetchall()]


def delete_records_of_runs(run_pks: list[int]) -> int:
    """Delete the records of these runs and their scope rows; returns how many records went."""
    if not run_pks:
        return 0
    marks = _marks(len(run_pks))
    with transaction.get_connection().cursor() as cursor:  # one statement (the foreign key is checked at commit)
        cursor.execute(
            f"WITH gone AS (DELETE FROM {_RECORDS} WHERE run_id IN ({marks}) RETURNING id), "  # noqa: S608
            f"scoped AS (DELETE FROM {_SCOPES} WHERE record_id IN (SELECT id FROM gone)) "
            "SELECT count(*) FROM gone",
            run_pks,
        )
        return cursor.fetchone()[0]


def insert_scopes(record: RunMemoryRecord, scope_keys: Iterable[str]) -> None:
    """One row per scope key of the record."""
    rows = [(record.pk, key, record.recorded_at_ms) for key in scope_keys]
    if not rows:
        return
    flat = [value for row in rows for value in row]
    values = ", ".join(["(%s, %s, %s)"] * len(rows))
    with transaction.get_connection().cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {_SCOPES} (record_id, scope_key, recorded_at_ms) VALUES {values}",  # noqa: S608
            flat,
        )
