"""Plane 1: the canonical, append-only session journal. Appends are the only write; offsets are gapless.

An append is the hottest write of the service (every output, tool call and lifecycle change), so it is two
hand-written statements instead of ORM calls: one ``UPDATE … RETURNING`` takes the session row lock and the next
offset, and one ``INSERT`` stores the event. On PostgreSQL both run as a single statement (a data-modifying CTE).
"""

from __future__ import annotations

from django.db import transaction

from memory.clock import now_ms
from memory.errors import NotFound
from memory.models import EventType, JournalEvent, Run, Session

# Table names are constants of this codebase (not input), so the f-strings are not an injection vector.
_SESSIONS = Session._meta.db_table
_EVENTS = JournalEvent._meta.db_table
_NEXT_OFFSET_SQL = (
    f"UPDATE {_SESSIONS} SET last_offset = last_offset + 1, updated_at_ms = %s "  # noqa: S608
    "WHERE id = %s RETURNING last_offset"
)
_INSERT_SQL = (
    f'INSERT INTO {_EVENTS} (session_id, "offset", timestamp_ms, run_id, type, event) '  # noqa: S608
    "VALUES (%s, %s, %s, %s, %s, %s) RETURNING id"
)
_APPEND_PG_SQL = (
    f"WITH next AS (UPDATE {_SESSIONS} SET last_offset = last_offset + 1, updated_at_ms = %s "  # noqa: S608
    "WHERE id = %s RETURNING id, last_offset) "
    f'INSERT INTO {_EVENTS} (session_id, "offset", timestamp_ms, run_id, type, event) '
    "SELECT next.id, next.last_offset, %s, %s, %s, %s::jsonb FROM next RETURNING id, \"offset\""
)
_EVENT_FIELD = JournalEvent._meta.get_field("event")


def append_event(*, session_id: int, event: dict, run: Run | None = None) -> JournalEvent:
    """Append one event with the session's next offset. Must run inside a transaction: the session row
    lock serialises concurrent appends, so offsets are 1..N with no gap or duplicate."""
    conn = transaction.get_connection()
    if not conn.in_atomic_block:
        raise RuntimeError("append_event must be called inside transaction.atomic()")
    event_type = event.get("type")
    if event_type not in EventType.values:
        raise ValueError(f"unknown journal event type {event_type!r}")
    ts = now_ms()
    run_id = run.pk if run is not None else None
    payload = _EVENT_FIELD.get_db_prep_save(event, connection=conn)
    with conn.cursor() as cursor:
        if conn.vendor == "postgresql":
            cursor.execute(_APPEND_PG_SQL, [ts, session_id, ts, run_id, event_type, payload])
            row = cursor.fetchone()
            pk, offset = row if row is not None else (None, None)
        else:  # SQLite ≥ 3.35 supports RETURNING; its UPDATE cannot live in a CTE
            cursor.execute(_NEXT_OFFSET_SQL, [ts, session_id])
            row = cursor.fetchone()
            offset = row[0] if row is not None else None
            if offset is not None:
                cursor.execute(_INSERT_SQL, [session_id, offset, ts, run_id, event_type, payload])
                pk = cursor.fetchone()[0]
    if offset is None:
        raise NotFound(f"unknown session session-{session_id}", domain="sessions", code="session_not_found")
    appended = JournalEvent(id=pk, session_id=session_id, offset=offset, timestamp_ms=ts, run_id=run_id,
                            type=event_type, event=event)
    appended._state.adding = False
    appended._state.db = conn.alias
    return appended


def log_entry(event: JournalEvent) -> dict:
    """The spec's LogEntry {offset, timestamp_ms, run_id, event}."""
    return {
        "offset": event.offset,
        "timestamp_ms": event.timestamp_ms,
        "run_id": f"run-{event.run_id}" if event.run_id else None,
        "event": event.event,
    }
