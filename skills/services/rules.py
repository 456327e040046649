"""The rules of the promoted-skill lifecycle (spec §4.18): the transition table, which learnings may be
promoted, the rollout gate, and whether a learning can be the source of a rollback. Pure checks that raise
the catalogue's errors; no writes."""

from __future__ import annotations

from typing import Any

from learnings.models import Learning, LearningKind, LearningStatus, PublishTier, ScopeKind
from skills.models import SkillStatus, SkillVerificationStatus
from skills.services.messages import (
    MSG_ACTIVE_IMMUTABLE,
    MSG_NEEDS_CANARY,
    MSG_NEEDS_VERIFICATION,
    MSG_NOT_ACTIVE,
    MSG_NOT_ACTIVE_TIER,
    MSG_NOT_PROCEDURE,
    MSG_NOT_WORKSPACE,
    MSG_ZERO_CANARY_FAILURES,
    conflict,
)

S = SkillStatus
ALLOWED_TRANSITIONS: dict[str, frozenset[str]] = {
    S.DRAFT: frozenset({S.DRAFT, S.VERIFIED}),
    S.VERIFIED: frozenset({S.DRAFT, S.VERIFIED, S.CANARY, S.ACTIVE}),
    S.CANARY: frozenset({S.DRAFT, S.CANARY, S.ACTIVE}),
    S.ACTIVE: frozenset({S.ACTIVE}),
    S.REVOKED: frozenset(),
}


def is_promotable(learning: Learning) -> bool:
    """Active, active-tier, workspace-scoped procedure (what the admin offers "promote to skill" for)."""
    return (
        learning.kind == LearningKind.PROCEDURE
        and learning.status == LearningStatus.ACTIVE
        and learning.publish_tier == PublishTier.ACTIVE
        and learning.scope_kind == ScopeKind.WORKSPACE
    )


def ensure_promotable(learning: Learning) -> None:
    lid = learning.public_id
    if learning.kind != LearningKind.PROCEDURE:
        raise conflict(MSG_NOT_PROCEDURE.format(id=lid), "learning_not_promotable")
    if learning.status != LearningStatus.ACTIVE:
        raise conflict(MSG_NOT_ACTIVE.format(id=lid), "learning_not_promotable")
    if learning.publish_tier != PublishTier.ACTIVE:
        raise conflict(MSG_NOT_ACTIVE_TIER.format(id=lid), "learning_not_promotable")
    if learning.scope_kind != ScopeKind.WORKSPACE:
        raise conflict(MSG_NOT_WORKSPACE.format(id=lid), "learning_not_promotable")


def can_source_rollback(learning: Learning) -> bool:
    """A rollback restores a skill only onto an active, active-tier procedure learning (any scope)."""
    return (
        learning.kind == LearningKind.PROCEDURE
        and learning.status == LearningStatus.ACTIVE
        and learning.publish_tier == PublishTier.ACTIVE
    )


def reset_evidence() -> dict[str, Any]:
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


def has_verification_evidence(state: dict[str, Any]) -> bool:
    return (
        state["verification_status"] == SkillVerificationStatus.VERIFIED
        and state["real_daemon_verified"]
        and state["successful_run_count"] > 0
        and bool(state["verifier_run_ids"])
    )


def ensure_gate(current_status: str, state: dict[str, Any], *, definition_changed: bool) -> None:
    target = state["status"]
    if current_status == S.ACTIVE and definition_changed:
        raise conflict(MSG_ACTIVE_IMMUTABLE, "definition_immutable")
    if current_status == S.ACTIVE and target == S.ACTIVE:
        return
    if target in (S.VERIFIED, S.CANARY, S.ACTIVE) and not has_verification_evidence(state):
        raise conflict(MSG_NEEDS_VERIFICATION, "rollout_gate")
    if target == S.ACTIVE:
        if state["canary_failure_count"] > 0:
            raise conflict(MSG_ZERO_CANARY_FAILURES, "rollout_gate")
        if state["canary_success_count"] == 0:
            raise conflict(MSG_NEEDS_CANARY, "rollout_gate")
