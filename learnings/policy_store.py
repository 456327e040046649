"""Reads of the learning policy (spec §2.1, §3.2): the revision in force (stored through ``memory.policies``)
and the parsing of a policy request body. Writes (``set_policy``) are in ``learnings.services.policy``."""

from __future__ import annotations

import logging

from learnings.policy import LearningPolicy, LearningPolicyError
from memory import policies
from memory.errors import ValidationFailed
from memory.models import PolicyKind

logger = logging.getLogger(__name__)


def current_policy_and_revision() -> tuple[LearningPolicy, int]:
    data, revision = policies.current_policy_dict(PolicyKind.LEARNING)
    if not data:
        return LearningPolicy(), revision
    try:
        policy = LearningPolicy.from_dict(data)
        policy.validate()
    except LearningPolicyError:
        logger.error("stored learning policy revision %s is invalid; using defaults", revision)
        return LearningPolicy(), revision
    return policy, revision


def current_policy() -> LearningPolicy:
    """The policy in force; the defaults (mode ``shadow``) when none was ever stored."""
    return current_policy_and_revision()[0]


def policy_revision() -> int:
    return policies.current_policy_dict(PolicyKind.LEARNING)[1]


def policy_error(exc: LearningPolicyError) -> ValidationFailed:
    field = exc.field if exc.field == "policy" or exc.field.startswith("policy.") else f"policy.{exc.field}"
    return ValidationFailed(exc.message, field=field, domain="runtime", code="invalid_learning_policy")


def parse_request(body: object) -> tuple[LearningPolicy, int | None]:
    """Parse and validate a ``POST /v1/runtime/learning-policy`` body (or the admin form's equivalent)."""
    try:
        parsed = LearningPolicy.from_request(body)
    except LearningPolicyError as exc:
        raise policy_error(exc) from exc
    return parsed.policy, parsed.expected_revision
