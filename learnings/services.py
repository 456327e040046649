"""Every write of the learning plane (spec §2.3, §2.4, §4.8, §4.9, §4.13–§4.15).

Services are keyword-only and atomic; state changes are compare-and-swap updates guarded by the expected
state, and each writes an audit event in the same transaction. Reviews and captures are queued after
commit. Before a learning is revoked or superseded the ``learning_revoking`` hook fires (the skills plane
revokes the promoted skill it grew); a listener error aborts the whole transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import QuerySet

from learnings import semantic, validation
from learnings.models import (
    CandidateOrigin,
    CandidateState,
    Learning,
    LearningCandidate,
    LearningKind,
    LearningStatus,
    PolicyDecision,
    PublishTier,
    Sensitivity,
    VerificationStatus,
    key_digest,
)
from learnings.policy import policy_actor_for, status_for_tier
from learnings.selectors import (
    DOMAIN,
    candidate_not_found,
    find_conflict,
    find_equivalent,
    learning_not_found,
    parse_learning_id,
)
from learnings.validation import LearningScope, LearningValidationError
from memory import hooks
from memory.audit import record_audit
from memory.clock import now_ms
from memory.errors import AppError, Conflict, ValidationFailed
from memory.models import Run, RunMemoryRecord

logger = logging.getLogger(__name__)

RUN_SUMMARY_TTL_MS = 30 * 24 * 60 * 60 * 1000
MAX_EVIDENCE_REFS = 32
MAX_REF_TEXT = 500
SOURCE_TEXT_FIELDS = ("run_id", "session_id", "agent_id", "observation_id", "derivation_id")
SOURCE_FIELDS = (*SOURCE_TEXT_FIELDS, "input_event_offset")
EVIDENCE_FIELDS = ("run_id", "artifact_id", "note")
REVOKING_HOOK = "learning_revoking"

MSG_SUPERSEDE_TIER = "superseding learnings must use the active publish tier"
MSG_SUPERSEDE_SCOPE = "superseding learning scope must match the source learning scope"
MSG_REVOKE_REASON_SECRET = "learning revocation reason contains secret-like material"


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


# ---- input cleaning ---------------------------------------------------------------------------------------


def invalid(exc: LearningValidationError, *, code: str = "invalid_learning") -> ValidationFailed:
    return ValidationFailed(exc.message, field=exc.field, domain=DOMAIN, code=code)


def normalise_scope(kind: object, scope_id: object) -> LearningScope:
    """A scope given as input: ids trimmed, workspace id defaulted (§2.3)."""
    try:
        return validation.normalise_scope(kind, scope_id)  # type: ignore[arg-type]
    except LearningValidationError as exc:
        raise invalid(exc) from exc


def clean_source(value: object) -> dict:
    """A ``LearningSourceRef``: optional run/session/agent/observation/derivation ids and an input offset."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationFailed("source must be an object", field="source", domain=DOMAIN, code="invalid_learning")
    unknown = sorted(set(value) - set(SOURCE_FIELDS))
    if unknown:
        raise ValidationFailed(
            f"unknown field {unknown[0]}",
            field=f"source.{unknown[0]}",
            domain=DOMAIN,
            code="invalid_learning",
        )
    cleaned: dict[str, Any] = {}
    for name in SOURCE_TEXT_FIELDS:
        item = value.get(name)
        if item is None:
            continue
        if not isinstance(item, str) or len(item) > MAX_REF_TEXT:
            raise ValidationFailed(
                f"source.{name} must be a string of at most {MAX_REF_TEXT} characters",
                field=f"source.{name}",
                domain=DOMAIN,
                code="invalid_learning",
            )
        cleaned[name] = item
    offset = value.get("input_event_offset")
    if offset is not None:
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValidationFailed(
                "source.input_event_offset must be a non-negative integer",
                field="source.input_event_offset",
                domain=DOMAIN,
                code="invalid_learning",
            )
        cleaned["input_event_offset"] = offset
    return cleaned


def clean_evidence_refs(value: object) -> list[dict]:
    """``LearningEvidenceRef`` items: optional ``run_id``, ``artifact_id``, ``note`` strings."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValidationFailed(
            "evidence_refs must be a list", field="evidence_refs", domain=DOMAIN, code="invalid_learning"
        )
    if len(value) > MAX_EVIDENCE_REFS:
        raise ValidationFailed(
            f"evidence_refs may hold at most {MAX_EVIDENCE_REFS} items",
            field="evidence_refs",
            domain=DOMAIN,
            code="invalid_learning",
        )
    refs = []
    for index, item in enumerate(value):
        where = f"evidence_refs[{index}]"
        if not isinstance(item, Mapping):
            raise ValidationFailed(f"{where} must be an object", field=where, domain=DOMAIN, code="invalid_learning")
        unknown = sorted(set(item) - set(EVIDENCE_FIELDS))
        if unknown:
            raise ValidationFailed(
                f"unknown field {unknown[0]}",
                field=f"{where}.{unknown[0]}",
                domain=DOMAIN,
                code="invalid_learning",
            )
        ref = {}
        for name in EVIDENCE_FIELDS:
            text = item.get(name)
            if text is None:
                continue
            if not isinstance(text, str) or len(text) > MAX_REF_TEXT:
                raise ValidationFailed(
                    f"{where}.{name} must be a string of at most {MAX_REF_TEXT} characters",
                    field=f"{where}.{name}",
                    domain=DOMAIN,
                    code="invalid_learning",
                )
            ref[name] = text
        refs.append(ref)
    return refs


def clean_expiry(value: object, field: str = "expires_at_ms") -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**62:
        raise ValidationFailed(
            f"{field} must be a non-negative integer", field=field, domain=DOMAIN, code="invalid_learning"
        )
    return value


def _content(value: object) -> str:
    try:
        validation.validate_content(value)  # type: ignore[arg-type]
    except LearningValidationError as exc:
        raise invalid(exc) from exc
    return str(value).strip()


def _keys(content: str) -> tuple[str, str]:
    keys = semantic.semantic_keys(content)
    return key_digest(keys.content_key), key_digest(keys.subject_key)


def _enqueue_review(candidate_pk: int) -> None:
    def send() -> None:
        from learnings import tasks

        tasks.review_candidate.delay(candidate_pk)

    transaction.on_commit(send)


def _fire_revoking(learning: Learning, *, actor: object, reason: str, superseding: bool = False) -> None:
    """Let higher planes react before ``learning`` stops being live (the skills plane revokes the promoted
    skill it grew). Listeners get ``(learning, actor=, reason=, superseding=)``; their errors propagate and
    abort the caller's transaction."""
    hooks.fire(REVOKING_HOOK, learning, actor=actor, reason=reason, superseding=superseding)


# ---- candidates -------------------------------------------------------------------------------------------


def _new_candidate(
    *,
    origin: str,
    scope: LearningScope,
    kind: str,
    content: str,
    sensitivity: str,
    confidence: object,
    source: dict,
    evidence_refs: list,
    created_at_ms: int,
    expires_at_ms: int | None,
    source_run: Run | None,
) -> LearningCandidate:
    content_key, subject_key = _keys(content)
    candidate = LearningCandidate(
        origin=origin,
        scope_kind=scope.kind,
        scope_id=scope.id,
        scope_key=scope.scope_key,
        kind=kind,
        sensitivity=sensitivity,
        content=content,
        confidence=confidence,
        source=source,
        evidence_refs=evidence_refs,
        created_at_ms=created_at_ms,
        expires_at_ms=expires_at_ms,
        state=CandidateState.PENDING,
        source_run=source_run,
        content_key=content_key,
        subject_key=subject_key,
        updated_at_ms=now_ms(),
    )
    try:
        validation.validate_candidate(candidate)
    except LearningValidationError as exc:
        raise invalid(exc, code="invalid_learning_candidate") from exc
    if sensitivity not in Sensitivity.values:
        raise ValidationFailed(
            f"unknown learning sensitivity `{sensitivity}`",
            field="sensitivity",
            domain=DOMAIN,
            code="invalid_learning_candidate",
        )
    return candidate


@transaction.atomic
def candidate_create(
    *,
    actor: object,
    scope: LearningScope,
    kind: str,
    content: str,
    sensitivity: str = Sensitivity.SCOPED,
    confidence: object = 80,
    source: object = None,
    evidence_refs: object = None,
    expires_at_ms: object = None,
) -> LearningCandidate:
    """``POST /v1/learning-candidates``: origin is always ``api`` (an API caller cannot forge daemon
    provenance), state ``pending``, created now; then validated (§3.4) and queued for review."""
    if not isinstance(content, str):
        raise invalid(LearningValidationError("content", validation.MSG_CONTENT_REQUIRED))
    candidate = _new_candidate(
        origin=CandidateOrigin.API,
        scope=normalise_scope(scope.kind, scope.id),
        kind=kind,
        content=content.strip(),
        sensitivity=sensitivity,
        confidence=confidence,
        source=clean_source(source),
        evidence_refs=clean_evidence_refs(evidence_refs),
        created_at_ms=now_ms(),
        expires_at_ms=clean_expiry(expires_at_ms),
        source_run=None,
    )
    candidate.save()
    record_audit(
        subject_type="learning_candidate",
        subject_id=candidate.public_id,
        action="create",
        actor=actor,
        to_state=CandidateState.PENDING,
        data={"origin": candidate.origin, "kind": candidate.kind, "scope": candidate.scope_key},
    )
    _enqueue_review(candidate.pk)
    return candidate


def daemon_source(run: Run) -> dict:
    session = run.session
    return {
        "run_id": run.public_id,
        "session_id": session.public_id,
        "agent_id": session.owner.get_username(),
    }


@transaction.atomic
def daemon_candidate_create(
    *,
    run: Run,
    kind: str,
    content: str,
    confidence: int,
    sensitivity: str = Sensitivity.SCOPED,
    scope: LearningScope | None = None,
    evidence_refs: list | None = None,
    created_at_ms: int | None = None,
    expires_at_ms: int | None = None,
) -> tuple[LearningCandidate, bool]:
    """A daemon-origin candidate from a run (capture), deduplicated (§4.9): same origin, scope, kind,
    semantic content key and source run ⇒ the existing candidate is returned. Returns (candidate, created)."""
    scope = scope or LearningScope(kind="session", id=run.session.public_id)
    content = content.strip()
    candidate = _new_candidate(
        origin=CandidateOrigin.DAEMON,
        scope=scope,
        kind=kind,
        content=content,
        sensitivity=sensitivity,
        confidence=confidence,
        source=daemon_source(run),
        evidence_refs=list(evidence_refs or []),
        created_at_ms=now_ms() if created_at_ms is None else created_at_ms,
        expires_at_ms=expires_at_ms,
        source_run=run,
    )
    existing = LearningCandidate.objects.filter(
        origin=CandidateOrigin.DAEMON,
        scope_key=candidate.scope_key,
        kind=kind,
        content_key=candidate.content_key,
        source_run=run,
    ).first()
    if kind == LearningKind.RUN_SUMMARY and existing is None:
        existing = LearningCandidate.objects.filter(source_run=run, kind=LearningKind.RUN_SUMMARY).first()
    if existing is not None:
        return existing, False
    try:
        with transaction.atomic():
            candidate.save()
    except IntegrityError:  # a concurrent capture won: the unique constraints keep one
        existing = (
            LearningCandidate.objects.filter(
                source_run=run,
                kind=kind,
                scope_key=candidate.scope_key,
                origin=CandidateOrigin.DAEMON,
            )
            .filter(content_key=candidate.content_key)
            .first()
            or LearningCandidate.objects.filter(source_run=run, kind=LearningKind.RUN_SUMMARY).first()
        )
        if existing is None:
            raise
        return existing, False
    record_audit(
        subject_type="learning_candidate",
        subject_id=candidate.public_id,
        action="capture",
        actor="daemon",
        to_state=CandidateState.PENDING,
        data={
            "origin": candidate.origin,
            "kind": kind,
            "scope": candidate.scope_key,
            "run_id": run.public_id,
        },
    )
    _enqueue_review(candidate.pk)
    return candidate, True


def run_summary_candidate_ensure(*, run: Run, record: RunMemoryRecord) -> tuple[LearningCandidate | None, bool]:
    """§4.8: one run_summary candidate per run (daemon origin, session scope, sensitive, confidence 100,
    the run-memory summary, 30-day expiry). Skipped when the summary is blank."""
    content = (record.summary or "").strip()
    if not content:
        return None, False
    existing = LearningCandidate.objects.filter(source_run=run, kind=LearningKind.RUN_SUMMARY).first()
    if existing is not None:
        return existing, False
    return daemon_candidate_create(
        run=run,
        kind=LearningKind.RUN_SUMMARY,
        content=content,
        confidence=100,
        sensitivity=Sensitivity.SENSITIVE,
        created_at_ms=record.recorded_at_ms,
        expires_at_ms=now_ms() + RUN_SUMMARY_TTL_MS,
    )


def _lock_candidate(candidate: LearningCandidate | int) -> LearningCandidate:
    pk = candidate if isinstance(candidate, int) else candidate.pk
    locked = LearningCandidate.objects.select_for_update().filter(pk=pk).first()
    if locked is None:
        raise candidate_not_found(f"learning-candidate-{pk}")
    return locked


def _move_candidate(
    candidate: LearningCandidate,
    *,
    to_state: str,
    actor: object,
    action: str,
    reason: str = "",
    from_states: tuple[str, ...] | None = None,
    **changes: Any,
) -> LearningCandidate:
    """Compare-and-swap the candidate's state and audit the transition."""
    from_state = candidate.state
    expected = from_states or (from_state,)
    ts = now_ms()
    updated = LearningCandidate.objects.filter(pk=candidate.pk, state__in=expected).update(
        state=to_state, updated_at_ms=ts, **changes
    )
    if updated != 1:
        raise Conflict(
            f"learning candidate {candidate.public_id} changed concurrently; retry",
            domain=DOMAIN,
            code="candidate_changed",
        )
    record_audit(
        subject_type="learning_candidate",
        subject_id=candidate.public_id,
        action=action,
        actor=actor,
        from_state=from_state,
        to_state=to_state,
        reason=reason,
        data={
            k: (f"learning-{v.pk}" if isinstance(v, Learning) else v)
            for k, v in changes.items()
            if k in ("published_learning", "matched_rule_name")
        },
    )
    candidate.refresh_from_db()
    return candidate


def _mark_published(
    candidate: LearningCandidate,
    learning: Learning,
    *,
    actor: object,
    reason: str,
    review: dict | None = None,
    revision: int | None = None,
) -> LearningCandidate:
    changes: dict[str, Any] = {"published_learning": learning}
    if review is not None:
        changes.update(_review_fields(review, revision))
    return _move_candidate(
        candidate,
        to_state=CandidateState.PUBLISHED,
        actor=actor,
        action="publish",
        reason=reason,
        from_states=(CandidateState.PENDING, CandidateState.ESCALATED, candidate.state),
        **changes,
    )


def _review_fields(review: dict, revision: int | None) -> dict:
    try:
        validation.validate_review_reason(review.get("reason"))
    except LearningValidationError as exc:
        raise invalid(exc, code="invalid_learning_candidate") from exc
    return {
        "automation_review": review,
        "matched_rule_name": (review.get("matched_rule_name") or "")[:200],
        "reviewed_policy_revision": revision,
        "review_lease_until_ms": None,
    }


@transaction.atomic
def candidate_reject(
    *,
    candidate: LearningCandidate | int,
    actor: object,
    reason: str = "",
    review: dict | None = None,
    revision: int | None = None,
) -> LearningCandidate:
    """Reject a pending or escalated candidate (a rejected one: no-op; a published one: 409)."""
    locked = _lock_candidate(candidate)
    if locked.state == CandidateState.PUBLISHED:
        raise Conflict(
            f"learning candidate {locked.public_id} was already published",
            domain=DOMAIN,
            code="candidate_already_published",
        )
    if locked.state == CandidateState.REJECTED:
        return locked
    changes = _review_fields(review, revision) if review is not None else {}
    return _move_candidate(
        locked,
        to_state=CandidateState.REJECTED,
        actor=actor,
        action="reject",
        reason=reason or (review or {}).get("reason", ""),
        **changes,
    )


@transaction.atomic
def candidate_escalate(
    *, candidate: LearningCandidate | int, review: dict, revision: int | None, actor: object = "daemon"
) -> LearningCandidate:
    """Automation hands a pending candidate to an operator (state ``escalated``) with its review."""
    locked = _lock_candidate(candidate)
    if locked.state != CandidateState.PENDING:
        raise Conflict(
            f"learning candidate {locked.public_id} is {locked.state}, not pending",
            domain=DOMAIN,
            code="candidate_changed",
        )
    return _move_candidate(
        locked,
        to_state=CandidateState.ESCALATED,
        actor=actor,
        action="escalate",
        reason=review.get("reason", ""),
        **_review_fields(review, revision),
    )


@transaction.atomic
def candidate_record_review(
    *, candidate: LearningCandidate | int, review: dict, revision: int | None, actor: object = "daemon"
) -> LearningCandidate:
    """Store an automation review without changing the state (shadow mode, or a candidate an operator
    already published)."""
    locked = _lock_candidate(candidate)
    LearningCandidate.objects.filter(pk=locked.pk, state=locked.state).update(
        updated_at_ms=now_ms(), **_review_fields(review, revision)
    )
    record_audit(
        subject_type="learning_candidate",
        subject_id=locked.public_id,
        action="review",
        actor=actor,
        from_state=locked.state,
        to_state=locked.state,
        reason=review.get("reason", ""),
        data={
            "mode": review.get("mode"),
            "action": review.get("action"),
            "matched_rule_name": review.get("matched_rule_name"),
        },
    )
    locked.refresh_from_db()
    return locked


# ---- publication (§4.14) ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Governance:
    """Who decided a publication and what it is: tier, decision, verification, expiry override."""

    publish_tier: str = PublishTier.ACTIVE
    policy_decision: str = PolicyDecision.MANUAL
    verification_status: str = VerificationStatus.UNVERIFIED
    expires_at_ms: int | None = None
    use_expiry: bool = False  # True: expires_at_ms replaces the candidate's expiry even when None


_UNSET: Any = object()


def _validated_learning(learning: Learning) -> Learning:
    try:
        validation.validate_learning(learning)
    except LearningValidationError as exc:
        raise invalid(exc) from exc
    return learning


def _serialize_scope(scope_key: str, kind: str) -> None:
    """Serialise publications into one (scope, kind) until commit, so the equivalence and conflict checks
    that precede an insert cannot race (a transaction-scoped advisory lock on PostgreSQL; SQLite already
    serialises writers)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"learnings:{scope_key}:{kind}"])


def _lock_learning(pk: int) -> Learning:
    learning = Learning.objects.select_for_update().filter(pk=pk).first()
    if learning is None:
        raise learning_not_found(f"learning-{pk}")
    return learning


def live_replacement(learning: Learning, at_ms: int | None = None) -> Learning | None:
    """A live learning that names ``learning`` in ``supersedes`` (its replacement), if any."""
    return Learning.objects.filter(supersedes=learning).live(at_ms).order_by("-id").first()


def _move_learning(
    learning: Learning, *, to_status: str, actor: object, action: str, reason: str = "", **changes: Any
) -> Learning:
    from_status = learning.status
    updated = Learning.objects.filter(pk=learning.pk, status=from_status).update(
        status=to_status, updated_at_ms=now_ms(), **changes
    )
    if updated != 1:
        raise Conflict(
            f"learning {learning.public_id} changed concurrently; retry",
            domain=DOMAIN,
            code="learning_changed",
        )
    record_audit(
        subject_type="learning",
        subject_id=learning.public_id,
        action=action,
        actor=actor,
        from_state=from_status,
        to_state=to_status,
        reason=reason,
        data={
            k: (f"learning-{v.pk}" if isinstance(v, Learning) else v)
            for k, v in changes.items()
            if k == "superseded_by"
        },
    )
    learning.refresh_from_db()
    return learning


def _supersede_target(target_id: str, *, scope_key: str) -> tuple[Learning | None, Learning | None]:
    """(target to supersede, existing live replacement to reuse) for a publication naming ``supersedes``."""
    target = Learning.objects.select_for_update().filter(pk=parse_learning_id(target_id)).first()
    if target is None:
        raise learning_not_found(target_id)
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


def _supersede(target: Learning, replacement: Learning, *, actor: object) -> None:
    _move_learning(
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


@transaction.atomic
def candidate_publish(
    *,
    candidate: LearningCandidate | int,
    actor: object,
    publish_tier: str = PublishTier.ACTIVE,
    supersedes: str | None = None,
    scope: LearningScope | None = None,
    kind: str | None = None,
    sensitivity: str | None = None,
    content: str | None = None,
    confidence: object = None,
    expires_at_ms: object = None,
    evidence_refs: object = None,
    governance: Governance | None = None,
    review: dict | None = None,
    revision: int | None = None,
) -> Learning:
    """Publish a candidate (§4.14); operators publish ``manual``, automation passes ``governance``.

    Unknown → 404; rejected → 409; a learning already built from it repairs the candidate and is returned;
    already published → 409; an equivalent prompt-visible learning is reused; ``supersedes`` needs the active
    tier and reuses a live replacement; a same-subject conflict → 409 unless superseded.
    """
    governance = governance or Governance(publish_tier=publish_tier)
    actor_label = (
        policy_actor_for(governance.policy_decision) if governance.policy_decision != "escalated" else "operator"
    )
    if governance.publish_tier not in PublishTier.values:
        raise ValidationFailed(
            f"unknown learning publish tier `{governance.publish_tier}`",
            field="publish_tier",
            domain=DOMAIN,
            code="invalid_learning",
        )
    if supersedes is not None and governance.publish_tier != PublishTier.ACTIVE:
        raise ValidationFailed(MSG_SUPERSEDE_TIER, field="publish_tier", domain=DOMAIN, code="invalid_learning")
    locked = _lock_candidate(candidate)
    if locked.state == CandidateState.REJECTED:
        raise Conflict(f"learning candidate {locked.public_id} was rejected", domain=DOMAIN, code="candidate_rejected")
    built = Learning.objects.filter(source_candidate=locked).first()
    if built is not None:
        if locked.state != CandidateState.PUBLISHED or locked.published_learning_id != built.pk:
            _mark_published(locked, built, actor=actor, reason="repaired from the learning built from it")
        return built
    if locked.state == CandidateState.PUBLISHED:
        raise Conflict(
            f"learning candidate {locked.public_id} was already published",
            domain=DOMAIN,
            code="candidate_already_published",
        )

    at = now_ms()
    scope = (
        normalise_scope(scope.kind, scope.id)
        if scope is not None
        else LearningScope(kind=locked.scope_kind, id=locked.scope_id)
    )
    body = _content(content) if content is not None else locked.content
    refs = clean_evidence_refs(evidence_refs)
    if governance.use_expiry:
        expiry = governance.expires_at_ms
    else:
        override = clean_expiry(expires_at_ms)
        expiry = override if override is not None else locked.expires_at_ms
    content_key, subject_key = _keys(body)
    learning = Learning(
        scope_kind=scope.kind,
        scope_id=scope.id,
        scope_key=scope.scope_key,
        kind=kind or locked.kind,
        sensitivity=sensitivity or locked.sensitivity,
        content=body,
        confidence=locked.confidence if confidence is None else confidence,
        source=locked.source,
        source_run_id=locked.source_run_id,
        evidence_refs=refs or locked.evidence_refs,
        created_at_ms=locked.created_at_ms,
        published_at_ms=at,
        expires_at_ms=expiry,
        status=status_for_tier(governance.publish_tier),
        publish_tier=governance.publish_tier,
        policy_decision=governance.policy_decision,
        policy_actor=actor_label,
        verification_status=governance.verification_status,
        content_key=content_key,
        subject_key=subject_key,
        source_candidate=locked,
        updated_at_ms=at,
    )
    if learning.sensitivity not in Sensitivity.values:
        raise ValidationFailed(
            f"unknown learning sensitivity `{learning.sensitivity}`",
            field="sensitivity",
            domain=DOMAIN,
            code="invalid_learning",
        )
    _validated_learning(learning)
    reason = (
        "published by an operator"
        if governance.policy_decision == PolicyDecision.MANUAL
        else (review or {}).get("reason", "published by automation")
    )

    _serialize_scope(learning.scope_key, learning.kind)
    equivalent = find_equivalent(scope_key=learning.scope_key, kind=learning.kind, content_key=content_key, at_ms=at)
    if equivalent is not None:
        _mark_published(
            locked,
            equivalent,
            actor=actor,
            reason=f"equivalent to {equivalent.public_id}",
            review=review,
            revision=revision,
        )
        return equivalent

    target = None
    if supersedes is not None:
        target, replacement = _supersede_target(supersedes, scope_key=learning.scope_key)
        if replacement is not None:
            _mark_published(
                locked,
                replacement,
                actor=actor,
                reason=f"reused replacement {replacement.public_id}",
                review=review,
                revision=revision,
            )
            return replacement
    conflict = find_conflict(
        scope_key=learning.scope_key,
        kind=learning.kind,
        subject_key=subject_key,
        content_key=content_key,
        at_ms=at,
        exclude_ids=(target.pk,) if target else (),
    )
    if conflict is not None:
        raise LearningConflict(conflict)
    if target is not None:
        _fire_revoking(
            target,
            actor=actor,
            reason=f"source learning {target.public_id} is being superseded",
            superseding=True,
        )
        learning.supersedes = target
    learning.save()
    if target is not None:
        _supersede(target, learning, actor=actor)
    else:
        record_audit(
            subject_type="learning",
            subject_id=learning.public_id,
            action="publish",
            actor=actor,
            to_state=learning.status,
            reason=reason,
            data={
                "candidate": locked.public_id,
                "publish_tier": learning.publish_tier,
                "policy_decision": learning.policy_decision,
                "verification_status": learning.verification_status,
            },
        )
    _mark_published(locked, learning, actor=actor, reason=reason, review=review, revision=revision)
    return learning


# ---- revoke, supersede (§4.15) ----------------------------------------------------------------------------


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
    locked = _lock_learning(learning if isinstance(learning, int) else learning.pk)
    if locked.status == LearningStatus.REVOKED:
        return locked
    _fire_revoking(locked, actor=actor, reason=f"source learning {locked.public_id} was revoked")
    return _move_learning(
        locked,
        to_status=LearningStatus.REVOKED,
        actor=actor,
        action="revoke",
        reason=reason or "",
        revoked_at_ms=now_ms(),
        revoked_reason=reason,
    )


def learnings_revoke_matching(*, queryset: QuerySet, actor: object, reason: str | None = None) -> list[Learning]:
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
    locked = _lock_learning(learning if isinstance(learning, int) else learning.pk)
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
    body = _content(content)
    content_key, subject_key = _keys(body)
    at = now_ms()
    new = Learning(
        scope_kind=locked.scope_kind,
        scope_id=locked.scope_id,
        scope_key=locked.scope_key,
        kind=kind or locked.kind,
        sensitivity=sensitivity or locked.sensitivity,
        content=body,
        confidence=locked.confidence if confidence is None else confidence,
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
    if new.sensitivity not in Sensitivity.values:
        raise ValidationFailed(
            f"unknown learning sensitivity `{new.sensitivity}`",
            field="sensitivity",
            domain=DOMAIN,
            code="invalid_learning",
        )
    _validated_learning(new)
    _serialize_scope(new.scope_key, new.kind)
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
    _fire_revoking(
        locked,
        actor=actor,
        reason=f"source learning {locked.public_id} is being superseded",
        superseding=True,
    )
    new.save()
    _supersede(locked, new, actor=actor)
    return new
