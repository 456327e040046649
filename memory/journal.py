"""Plane 1: the canonical, append-only session journal. Appends are the only write; offsets are gapless.

An append is the hottest write of the service (every output, tool call and lifecycle change), so it is one
hand-written statement instead of ORM calls: a data-modifying CTE whose ``UPDATE … RETURNING`` takes the session
row lock and the next offset, and whose ``INSERT`` stores the event. The schema rejects UPDATE and DELETE on
events (a trigger, migrations 0002/0004).
"""

from __future__ import annotations

from django.db import transaction

from memory import public_ids
from memory import sql as memory_sql
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
    with memory_sql.prepared_cursor(conn.alias) as cursor:  # planned once per connection
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


def appends_with(*, session_id: int, events: list[dict], run_source: str) -> tuple[list[str], list, int]:
    """:func:`append_event` of several events of one run, as data-modifying CTEs to embed in a larger
    statement: ``journal_next`` takes the session row and its next ``len(events)`` offsets (in one UPDATE, only
    when the CTE ``run_source`` - one row with the run's ``id`` - holds a row), ``journal_appended`` stores the
    events at those offsets, in the given order. Returns the CTEs, their parameters and the events' timestamp.
    The caller's statement must check that ``journal_appended`` stored every event (none: no such session)."""
    conn = transaction.get_connection()
    if not conn.in_atomic_block:
        raise RuntimeError("journal appends must run inside transaction.atomic()")
    for event in events:
        if event.get("type") not in EventType.values:
            raise ValueError(f"unknown journal event type {event.get('type')!r}")
    ts = now_ms()
    count = len(events)
    rows = ", ".join(f"({index}, %s, %s::jsonb)" for index in range(1, count + 1))
    params: list = [count, ts, session_id, count, ts]
    for event in events:
        params += [event["type"], _EVENT_FIELD.get_db_prep_save(event, connection=conn)]
    ctes = [
        f"journal_next AS (UPDATE {_SESSIONS} SET last_offset = last_offset + %s, updated_at_ms = %s "  # noqa: S608
        f"WHERE id = %s AND EXISTS (SELECT 1 FROM {run_source}) RETURNING id, last_offset)",
        f'journal_appended AS (INSERT INTO {_EVENTS} (session_id, "offset", timestamp_ms, run_id, type, event) '  # noqa: S608
        f"SELECT n.id, n.last_offset - %s + v.i, %s, r.id, v.type, v.event FROM journal_next n "
        f"CROSS JOIN {run_source} r CROSS JOIN (VALUES {rows}) AS v(i, type, event) ORDER BY v.i RETURNING id)",
    ]
    return ctes, params, ts
