"""Reads of the learning policy (spec §2.1, §3.2): the revision in force (stored through ``memory.revisioned_policies``)
and the parsing of a policy request body. Writes (``set_policy``) are in ``learnings.services.policy_revision``.

The stored policy is read fresh on every prompt assembly and terminal run; parsing it against the JSON
Schema costs about a millisecond, so the last parse is kept and reused while the stored object serialises to
the same JSON text (tens of microseconds; ``1``, ``1.0`` and ``true`` differ there as they do to the
schema). The same text parses to the same frozen policy, so this cannot serve a stale policy: a new
revision, or the same number holding other data, is parsed again."""

from __future__ import annotations

import json
import logging

from learnings.learning_policy import LearningPolicy, LearningPolicyError
from memory import revisioned_policies
from memory.errors import ValidationFailed
from memory.models import PolicyKind

logger = logging.getLogger(__name__)


_last_parsed: tuple[str, LearningPolicy] | None = None


def current_policy_and_revision() -> tuple[LearningPolicy, int]:
    global _last_parsed  # the one-entry memo described above
    data, revision = revisioned_policies.current_policy_dict(PolicyKind.LEARNING)
    if not data:
        return LearningPolicy(), revision
    key = json.dumps(data, sort_keys=True)
    last = _last_parsed
    if last is not None and last[0] == key:
        return last[1], revision
    try:
        policy = LearningPolicy.from_dict(data)  # the schema
        policy.validate_rules()  # and the §3.2 rules
    except LearningPolicyError:
        logger.error("stored learning policy revision %s is invalid; using defaults", revision)
        return LearningPolicy(), revision
    _last_parsed = (key, policy)
    return policy, revision


def current_policy() -> LearningPolicy:
    """The policy in force; the defaults (mode ``shadow``) when none was ever stored."""
    return current_policy_and_revision()[0]


def policy_revision() -> int:
    return revisioned_policies.current_policy_dict(PolicyKind.LEARNING)[1]


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
