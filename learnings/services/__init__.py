"""Every write of the learning plane (spec §2.3, §2.4, §4.8, §4.9, §4.13–§4.15), by workflow:

* ``candidates`` — create (API, capture), the run_summary candidate, reject / escalate / record a review;
* ``publish`` — ``candidate_publish`` with its ``PublishOptions`` (operator edits or an automated decision);
* ``governance`` — revoke, revoke every match, supersede;
* ``policy`` — a new learning-policy revision (reads of the policy in force: ``learnings.policy_in_force``);
* ``rows`` (shared ``Learning`` row moves, the conflict error, the ``learning_revoking`` hook),
  ``cleaning`` (input cleaning), ``queue`` (background work queued by task name after commit).

Services are keyword-only and atomic; state changes are compare-and-swap updates guarded by the expected
state, each with an audit event in the same transaction. The names stay importable from ``learnings.services``.
"""

from learnings.services.candidates import (
    RUN_SUMMARY_TTL_MS,
    candidate_create,
    candidate_escalate,
    candidate_record_review,
    candidate_reject,
    daemon_candidate_create,
    daemon_source,
    lock_candidate,
    mark_published,
    run_summary_candidate_ensure,
)
from learnings.services.cleaning import (
    EVIDENCE_FIELDS,
    MAX_EVIDENCE_REFS,
    MAX_REF_TEXT,
    SOURCE_FIELDS,
    SOURCE_TEXT_FIELDS,
    clean_content,
    clean_evidence_refs,
    clean_expiry,
    clean_source,
    invalid,
    normalise_scope,
    semantic_key_digests,
)
from learnings.services.governance import (
    MSG_REVOKE_REASON_SECRET,
    check_revocation_reason,
    learning_revoke,
    learning_supersede,
    learnings_revoke_matching,
)
from learnings.services.policy_revision import requeue_pending_candidates, set_policy
from learnings.services.publish import (
    MSG_SUPERSEDE_TIER,
    AutomationDecision,
    Governance,
    PublishEdits,
    PublishOptions,
    candidate_publish,
    learning_create_published,
)
from learnings.services.rows import MSG_SUPERSEDE_SCOPE, REVOKING_HOOK, LearningConflict, live_replacement

__all__ = [
    "EVIDENCE_FIELDS",
    "MAX_EVIDENCE_REFS",
    "MAX_REF_TEXT",
    "MSG_REVOKE_REASON_SECRET",
    "MSG_SUPERSEDE_SCOPE",
    "MSG_SUPERSEDE_TIER",
    "REVOKING_HOOK",
    "RUN_SUMMARY_TTL_MS",
    "SOURCE_FIELDS",
    "SOURCE_TEXT_FIELDS",
    "AutomationDecision",
    "Governance",
    "LearningConflict",
    "PublishEdits",
    "PublishOptions",
    "candidate_create",
    "candidate_escalate",
    "candidate_publish",
    "learning_create_published",
    "candidate_record_review",
    "candidate_reject",
    "check_revocation_reason",
    "clean_content",
    "clean_evidence_refs",
    "clean_expiry",
    "clean_source",
    "daemon_candidate_create",
    "daemon_source",
    "invalid",
    "learning_revoke",
    "learning_supersede",
    "learnings_revoke_matching",
    "live_replacement",
    "lock_candidate",
    "mark_published",
    "normalise_scope",
    "requeue_pending_candidates",
    "run_summary_candidate_ensure",
    "semantic_key_digests",
    "set_policy",
]
