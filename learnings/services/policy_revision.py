"""Writes of the learning policy (spec §2.1, §3.2): a new revision stored through
``memory.revisioned_policies``; once it commits, every pending candidate is queued for review again (the shadow
sweep, by task name). Reads of the policy in force stay in ``learnings.policy_in_force``."""

from __future__ import annotations

from django.db import transaction

from learnings.learning_policy import LearningPolicy
from learnings.policy_in_force import parse_request
from learnings.services.queue import SHADOW_REVIEW_SWEEP_TASK, enqueue_on_commit, send_task
from memory import revisioned_policies
from memory.models import PolicyKind


@transaction.atomic
def set_policy(body: object, actor: object) -> tuple[LearningPolicy, int]:
    """Validate and store a new revision; re-queue every pending candidate once the change commits.

    Returns ``(policy, revision)``. A stale ``expected_revision`` is a 409 ``runtime_revision_conflict``.
    """
    policy, expected_revision = parse_request(body)
    row = revisioned_policies.save_policy(
        kind=PolicyKind.LEARNING, policy=policy.to_dict(), expected_revision=expected_revision, actor=actor
    )
    enqueue_on_commit(SHADOW_REVIEW_SWEEP_TASK)
    return policy, row.revision


def requeue_pending_candidates() -> None:
    """Queue the review of every pending candidate (the sweep walks them in batches)."""
    send_task(SHADOW_REVIEW_SWEEP_TASK)
