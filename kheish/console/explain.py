"""Why something is, or is not, in a prompt, in words an operator reads: the publish form's tier labels and the
session Memory card's reasons.

The rules are not re-derived here. ``Learning.is_prompt_eligible`` (kind, ``is_prompt_visible``, expiry) decides;
this module only names which of its gates a record fails, and says nothing when the predicate passes (a test
checks the two agree on every combination). Past those gates, the prompt set is
``Learning.objects.for_prompt`` (scopes, live, unshadowed), and the ranker chooses within it for the input."""

from __future__ import annotations

from django.template.defaultfilters import pluralize

from kheish.console.common import Stamp
from learnings.learning_policy import status_for_tier
from learnings.models import (
    PROMPT_ELIGIBLE_KINDS,
    CandidateState,
    Learning,
    LearningCandidate,
    LearningKind,
    LearningStatus,
    PolicyDecision,
    PublishTier,
    Sensitivity,
    VerificationStatus,
)

ELIGIBLE_KIND_NAMES = "facts, preferences and decisions"


def kind_reason(kind: str) -> str:
    if kind == LearningKind.RUN_SUMMARY:
        return "run summaries never reach a prompt (only " + ELIGIBLE_KIND_NAMES + " do)"
    if kind == LearningKind.PROCEDURE:
        return ("procedures never reach a prompt (only " + ELIGIBLE_KIND_NAMES + " do); "
                "promote one to a skill instead")
    return f"{kind} is not a prompt kind (only {ELIGIBLE_KIND_NAMES} are)"


def learning_exclusion(learning: Learning) -> list[str]:
    """Why ``learning.is_prompt_eligible`` is False, one phrase per failed gate; ``[]`` when it is True."""
    if learning.is_prompt_eligible:
        return []
    reasons = []
    if learning.kind not in PROMPT_ELIGIBLE_KINDS:
        reasons.append(kind_reason(learning.kind))
    if not learning.is_prompt_visible:
        reasons += _visibility_reasons(learning)
    if learning.is_expired():
        reasons.append(f"expired {Stamp(learning.expires_at_ms).full}")
    return reasons or ["not prompt-visible"]


def _visibility_reasons(learning: Learning) -> list[str]:
    """The gates of ``Learning.is_prompt_visible`` that ``learning`` fails."""
    reasons = []
    if learning.status == LearningStatus.SUPERSEDED:
        replacement = f" by learning-{learning.superseded_by_id}" if learning.superseded_by_id else ""
        reasons.append(f"superseded{replacement}")
    elif learning.status == LearningStatus.REVOKED:
        reasons.append("revoked" + (f": {learning.revoked_reason}" if learning.revoked_reason else ""))
    elif learning.status != LearningStatus.ACTIVE or learning.publish_tier != PublishTier.ACTIVE:
        reasons.append("provisional tier: kept, never injected")
    if learning.sensitivity == Sensitivity.SENSITIVE:
        reasons.append("sensitive: never injected")
    if learning.verification_status == VerificationStatus.FAILED:
        reasons.append("verification failed")
    if learning.policy_decision == PolicyDecision.ESCALATED:
        reasons.append("escalated: waits for an operator")
    elif (learning.policy_decision == PolicyDecision.AUTOMATIC
          and learning.verification_status != VerificationStatus.VERIFIED):
        reasons.append(f"published automatically and not verified (verification {learning.verification_status})")
    return reasons


def candidate_exclusion(candidate: LearningCandidate) -> list[str]:
    """Why an unpublished candidate is not in a prompt: candidates never are, only published learnings."""
    if candidate.state == CandidateState.REJECTED:
        reasons = ["rejected: never published"]
    else:
        reasons = [f"candidate {candidate.state}, not published: only published learnings reach a prompt"]
    if candidate.kind not in PROMPT_ELIGIBLE_KINDS:
        reasons.append(kind_reason(candidate.kind))
    return reasons


def publish_outcome(candidate: LearningCandidate, tier: str) -> tuple[bool, list[str]]:
    """What publishing ``candidate`` by hand at ``tier`` would give: whether the learning is prompt-eligible
    (``Learning.is_prompt_eligible`` of the learning ``candidate_publish`` builds) and, if not, why."""
    learning = Learning(kind=candidate.kind, sensitivity=candidate.sensitivity, status=status_for_tier(tier),
                        publish_tier=tier, policy_decision=PolicyDecision.MANUAL,
                        verification_status=VerificationStatus.UNVERIFIED, expires_at_ms=candidate.expires_at_ms)
    return learning.is_prompt_eligible, learning_exclusion(learning)


def publish_tier_choices(candidate: LearningCandidate | None) -> list[tuple[str, str]]:
    """The publish form's tier labels, true for ``candidate`` (generic when there is none: bulk publish)."""
    if candidate is None:
        return [(PublishTier.ACTIVE, "active: eligible for prompts if a fact, preference or decision, not sensitive"),
                (PublishTier.PROVISIONAL, "provisional: kept, never injected")]
    choices = []
    for tier in (PublishTier.ACTIVE, PublishTier.PROVISIONAL):
        eligible, reasons = publish_outcome(candidate, tier)
        label = ("eligible for prompts (when the input matches)" if eligible
                 else "never injected: " + "; ".join(reasons))
        if tier == PublishTier.PROVISIONAL and not eligible and reasons == ["provisional tier: kept, never injected"]:
            label = "kept, never injected"
        choices.append((tier, f"{tier}: {label}"))
    return choices


def count(n: int, singular: str, plural: str | None = None) -> str:
    """``1 learning``, ``2 learnings`` (``plural`` for irregular words)."""
    return f"{n} {singular if n == 1 else (plural or singular + pluralize(n))}"
