"""The one write sequence every promoted-skill change goes through: lock, history snapshot, compare-and-swap
update, lifecycle event, audit row (``apply_transition``), plus the record's JSON form that snapshots keep and
rollback restores. Promotion, rollout evidence, revoke and rollback all call ``apply_transition``."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from learnings.models import Learning
from learnings.selectors import parse_learning_id
from memory import public_ids
from memory.audit import actor_label, record_audit
from memory.clock import now_ms
from memory.errors import NotFound
from skills.fingerprint import definition_fingerprint, validate_skill_name
from skills.models import LearningSkill, LearningSkillEvent, LearningSkillSnapshot
from skills.selectors import skill_not_found
from skills.services.messages import MSG_CHANGED_CONCURRENTLY, MSG_STALE_FINGERPRINT, SUBJECT, conflict


def lock_skill(name: str) -> LearningSkill:
    validate_skill_name(name)
    skill = LearningSkill.objects.select_for_update().filter(skill_name=name).first()
    if skill is None:
        raise skill_not_found(name)
    return skill


def lock_learning(learning: Learning | int | str) -> Learning:
    if isinstance(learning, Learning):
        pk = learning.pk
    elif isinstance(learning, int):
        pk = learning
    else:
        pk = parse_learning_id(learning)
    locked: Learning | None = Learning.objects.select_for_update().filter(pk=pk).first()
    if locked is None:
        raise NotFound(f"unknown learning {public_ids.learning_id(pk)}", domain="learnings", code="learning_not_found")
    return locked


def verify_fingerprint(skill: LearningSkill) -> str:
    """The current fingerprint; a stored one that no longer recomputes means the row was edited behind the
    service's back."""
    computed = definition_fingerprint(skill.definition)
    if skill.definition_fingerprint and skill.definition_fingerprint != computed:
        raise conflict(MSG_STALE_FINGERPRINT, "stale_fingerprint")
    return computed


def record_json(skill: LearningSkill) -> dict[str, Any]:
    """The whole record (what a history snapshot keeps and what rollback restores)."""
    return {
        "skill_name": skill.skill_name,
        "source_learning_id": skill.source_learning_public_id,
        "source_scope": skill.source_scope,
        "status": skill.status,
        "description": skill.description,
        "when_to_use": skill.when_to_use,
        "version": skill.version,
        "instructions": skill.instructions,
        "skill_path": skill.skill_path,
        "skill_root": skill.skill_root,
        "digest": skill.digest,
        "definition_fingerprint": skill.definition_fingerprint,
        "runtime": skill.runtime,
        "evidence_refs": skill.evidence_refs,
        "verification_status": skill.verification_status,
        "successful_run_count": skill.successful_run_count,
        "distinct_session_count": skill.distinct_session_count,
        "evidence_session_ids": skill.evidence_session_ids,
        "verifier_run_ids": skill.verifier_run_ids,
        "real_daemon_verified": skill.real_daemon_verified,
        "last_verified_workspace_digest": skill.last_verified_workspace_digest,
        "canary_success_count": skill.canary_success_count,
        "canary_failure_count": skill.canary_failure_count,
        "promoted_at_ms": skill.promoted_at_ms,
        "revoked_at_ms": skill.revoked_at_ms,
        "revoked_reason": skill.revoked_reason,
    }


def _snapshot(skill: LearningSkill, at_ms: int) -> LearningSkillSnapshot:
    record = record_json(skill)
    encoded = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return LearningSkillSnapshot.objects.create(
        skill=skill,
        recorded_at_ms=at_ms,
        status=skill.status,
        record=record,
        record_digest=hashlib.sha256(encoded).hexdigest()[:16],
    )


def _update(skill: LearningSkill, *, expected_status: str, expected_fingerprint: str, **changes: object) -> None:
    """Compare-and-swap on (status, fingerprint): zero rows → someone else changed the record."""
    changes.setdefault("updated_at_ms", now_ms())
    updated = LearningSkill.objects.filter(
        pk=skill.pk, status=expected_status, definition_fingerprint=expected_fingerprint
    ).update(**changes)
    if updated != 1:
        raise conflict(MSG_CHANGED_CONCURRENTLY.format(name=skill.skill_name), "skill_changed")
    for name, value in changes.items():
        setattr(skill, name, value)


def _event(
    skill: LearningSkill,
    *,
    event: str,
    at_ms: int,
    to_status: str,
    actor: object,
    from_status: str | None = None,
    reason: str | None = None,
    **extra: Any,
) -> LearningSkillEvent:
    return LearningSkillEvent.objects.create(
        skill=skill,
        event=event,
        recorded_at_ms=at_ms,
        from_status=from_status,
        to_status=to_status,
        definition_fingerprint=extra.pop("definition_fingerprint", skill.definition_fingerprint),
        reason=reason,
        actor=actor_label(actor),
        **extra,
    )


def record_lifecycle(
    skill: LearningSkill,
    *,
    event: str,
    action: str,
    at_ms: int,
    actor: object,
    from_status: str | None,
    to_status: str,
    reason: str | None = None,
    audit_data: dict[str, Any] | None = None,
    event_fields: dict[str, Any] | None = None,
) -> None:
    """The lifecycle event and the audit row of a change (the tail of ``apply_transition``; on its own only
    for a record that has just been created, which has nothing to snapshot)."""
    _event(
        skill,
        event=event,
        at_ms=at_ms,
        from_status=from_status,
        to_status=to_status,
        reason=reason,
        actor=actor,
        **(event_fields or {}),
    )
    record_audit(
        subject_type=SUBJECT,
        subject_id=skill.skill_name,
        action=action,
        actor=actor,
        from_state=from_status or "",
        to_state=to_status,
        reason=reason or "",
        data=audit_data,
    )


def apply_transition(
    skill: LearningSkill,
    *,
    event: str,
    action: str,
    at_ms: int,
    actor: object,
    changes: dict[str, Any],
    to_status: str | None = None,
    reason: str | None = None,
    audit_data: dict[str, Any] | None = None,
    event_fields: dict[str, Any] | None = None,
) -> str:
    """Snapshot the record as it is, update it with a compare-and-swap on its current status and fingerprint,
    then append the lifecycle event and the audit row. ``to_status=None`` records evidence without a status
    change (the event carries no ``from_status``; the audit row reads status → same status). Returns the
    status the record had before."""
    from_status = skill.status
    _snapshot(skill, at_ms)
    _update(
        skill,
        expected_status=from_status,
        expected_fingerprint=skill.definition_fingerprint,
        **{"updated_at_ms": at_ms, **changes},
    )
    if to_status is None:
        _event(skill, event=event, at_ms=at_ms, to_status=from_status, actor=actor, **(event_fields or {}))
        record_audit(
            subject_type=SUBJECT,
            subject_id=skill.skill_name,
            action=action,
            actor=actor,
            from_state=from_status,
            to_state=from_status,
            data=audit_data,
        )
    else:
        record_lifecycle(
            skill,
            event=event,
            action=action,
            at_ms=at_ms,
            actor=actor,
            from_status=from_status,
            to_status=to_status,
            reason=reason,
            audit_data=audit_data,
            event_fields=event_fields,
        )
    return from_status
