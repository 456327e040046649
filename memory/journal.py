"""Plane 1: the canonical, append-only session journal. Appends are the only write; offsets are gapless."""

from __future__ import annotations

from django.db import transaction

from memory.clock import now_ms
from memory.errors import NotFound
from memory.models import EventType, JournalEvent, Run, Session

# The table name is a constant of this codebase (not input), so the f-string is not an injection vector.
_NEXT_OFFSET_SQL = (
    f"UPDATE {Session._meta.db_table} SET last_offset = last_offset + 1, updated_at_ms = %s "  # noqa: S608
    "WHERE id = %s RETURNING last_offset"
)


def append_event(*, session_id: int, event: dict, run: Run | None = None) -> JournalEvent:
    """Append one event with the session's next offset. Must run inside a transaction: the session row
    lock serialises concurrent appends, so offsets are 1..N with no gap or duplicate."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("append_event must be called inside transaction.atomic()")
    event_type = event.get("type")
    if event_type not in EventType.values:
        raise ValueError(f"unknown journal event type {event_type!r}")
    ts = now_ms()
    # One statement takes the row lock and the next offset (PostgreSQL and SQLite ≥ 3.35 support RETURNING).
    with transaction.get_connection().cursor() as cursor:
        cursor.execute(_NEXT_OFFSET_SQL, [ts, session_id])
        row = cursor.fetchone()
    if row is None:
        raise NotFound(f"unknown session session-{session_id}", domain="sessions", code="session_not_found")
    offset = row[0]
    return JournalEvent.objects.create(
        session_id=session_id, offset=offset, timestamp_ms=ts, run=run, type=event_type, event=event
    )


def log_entry(event: JournalEvent) -> dict:
    """The spec's LogEntry {offset, timestamp_ms, run_id, event}."""
    return {
        "offset": event.offset,
        "timestamp_ms": event.timestamp_ms,
        "run_id": f"run-{event.run_id}" if event.run_id else None,
        "event": event.event,
    }
