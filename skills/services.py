"""Every write of promoted skills (spec §4.15, §4.18): promotion and the status changes made by promoting
again, rollout evidence, revoke, rollback, and the cascade from the source learning.

Each service is keyword-only and atomic; it locks the rows it reads, saves a history snapshot before every
update, appends a lifecycle event, writes an audit event, and changes status with a compare-and-swap update.

Files on disk are not transactional, so:

* mounting (a skill becoming active, a rollback) happens inside the transaction, after the database writes,
  and is read back through the catalog loader; any failure restores the files that were there before and
  re-raises, so the transaction aborts and nothing changed;
* unmounting (revoke, the cascade from a revoked or superseded learning) is deferred to
  ``transaction.on_commit``: if anything later aborts the surrounding transaction, the files were never
  touched. The deferred removal re-checks that no active record owns the directory; if it fails, the files
  stay behind as orphans that ``repair`` removes.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field

from django.db import IntegrityError, transaction
from django.db.models import Q

from learnings.models import Learning, LearningKind, LearningStatus, PublishTier, ScopeKind
from learnings.selectors import parse_learning_id
from memory.audit import actor_label, record_audit
from memory.clock import now_ms
from memory.errors import Conflict, NotFound, ValidationFailed
from memory.models import TERMINAL_STATUSES, Run, RunStatus
from memory.runs import get_run
from skills import catalog, mount
from skills.fingerprint import (
    CONTEXT_FORK,
    DEFAULT_PROMOTED_DESCRIPTION,
    ONE_LINE_MAX_CHARS,
    VERSION_MAX_CHARS,
    SkillDefinition,
    SkillRuntime,
    definition_fingerprint,
    optional_single_line,
    validate_instructions,
    validate_single_line,
    validate_skill_name,
)
from skills.models import (
    LearningSkill,
    LearningSkillEvent,
    LearningSkillSnapshot,
    LifecycleEventKind,
    RolloutKind,
    SkillStatus,
    SkillVerificationStatus,
)

logger = logging.getLogger("kheish.skills")

DOMAIN = "skills"
SUBJECT = "learning_skill"
VERIFICATION_PROFILE = "verification"
MAX_REASON_CHARS = 2000
MAX_MARKER_CHARS = 2000

S = SkillStatus
ALLOWED_TRANSITIONS: dict[str, frozenset[str]] = {
    S.DRAFT: frozenset({S.DRAFT, S.VERIFIED}),
    S.VERIFIED: frozenset({S.DRAFT, S.VERIFIED, S.CANARY, S.ACTIVE}),
    S.CANARY: frozenset({S.DRAFT, S.CANARY, S.ACTIVE}),
    S.ACTIVE: frozenset({S.ACTIVE}),
    S.REVOKED: frozenset(),
}

MSG_NOT_PROCEDURE = "learning {id} is not a procedure learning"
MSG_NOT_ACTIVE = "learning {id} must be active before promotion"
MSG_NOT_ACTIVE_TIER = "learning {id} must use the active publish tier before promotion"
MSG_NOT_WORKSPACE = "learning {id} must use workspace scope before promotion"
MSG_FORK = "promoted procedure skills must use fork context"
MSG_PROFILE = "promoted procedure skills must use the verification agent profile"
MSG_NEW_DRAFT = "new promoted skills must start in draft status"
MSG_EXISTS = "promoted skill {name} already exists"
MSG_CATALOG_CLASH = "skill {name} already exists in the daemon catalog"
MSG_ALREADY_PROMOTED = "learning {id} is already promoted as skill {name}"
MSG_TRANSITION = "cannot transition promoted skill from {from_} to {to}"
MSG_ACTIVE_IMMUTABLE = "active promoted skill definition changes must start a new draft rollout"
MSG_NEEDS_VERIFICATION = "promoted skills require daemon-validated verification evidence"
MSG_NEEDS_CANARY = "active promoted skills require at least one successful canary rollout"
MSG_ZERO_CANARY_FAILURES = "active promoted skills require zero canary failures"
MSG_MARKER_REQUIRED = "expected_output_contains is required"
MSG_REVOKED_EVIDENCE = "revoked promoted skills cannot accept rollout evidence"
MSG_CANARY_STATUS = "canary rollout evidence requires promoted skill status canary"
MSG_FINGERPRINT_GUARD = "rollout evidence definition_fingerprint does not match current promoted skill definition"
MSG_VERIFICATION_FAILED = "verification rollout evidence requires a completed run with matching output"
MSG_STALE_FINGERPRINT = "promoted skill definition fingerprint is stale"
MSG_ROLLBACK_SOURCE = "cannot rollback promoted skill {name}; source learning {id} is not an active procedure learning"
MSG_NO_SNAPSHOT = "no active rollback snapshot exists for learning skill {name}"
MSG_REASON_SECRET = "promoted skill {context} reason appears to contain secret material"


def _status_label(status: str) -> str:
    """Statuses in transition errors are spelled as the reference daemon spells them (``Draft``)."""
    return status.capitalize()


# ---- small helpers ---------------------------------------------------------------------------------------


def _has_secret(text: str) -> bool:
    """The §4.19 learning-content classifier (imported at call time: it lives in ``memory.redaction``)."""
    from memory.redaction import looks_like_secret

    return bool(looks_like_secret(text))


def skill_not_found(name: object) -> NotFound:
    return NotFound(f"unknown learning skill {name}", domain=DOMAIN, code="learning_skill_not_found")


def _conflict(message: str, code: str, *, field_name: str | None = None) -> Conflict:
    return Conflict(message, field=field_name, domain=DOMAIN, code=code)


def _invalid(message: str, code: str, *, field_name: str | None = None) -> ValidationFailed:
    return ValidationFailed(message, field=field_name, domain=DOMAIN, code=code)


def _clean_reason(reason: object, context: str) -> str | None:
    """An operator reason: optional, trimmed, bounded, and never secret-looking (§4.15)."""
    if reason is None:
        return None
    if not isinstance(reason, str):
        raise _invalid("reason must be a string", "invalid_reason", field_name="reason")
    reason = reason.strip()
    if not reason:
        return None
    if len(reason) > MAX_REASON_CHARS:
        raise _invalid(f"reason must be at most {MAX_REASON_CHARS} characters", "invalid_reason", field_name="reason")
    if _has_secret(reason):
        raise _invalid(MSG_REASON_SECRET.format(context=context), "secret_material", field_name="reason")
    return reason


def _lock_skill(name: str) -> LearningSkill:
    validate_skill_name(name)
    skill = LearningSkill.objects.select_for_update().filter(skill_name=name).first()
    if skill is None:
        raise skill_not_found(name)
    return skill


def _lock_learning(learning: Learning | int | str) -> Learning:
    if isinstance(learning, Learning):
        pk = learning.pk
    elif isinstance(learning, int):
        pk = learning
    else:
        pk = parse_learning_id(learning)
    locked = Learning.objects.select_for_update().filter(pk=pk).first()
    if locked is None:
        raise NotFound(f"unknown learning learning-{pk}", domain="learnings", code="learning_not_found")
    return locked


def _verify_fingerprint(skill: LearningSkill) -> str:
    """The current fingerprint; a stored one that no longer recomputes means the row was edited behind the
    service's back."""
    computed = definition_fingerprint(skill.definition)
    if skill.definition_fingerprint and skill.definition_fingerprint != computed:
        raise _conflict(MSG_STALE_FINGERPRINT, "stale_fingerprint")
    return computed


def is_promotable(learning: Learning) -> bool:
    """Active, active-tier, workspace-scoped procedure (what the admin offers "promote to skill" for)."""
    return (
        learning.kind == LearningKind.PROCEDURE
        and learning.status == LearningStatus.ACTIVE
        and learning.publish_tier == PublishTier.ACTIVE
        and learning.scope_kind == ScopeKind.WORKSPACE
    )


def _ensure_promotable(learning: Learning) -> None:
    lid = learning.public_id
    if learning.kind != LearningKind.PROCEDURE:
        raise _conflict(MSG_NOT_PROCEDURE.format(id=lid), "learning_not_promotable")
    if learning.status != LearningStatus.ACTIVE:
        raise _conflict(MSG_NOT_ACTIVE.format(id=lid), "learning_not_promotable")
    if learning.publish_tier != PublishTier.ACTIVE:
        raise _conflict(MSG_NOT_ACTIVE_TIER.format(id=lid), "learning_not_promotable")
    if learning.scope_kind != ScopeKind.WORKSPACE:
        raise _conflict(MSG_NOT_WORKSPACE.format(id=lid), "learning_not_promotable")


# ---- records as JSON: the view, snapshots ----------------------------------------------------------------


def record_json(skill: LearningSkill) -> dict:
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


def _event(
    skill: LearningSkill,
    *,
    event: str,
    at_ms: int,
    to_status: str,
    actor: object,
    from_status: str | None = None,
    reason: str | None = None,
    **extra: object,
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


def _update(skill: LearningSkill, *, expected_status: str, expected_fingerprint: str, **changes: object) -> None:
    """Compare-and-swap on (status, fingerprint): zero rows → someone else changed the record."""
    changes.setdefault("updated_at_ms", now_ms())
    updated = LearningSkill.objects.filter(
        pk=skill.pk, status=expected_status, definition_fingerprint=expected_fingerprint
    ).update(**changes)
    if updated != 1:
        raise _conflict(f"promoted skill {skill.skill_name} changed concurrently; retry", "skill_changed")
    for name, value in changes.items():
        setattr(skill, name, value)


def _reset_evidence() -> dict:
    return {
        "verification_status": SkillVerificationStatus.UNVERIFIED,
        "successful_run_count": 0,
        "distinct_session_count": 0,
        "evidence_session_ids": [],
        "verifier_run_ids": [],
        "real_daemon_verified": False,
        "last_verified_workspace_digest": None,
        "canary_success_count": 0,
        "canary_failure_count": 0,
    }


def _has_verification_evidence(state: dict) -> bool:
    return (
        state["verification_status"] == SkillVerificationStatus.VERIFIED
        and state["real_daemon_verified"]
        and state["successful_run_count"] > 0
        and bool(state["verifier_run_ids"])
    )


def _ensure_gate(current_status: str, state: dict, *, definition_changed: bool) -> None:
    target = state["status"]
    if current_status == S.ACTIVE and definition_changed:
        raise _conflict(MSG_ACTIVE_IMMUTABLE, "definition_immutable")
    if current_status == S.ACTIVE and target == S.ACTIVE:
        return
    if target in (S.VERIFIED, S.CANARY, S.ACTIVE) and not _has_verification_evidence(state):
        raise _conflict(MSG_NEEDS_VERIFICATION, "rollout_gate")
    if target == S.ACTIVE:
        if state["canary_failure_count"] > 0:
            raise _conflict(MSG_ZERO_CANARY_FAILURES, "rollout_gate")
        if state["canary_success_count"] == 0:
            raise _conflict(MSG_NEEDS_CANARY, "rollout_gate")


# ---- mounting inside a transaction, unmounting after commit ----------------------------------------------


def _mount(skill: LearningSkill) -> None:
    """Write the files of an active record and prove they load as the same definition. On failure the
    previous files come back and the error propagates (aborting the transaction)."""
    learning_id = skill.source_learning_public_id
    definition = skill.definition
    previous = mount.capture(learning_id)
    try:
        mount.write_skill(learning_id, definition)
        problem = mount.mount_problem(learning_id, definition)
        if problem:
            raise mount.MountError(
                f"promoted skill {skill.skill_name} loaded definition does not match the daemon record: {problem}"
            )
        loaded = mount.load_mounted(learning_id)
    except Exception as exc:
        try:
            mount.restore(learning_id, previous)
        except Exception:  # noqa: BLE001 - report the original error; repair will finish the job
            logger.exception("could not restore mounted files of %s after a failed mount", learning_id)
        if isinstance(exc, mount.MountError | catalog.CatalogFileError | OSError):
            raise Conflict(
                f"promoted skill {skill.skill_name} could not be mounted: {exc}",
                domain=DOMAIN,
                code="mount_failed",
            ) from exc
        raise
    LearningSkill.objects.filter(pk=skill.pk).update(
        skill_path=loaded.skill_path, skill_root=loaded.skill_root, digest=loaded.digest
    )
    skill.skill_path, skill.skill_root, skill.digest = loaded.skill_path, loaded.skill_root, loaded.digest


def unmount_if_orphaned(learning_pk: int) -> bool:
    """Remove the mount directory of a learning unless an active record still owns it. Never raises."""
    if LearningSkill.objects.filter(source_learning_id=learning_pk, status=S.ACTIVE).exists():
        return False
    try:
        return mount.remove(f"learning-{learning_pk}")
    except Exception:  # noqa: BLE001 - the files stay as orphans for repair
        logger.exception("could not remove mounted files of learning-%s; repair will remove them", learning_pk)
        return False


def _unmount_on_commit(learning_pk: int) -> None:
    transaction.on_commit(lambda: unmount_if_orphaned(learning_pk))


# ---- promotion (and status changes by promoting again) ---------------------------------------------------


@dataclass(frozen=True)
class PromotionRequest:
    """CreateLearningSkillRequest (spec §2.5)."""

    skill_name: str
    instructions: str
    description: str | None = None
    when_to_use: str | None = None
    version: str | None = None
    allowed_tools: tuple[str, ...] | list[str] = field(default_factory=tuple)
    blocked_tools: tuple[str, ...] | list[str] = field(default_factory=tuple)
    context: str = CONTEXT_FORK
    agent_profile: str | None = None
    provider: str | None = None
    model: str | None = None
    fallback_model: str | None = None
    status: str = SkillStatus.DRAFT


@dataclass(frozen=True)
class _Cleaned:
    name: str
    instructions: str
    description: str | None
    when_to_use: str | None
    version: str | None
    runtime: SkillRuntime
    status: str


def _check_secrets(
    name: str,
    instructions: str,
    description: str | None,
    when_to_use: str | None,
    version: str | None,
    runtime: SkillRuntime,
) -> None:
    if _has_secret(name):
        raise _invalid(
            "promoted skill name appears to contain secret material",
            "secret_material",
            field_name="skill_name",
        )
    if _has_secret(instructions):
        raise _invalid(
            "promoted skill instructions appear to contain secret material",
            "secret_material",
            field_name="instructions",
        )
    for field_name, value in (
        ("description", description),
        ("when_to_use", when_to_use),
        ("version", version),
    ):
        if value is not None and _has_secret(value):
            raise _invalid(
                f"promoted skill {field_name} appears to contain secret material",
                "secret_material",
                field_name=field_name,
            )
    for field_name, value in runtime.text_fields():
        if _has_secret(value):
            raise _invalid(
                f"promoted skill runtime {field_name} appears to contain secret material",
                "secret_material",
                field_name=field_name,
            )


def _clean_request(request: PromotionRequest) -> _Cleaned:
    name = validate_skill_name(request.skill_name)
    for field_name in ("instructions", "description", "when_to_use", "version"):
        value = getattr(request, field_name)
        if value is not None and not isinstance(value, str):
            raise _invalid(f"{field_name} must be a string", "invalid_skill_definition", field_name=field_name)
    if not isinstance(request.instructions, str) or not request.instructions.strip():
        raise _invalid("instructions are required", "invalid_skill_definition", field_name="instructions")
    description = optional_single_line(request.description)
    when_to_use = optional_single_line(request.when_to_use)
    version = optional_single_line(request.version)
    runtime_input = {
        "allowed_tools": list(request.allowed_tools or []),
        "blocked_tools": list(request.blocked_tools or []),
        "context": request.context or CONTEXT_FORK,
    }
    for name_ in ("agent_profile", "provider", "model", "fallback_model"):
        value = getattr(request, name_)
        if value is not None and not isinstance(value, str):
            raise _invalid(f"{name_} must be a string", "invalid_skill_runtime", field_name=name_)
        runtime_input[name_] = value.strip() if isinstance(value, str) and value.strip() else None
    if runtime_input["agent_profile"] is None:
        runtime_input["agent_profile"] = VERIFICATION_PROFILE
    # Secret checks first: a secret never reaches a later error message or the database.
    _check_secrets(
        name,
        request.instructions,
        description,
        when_to_use,
        version,
        SkillRuntime(
            allowed_tools=tuple(t for t in runtime_input["allowed_tools"] if isinstance(t, str)),
            blocked_tools=tuple(t for t in runtime_input["blocked_tools"] if isinstance(t, str)),
            context=str(runtime_input["context"]),
            **{k: runtime_input[k] for k in ("agent_profile", "provider", "model", "fallback_model")},
        ),
    )
    if runtime_input["context"] != CONTEXT_FORK:
        raise _invalid(MSG_FORK, "invalid_skill_runtime", field_name="context")
    if runtime_input["agent_profile"] != VERIFICATION_PROFILE:
        raise _invalid(MSG_PROFILE, "invalid_skill_runtime", field_name="agent_profile")
    runtime = SkillRuntime.from_dict(runtime_input)
    if description is not None:
        validate_single_line("description", description)
    if when_to_use is not None:
        validate_single_line("when_to_use", when_to_use, max_chars=ONE_LINE_MAX_CHARS)
    if version is not None:
        validate_single_line("version", version, max_chars=VERSION_MAX_CHARS)
    instructions = validate_instructions(request.instructions)
    status = request.status or SkillStatus.DRAFT
    if status not in SkillStatus.values or status == S.REVOKED:
        raise _invalid(
            "status must be one of draft, verified, canary, active",
            "invalid_skill_status",
            field_name="status",
        )
    return _Cleaned(
        name=name,
        instructions=instructions,
        description=description,
        when_to_use=when_to_use,
        version=version,
        runtime=runtime,
        status=status,
    )


@transaction.atomic
def skill_promote(*, learning: Learning | int | str, request: PromotionRequest, actor: object) -> LearningSkill:
    """``POST /v1/learnings/{id}/promote-skill``: a new draft skill, or — same learning and name again — the
    merge that changes its definition and/or status along the transition table of §4.18."""
    cleaned = _clean_request(request)
    locked_learning = _lock_learning(learning)
    _ensure_promotable(locked_learning)
    live_for_learning = (
        LearningSkill.objects.select_for_update()
        .filter(source_learning=locked_learning)
        .exclude(status=S.REVOKED)
        .first()
    )
    if live_for_learning is not None:
        if live_for_learning.skill_name == cleaned.name:
            return _merge(live_for_learning, cleaned, actor=actor)
        raise _conflict(
            MSG_ALREADY_PROMOTED.format(id=locked_learning.public_id, name=live_for_learning.skill_name),
            "learning_already_promoted",
            field_name="skill_name",
        )
    existing = LearningSkill.objects.select_for_update().filter(skill_name=cleaned.name).first()
    if existing is not None and existing.status != S.REVOKED:
        raise _conflict(MSG_EXISTS.format(name=cleaned.name), "skill_exists", field_name="skill_name")
    if cleaned.status != S.DRAFT:
        raise _invalid(MSG_NEW_DRAFT, "invalid_skill_status", field_name="status")
    if catalog.load_catalog().get(cleaned.name) is not None:
        raise _conflict(MSG_CATALOG_CLASH.format(name=cleaned.name), "catalog_name_clash", field_name="skill_name")
    return _create(locked_learning, cleaned, existing=existing, actor=actor)


def _create(learning: Learning, cleaned: _Cleaned, *, existing: LearningSkill | None, actor: object) -> LearningSkill:
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
    expected_root = mount.procedural_root() / learning_id
    fields = {
        "source_learning": learning,
        "source_scope": {"kind": learning.scope_kind, "id": learning.scope_id},
        "status": S.DRAFT,
        "description": definition.description,
        "when_to_use": definition.when_to_use,
        "version": definition.version,
        "instructions": definition.instructions,
        "runtime": definition.runtime.to_dict(),
        "definition_fingerprint": definition.fingerprint(),
        "skill_path": str(expected_root / catalog.SKILL_FILE),
        "skill_root": str(expected_root),
        "digest": "",
        "evidence_refs": list(learning.evidence_refs or []),
        **_reset_evidence(),
        "promoted_at_ms": at,
        "updated_at_ms": at,
        "revoked_at_ms": None,
        "revoked_reason": None,
    }
    from_status = None
    try:
        with transaction.atomic():
            if existing is None:
                skill = LearningSkill.objects.create(skill_name=cleaned.name, **fields)
            else:
                # The name of a revoked record is free again: the same row becomes a fresh draft.
                _snapshot(existing, at)
                from_status = existing.status
                _update(
                    existing,
                    expected_status=existing.status,
                    expected_fingerprint=existing.definition_fingerprint,
                    **fields,
                )
                skill = existing
    except IntegrityError as exc:
        raise _conflict(MSG_EXISTS.format(name=cleaned.name), "skill_exists", field_name="skill_name") from exc
    _event(
        skill,
        event=LifecycleEventKind.PROMOTE,
        at_ms=at,
        from_status=from_status,
        to_status=S.DRAFT,
        actor=actor,
    )
    record_audit(
        subject_type=SUBJECT,
        subject_id=skill.skill_name,
        action="promote",
        actor=actor,
        from_state=from_status or "",
        to_state=S.DRAFT,
        data={"source_learning_id": learning_id, "definition_fingerprint": skill.definition_fingerprint},
    )
    # A draft is never mounted; clear anything a past skill of this learning may have left behind.
    _unmount_on_commit(learning.pk)
    return skill


def _merge(existing: LearningSkill, cleaned: _Cleaned, *, actor: object) -> LearningSkill:
    current_fp = _verify_fingerprint(existing)
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
        state.update(_reset_evidence())
    if target not in ALLOWED_TRANSITIONS[existing.status]:
        raise _conflict(
            MSG_TRANSITION.format(from_=_status_label(existing.status), to=_status_label(target)),
            "invalid_transition",
            field_name="status",
        )
    _ensure_gate(existing.status, state, definition_changed=definition_changed)
    if not (status_changed or definition_changed or restarting):
        return existing  # nothing to change: no snapshot, no event
    at = now_ms()
    was_active = existing.status == S.ACTIVE
    from_status = existing.status
    _snapshot(existing, at)
    _update(
        existing,
        expected_status=from_status,
        expected_fingerprint=existing.definition_fingerprint,
        description=definition.description,
        when_to_use=definition.when_to_use,
        version=definition.version,
        instructions=definition.instructions,
        runtime=definition.runtime.to_dict(),
        definition_fingerprint=new_fp,
        revoked_at_ms=None,
        revoked_reason=None,
        updated_at_ms=at,
        **state,
    )
    reason = "definition changed" if definition_changed else ("rollout restarted" if restarting else None)
    _event(
        existing,
        event=LifecycleEventKind.PROMOTE,
        at_ms=at,
        from_status=from_status,
        to_status=target,
        reason=reason,
        actor=actor,
    )
    record_audit(
        subject_type=SUBJECT,
        subject_id=existing.skill_name,
        action="promote",
        actor=actor,
        from_state=from_status,
        to_state=target,
        reason=reason or "",
        data={"definition_fingerprint": new_fp, "definition_changed": definition_changed},
    )
    if target == S.ACTIVE and not was_active:
        _mount(existing)
    return existing


# ---- rollout evidence ------------------------------------------------------------------------------------


def latest_output(run: Run) -> str | None:
    """The content of the run's latest non-empty output."""
    for output in reversed(run.outputs or []):
        content = output.get("content") if isinstance(output, dict) else None
        if isinstance(content, str) and content.strip():
            return content
    return None


@transaction.atomic
def skill_record_rollout(
    *,
    skill_name: str,
    kind: str,
    run_id: str,
    expected_output_contains: str | None,
    definition_fingerprint: str | None = None,
    actor: object,
) -> LearningSkill:
    """``POST /v1/learning-skills/{name}/rollout-result``: evidence from a run of this service."""
    if kind not in RolloutKind.values:
        raise _invalid("kind must be `verification` or `canary`", "invalid_rollout", field_name="kind")
    marker = expected_output_contains.strip() if isinstance(expected_output_contains, str) else ""
    if not marker:
        raise _invalid(MSG_MARKER_REQUIRED, "invalid_rollout", field_name="expected_output_contains")
    if len(marker) > MAX_MARKER_CHARS:
        raise _invalid(
            f"expected_output_contains must be at most {MAX_MARKER_CHARS} characters",
            "invalid_rollout",
            field_name="expected_output_contains",
        )
    skill = _lock_skill(skill_name)
    run = get_run(run_id)
    current_fp = _verify_fingerprint(skill)
    if skill.status == S.REVOKED:
        raise _conflict(MSG_REVOKED_EVIDENCE, "rollout_rejected")
    if kind == RolloutKind.CANARY and skill.status != S.CANARY:
        raise _conflict(MSG_CANARY_STATUS, "rollout_rejected")
    guard = definition_fingerprint.strip() if isinstance(definition_fingerprint, str) else ""
    if guard and guard != current_fp:
        raise _conflict(MSG_FINGERPRINT_GUARD, "fingerprint_mismatch", field_name="definition_fingerprint")
    if run.public_id in skill.verifier_run_ids:
        return skill  # the same run recorded twice: a no-op
    output = latest_output(run) if run.status == RunStatus.COMPLETED else None
    success = output is not None and marker in output
    session_id = run.session.public_id
    at = now_ms()
    state = {"verifier_run_ids": [*skill.verifier_run_ids, run.public_id]}
    sessions = list(skill.evidence_session_ids)
    if success and session_id not in sessions:
        sessions.append(session_id)
    if kind == RolloutKind.VERIFICATION:
        if not success:
            raise _conflict(MSG_VERIFICATION_FAILED, "rollout_rejected", field_name="run_id")
        note = "verification rollout succeeded"
        state.update(
            verification_status=SkillVerificationStatus.VERIFIED,
            real_daemon_verified=True,
            successful_run_count=skill.successful_run_count + 1,
        )
    else:
        if not _has_verification_evidence(record_json(skill)):
            raise _conflict(MSG_NEEDS_VERIFICATION, "rollout_gate")
        if run.status not in TERMINAL_STATUSES:
            raise _conflict(
                f"canary rollout evidence requires a finished run; {run.public_id} is {run.status}",
                "rollout_rejected",
                field_name="run_id",
            )
        if success:
            note = "canary rollout succeeded"
            state.update(
                canary_success_count=skill.canary_success_count + 1,
                successful_run_count=skill.successful_run_count + 1,
            )
        else:
            note = "canary rollout failed"
            state.update(canary_failure_count=skill.canary_failure_count + 1)
    state["evidence_session_ids"] = sessions
    state["distinct_session_count"] = len(sessions)
    evidence = {
        "run_id": run.public_id,
        "note": f"{note}; session={session_id}; definition_fingerprint={current_fp}; recorded_at_ms={at}",
    }
    state["evidence_refs"] = [*skill.evidence_refs, evidence]
    _snapshot(skill, at)
    _update(
        skill,
        expected_status=skill.status,
        expected_fingerprint=skill.definition_fingerprint,
        updated_at_ms=at,
        **state,
    )
    _event(
        skill,
        event=LifecycleEventKind.ROLLOUT_RESULT,
        at_ms=at,
        to_status=skill.status,
        actor=actor,
        rollout_kind=kind,
        run_id=run.public_id,
        session_id=session_id,
        success=success,
        definition_fingerprint=current_fp,
    )
    record_audit(
        subject_type=SUBJECT,
        subject_id=skill.skill_name,
        action="rollout_result",
        actor=actor,
        from_state=skill.status,
        to_state=skill.status,
        data={
            "kind": kind,
            "run_id": run.public_id,
            "session_id": session_id,
            "success": success,
            "definition_fingerprint": current_fp,
        },
    )
    return skill


# ---- revoke, rollback, the cascade from the learning plane -----------------------------------------------


def _revoke(skill: LearningSkill, *, reason: str | None, actor: object) -> LearningSkill:
    if skill.status == S.REVOKED:
        return skill
    at = now_ms()
    from_status = skill.status
    _snapshot(skill, at)
    _update(
        skill,
        expected_status=from_status,
        expected_fingerprint=skill.definition_fingerprint,
        status=S.REVOKED,
        revoked_at_ms=at,
        revoked_reason=reason,
        updated_at_ms=at,
    )
    _event(
        skill,
        event=LifecycleEventKind.REVOKE,
        at_ms=at,
        from_status=from_status,
        to_status=S.REVOKED,
        reason=reason,
        actor=actor,
    )
    record_audit(
        subject_type=SUBJECT,
        subject_id=skill.skill_name,
        action="revoke",
        actor=actor,
        from_state=from_status,
        to_state=S.REVOKED,
        reason=reason or "",
    )
    if from_status == S.ACTIVE:
        _unmount_on_commit(skill.source_learning_id)
    return skill


@transaction.atomic
def skill_revoke(*, skill_name: str, actor: object, reason: str | None = None) -> LearningSkill:
    """Idempotent: revoking a revoked skill returns it unchanged. An active skill's files go after commit."""
    reason = _clean_reason(reason, "revocation")
    return _revoke(_lock_skill(skill_name), reason=reason, actor=actor)


@transaction.atomic
def skill_rollback(*, skill_name: str, actor: object, reason: str | None = None) -> LearningSkill:
    """Restore the newest active history snapshot and remount it, if the source learning is still an active,
    active-tier procedure."""
    reason = _clean_reason(reason, "rollback")
    # Lock order everywhere: the learning first, then the skill (as the learning plane's revoke does).
    validate_skill_name(skill_name)
    source_pk = LearningSkill.objects.filter(skill_name=skill_name).values_list("source_learning_id", flat=True).first()
    if source_pk is None:
        raise skill_not_found(skill_name)
    learning = _lock_learning(source_pk)
    skill = _lock_skill(skill_name)
    if skill.source_learning_id != learning.pk:
        raise _conflict(f"promoted skill {skill_name} changed concurrently; retry", "skill_changed")
    if not (
        learning.kind == LearningKind.PROCEDURE
        and learning.status == LearningStatus.ACTIVE
        and learning.publish_tier == PublishTier.ACTIVE
    ):
        raise _conflict(MSG_ROLLBACK_SOURCE.format(name=skill.skill_name, id=learning.public_id), "rollback_refused")
    snapshot = (
        LearningSkillSnapshot.objects.filter(skill=skill, status=S.ACTIVE).order_by("-recorded_at_ms", "-id").first()
    )
    if snapshot is None:
        raise _conflict(MSG_NO_SNAPSHOT.format(name=skill.skill_name), "no_rollback_snapshot")
    record = snapshot.record
    restored_learning = learning
    if record.get("source_learning_id") != learning.public_id:
        restored_learning = _lock_learning(str(record.get("source_learning_id")))
        if not (
            restored_learning.kind == LearningKind.PROCEDURE
            and restored_learning.status == LearningStatus.ACTIVE
            and restored_learning.publish_tier == PublishTier.ACTIVE
        ):
            raise _conflict(
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
        raise _conflict(
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
    at = now_ms()
    from_status = skill.status
    evidence_refs = list(record.get("evidence_refs") or [])
    if reason:
        evidence_refs.append({"note": f"rollback restored active snapshot: {reason}"})
    _snapshot(skill, at)
    _update(
        skill,
        expected_status=from_status,
        expected_fingerprint=skill.definition_fingerprint,
        source_learning=restored_learning,
        source_scope=record.get("source_scope") or skill.source_scope,
        status=S.ACTIVE,
        description=definition.description,
        when_to_use=definition.when_to_use,
        version=definition.version,
        instructions=definition.instructions,
        runtime=runtime.to_dict(),
        definition_fingerprint=definition.fingerprint(),
        evidence_refs=evidence_refs,
        verification_status=record["verification_status"],
        successful_run_count=record["successful_run_count"],
        distinct_session_count=record["distinct_session_count"],
        evidence_session_ids=record.get("evidence_session_ids") or [],
        verifier_run_ids=record.get("verifier_run_ids") or [],
        real_daemon_verified=record["real_daemon_verified"],
        last_verified_workspace_digest=record.get("last_verified_workspace_digest"),
        canary_success_count=record["canary_success_count"],
        canary_failure_count=record["canary_failure_count"],
        revoked_at_ms=None,
        revoked_reason=None,
        updated_at_ms=at,
    )
    skill.source_learning_id = restored_learning.pk
    _event(
        skill,
        event=LifecycleEventKind.ROLLBACK,
        at_ms=at,
        from_status=from_status,
        to_status=S.ACTIVE,
        reason=reason,
        actor=actor,
    )
    record_audit(
        subject_type=SUBJECT,
        subject_id=skill.skill_name,
        action="rollback",
        actor=actor,
        from_state=from_status,
        to_state=S.ACTIVE,
        reason=reason or "",
        data={"snapshot": str(snapshot), "definition_fingerprint": skill.definition_fingerprint},
    )
    _mount(skill)
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


# ---- repair helpers ----------------------------------------------------------------------------------------


def refresh_mount_metadata(skill: LearningSkill, *, skill_path: str, skill_root: str, digest: str) -> None:
    """Repair: record where an active skill is mounted and its loaded digest (no status change)."""
    LearningSkill.objects.filter(pk=skill.pk, status=S.ACTIVE).update(
        skill_path=skill_path, skill_root=skill_root, digest=digest
    )
    skill.skill_path, skill.skill_root, skill.digest = skill_path, skill_root, digest


def active_skills_by_learning_dir() -> dict[str, LearningSkill]:
    return {
        skill.source_learning_public_id: skill
        for skill in LearningSkill.objects.filter(status=S.ACTIVE).order_by("skill_name")
    }


def live_skill_for_learning(learning: Learning) -> LearningSkill | None:
    return LearningSkill.objects.filter(Q(source_learning=learning) & ~Q(status=S.REVOKED)).first()
