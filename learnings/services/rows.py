"""What the learning plane's publication and governance workflows share about ``Learning`` rows: the
content-conflict error, validation of a new row, the per-(scope, kind) advisory lock, the row lock, the
compare-and-swap status move with its audit row, the supersede bookkeeping, and the ``learning_revoking``
hook fired before a learning stops being live."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import connection

from learnings import validation
from learnings.models import CandidateState, Learning, LearningCandidate, LearningStatus, Sensitivity
from learnings.selectors import DOMAIN, learning_not_found, parse_learning_id
from learnings.services.cleaning import invalid
from learnings.validation import LearningValidationError
from memory import hooks, public_ids
from memory.audit import record_audit
from memory.clock import now_ms
from memory.errors import Conflict, ValidationFailed
from memory.models import AuditEvent

REVOKING_HOOK = "learning_revoking"
MSG_SUPERSEDE_SCOPE = "superseding learning scope must match the source learning scope"


class LearningConflict(Conflict):
    """The content contradicts a prompt-visible learning about the same subject."""

    def __init__(self, existing: Learning) -> None:
        super().__init__(
            f"learning conflicts with active learning {existing.public_id}; publish with supersedes to replace it",
            field="content",
            domain=DOMAIN,
            code="learning_conflict",
        )
        self.existing = existing


def fire_revoking(learning: Learning, *, actor: object, reason: str, superseding: bool = False) -> None:
    """Let higher planes react before ``learning`` stops being live (the skills plane revokes the promoted
    skill it grew). Listeners get ``(learning, actor=, reason=, superseding=)``; their errors propagate and
    abort the caller's transaction."""
    hooks.fire(REVOKING_HOOK, learning, actor=actor, reason=reason, superseding=superseding)


_SENSITIVITIES = frozenset(Sensitivity.values)


def publish_audit_data(learning: Learning, candidate_id: str) -> dict[str, Any]:
    """The ``data`` of a learning's ``publish`` audit row: its candidate and how it was published (every publish
    path writes the same row: the service, a fresh create-and-publish, the bulk import)."""
    return {
        "candidate": candidate_id,
        "publish_tier": learning.publish_tier,
        "policy_decision": learning.policy_decision,
        "verification_status": learning.verification_status,
    }


def learning_publish_row(
    learning: Learning,
    candidate_id: str,
    *,
    who: str,
    reason: str,
    at_ms: int,
    make: Callable[..., AuditEvent] = AuditEvent,
) -> AuditEvent:
    """A learning's ``publish`` audit row, unsaved, for the paths that write their rows in one statement (a fresh
    create-and-publish, the bulk import); ``who`` is ``memory.audit.actor_label``'s. ``make``: what builds the
    row from its fields (the bulk import's ``instance_maker``, a copier of one row built once a batch)."""
    return make(
        subject_type="learning",
        subject_id=learning.public_id,
        action="publish",
        actor=who,
        to_state=learning.status,
        reason=reason,
        at_ms=at_ms,
        data=publish_audit_data(learning, candidate_id),
    )


def candidate_publish_row(
    candidate_id: str,
    learning_id: str,
    *,
    who: str,
    reason: str,
    at_ms: int,
    make: Callable[..., AuditEvent] = AuditEvent,
) -> AuditEvent:
    """A candidate's ``publish`` audit row (pending → published, the learning it became or was found equivalent
    to), unsaved, as ``learning_publish_row``."""
    return make(
        subject_type="learning_candidate",
        subject_id=candidate_id,
        action="publish",
        actor=who,
        from_state=CandidateState.PENDING,
        to_state=CandidateState.PUBLISHED,
        reason=reason,
        at_ms=at_ms,
        data={"published_learning": learning_id},
    )


def validated_learning(learning: Learning, *, secret_guarded: tuple[str, str] | None = None) -> Learning:
    """A new learning row checked before it is saved: a known sensitivity, then the §1.6 rules.
    ``secret_guarded``: the (kind, content) of the candidate it is published from, which the secret guard
    has just passed (``validation.validate_learning``: the guard runs again unless both are unchanged)."""
    if not isinstance(learning.sensitivity, str) or learning.sensitivity not in _SENSITIVITIES:
        raise ValidationFailed(
            f"unknown learning sensitivity `{learning.sensitivity}`",
            field="sensitivity",
            domain=DOMAIN,
            code="invalid_learning",
        )
    try:
        validation.validate_learning(learning, secret_guarded=secret_guarded)
    except LearningValidationError as exc:
        raise invalid(exc) from exc
    return learning


SCOPE_LOCK_SQL = "pg_advisory_xact_lock(hashtextextended(%s, 0))"
"""The expression of :func:`serialize_scope`'s lock (its parameter: :func:`scope_lock_key`), for a statement
that takes it along with other work (``publish.learning_create_published``)."""


def scope_lock_key(scope_key: str, kind: str) -> str:
    return f"learnings:{scope_key}:{kind}"


def lock_scope_drawing_keys(scope_key: str, kind: str) -> tuple[int, int]:
    """:func:`serialize_scope`, drawing in the same statement the keys of a new candidate and of its learning
    (``publish.learning_create_published``; a key not used is a gap, as after any rollback). Its text never
    changes: prepared once per connection (``memory.sql.prepared_cursor``)."""
    from memory.sql import next_key_sql, prepared_cursor

    with prepared_cursor(connection.alias) as cursor:
        cursor.execute(
            f"SELECT {SCOPE_LOCK_SQL}, {next_key_sql(LearningCandidate)}, {next_key_sql(Learning)}",
            [scope_lock_key(scope_key, kind)],
        )
        _, candidate_key, learning_key = cursor.fetchone()
    return candidate_key, learning_key


def serialize_scope(scope_key: str, kind: str) -> None:
    """Serialise publications into one (scope, kind) until commit, so the equivalence and conflict checks
    that precede an insert cannot race (a transaction-scoped advisory lock)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {SCOPE_LOCK_SQL}", [scope_lock_key(scope_key, kind)])


def lock_learning(pk: int) -> Learning:
    learning = Learning.objects.select_for_update().filter(pk=pk).first()
    if learning is None:
        raise learning_not_found(public_ids.learning_id(pk))
    return learning


def live_replacement(learning: Learning, at_ms: int | None = None) -> Learning | None:
    """A live learning that names ``learning`` in ``supersedes`` (its replacement), if any."""
    return Learning.objects.filter(supersedes=learning).live(at_ms).order_by("-id").first()


def guarded_move(
    instance: Any,
    *,
    field: str,
    expected: tuple[str, ...],
    to: str,
    subject_type: str,
    action: str,
    actor: object,
    reason: str,
    audit_keys: tuple[str, ...],
    conflict_code: str,
    **changes: Any,
) -> None:
    """The one compare-and-swap transition of a learning-plane row (candidate or learning): ``field`` moves from
    one of ``expected`` to ``to`` with ``changes``; 409 when another writer got there first; an audit row in the
    same transaction (``audit_keys`` of the changes recorded); the instance is refreshed."""
    from_state = getattr(instance, field)
    updated = (
        type(instance)
        .objects.filter(pk=instance.pk, **{f"{field}__in": expected})
        .update(**{field: to}, updated_at_ms=now_ms(), **changes)
    )
    if updated != 1:
        raise Conflict(
            f"{subject_type.replace('_', ' ')} {instance.public_id} changed concurrently; retry",
            domain=DOMAIN,
            code=conflict_code,
        )
    record_audit(
        subject_type=subject_type,
        subject_id=instance.public_id,
        action=action,
        actor=actor,
        from_state=from_state,
        to_state=to,
        reason=reason,
        data={
            k: (public_ids.learning_id(v.pk) if isinstance(v, Learning) else v)
            for k, v in changes.items()
            if k in audit_keys
        },
    )
    instance.refresh_from_db()


def move_learning(
    learning: Learning, *, to_status: str, actor: object, action: str, reason: str = "", **changes: Any
) -> Learning:
    guarded_move(
        learning,
        field="status",
        expected=(learning.status,),
        to=to_status,
        subject_type="learning",
        action=action,
        actor=actor,
        reason=reason,
        audit_keys=("superseded_by",),
        conflict_code="learning_changed",
        **changes,
    )
    return learning


def supersede_target(target_id: str, *, scope_key: str) -> tuple[Learning | None, Learning | None]:
    """(target to supersede, existing live replacement to reuse) for a publication naming ``supersedes``."""
    target = Learning.objects.select_for_update().filter(pk=parse_learning_id(target_id)).first()
    if target is None:
        error = learning_not_found(target_id)
        error.field = "supersedes"
        raise error
    replacement = live_replacement(target)
    if replacement is not None:
        return None, replacement
    if target.status == LearningStatus.SUPERSEDED:
        raise Conflict(
            f"learning {target.public_id} was already superseded",
            field="supersedes",
            domain=DOMAIN,
            code="learning_already_superseded",
        )
    if target.status == LearningStatus.REVOKED:
        raise Conflict(
            f"cannot supersede revoked learning {target.public_id}",
            field="supersedes",
            domain=DOMAIN,
            code="learning_revoked",
        )
    if target.scope_key != scope_key:
        raise ValidationFailed(MSG_SUPERSEDE_SCOPE, field="scope", domain=DOMAIN, code="invalid_learning")
    return target, None


def record_supersede(target: Learning, replacement: Learning, *, actor: object) -> None:
    move_learning(
        target,
        to_status=LearningStatus.SUPERSEDED,
        actor=actor,
        action="supersede",
        reason=f"superseded by {replacement.public_id}",
        superseded_by=replacement,
    )
    record_audit(
        subject_type="learning",
        subject_id=replacement.public_id,
        action="publish",
        actor=actor,
        to_state=replacement.status,
        reason=f"supersedes {target.public_id}",
        data={"supersedes": target.public_id},
    )
