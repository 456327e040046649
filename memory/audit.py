"""Audit trail: one row per state transition, written in the caller's transaction."""

from __future__ import annotations

from typing import Any

from memory import sql
from memory.clock import now_ms
from memory.models import AuditEvent


def actor_label(actor: Any) -> str:
    """A stable, human-readable actor name: a user's username, or a literal such as 'daemon'."""
    if actor is None:
        return "daemon"
    if isinstance(actor, str):
        return actor
    return getattr(actor, "get_username", lambda: str(actor))()


def record_audit(
    *,
    subject_type: str,
    subject_id: str,
    action: str,
    actor: Any,
    from_state: str = "",
    to_state: str = "",
    reason: str = "",
    data: dict | None = None,
) -> AuditEvent:
    return sql.create(
        AuditEvent,
        subject_type=subject_type,
        subject_id=subject_id,
        action=action,
        from_state=from_state or "",
        to_state=to_state or "",
        actor=actor_label(actor),
        reason=reason or "",
        data=data or {},
        at_ms=now_ms(),
    )
