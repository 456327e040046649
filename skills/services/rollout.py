"""Rollout evidence (spec §4.18): ``skill_record_rollout`` records a verification or canary run of this
service against a promoted skill's current definition."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from memory.clock import now_ms
from memory.models import TERMINAL_STATUSES, Run, RunStatus
from memory.runs import get_run
from skills.models import LearningSkill, LifecycleEventKind, RolloutKind, SkillStatus, SkillVerificationStatus
from skills.services.cleaning import clean_rollout_input
from skills.services.messages import (
    MSG_CANARY_STATUS,
    MSG_FINGERPRINT_GUARD,
    MSG_NEEDS_VERIFICATION,
    MSG_REVOKED_EVIDENCE,
    MSG_VERIFICATION_FAILED,
    conflict,
)
from skills.services.rules import has_verification_evidence
from skills.services.transitions import apply_transition, lock_skill, record_json, verify_fingerprint


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
    marker = clean_rollout_input(kind=kind, expected_output_contains=expected_output_contains)
    skill = lock_skill(skill_name)
    run = get_run(run_id)
    current_fp = verify_fingerprint(skill)
    if skill.status == SkillStatus.REVOKED:
        raise conflict(MSG_REVOKED_EVIDENCE, "rollout_rejected")
    if kind == RolloutKind.CANARY and skill.status != SkillStatus.CANARY:
        raise conflict(MSG_CANARY_STATUS, "rollout_rejected")
    guard = definition_fingerprint.strip() if isinstance(definition_fingerprint, str) else ""
    if guard and guard != current_fp:
        raise conflict(MSG_FINGERPRINT_GUARD, "fingerprint_mismatch", field_name="definition_fingerprint")
    if run.public_id in skill.verifier_run_ids:
        return skill  # the same run recorded twice: a no-op
    output = latest_output(run) if run.status == RunStatus.COMPLETED else None
    success = output is not None and marker in output
    session_id = run.session.public_id
    at = now_ms()
    state: dict[str, Any] = {"verifier_run_ids": [*skill.verifier_run_ids, run.public_id]}
    sessions = list(skill.evidence_session_ids)
    if success and session_id not in sessions:
        sessions.append(session_id)
    if kind == RolloutKind.VERIFICATION:
        if not success:
            raise conflict(MSG_VERIFICATION_FAILED, "rollout_rejected", field_name="run_id")
        note = "verification rollout succeeded"
        state.update(
            verification_status=SkillVerificationStatus.VERIFIED,
            real_daemon_verified=True,
            successful_run_count=skill.successful_run_count + 1,
        )
    else:
        if not has_verification_evidence(record_json(skill)):
            raise conflict(MSG_NEEDS_VERIFICATION, "rollout_gate")
        if run.status not in TERMINAL_STATUSES:
            raise conflict(
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
    details = {"run_id": run.public_id, "session_id": session_id, "success": success}
    apply_transition(
        skill,
        event=LifecycleEventKind.ROLLOUT_RESULT,
        action="rollout_result",
        at_ms=at,
        actor=actor,
        changes=state,
        event_fields={"rollout_kind": kind, **details, "definition_fingerprint": current_fp},
        audit_data={"kind": kind, **details, "definition_fingerprint": current_fp},
    )
    return skill
