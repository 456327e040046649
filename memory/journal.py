"""Plane 1: the canonical, append-only session journal. Appends are the only write; offsets are gapless.

An append is the hottest write of the service (every output, tool call and lifecycle change), so it is one
hand-written statement instead of ORM calls: a data-modifying CTE whose ``UPDATE … RETURNING`` takes the session
row lock and the next offset, and whose ``INSERT`` stores the event. The schema rejects UPDATE and DELETE on
events (a trigger, migrations 0002/0004).
"""

from __future__ import annotations

from django.db import transaction

from memory import public_ids
from memory.clock import now_ms
from memory.errors import NotFound
from memory.models import EventType, JournalEvent, Run, Session

# Table names are constants of this codebase (not input), so the f-strings are not an injection vector.
_SESSIONS = Session._meta.db_table
_EVENTS = JournalEvent._meta.db_table
_APPEND_SQL = (
    f"WITH next AS (UPDATE {_SESSIONS} SET last_offset = last_offset + 1, updated_at_ms = %s "  # noqa: S608
    "WHERE id = %s RETURNING id, last_offset) "
    f'INSERT INTO {_EVENTS} (session_id, "offset", timestamp_ms, run_id, type, event) '
    'SELECT next.id, next.last_offset, %s, %s, %s, %s::jsonb FROM next RETURNING id, "offset"'
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
        cursor.execute(_APPEND_SQL, [ts, session_id, ts, run_id, event_type, payload])
        row = cursor.fetchone()
    if row is None:
        raise NotFound(
            f"unknown session {public_ids.session_id(session_id)}", domain="sessions", code="session_not_found"
        )
    pk, offset = row
    appended = JournalEvent(
        id=pk, session_id=session_id, offset=offset, timestamp_ms=ts, run_id=run_id, type=event_type, event=event
    )
    appended._state.adding = False
    appended._state.db = conn.alias
    return appended


def log_entry(event: JournalEvent) -> dict:
    """The spec's LogEntry {offset, timestamp_ms, run_id, event}."""
    return {
        "offset": event.offset,
        "timestamp_ms": event.timestamp_ms,
        "run_id": public_ids.run_id(event.run_id) if event.run_id else None,
        "event": event.event,
    }
