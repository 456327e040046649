"""Promotion (spec §4.15, §4.18): ``skill_promote`` creates a new draft skill from an active procedure
learning, or — same learning and name again — merges a new definition and/or status into the live record
along the transition table."""

from __future__ import annotations

from typing import Any, TypedDict

from django.db import IntegrityError, transaction

from learnings.models import Learning
from memory.clock import now_ms
from skills import catalog, mounted_files
from skills.fingerprint import DEFAULT_PROMOTED_DESCRIPTION, SkillDefinition
from skills.models import LearningSkill, LifecycleEventKind, SkillStatus, SkillVerificationStatus
from skills.services.cleaning import CleanedRequest, PromotionRequest, clean_request
from skills.services.messages import (
    MSG_ALREADY_PROMOTED,
    MSG_CATALOG_CLASH,
    MSG_EXISTS,
    MSG_NEW_DRAFT,
    MSG_TRANSITION,
    conflict,
    invalid,
    status_label,
)
from skills.services.mounting import mount_active, unmount_on_commit
from skills.services.rules import ALLOWED_TRANSITIONS, ensure_gate, ensure_promotable, reset_evidence
from skills.services.transitions import apply_transition, lock_learning, record_lifecycle, verify_fingerprint

S = SkillStatus


class _Lifecycle(TypedDict):
    """The arguments ``record_lifecycle`` and ``apply_transition`` share for a promotion."""

    event: str
    action: str
    at_ms: int
    actor: object
    to_status: str
    audit_data: dict[str, Any]


@transaction.atomic
def skill_promote(*, learning: Learning | int | str, request: PromotionRequest, actor: object) -> LearningSkill:
    """``POST /v1/learnings/{id}/promote-skill``: a new draft skill, or — same learning and name again — the
    merge that changes its definition and/or status along the transition table of §4.18."""
    cleaned = clean_request(request)
    locked_learning = lock_learning(learning)
    ensure_promotable(locked_learning)
    live_for_learning = (
        LearningSkill.objects.select_for_update()
        .filter(source_learning=locked_learning)
        .exclude(status=S.REVOKED)
        .first()
    )
    if live_for_learning is not None:
        if live_for_learning.skill_name == cleaned.name:
            return _merge(live_for_learning, cleaned, actor=actor)
        raise conflict(
            MSG_ALREADY_PROMOTED.format(id=locked_learning.public_id, name=live_for_learning.skill_name),
            "learning_already_promoted",
            field_name="skill_name",
        )
    existing = LearningSkill.objects.select_for_update().filter(skill_name=cleaned.name).first()
    if existing is not None and existing.status != S.REVOKED:
        raise conflict(MSG_EXISTS.format(name=cleaned.name), "skill_exists", field_name="skill_name")
    if cleaned.status != S.DRAFT:
        raise invalid(MSG_NEW_DRAFT, "invalid_skill_status", field_name="status")
    if catalog.load_catalog().get(cleaned.name) is not None:
        raise conflict(MSG_CATALOG_CLASH.format(name=cleaned.name), "catalog_name_clash", field_name="skill_name")
    return _create(locked_learning, cleaned, existing=existing, actor=actor)


def _create(
    learning: Learning, cleaned: CleanedRequest, *, existing: LearningSkill | None, actor: object
) -> LearningSkill:
    at = now_ms()
    definition = SkillDefinition(
        name=cleaned.name,
        description=cleaned.description or DEFAULT_PROMOTED_DESCRIPTION,
        when_to_use=cleaned.when_to_use,
        version=cleaned.version,
        instructions=cleaned.instructions,
        runtime=cleaned.runtime,
    )
    learning_id = learning.public_id
    expected_root = mounted_files.procedural_root() / learning_id
    fingerprint = definition.fingerprint()
    fields = {
        "source_learning": learning,
        "source_scope": {"kind": learning.scope_kind, "id": learning.scope_id},
        "status": S.DRAFT,
        "description": definition.description,
        "when_to_use": definition.when_to_use,
        "version": definition.version,
        "instructions": definition.instructions,
        "runtime": definition.runtime.to_dict(),
        "definition_fingerprint": fingerprint,
        "skill_path": str(expected_root / catalog.SKILL_FILE),
        "skill_root": str(expected_root),
        "digest": "",
        "evidence_refs": list(learning.evidence_refs or []),
        **reset_evidence(),
        "promoted_at_ms": at,
        "updated_at_ms": at,
        "revoked_at_ms": None,
        "revoked_reason": None,
    }
    lifecycle: _Lifecycle = {
        "event": LifecycleEventKind.PROMOTE,
        "action": "promote",
        "at_ms": at,
        "actor": actor,
        "to_status": S.DRAFT,
        "audit_data": {"source_learning_id": learning_id, "definition_fingerprint": fingerprint},
    }
    try:
        with transaction.atomic():
            if existing is None:
                skill = LearningSkill.objects.create(skill_name=cleaned.name, **fields)
                record_lifecycle(skill, from_status=None, **lifecycle)
            else:
                # The name of a revoked record is free again: the same row becomes a fresh draft.
                apply_transition(existing, changes=fields, **lifecycle)
                skill = existing
    except IntegrityError as exc:
        raise conflict(MSG_EXISTS.format(name=cleaned.name), "skill_exists", field_name="skill_name") from exc
    # A draft is never mounted; clear anything a past skill of this learning may have left behind.
    unmount_on_commit(learning.pk)
    return skill


def _merge(existing: LearningSkill, cleaned: CleanedRequest, *, actor: object) -> LearningSkill:
    current_fp = verify_fingerprint(existing)
    definition = SkillDefinition(
        name=existing.skill_name,
        description=cleaned.description if cleaned.description is not None else existing.description,
        when_to_use=cleaned.when_to_use if cleaned.when_to_use is not None else existing.when_to_use,
        version=cleaned.version if cleaned.version is not None else existing.version,
        instructions=cleaned.instructions,
        runtime=cleaned.runtime,
    )
    new_fp = definition.fingerprint()
    definition_changed = new_fp != current_fp
    target = cleaned.status
    status_changed = target != existing.status
    restarting = existing.status in (S.VERIFIED, S.CANARY) and target == S.DRAFT
    state = {
        "status": target,
        "verification_status": (
            SkillVerificationStatus.VERIFIED
            if target in (S.VERIFIED, S.CANARY, S.ACTIVE)
            else existing.verification_status
        ),
        "successful_run_count": existing.successful_run_count,
        "distinct_session_count": existing.distinct_session_count,
        "evidence_session_ids": existing.evidence_session_ids,
        "verifier_run_ids": existing.verifier_run_ids,
        "real_daemon_verified": existing.real_daemon_verified,
        "last_verified_workspace_digest": existing.last_verified_workspace_digest,
        "canary_success_count": existing.canary_success_count,
        "canary_failure_count": existing.canary_failure_count,
    }
    if definition_changed or restarting:
        state.update(reset_evidence())
    if target not in ALLOWED_TRANSITIONS[existing.status]:
        raise conflict(
            MSG_TRANSITION.format(from_=status_label(existing.status), to=status_label(target)),
            "invalid_transition",
            field_name="status",
        )
    ensure_gate(existing.status, state, definition_changed=definition_changed)
    if not (status_changed or definition_changed or restarting):
        return existing  # nothing to change: no snapshot, no event
    at = now_ms()
    was_active = existing.status == S.ACTIVE
    reason = "definition changed" if definition_changed else ("rollout restarted" if restarting else None)
    apply_transition(
        existing,
        event=LifecycleEventKind.PROMOTE,
        action="promote",
        at_ms=at,
        actor=actor,
        to_status=target,
        reason=reason,
        changes={
            "description": definition.description,
            "when_to_use": definition.when_to_use,
            "version": definition.version,
            "instructions": definition.instructions,
            "runtime": definition.runtime.to_dict(),
            "definition_fingerprint": new_fp,
            "revoked_at_ms": None,
            "revoked_reason": None,
            **state,
        },
        audit_data={"definition_fingerprint": new_fp, "definition_changed": definition_changed},
    )
    if target == S.ACTIVE and not was_active:
        mount_active(existing)
    return existing
