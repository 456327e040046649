"""The learning automation policy (spec §3.2, §3.3) and publication-rule evaluation (§4.10).

Frozen dataclasses mirror the JSON shape exactly::

    {"mode": "shadow",
     "capture": {"run_summary_candidates": true,
                 "semantic_candidates": {"enabled": false, "model": null, "timeout_ms": null,
                                         "max_candidates_per_run": 2}},
     "publication": {"default_action": "manual_review", "allow_api_origin_active_publication": false,
                     "quarantined_rule_names": [], "rules": []},
     "judge": {"enabled": false, "model": null, "timeout_ms": null}}

``LearningPolicy()`` is the stored default (``mode`` = ``shadow``). A *submitted* policy that omits
``mode`` gets ``manual_only`` (the reference's enum default); every other omitted field takes the default
above. Unknown fields and wrong types are rejected with :class:`LearningPolicyError`, whose ``field`` is a
dotted path relative to the policy object (``publication.rules[0].min_confidence``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from learnings.validation import (
    LEARNING_KINDS,
    SCOPE_KINDS,
    SEMANTIC_KINDS,
    SENSITIVITIES,
    content_has_secret_material,
)

MODES = ("manual_only", "shadow", "enabled")
ACTIONS = ("manual_review", "reject", "publish_provisional", "publish_active")
ACTION_DEBUG_NAMES = {
    "manual_review": "ManualReview",
    "reject": "Reject",
    "publish_provisional": "PublishProvisional",
    "publish_active": "PublishActive",
}
"""The reference formats actions with Rust's ``{:?}`` inside review reasons (``falling back to
ManualReview``); these names keep those reasons byte-identical."""

DEFAULT_MODE = "shadow"
SUBMITTED_MODE_DEFAULT = "manual_only"
DEFAULT_MODEL_TIMEOUT_MS = 15_000
DEFAULT_MAX_CANDIDATES_PER_RUN = 2
MAX_CANDIDATES_PER_RUN_LIMIT = 8
POLICY_FIELDS = ("mode", "capture", "publication", "judge")

# Literal reasons (§4.10).
REASON_SECRET = "candidate content matched the anti-secret learning classifier"
REASON_UNNAMED_RULE = "matched unnamed publication rule"
REASON_PROCEDURE_ACTIVE = "procedure learnings cannot be auto-published with the active tier"
REASON_API_ORIGIN_ACTIVE = (
    "api-origin candidates cannot be auto-published with the active tier; retaining provisional tier"
)


class LearningPolicyError(ValueError):
    """The submitted learning policy is malformed or invalid (400 ``runtime/invalid_learning_policy``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message

    def __repr__(self) -> str:
        return f"LearningPolicyError(field={self.field!r}, message={self.message!r})"


# ---------------------------------------------------------------------------------------------------------
# Parsing helpers (strict: unknown fields, wrong types and nulls for required values are errors)
# ---------------------------------------------------------------------------------------------------------

_MISSING = object()


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _object(value: object, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise LearningPolicyError(path or "policy", f"{path or 'policy'} must be an object")
    return value


def _only(data: Mapping[str, Any], allowed: Sequence[str], path: str) -> None:
    for key in data:
        if key not in allowed:
            name = _join(path, str(key))
            raise LearningPolicyError(name, f"unknown field `{name}`")


def _bool(data: Mapping[str, Any], key: str, path: str, default: bool) -> bool:
    value = data.get(key, _MISSING)
    if value is _MISSING:
        return default
    if not isinstance(value, bool):
        raise LearningPolicyError(_join(path, key), f"{_join(path, key)} must be a boolean")
    return value


def _int_value(value: object, name: str, *, allow_negative: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or (value < 0 and not allow_negative):
        kind = "an integer" if allow_negative else "a non-negative integer"
        raise LearningPolicyError(name, f"{name} must be {kind}")
    return value


def _int(data: Mapping[str, Any], key: str, path: str, default: int) -> int:
    value = data.get(key, _MISSING)
    if value is _MISSING:
        return default
    return _int_value(value, _join(path, key))


def _optional_int(
    data: Mapping[str, Any], key: str, path: str, *, allow_negative: bool = False
) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    return _int_value(value, _join(path, key), allow_negative=allow_negative)


def _optional_number(data: Mapping[str, Any], key: str, path: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise LearningPolicyError(_join(path, key), f"{_join(path, key)} must be a number")
    return value


def _optional_str(data: Mapping[str, Any], key: str, path: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise LearningPolicyError(_join(path, key), f"{_join(path, key)} must be a string")
    return value


def _choice_value(value: object, name: str, choices: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in choices:
        expected = ", ".join(f"`{choice}`" for choice in choices)
        raise LearningPolicyError(name, f"{name} must be one of {expected}")
    return value


def _choice(data: Mapping[str, Any], key: str, path: str, choices: Sequence[str], default: str) -> str:
    value = data.get(key, _MISSING)
    if value is _MISSING:
        return default
    return _choice_value(value, _join(path, key), choices)


def _optional_choice(data: Mapping[str, Any], key: str, path: str, choices: Sequence[str]) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    return _choice_value(value, _join(path, key), choices)


def _section(data: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any] | None:
    value = data.get(key, _MISSING)
    if value is _MISSING:
        return None
    return _object(value, _join(path, key))


def _list(data: Mapping[str, Any], key: str, path: str) -> list[Any]:
    value = data.get(key, _MISSING)
    if value is _MISSING:
        return []
    if not isinstance(value, list | tuple):
        raise LearningPolicyError(_join(path, key), f"{_join(path, key)} must be a list")
    return list(value)


# ---------------------------------------------------------------------------------------------------------
# The policy
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ModelGeneration:
    """Generation overrides for the extractor / judge model call."""

    model: str | None = None
    fallback_model: str | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None

    FIELDS = ("model", "fallback_model", "max_output_tokens", "temperature")

    @classmethod
    def from_dict(cls, data: object, path: str) -> ModelGeneration:
        data = _object(data, path)
        _only(data, cls.FIELDS, path)
        return cls(
            model=_optional_str(data, "model", path),
            fallback_model=_optional_str(data, "fallback_model", path),
            max_output_tokens=_optional_int(data, "max_output_tokens", path),
            temperature=_optional_number(data, "temperature", path),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "fallback_model": self.fallback_model,
            "max_output_tokens": self.max_output_tokens,
            "temperature": self.temperature,
        }


@dataclass(frozen=True, kw_only=True)
class ModelOverride:
    """The ``model`` object of capture and judge settings: a provider name and generation overrides
    (the reference's hook-model override ``{provider?, generation?}``)."""

    provider: str | None = None
    generation: ModelGeneration | None = None

    FIELDS = ("provider", "generation")

    @classmethod
    def from_dict(cls, data: object, path: str) -> ModelOverride:
        data = _object(data, path)
        _only(data, cls.FIELDS, path)
        generation = data.get("generation")
        if generation is not None:
            generation = ModelGeneration.from_dict(generation, _join(path, "generation"))
        return cls(provider=_optional_str(data, "provider", path), generation=generation)

    def to_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "generation": None if self.generation is None else self.generation.to_dict(),
        }


def _optional_model(data: Mapping[str, Any], path: str) -> ModelOverride | None:
    value = data.get("model")
    return None if value is None else ModelOverride.from_dict(value, _join(path, "model"))


@dataclass(frozen=True, kw_only=True)
class SemanticCaptureConfig:
    enabled: bool = False
    model: ModelOverride | None = None
    timeout_ms: int | None = None
    max_candidates_per_run: int = DEFAULT_MAX_CANDIDATES_PER_RUN

    FIELDS = ("enabled", "model", "timeout_ms", "max_candidates_per_run")

    @property
    def effective_timeout_ms(self) -> int:
        """``timeout_ms``, or 15000 when it is null."""
        return DEFAULT_MODEL_TIMEOUT_MS if self.timeout_ms is None else self.timeout_ms

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], path: str) -> SemanticCaptureConfig:
        _only(data, cls.FIELDS, path)
        return cls(
            enabled=_bool(data, "enabled", path, False),
            model=_optional_model(data, path),
            timeout_ms=_optional_int(data, "timeout_ms", path),
            max_candidates_per_run=_int(data, "max_candidates_per_run", path, DEFAULT_MAX_CANDIDATES_PER_RUN),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "model": None if self.model is None else self.model.to_dict(),
            "timeout_ms": self.timeout_ms,
            "max_candidates_per_run": self.max_candidates_per_run,
        }


@dataclass(frozen=True, kw_only=True)
class CaptureConfig:
    run_summary_candidates: bool = True
    semantic_candidates: SemanticCaptureConfig = field(default_factory=SemanticCaptureConfig)

    FIELDS = ("run_summary_candidates", "semantic_candidates")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], path: str) -> CaptureConfig:
        _only(data, cls.FIELDS, path)
        semantic = _section(data, "semantic_candidates", path)
        return cls(
            run_summary_candidates=_bool(data, "run_summary_candidates", path, True),
            semantic_candidates=(
                SemanticCaptureConfig()
                if semantic is None
                else SemanticCaptureConfig.from_dict(semantic, _join(path, "semantic_candidates"))
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_summary_candidates": self.run_summary_candidates,
            "semantic_candidates": self.semantic_candidates.to_dict(),
        }


@dataclass(frozen=True, kw_only=True)
class PublicationRule:
    """One ordered rule; the first non-quarantined rule that matches a candidate decides its action."""

    name: str | None = None
    scope_kind: str | None = None
    scope_id: str | None = None
    kind: str | None = None
    sensitivity: str | None = None
    min_confidence: int | None = None
    require_evidence: bool = False
    require_source_run: bool = False
    require_source_session: bool = False
    action: str
    expires_after_ms: int | None = None

    FIELDS = (
        "name",
        "scope_kind",
        "scope_id",
        "kind",
        "sensitivity",
        "min_confidence",
        "require_evidence",
        "require_source_run",
        "require_source_session",
        "action",
        "expires_after_ms",
    )

    @classmethod
    def from_dict(cls, data: object, path: str) -> PublicationRule:
        data = _object(data, path)
        _only(data, cls.FIELDS, path)
        if data.get("action") is None:
            raise LearningPolicyError(_join(path, "action"), f"{_join(path, 'action')} is required")
        return cls(
            name=_optional_str(data, "name", path),
            scope_kind=_optional_choice(data, "scope_kind", path, SCOPE_KINDS),
            scope_id=_optional_str(data, "scope_id", path),
            kind=_optional_choice(data, "kind", path, LEARNING_KINDS),
            sensitivity=_optional_choice(data, "sensitivity", path, SENSITIVITIES),
            # Range-checked by validate() so that out-of-range values get the literal message.
            min_confidence=_optional_int(data, "min_confidence", path, allow_negative=True),
            require_evidence=_bool(data, "require_evidence", path, False),
            require_source_run=_bool(data, "require_source_run", path, False),
            require_source_session=_bool(data, "require_source_session", path, False),
            action=_choice(data, "action", path, ACTIONS, "manual_review"),
            expires_after_ms=_optional_int(data, "expires_after_ms", path),
        )

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.FIELDS}


@dataclass(frozen=True, kw_only=True)
class PublicationConfig:
    default_action: str = "manual_review"
    allow_api_origin_active_publication: bool = False
    quarantined_rule_names: tuple[str, ...] = ()
    rules: tuple[PublicationRule, ...] = ()

    FIELDS = ("default_action", "allow_api_origin_active_publication", "quarantined_rule_names", "rules")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], path: str) -> PublicationConfig:
        _only(data, cls.FIELDS, path)
        names_path = _join(path, "quarantined_rule_names")
        names = _list(data, "quarantined_rule_names", path)
        for index, name in enumerate(names):
            if not isinstance(name, str):
                raise LearningPolicyError(f"{names_path}[{index}]", f"{names_path}[{index}] must be a string")
        rules_path = _join(path, "rules")
        return cls(
            default_action=_choice(data, "default_action", path, ACTIONS, "manual_review"),
            allow_api_origin_active_publication=_bool(
                data, "allow_api_origin_active_publication", path, False
            ),
            quarantined_rule_names=tuple(names),
            rules=tuple(
                PublicationRule.from_dict(rule, f"{rules_path}[{index}]")
                for index, rule in enumerate(_list(data, "rules", path))
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "default_action": self.default_action,
            "allow_api_origin_active_publication": self.allow_api_origin_active_publication,
            "quarantined_rule_names": list(self.quarantined_rule_names),
            "rules": [rule.to_dict() for rule in self.rules],
        }

    @property
    def quarantine_set(self) -> frozenset[str]:
        """Trimmed, ASCII-lowercased, non-empty quarantined names."""
        return frozenset(_ascii_lower(name.strip()) for name in self.quarantined_rule_names if name.strip())


@dataclass(frozen=True, kw_only=True)
class JudgeConfig:
    enabled: bool = False
    model: ModelOverride | None = None
    timeout_ms: int | None = None

    FIELDS = ("enabled", "model", "timeout_ms")

    @property
    def effective_timeout_ms(self) -> int:
        """``timeout_ms``, or 15000 when it is null."""
        return DEFAULT_MODEL_TIMEOUT_MS if self.timeout_ms is None else self.timeout_ms

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], path: str) -> JudgeConfig:
        _only(data, cls.FIELDS, path)
        return cls(
            enabled=_bool(data, "enabled", path, False),
            model=_optional_model(data, path),
            timeout_ms=_optional_int(data, "timeout_ms", path),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "model": None if self.model is None else self.model.to_dict(),
            "timeout_ms": self.timeout_ms,
        }


@dataclass(frozen=True, kw_only=True)
class LearningPolicyRequest:
    """A parsed ``POST /v1/runtime/learning-policy`` body."""

    policy: LearningPolicy
    expected_revision: int | None = None


@dataclass(frozen=True, kw_only=True)
class LearningPolicy:
    mode: str = DEFAULT_MODE
    capture: CaptureConfig = field(default_factory=CaptureConfig)
    publication: PublicationConfig = field(default_factory=PublicationConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)

    @property
    def reviews_candidates(self) -> bool:
        """False in ``manual_only`` mode, where the worker evaluates nothing (§3.3)."""
        return self.mode != "manual_only"

    # -- parsing -------------------------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: object) -> LearningPolicy:
        """Parse a policy object (strict; does not :meth:`validate`). An omitted ``mode`` is
        ``manual_only``; other omitted fields take their defaults."""
        data = _object(data, "")
        _only(data, POLICY_FIELDS, "")
        capture = _section(data, "capture", "")
        publication = _section(data, "publication", "")
        judge = _section(data, "judge", "")
        return cls(
            mode=_choice(data, "mode", "", MODES, SUBMITTED_MODE_DEFAULT),
            capture=CaptureConfig() if capture is None else CaptureConfig.from_dict(capture, "capture"),
            publication=(
                PublicationConfig()
                if publication is None
                else PublicationConfig.from_dict(publication, "publication")
            ),
            judge=JudgeConfig() if judge is None else JudgeConfig.from_dict(judge, "judge"),
        )

    @classmethod
    def from_request(cls, body: object) -> LearningPolicyRequest:
        """Parse and validate a policy-update body.

        Accepted: ``{"policy": {...}, "expected_revision"?: int}``, or the legacy flat policy object (at
        least one of ``mode``/``capture``/``publication``/``judge``, optionally with
        ``expected_revision``). Anything else (including ``{}`` and a body with only
        ``expected_revision``) is rejected.
        """
        if not isinstance(body, Mapping):
            raise LearningPolicyError("policy", "learning-policy request must be an object")
        if "policy" in body:
            _only(body, ("policy", "expected_revision"), "")
            policy = cls.from_dict(body["policy"])
        else:
            if not any(key in body for key in POLICY_FIELDS):
                raise LearningPolicyError(
                    "policy", "learning-policy request must include policy or legacy policy fields"
                )
            policy = cls.from_dict({key: value for key, value in body.items() if key != "expected_revision"})
        expected_revision = _optional_int(body, "expected_revision", "")
        policy.validate()
        return LearningPolicyRequest(policy=policy, expected_revision=expected_revision)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "capture": self.capture.to_dict(),
            "publication": self.publication.to_dict(),
            "judge": self.judge.to_dict(),
        }

    # -- validation ----------------------------------------------------------------------------------------

    def validate(self) -> None:
        """Raise :class:`LearningPolicyError` with the first violated rule of §3.2 (literal messages)."""
        publication = self.publication
        if publication.default_action == "publish_active":
            raise LearningPolicyError(
                "publication.default_action", "learning publication default_action cannot be publish_active"
            )
        seen: set[str] = set()
        for index, name in enumerate(publication.quarantined_rule_names):
            name_field = f"publication.quarantined_rule_names[{index}]"
            trimmed = name.strip()
            if not trimmed:
                raise LearningPolicyError(
                    name_field, "learning publication quarantine names must not be empty"
                )
            if _ascii_lower(trimmed) in seen:
                raise LearningPolicyError(name_field, "learning publication quarantine names must be unique")
            seen.add(_ascii_lower(trimmed))
        if self.judge.enabled and self.judge.timeout_ms == 0:
            raise LearningPolicyError(
                "judge.timeout_ms", "learning judge timeout_ms must be greater than zero"
            )
        semantic = self.capture.semantic_candidates
        if semantic.enabled:
            prefix = "capture.semantic_candidates"
            if semantic.timeout_ms == 0:
                raise LearningPolicyError(
                    f"{prefix}.timeout_ms", "semantic capture timeout_ms must be greater than zero"
                )
            if semantic.max_candidates_per_run == 0:
                raise LearningPolicyError(
                    f"{prefix}.max_candidates_per_run",
                    "semantic capture max_candidates_per_run must be greater than zero",
                )
            if semantic.max_candidates_per_run > MAX_CANDIDATES_PER_RUN_LIMIT:
                raise LearningPolicyError(
                    f"{prefix}.max_candidates_per_run",
                    "semantic capture max_candidates_per_run must be 8 or lower",
                )
        for index, rule in enumerate(publication.rules):
            prefix = f"publication.rules[{index}]"
            if rule.scope_id is not None and not rule.scope_id.strip():
                raise LearningPolicyError(
                    f"{prefix}.scope_id", f"learning publication rule #{index} uses an empty scope_id"
                )
            if rule.min_confidence is not None and not 0 <= rule.min_confidence <= 100:
                raise LearningPolicyError(
                    f"{prefix}.min_confidence",
                    f"learning publication rule #{index} min_confidence must be between 0 and 100",
                )
            if rule.action == "publish_active" and rule.kind == "procedure":
                raise LearningPolicyError(
                    f"{prefix}.action",
                    "automatic active publication is not supported for procedure learnings",
                )
            if rule.action == "publish_active" and rule.kind is None:
                raise LearningPolicyError(
                    f"{prefix}.kind",
                    f"learning publication rule #{index} cannot use publish_active "
                    "without an explicit kind filter",
                )


def _ascii_lower(text: str) -> str:
    return "".join(chr(ord(ch) + 32) if "A" <= ch <= "Z" else ch for ch in text)


# ---------------------------------------------------------------------------------------------------------
# §4.10 Rule evaluation
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Evaluation:
    """Outcome of :func:`evaluate_candidate`: the baseline action before judge and verification."""

    action: str
    matched_rule_name: str | None
    reason: str
    expires_at_ms: int | None


def _read(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _present(value: object) -> bool:
    return value is not None and (not isinstance(value, str) or bool(value.strip()))


def rule_matches(rule: PublicationRule, candidate: Any) -> bool:
    """Every present filter equal, confidence at least ``min_confidence``, and the trusted-input gates
    (``require_evidence`` / ``require_source_run`` / ``require_source_session``) satisfied — which only a
    daemon-origin candidate can do: API callers cannot forge provenance."""
    trusted = _read(candidate, "origin", "api") == "daemon"
    source = _read(candidate, "source") or {}
    filters = (
        (rule.scope_kind, "scope_kind"),
        (rule.scope_id, "scope_id"),
        (rule.kind, "kind"),
        (rule.sensitivity, "sensitivity"),
    )
    if any(expected is not None and _read(candidate, name) != expected for expected, name in filters):
        return False
    if rule.min_confidence is not None and (_read(candidate, "confidence") or 0) < rule.min_confidence:
        return False
    gates = (
        (rule.require_evidence, bool(_read(candidate, "evidence_refs"))),
        (rule.require_source_run, _present(_read(source, "run_id"))),
        (rule.require_source_session, _present(_read(source, "session_id"))),
    )
    return all(trusted and satisfied for required, satisfied in gates if required)


def _earlier_expiry(candidate_expires_at_ms: int | None, rule: PublicationRule, now_ms: int) -> int | None:
    relative = None if rule.expires_after_ms is None else now_ms + rule.expires_after_ms
    if candidate_expires_at_ms is None:
        return relative
    if relative is None:
        return candidate_expires_at_ms
    return min(candidate_expires_at_ms, relative)


def _rule_reason(rule: PublicationRule) -> str:
    if rule.name is not None and rule.name.strip():
        return f"matched publication rule `{rule.name}`"
    return REASON_UNNAMED_RULE


def evaluate_candidate(policy: LearningPolicy, candidate: Any, *, now_ms: int) -> Evaluation:
    """Evaluate a candidate against the publication rules (§4.10). ``now_ms`` is the review time.

    ``candidate`` is any object or mapping with ``origin``, ``kind``, ``scope_kind``, ``scope_id``,
    ``sensitivity``, ``confidence``, ``content``, ``evidence_refs``, ``source`` (mapping or object with
    ``run_id``/``session_id``) and ``expires_at_ms``. The mode is not consulted: callers skip evaluation
    in ``manual_only`` (:attr:`LearningPolicy.reviews_candidates`).

    1. fact/preference/decision content that looks secret → ``reject``;
    2. the first non-quarantined matching rule → its action and name, expiry = the earlier of the
       candidate's expiry and ``now_ms + expires_after_ms``;
    3. no match → ``default_action`` with the candidate's expiry;
    4. procedure + ``publish_active`` → ``manual_review``;
    5. api origin + ``publish_active`` without ``allow_api_origin_active_publication`` →
       ``publish_provisional``.
    """
    kind = _read(candidate, "kind")
    candidate_expiry = _read(candidate, "expires_at_ms")
    if kind in SEMANTIC_KINDS and content_has_secret_material(_read(candidate, "content") or ""):
        return Evaluation("reject", None, REASON_SECRET, candidate_expiry)

    publication = policy.publication
    quarantined = publication.quarantine_set
    for rule in publication.rules:
        name = (rule.name or "").strip()
        if name and _ascii_lower(name) in quarantined:
            continue
        if rule_matches(rule, candidate):
            action, matched, reason = rule.action, rule.name, _rule_reason(rule)
            expiry = _earlier_expiry(candidate_expiry, rule, now_ms)
            break
    else:
        action, matched = publication.default_action, None
        reason = f"no publication rule matched; falling back to {ACTION_DEBUG_NAMES[action]}"
        expiry = candidate_expiry

    if kind == "procedure" and action == "publish_active":
        action, reason = "manual_review", REASON_PROCEDURE_ACTIVE
    if (
        _read(candidate, "origin", "api") == "api"
        and action == "publish_active"
        and not publication.allow_api_origin_active_publication
    ):
        action, reason = "publish_provisional", REASON_API_ORIGIN_ACTIVE
    return Evaluation(action, matched, reason, expiry)


# ---------------------------------------------------------------------------------------------------------
# Publication metadata (§4.10, §4.12, §4.14)
# ---------------------------------------------------------------------------------------------------------

POLICY_ACTORS = {"manual": "operator", "automatic": "daemon"}


def publish_tier_for_action(action: str) -> str | None:
    """``publish_provisional`` → ``provisional``, ``publish_active`` → ``active``, otherwise ``None``."""
    return {"publish_provisional": "provisional", "publish_active": "active"}.get(action)


def status_for_tier(publish_tier: str) -> str:
    """A freshly published learning's status follows its tier."""
    return "provisional" if publish_tier == "provisional" else "active"


def policy_actor_for(policy_decision: str) -> str:
    """``operator`` for manual decisions, ``daemon`` for automatic ones."""
    return POLICY_ACTORS[policy_decision]


def automatic_learning_fields(evaluation: Evaluation) -> dict[str, Any] | None:
    """The governance fields of a learning the daemon publishes from ``evaluation``, or ``None`` when the
    action publishes nothing. Verification starts ``unverified``; the service marks a supported
    ``publish_active`` as ``verified`` (§4.12)."""
    tier = publish_tier_for_action(evaluation.action)
    if tier is None:
        return None
    return {
        "status": status_for_tier(tier),
        "publish_tier": tier,
        "policy_decision": "automatic",
        "policy_actor": policy_actor_for("automatic"),
        "verification_status": "unverified",
        "expires_at_ms": evaluation.expires_at_ms,
    }
