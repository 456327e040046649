"""Automation review of one candidate (spec §3.3, §4.10–§4.12, §4.20).

rules (secret guard, first matching rule, api-origin gate) → optional model judge (clamped; fails closed in
``enabled`` mode; shown the poisoning screen's findings) → the screen gate (a flagged candidate is never
published: ``publish_*`` → ``manual_review``) → for ``publish_active``: conflict escalation, then verification
against daemon-owned evidence (downgrade to ``publish_provisional`` when unsupported) → act according to the mode:

* ``manual_only``: nothing;
* ``shadow``: the review is stored, the candidate stays ``pending``;
* ``enabled``: ``manual_review`` → ``escalated``, ``reject`` → ``rejected``, ``publish_*`` → published with
  ``policy_decision=automatic`` / ``policy_actor=daemon`` (``verified`` when the active tier survived).

The judge's model call happens outside any transaction; the decision is applied under a row lock after
checking that the candidate is still reviewable.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import cast

from django.db import transaction

from learnings import judge, policy_in_force, semantic, services
from learnings.learning_policy import (
    LearningPolicy,
    ModelOverride,
    evaluate_candidate,
    publish_tier_for_action,
    screen_gate,
)
from learnings.models import (
    CandidateOrigin,
    CandidateState,
    LearningCandidate,
    PolicyDecision,
    VerificationStatus,
)
from learnings.selectors import candidate_view, find_conflict
from learnings.vocabulary import SEMANTIC_KINDS
from memory import llm, public_ids
from memory.clock import now_ms
from memory.models import RunMemoryRecord

logger = logging.getLogger(__name__)

REASON_CONFLICT = "; escalated because candidate conflicts with active learning {}"
REASON_UNSUPPORTED = (
    "; retained as provisional because no evidence the service recorded for the source run matched the "
    "candidate content"
)


@dataclass(frozen=True)
class ReviewOutcome:
    candidate_id: str
    mode: str
    action: str
    state: str
    learning_id: str | None
    review: dict


def _override_model(override: ModelOverride | None) -> str | None:
    if override is None or override.generation is None:
        return None
    return override.generation.model


def _judge(
    policy: LearningPolicy,
    candidate: LearningCandidate,
    action: str,
    reason: str,
    matched_rule_name: str | None,
    screening: dict | None = None,
) -> tuple[str, str, dict | None]:
    """Run the judge when enabled, a model is configured and the baseline is not ``manual_review``. The
    judge is told what the poisoning screen found (``screening``)."""
    if not policy.judge.enabled or action == "manual_review":
        return action, reason, None
    try:
        config = llm.model_config(
            model=_override_model(policy.judge.model), timeout_ms=policy.judge.effective_timeout_ms
        )
    except llm.ModelError as exc:
        return judge.judge_failure(policy.mode, action, reason, exc, judged_at_ms=now_ms())
    if config is None:
        return action, reason, None
    baseline = {
        "mode": policy.mode,
        "action": action,
        "matched_rule_name": matched_rule_name,
        "reason": reason,
    }
    try:
        payload = llm.chat_json(
            config,
            judge.build_judge_messages(candidate_view(candidate), baseline, screening=screening),
            schema=judge.judge_json_schema(),
            schema_name="learning_judge_verdict",
        )
        verdict = judge.parse_verdict(payload)
    except (llm.ModelError, judge.JudgeError) as exc:
        logger.warning("learning judge failed for %s: %s", candidate.public_id, exc)
        return judge.judge_failure(policy.mode, action, reason, exc, judged_at_ms=now_ms())
    new_action, new_reason = judge.apply_judge_verdict(action, reason, verdict)
    return new_action, new_reason, judge.judge_review(action, verdict, judged_at_ms=now_ms())


def candidate_supported(candidate: LearningCandidate) -> bool:
    """§4.12 support: a daemon-origin fact/preference/decision whose evidence names its source run, and whose
    source run's run-memory record attests the content (verbatim, or every evidence term for ≥2 terms), or
    the run's own input (what capture read, past the record's preview) holds it verbatim.

    Only the run-memory record is daemon-owned evidence here (this service keeps no debug artifacts), so
    API-origin candidates are never verified."""
    needle = (candidate.content or "").strip()
    run_id = (candidate.source or {}).get("run_id")
    if not needle or not isinstance(run_id, str) or not run_id.strip():
        return False
    if candidate.origin != CandidateOrigin.DAEMON or candidate.kind not in SEMANTIC_KINDS:
        return False
    if candidate.source_run_id is None or run_id != public_ids.run_id(candidate.source_run_id):
        return False
    if not any(isinstance(ref, dict) and ref.get("run_id") == run_id for ref in candidate.evidence_refs or []):
        return False
    record = RunMemoryRecord.objects.filter(run_id=candidate.source_run_id).first()
    if record is None:
        return False
    fields = [record.request_preview, record.outcome_preview, record.summary, *(record.failure_markers or [])]
    if semantic.run_memory_supports_content(fields, needle):
        return True
    from learnings.capture import input_attests  # whole-input capture: the run's input attests it verbatim

    return input_attests(candidate.source_run_id, needle)


def review_candidate(candidate_pk: int) -> ReviewOutcome | None:
    """Review one candidate under the policy in force. Idempotent; returns None when nothing was reviewed."""
    policy, revision = policy_in_force.current_policy_and_revision()
    if not policy.reviews_candidates:
        return None
    candidate = LearningCandidate.objects.filter(pk=candidate_pk).first()
    if candidate is None or candidate.state in (CandidateState.REJECTED, CandidateState.ESCALATED):
        return None
    if candidate.state == CandidateState.PUBLISHED and candidate.automation_review:
        return None
    reviewed_at = now_ms()
    evaluation = evaluate_candidate(policy, candidate, now_ms=reviewed_at)
    # The judge is asked about the rule's action (before the screen gate) and shown the screen's findings, so
    # it can reject an attack outright; whatever it answers, the gate then keeps a flagged candidate from
    # being published (held for an operator instead).
    action, reason, judge_review = _judge(
        policy,
        candidate,
        evaluation.rule_action or evaluation.action,
        evaluation.rule_reason or evaluation.reason,
        evaluation.matched_rule_name,
        evaluation.screening,
    )
    action, reason = screen_gate(action, reason, evaluation.screening)
    with transaction.atomic():
        locked = LearningCandidate.objects.select_for_update().filter(pk=candidate_pk).first()
        if locked is None or locked.state in (CandidateState.REJECTED, CandidateState.ESCALATED):
            return None
        if locked.state == CandidateState.PUBLISHED and locked.automation_review:
            return None
        verification = VerificationStatus.UNVERIFIED
        if action == "publish_active":
            conflict = find_conflict(
                scope_key=locked.scope_key,
                kind=locked.kind,
                subject_key=locked.subject_key,
                content_key=locked.content_key,
                at_ms=reviewed_at,
            )
            if conflict is not None:
                action, reason = "manual_review", reason + REASON_CONFLICT.format(conflict.public_id)
            elif candidate_supported(locked):
                verification = VerificationStatus.VERIFIED
            else:
                action, reason = "publish_provisional", reason + REASON_UNSUPPORTED
        review = {
            "mode": policy.mode,
            "action": action,
            "reviewed_at_ms": reviewed_at,
            "matched_rule_name": evaluation.matched_rule_name,
            "judge": judge_review,
            "reason": reason,
        }
        return _act(policy, locked, review, revision, verification, evaluation.expires_at_ms)


def _act(
    policy: LearningPolicy,
    candidate: LearningCandidate,
    review: dict,
    revision: int,
    verification: str,
    expires_at_ms: int | None,
) -> ReviewOutcome:
    action = review["action"]
    learning_id = None
    if policy.mode != "enabled" or candidate.state == CandidateState.PUBLISHED:
        candidate = services.candidate_record_review(candidate=candidate.pk, review=review, revision=revision)
    elif action == "manual_review":
        candidate = services.candidate_escalate(candidate=candidate.pk, review=review, revision=revision)
    elif action == "reject":
        candidate = services.candidate_reject(candidate=candidate.pk, actor="daemon", review=review, revision=revision)
    else:
        governance = services.Governance(
            publish_tier=cast(str, publish_tier_for_action(action)),  # the actions left publish
            policy_decision=PolicyDecision.AUTOMATIC,
            verification_status=verification,
            expires_at_ms=expires_at_ms,
            use_expiry=True,
        )
        try:
            learning = services.candidate_publish(
                candidate=candidate.pk,
                actor="daemon",
                options=services.PublishOptions.automated(governance, review=review, revision=revision),
            )
        except services.LearningConflict as conflict:
            review = {
                **review,
                "action": "manual_review",
                "reason": review["reason"] + REASON_CONFLICT.format(conflict.existing.public_id),
            }
            candidate = services.candidate_escalate(candidate=candidate.pk, review=review, revision=revision)
        else:
            learning_id = learning.public_id
            candidate.refresh_from_db()
    return ReviewOutcome(
        candidate_id=candidate.public_id,
        mode=policy.mode,
        action=review["action"],
        state=candidate.state,
        learning_id=learning_id,
        review=review,
    )
