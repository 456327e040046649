"""Plane 1: the canonical, append-only session journal. Appends are the only write; offsets are gapless."""

from __future__ import annotations

from django.db import transaction

from memory.clock import now_ms
from memory.errors import NotFound
from memory.models import EventType, JournalEvent, Run, Session


def append_event(*, session_id: int, event: dict, run: Run | None = None) -> JournalEvent:
    """Append one event with the session's next offset. Must run inside a transaction: the session row
    lock serialises concurrent appends, so offsets are 1..N with no gap or duplicate."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("append_event must be called inside transaction.atomic()")
    event_type = event.get("type")
    if event_type not in EventType.values:
        raise ValueError(f"unknown journal event type {event_type!r}")
    locked = Session.objects.select_for_update().filter(pk=session_id).values_list("last_offset", flat=True)
    last = locked.first()
    if last is None:
        raise NotFound(f"unknown session session-{session_id}", domain="sessions", code="session_not_found")
    offset = last + 1
    ts = now_ms()
    Session.objects.filter(pk=session_id).update(last_offset=offset, updated_at_ms=ts)
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
