"""Why something is, or is not, in a prompt, in words an operator reads: the publish form's tier labels and the
session Memory card's reasons.

The rules are not re-derived here: ``learnings.gate`` defines each prompt gate once, with the reason an operator
reads when a record fails it; ``Learning.is_prompt_eligible`` is that gate's predicate, and this module only
lists the reasons of the gates a record fails (empty exactly when the predicate passes; a test checks it on
every combination). Past those gates, the prompt set is ``Learning.objects.for_prompt`` (scopes, live,
unshadowed: ``SHADOWED_REASON``), and the ranker chooses within it for the input."""

from __future__ import annotations

from django.template.defaultfilters import pluralize

from kheish.console.common import Stamp
from learnings import gate
from learnings.learning_policy import status_for_tier
from learnings.models import (
    CandidateState,
    Learning,
    LearningCandidate,
    PolicyDecision,
    PublishTier,
    VerificationStatus,
)
from learnings.vocabulary import PROMPT_KINDS, kind_label, kind_plural, listing
from memory.clock import now_ms

ELIGIBLE_KIND_NAMES = listing([kind_plural(kind) for kind in PROMPT_KINDS], sep=", ", last=" and ")
SHADOWED_REASON = "shadowed: a live learning supersedes it"


def kind_reason(kind: str) -> str:
    return gate.kind_reason(kind)


def _when(ms: int) -> str:
    return Stamp(ms).full


def learning_exclusion(learning: Learning) -> list[str]:
    """Why ``learning.is_prompt_eligible`` is False, one phrase per failed gate of ``gate.PROMPT_ELIGIBLE``;
    ``[]`` when it is True."""
    return gate.reasons(gate.PROMPT_ELIGIBLE, learning, now_ms(), _when)


def candidate_exclusion(candidate: LearningCandidate) -> list[str]:
    """Why an unpublished candidate is not in a prompt: candidates never are, only published learnings."""
    if candidate.state == CandidateState.REJECTED:
        reasons = ["rejected: never published"]
    else:
        reasons = [f"candidate {candidate.state}, not published: only published learnings reach a prompt"]
    if not gate.PROMPT_KIND.holds(candidate, 0):
        reasons.append(kind_reason(candidate.kind))
    return reasons


def publish_outcome(candidate: LearningCandidate, tier: str) -> tuple[bool, list[str]]:
    """What publishing ``candidate`` by hand at ``tier`` would give: whether the learning is prompt-eligible
    (``Learning.is_prompt_eligible`` of the learning ``candidate_publish`` builds) and, if not, why."""
    learning = Learning(
        kind=candidate.kind,
        sensitivity=candidate.sensitivity,
        status=status_for_tier(tier),
        publish_tier=tier,
        policy_decision=PolicyDecision.MANUAL,
        verification_status=VerificationStatus.UNVERIFIED,
        expires_at_ms=candidate.expires_at_ms,
    )
    return learning.is_prompt_eligible, learning_exclusion(learning)


def publish_tier_choices(candidate: LearningCandidate | None) -> list[tuple[str, str]]:
    """The publish form's tier labels, true for ``candidate`` (generic when there is none: bulk publish)."""
    if candidate is None:
        kinds = listing([kind_label(kind) for kind in PROMPT_KINDS], sep=", ", last=" or ")
        return [
            (PublishTier.ACTIVE, f"active: eligible for prompts if a {kinds}, not sensitive"),
            (PublishTier.PROVISIONAL, "provisional: kept, never injected"),
        ]
    choices: list[tuple[str, str]] = []
    for tier in (PublishTier.ACTIVE, PublishTier.PROVISIONAL):
        eligible, reasons = publish_outcome(candidate, tier)
        label = "eligible for prompts (when the input matches)" if eligible else "never injected: " + "; ".join(reasons)
        if tier == PublishTier.PROVISIONAL and not eligible and reasons == [gate.TIER_REASON]:
            label = "kept, never injected"
        choices.append((tier, f"{tier}: {label}"))
    return choices


def count(n: int, singular: str, plural: str | None = None) -> str:
    """``1 learning``, ``2 learnings`` (``plural`` for irregular words)."""
    return f"{n} {singular if n == 1 else (plural or singular + pluralize(n))}"
