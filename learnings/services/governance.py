"""Governance of published learnings (spec §4.15): revoke (one, or every match, all or nothing) and
supersede with a new active learning. The ``learning_revoking`` hook fires first, so the skills plane can
revoke the promoted skill a learning grew inside the same transaction."""

from __future__ import annotations

from typing import Any, cast

from django.db import transaction
from django.db.models import QuerySet

from learnings import validation
from learnings.learning_policy import policy_actor_for
from learnings.models import Learning, LearningStatus, PolicyDecision, PublishTier
from learnings.selectors import DOMAIN, find_conflict
from learnings.services.cleaning import clean_content, clean_expiry, normalise_scope, semantic_key_digests
from learnings.services.rows import (
    MSG_SUPERSEDE_SCOPE,
    LearningConflict,
    fire_revoking,
    live_replacement,
    lock_learning,
    move_learning,
    record_supersede,
    serialize_scope,
    validated_learning,
)
from learnings.validation import LearningScope
from memory.clock import now_ms
from memory.errors import AppError, Conflict, ValidationFailed

MSG_REVOKE_REASON_SECRET = "learning revocation reason contains secret-like material"
_UNSET: Any = object()


def check_revocation_reason(reason: object) -> str | None:
    if reason is None:
        return None
    if not isinstance(reason, str):
        raise ValidationFailed("reason must be a string", field="reason", domain=DOMAIN, code="invalid_learning")
    if validation.content_has_secret_material(reason):
        raise ValidationFailed(MSG_REVOKE_REASON_SECRET, field="reason", domain=DOMAIN, code="invalid_learning")
    return reason.strip() or None


@transaction.atomic
def learning_revoke(*, learning: Learning | int, actor: object, reason: str | None = None) -> Learning:
    """Revoke a learning (idempotent). The linked promoted skill goes first (``learning_revoking``)."""
    reason = check_revocation_reason(reason)
    locked = lock_learning(learning if isinstance(learning, int) else learning.pk)
    if locked.status == LearningStatus.REVOKED:
        return locked
    fire_revoking(locked, actor=actor, reason=f"source learning {locked.public_id} was revoked")
    return move_learning(
        locked,
        to_status=LearningStatus.REVOKED,
        actor=actor,
        action="revoke",
        reason=reason or "",
        revoked_at_ms=now_ms(),
        revoked_reason=reason,
    )


def learnings_revoke_matching(
    *, queryset: QuerySet[Learning], actor: object, reason: str | None = None
) -> list[Learning]:
    """Revoke every matching learning one by one (§4.15; revoking is idempotent, so an already revoked match
    is returned as it is), all or nothing: on the first error nothing has changed and the error says how many
    updates had succeeded."""
    reason = check_revocation_reason(reason)
    revoked: list[Learning] = []
    with transaction.atomic():
        targets = list(queryset.order_by("id").values_list("pk", flat=True))
        for pk in targets:
            try:
                revoked.append(learning_revoke(learning=pk, actor=actor, reason=reason))
            except Exception as exc:
                detail = exc.detail if isinstance(exc, AppError) else str(exc) or type(exc).__name__
                message = f"failed to revoke matching learnings after {len(revoked)} successful updates: {detail}"
                status = exc.status if isinstance(exc, AppError) else 409
                raise AppError(message, domain=DOMAIN, code="revoke_matching_failed", status=status) from exc
    return revoked


@transaction.atomic
def learning_supersede(
    *,
    learning: Learning | int,
    actor: object,
    content: str,
    scope: LearningScope | None = None,
    kind: str | None = None,
    sensitivity: str | None = None,
    confidence: object = None,
    expires_at_ms: object = _UNSET,
) -> Learning:
    """Replace a learning non-destructively (§4.15): the replacement is active, manual/operator, inherits
    source, evidence, created_at and verification; the old record is kept as ``superseded``."""
    locked = lock_learning(learning if isinstance(learning, int) else learning.pk)
    if locked.status == LearningStatus.REVOKED:
        raise Conflict(f"cannot supersede revoked learning {locked.public_id}", domain=DOMAIN, code="learning_revoked")
    replacement = live_replacement(locked)
    if replacement is not None:
        return replacement
    if locked.status == LearningStatus.SUPERSEDED:
        raise Conflict(
            f"learning {locked.public_id} was already superseded",
            domain=DOMAIN,
            code="learning_already_superseded",
        )
    if scope is not None and normalise_scope(scope.kind, scope.id).scope_key != locked.scope_key:
        raise ValidationFailed(MSG_SUPERSEDE_SCOPE, field="scope", domain=DOMAIN, code="invalid_learning")
    body = clean_content(content)
    content_key, subject_key = semantic_key_digests(body)
    at = now_ms()
    new = Learning(
        scope_kind=locked.scope_kind,
        scope_id=locked.scope_id,
        scope_key=locked.scope_key,
        kind=kind or locked.kind,
        sensitivity=sensitivity or locked.sensitivity,
        content=body,
        # the caller's value: validated_learning checks it below
        confidence=locked.confidence if confidence is None else cast(int, confidence),
        source=locked.source,
        source_run_id=locked.source_run_id,
        evidence_refs=locked.evidence_refs,
        created_at_ms=locked.created_at_ms,
        published_at_ms=at,
        expires_at_ms=locked.expires_at_ms if expires_at_ms is _UNSET else clean_expiry(expires_at_ms),
        status=LearningStatus.ACTIVE,
        publish_tier=PublishTier.ACTIVE,
        policy_decision=PolicyDecision.MANUAL,
        policy_actor=policy_actor_for(PolicyDecision.MANUAL),
        verification_status=locked.verification_status,
        supersedes=locked,
        content_key=content_key,
        subject_key=subject_key,
        updated_at_ms=at,
    )
    validated_learning(new)
    serialize_scope(new.scope_key, new.kind)
    conflict = find_conflict(
        scope_key=new.scope_key,
        kind=new.kind,
        subject_key=subject_key,
        content_key=content_key,
        at_ms=at,
        exclude_ids=(locked.pk,),
    )
    if conflict is not None:
        raise LearningConflict(conflict)
    fire_revoking(
        locked,
        actor=actor,
        reason=f"source learning {locked.public_id} is being superseded",
        superseding=True,
    )
    new.save()
    record_supersede(locked, new, actor=actor)
    return new
