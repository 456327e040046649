"""Validation of learning candidates and published learnings (spec §1.4–§1.6, §2.3, §3.4).

Pure functions, no database: each check raises :class:`LearningValidationError` with the field at fault
and the reference's literal message, so the API maps it to a 400 and clients keep matching the text.

Two scope functions exist on purpose:

* :func:`normalise_scope` is for **input** (request bodies and query strings): it trims the id and fills
  in the workspace id;
* :func:`validate_scope` is for **records** about to be stored: it trims nothing and rejects an id with
  leading or trailing whitespace, so a stored scope is always canonical.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from learnings.vocabulary import (
    CAPTURED_ONLY_KINDS,
    DEFAULT_WORKSPACE_SCOPE_ID,
    SEMANTIC_KINDS,
    CandidateOrigin,
    LearningKind,
    LearningStatus,
    PublishTier,
    ScopeKind,
    VerificationStatus,
)

MAX_CONTENT_CHARS = 1600

# Literal messages (spec §2.3, §3.4).
MSG_SCOPE_ID_REQUIRED = "learning scope id is required"
MSG_SCOPE_ID_WHITESPACE = "learning scope id must not contain leading or trailing whitespace"
MSG_WORKSPACE_SCOPE_ID = "workspace learning scope id must be `default`"
MSG_QUERY_SCOPE_ID_REQUIRED = "scope_id is required for the selected learning scope"
MSG_QUERY_SCOPE_KIND_REQUIRED = "scope_kind is required when scope_id is provided"
MSG_CONTENT_REQUIRED = "learning content is required"
MSG_CONTENT_TOO_LONG = f"learning content exceeds the {MAX_CONTENT_CHARS} character limit"
MSG_CAPTURED_ONLY = "{kind} candidates are captured by the service only"
MSG_SECRET_MATERIAL = "semantic learning content appears to contain secret material"
MSG_REVIEW_REASON_REQUIRED = "learning automation review reason is required"
MSG_CONFIDENCE_RANGE = "learning confidence must be between 0 and 100"
MSG_POLICY_ACTOR_REQUIRED = "learning policy_actor is required when policy_decision is set"
MSG_PROVISIONAL_TIER = "provisional learnings must use the provisional publish tier"
MSG_ACTIVE_TIER = "active learnings must use the active publish tier"
MSG_ACTIVE_FAILED_VERIFICATION = "active learnings cannot use failed verification status"

# The choices' values, once: ``TextChoices.values`` builds a new list on every read, and each record is
# checked against several of them.
_SCOPE_KINDS = frozenset(ScopeKind.values)
_LEARNING_KINDS = frozenset(LearningKind.values)
_ORIGINS = frozenset(CandidateOrigin.values)


class LearningValidationError(ValueError):
    """A learning record or request field is invalid. ``field`` names it (dotted path)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message

    def __repr__(self) -> str:
        return f"LearningValidationError(field={self.field!r}, message={self.message!r})"


def _read(obj: Any, name: str, default: Any = None) -> Any:
    """Attribute or mapping access, so records can be model instances, dataclasses or dicts."""
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


# ---------------------------------------------------------------------------------------------------------
# Scopes
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LearningScope:
    kind: str
    id: str

    @property
    def scope_key(self) -> str:
        return scope_key(self.kind, self.id)


def scope_key(kind: str, scope_id: str) -> str:
    """``<kind>:<id.trim()>``, e.g. ``session:session-1`` or ``workspace:default``."""
    return f"{kind}:{scope_id.strip()}"


def _check_scope_kind(kind: object, field: str) -> str:
    if not isinstance(kind, str) or kind not in _SCOPE_KINDS:
        raise LearningValidationError(field, f"unknown learning scope kind `{kind}`")
    return kind


def normalise_scope(kind: object, scope_id: object, *, field: str = "scope") -> LearningScope:
    """Normalise a scope given as input (request body or query string).

    The id is trimmed. Workspace: a blank id becomes ``default``, any other id is rejected. Other kinds:
    a blank id is rejected.
    """
    kind = _check_scope_kind(kind, f"{field}.kind")
    if scope_id is not None and not isinstance(scope_id, str):
        raise LearningValidationError(f"{field}.id", MSG_SCOPE_ID_REQUIRED)
    trimmed = (scope_id or "").strip()
    if kind == ScopeKind.WORKSPACE:
        if trimmed and trimmed != DEFAULT_WORKSPACE_SCOPE_ID:
            raise LearningValidationError(f"{field}.id", MSG_WORKSPACE_SCOPE_ID)
        return LearningScope(kind=kind, id=DEFAULT_WORKSPACE_SCOPE_ID)
    if not trimmed:
        raise LearningValidationError(f"{field}.id", MSG_SCOPE_ID_REQUIRED)
    return LearningScope(kind=kind, id=trimmed)


def validate_scope(kind: str, scope_id: str | None, *, field: str = "scope") -> None:
    """Validate the scope of a record about to be stored; nothing is trimmed.

    Checked in order: blank id, leading/trailing whitespace, workspace id other than ``default``.
    """
    kind = _check_scope_kind(kind, f"{field}.kind")
    if not isinstance(scope_id, str) or not scope_id.strip():
        raise LearningValidationError(f"{field}.id", MSG_SCOPE_ID_REQUIRED)
    if scope_id.strip() != scope_id:
        raise LearningValidationError(f"{field}.id", MSG_SCOPE_ID_WHITESPACE)
    if kind == ScopeKind.WORKSPACE and scope_id != DEFAULT_WORKSPACE_SCOPE_ID:
        raise LearningValidationError(f"{field}.id", MSG_WORKSPACE_SCOPE_ID)


def parse_scope_query(scope_kind: str | None, scope_id: str | None) -> LearningScope | None:
    """Scope filter of list / revoke-matching queries (§2.3).

    Blank values count as absent. Neither → ``None`` (no filter); ``workspace`` without id →
    ``workspace:default``; kind and id → :func:`normalise_scope`; another kind without id →
    "scope_id is required for the selected learning scope"; id without kind →
    "scope_kind is required when scope_id is provided".
    """
    kind = scope_kind.strip() if isinstance(scope_kind, str) else None
    sid = scope_id.strip() if isinstance(scope_id, str) else None
    kind = kind or None
    sid = sid or None
    if kind is None:
        if sid is not None:
            raise LearningValidationError("scope_kind", MSG_QUERY_SCOPE_KIND_REQUIRED)
        return None
    kind = _check_scope_kind(kind, "scope_kind")
    if sid is None:
        if kind == ScopeKind.WORKSPACE:
            return LearningScope(kind=kind, id=DEFAULT_WORKSPACE_SCOPE_ID)
        raise LearningValidationError("scope_id", MSG_QUERY_SCOPE_ID_REQUIRED)
    try:
        return normalise_scope(kind, sid)
    except LearningValidationError as error:
        raise LearningValidationError("scope_id", error.message) from None


# ---------------------------------------------------------------------------------------------------------
# Content, confidence, kind, secrets
# ---------------------------------------------------------------------------------------------------------


def validate_content(content: object) -> None:
    """Content is required and at most 1600 characters once trimmed (counted in characters)."""
    if not isinstance(content, str) or not content.strip():
        raise LearningValidationError("content", MSG_CONTENT_REQUIRED)
    if len(content.strip()) > MAX_CONTENT_CHARS:
        raise LearningValidationError("content", MSG_CONTENT_TOO_LONG)


def validate_confidence(confidence: object) -> None:
    """An integer from 0 to 100 inclusive (booleans and floats are rejected)."""
    if isinstance(confidence, bool) or not isinstance(confidence, int) or not 0 <= confidence <= 100:
        raise LearningValidationError("confidence", MSG_CONFIDENCE_RANGE)


def validate_kind(kind: object, *, field: str = "kind") -> str:
    if not isinstance(kind, str) or kind not in _LEARNING_KINDS:
        raise LearningValidationError(field, f"unknown learning kind `{kind}`")
    return kind


def validate_candidate_kind_origin(kind: str, origin: str) -> None:
    """Known kind and origin; ``run_summary`` candidates (``CAPTURED_ONLY_KINDS``) may only come from the daemon."""
    validate_kind(kind)
    if not isinstance(origin, str) or origin not in _ORIGINS:
        raise LearningValidationError("origin", f"unknown learning candidate origin `{origin}`")
    if kind in CAPTURED_ONLY_KINDS and origin != CandidateOrigin.DAEMON:
        raise LearningValidationError("kind", MSG_CAPTURED_ONLY.format(kind=kind))


def content_has_secret_material(content: str) -> bool:
    """The learning-content secret classifier (§4.19), owned by ``memory.scrubbing``.

    Imported at call time so this module imports without the memory app's redaction module loaded
    (and so tests can substitute it).
    """
    from memory.scrubbing import looks_like_secret

    return bool(looks_like_secret(content))


def validate_secret_guard(kind: str, content: str) -> None:
    """Reject secret-looking content for fact/preference/decision. ``run_summary`` and ``procedure`` are not
    classified (run summaries are already scrubbed and may carry ``<redacted…>`` markers)."""
    if kind in SEMANTIC_KINDS and content_has_secret_material(content):
        raise LearningValidationError("content", MSG_SECRET_MATERIAL)


def validate_review_reason(reason: str | None) -> None:
    """An automation review must explain itself."""
    if not isinstance(reason, str) or not reason.strip():
        raise LearningValidationError("automation_review.reason", MSG_REVIEW_REASON_REQUIRED)


def validate_learning_consistency(
    *,
    status: str,
    publish_tier: str,
    verification_status: str,
    policy_decision: str | None,
    policy_actor: str | None,
) -> None:
    """§1.6: an actor whenever a decision is recorded; provisional⇔provisional tier and active⇔active tier
    (superseded/revoked may keep either tier); an active learning cannot have failed verification."""
    if policy_decision is not None and not (isinstance(policy_actor, str) and policy_actor.strip()):
        raise LearningValidationError("policy_actor", MSG_POLICY_ACTOR_REQUIRED)
    if status == LearningStatus.PROVISIONAL and publish_tier != PublishTier.PROVISIONAL:
        raise LearningValidationError("publish_tier", MSG_PROVISIONAL_TIER)
    if status == LearningStatus.ACTIVE and publish_tier != PublishTier.ACTIVE:
        raise LearningValidationError("publish_tier", MSG_ACTIVE_TIER)
    if status == LearningStatus.ACTIVE and verification_status == VerificationStatus.FAILED:
        raise LearningValidationError("verification_status", MSG_ACTIVE_FAILED_VERIFICATION)


# ---------------------------------------------------------------------------------------------------------
# Whole records
# ---------------------------------------------------------------------------------------------------------


def validate_candidate(candidate: Any) -> None:
    """Validate a candidate before it is stored, in the reference order: scope, content, kind/origin,
    secret guard, automation review reason, confidence.

    ``candidate`` is any object or mapping with ``scope_kind``, ``scope_id``, ``kind``, ``origin``,
    ``content``, ``confidence`` and optionally ``automation_review`` (a mapping or object with ``reason``).
    """
    validate_scope(_read(candidate, "scope_kind"), _read(candidate, "scope_id"))
    content = _read(candidate, "content")
    validate_content(content)
    kind = _read(candidate, "kind")
    validate_candidate_kind_origin(kind, _read(candidate, "origin", CandidateOrigin.API))
    validate_secret_guard(kind, content)
    review = _read(candidate, "automation_review")
    if review is not None:
        validate_review_reason(_read(review, "reason"))
    validate_confidence(_read(candidate, "confidence"))


def validate_learning(learning: Any, *, secret_guarded: tuple[str, str] | None = None) -> None:
    """Validate a published learning before it is stored: scope, content, secret guard, consistency
    rules, confidence.

    ``learning`` is any object or mapping with ``scope_kind``, ``scope_id``, ``kind``, ``content``,
    ``confidence``, ``status``, ``publish_tier``, ``verification_status``, ``policy_decision`` and
    ``policy_actor``. ``secret_guarded``: the (kind, content) that :func:`validate_secret_guard` already
    passed in this call path (the candidate the learning is published from, validated a moment ago); when
    the learning's kind and content are exactly those, the guard's answer is known and the classifier is
    not run a second time on the same text. Any other kind or content (an operator's edit) is classified.
    """
    validate_scope(_read(learning, "scope_kind"), _read(learning, "scope_id"))
    content = _read(learning, "content")
    validate_content(content)
    kind = validate_kind(_read(learning, "kind"))
    if secret_guarded is None or secret_guarded != (kind, content):
        validate_secret_guard(kind, content)
    validate_learning_consistency(
        status=_read(learning, "status"),
        publish_tier=_read(learning, "publish_tier", PublishTier.ACTIVE),
        verification_status=_read(learning, "verification_status", VerificationStatus.UNVERIFIED),
        policy_decision=_read(learning, "policy_decision"),
        policy_actor=_read(learning, "policy_actor"),
    )
    validate_confidence(_read(learning, "confidence"))
