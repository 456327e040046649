"""Taking promoted skills back (spec §4.15, §4.18): ``skill_revoke``, ``skill_rollback`` to the newest active
snapshot, and ``on_learning_revoking``, the cascade from a learning that is revoked or superseded."""

from __future__ import annotations

from django.db import transaction

from learnings.models import Learning
from memory.clock import now_ms
from skills.fingerprint import SkillDefinition, SkillRuntime, validate_skill_name
from skills.models import LearningSkill, LearningSkillSnapshot, LifecycleEventKind, SkillStatus
from skills.selectors import skill_not_found
from skills.services.cleaning import clean_reason
from skills.services.messages import (
    MSG_ALREADY_PROMOTED,
    MSG_CHANGED_CONCURRENTLY,
    MSG_NO_SNAPSHOT,
    MSG_ROLLBACK_SOURCE,
    conflict,
)
from skills.services.mounting import mount_active, unmount_on_commit
from skills.services.rules import can_source_rollback
from skills.services.transitions import apply_transition, lock_learning, lock_skill

S = SkillStatus


def _revoke(skill: LearningSkill, *, reason: str | None, actor: object) -> LearningSkill:
    if skill.status == S.REVOKED:
        return skill
    at = now_ms()
    from_status = apply_transition(
        skill,
        event=LifecycleEventKind.REVOKE,
        action="revoke",
        at_ms=at,
        actor=actor,
        to_status=S.REVOKED,
        reason=reason,
        changes={"status": S.REVOKED, "revoked_at_ms": at, "revoked_reason": reason},
    )
    if from_status == S.ACTIVE:
        unmount_on_commit(skill.source_learning_id)
    return skill


@transaction.atomic
def skill_revoke(*, skill_name: str, actor: object, reason: str | None = None) -> LearningSkill:
    """Idempotent: revoking a revoked skill returns it unchanged. An active skill's files go after commit."""
    reason = clean_reason(reason, "revocation")
    return _revoke(lock_skill(skill_name), reason=reason, actor=actor)


@transaction.atomic
def skill_rollback(*, skill_name: str, actor: object, reason: str | None = None) -> LearningSkill:
    """Restore the newest active history snapshot and remount it, if the source learning is still an active,
    active-tier procedure."""
    reason = clean_reason(reason, "rollback")
    # Lock order everywhere: the learning first, then the skill (as the learning plane's revoke does).
    validate_skill_name(skill_name)
    source_pk = LearningSkill.objects.filter(skill_name=skill_name).values_list("source_learning_id", flat=True).first()
    if source_pk is None:
        raise skill_not_found(skill_name)
    learning = lock_learning(source_pk)
    skill = lock_skill(skill_name)
    if skill.source_learning_id != learning.pk:
        raise conflict(MSG_CHANGED_CONCURRENTLY.format(name=skill_name), "skill_changed")
    if not can_source_rollback(learning):
        raise conflict(MSG_ROLLBACK_SOURCE.format(name=skill.skill_name, id=learning.public_id), "rollback_refused")
    snapshot = (
        LearningSkillSnapshot.objects.filter(skill=skill, status=S.ACTIVE).order_by("-recorded_at_ms", "-id").first()
    )
    if snapshot is None:
        raise conflict(MSG_NO_SNAPSHOT.format(name=skill.skill_name), "no_rollback_snapshot")
    record = snapshot.record
    restored_learning = learning
    if record.get("source_learning_id") != learning.public_id:
        restored_learning = lock_learning(str(record.get("source_learning_id")))
        if not can_source_rollback(restored_learning):
            raise conflict(
                MSG_ROLLBACK_SOURCE.format(name=skill.skill_name, id=restored_learning.public_id),
                "rollback_refused",
            )
    other = (
        LearningSkill.objects.filter(source_learning=restored_learning)
        .exclude(status=S.REVOKED)
        .exclude(pk=skill.pk)
        .first()
    )
    if other is not None:
        raise conflict(
            MSG_ALREADY_PROMOTED.format(id=restored_learning.public_id, name=other.skill_name),
            "learning_already_promoted",
        )
    runtime = SkillRuntime.from_dict(record.get("runtime"))
    definition = SkillDefinition(
        name=skill.skill_name,
        description=record["description"],
        when_to_use=record.get("when_to_use"),
        version=record.get("version"),
        instructions=record["instructions"],
        runtime=runtime,
    )
    fingerprint = definition.fingerprint()
    evidence_refs = list(record.get("evidence_refs") or [])
    if reason:
        evidence_refs.append({"note": f"rollback restored active snapshot: {reason}"})
    apply_transition(
        skill,
        event=LifecycleEventKind.ROLLBACK,
        action="rollback",
        at_ms=now_ms(),
        actor=actor,
        to_status=S.ACTIVE,
        reason=reason,
        changes={
            "source_learning": restored_learning,
            "source_scope": record.get("source_scope") or skill.source_scope,
            "status": S.ACTIVE,
            "description": definition.description,
            "when_to_use": definition.when_to_use,
            "version": definition.version,
            "instructions": definition.instructions,
            "runtime": runtime.to_dict(),
            "definition_fingerprint": fingerprint,
            "evidence_refs": evidence_refs,
            "verification_status": record["verification_status"],
            "successful_run_count": record["successful_run_count"],
            "distinct_session_count": record["distinct_session_count"],
            "evidence_session_ids": record.get("evidence_session_ids") or [],
            "verifier_run_ids": record.get("verifier_run_ids") or [],
            "real_daemon_verified": record["real_daemon_verified"],
            "last_verified_workspace_digest": record.get("last_verified_workspace_digest"),
            "canary_success_count": record["canary_success_count"],
            "canary_failure_count": record["canary_failure_count"],
            "revoked_at_ms": None,
            "revoked_reason": None,
        },
        audit_data={"snapshot": str(snapshot), "definition_fingerprint": fingerprint},
    )
    mount_active(skill)
    return skill


def on_learning_revoking(
    learning: Learning | None = None,
    *,
    actor: object = None,
    reason: str | None = None,
    superseding: bool = False,
    **kwargs: object,
) -> LearningSkill | None:
    """The ``learning_revoking`` hook: before a learning is revoked or superseded, revoke the live skill it
    grew. Runs inside the learning plane's transaction: an error here aborts it, and the files (removed only
    on commit) are untouched."""
    learning = learning if learning is not None else kwargs.get("learning")  # type: ignore[assignment]
    if learning is None:
        return None
    skill = (
        LearningSkill.objects.select_for_update()
        .filter(source_learning_id=learning.pk)
        .exclude(status=S.REVOKED)
        .first()
    )
    if skill is None:
        return None
    if not reason:
        verb = "is being superseded" if superseding else "was revoked"
        reason = f"source learning {learning.public_id} {verb}"
    return _revoke(skill, reason=reason, actor=actor)
