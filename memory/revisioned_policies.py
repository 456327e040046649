"""Revisioned runtime policies (run-memory, learning). One row per revision; the newest is in force.
A stale `expected_revision` is a 409 `runtime/runtime_revision_conflict`."""

from __future__ import annotations

from django.db import IntegrityError, transaction

from memory import sql
from memory.audit import record_audit
from memory.errors import Conflict
from memory.models import PolicyRevision


def current_policy_dict(kind: str) -> tuple[dict | None, int]:
    """The policy in force and its revision; (None, 0) before the first save. Read on every terminal run and
    prompt assembly, and always fresh (another process may have just saved a revision): one indexed query."""
    current = sql.current_policy(kind)
    if current is None:
        return None, 0
    revision, policy = current
    return policy, revision


@transaction.atomic
def save_policy(*, kind: str, policy: dict, expected_revision: int | None, actor: object) -> PolicyRevision:
    latest = PolicyRevision.objects.select_for_update().filter(kind=kind).order_by("-revision").first()
    revision = latest.revision if latest else 0
    if expected_revision is not None and expected_revision != revision:
        raise Conflict(
            f"runtime config revision conflict: expected {expected_revision}, current {revision}",
            field="expected_revision",
            domain="runtime",
            code="runtime_revision_conflict",
        )
    try:
        with transaction.atomic():
            row = PolicyRevision.objects.create(
                kind=kind, revision=revision + 1, policy=policy, actor=getattr(actor, "username", None) or str(actor)
            )
    except IntegrityError as exc:
        raise Conflict(
            "runtime config revision conflict: changed concurrently",
            field="expected_revision",
            domain="runtime",
            code="runtime_revision_conflict",
        ) from exc
    before = latest.policy if latest else None
    changed = sorted(k for k in set(policy) | set(before or {}) if (before or {}).get(k) != policy.get(k))
    record_audit(
        subject_type="policy",
        subject_id=kind,
        action="update",
        actor=actor,
        from_state=f"r{revision}",
        to_state=f"r{row.revision}",
        data={"changed": changed, "before": before, "after": policy},
    )
    return row
