"""The learning automation policy (spec §3.2, §3.3) and publication-rule evaluation (§4.10).

Frozen dataclasses mirror the JSON shape exactly::

    {"mode": "shadow",
     "capture": {"run_summary_candidates": true,
                 "semantic_candidates": {"enabled": false, "model": null, "timeout_ms": null,
                                         "max_candidates_per_run": 2}},
     "publication": {"default_action": "manual_review", "allow_api_origin_active_publication": false,
                     "quarantined_rule_names": [], "rules": []},
     "judge": {"enabled": false, "model": null, "timeout_ms": null},
     "retrieval": {"ranker": "hybrid", "max_tokens": 2000, "max_entries": 24, "standing_tokens": 400}}

``LearningPolicy()`` is the stored default (``mode`` = ``shadow``). A *submitted* policy that omits
``mode`` gets ``manual_only`` (the reference's enum default); every other omitted field takes the default
above. The shape is one JSON Schema (:data:`POLICY_SCHEMA`, Draft 2020-12, checked with ``jsonschema``);
unknown fields, wrong types and out-of-bound values are rejected with :class:`LearningPolicyError`, whose
``field`` is a dotted path relative to the policy object (``publication.rules[0].min_confidence``). The
§3.2 rules that relate fields are :meth:`LearningPolicy.validate_rules`, with the spec's literal messages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError

from learnings import screening
from learnings.validation import content_has_secret_material
from learnings.vocabulary import (
    SEMANTIC_KINDS,
    LearningKind,
    LearningStatus,
    PolicyDecision,
    PublishTier,
    ScopeKind,
    Sensitivity,
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
POLICY_FIELDS = ("mode", "capture", "publication", "judge", "retrieval")
RANKERS = ("hybrid", "lexical")
DEFAULT_RETRIEVAL_MAX_TOKENS = 2_000
DEFAULT_RETRIEVAL_MAX_ENTRIES = 24
DEFAULT_RETRIEVAL_STANDING_TOKENS = 400
"""Tokens of learned_context kept for standing preferences and decisions (``learnings.standing``)."""
RETRIEVAL_MAX_TOKENS_LIMIT = 150_000
RETRIEVAL_MAX_ENTRIES_LIMIT = 500

# Literal reasons (§4.10).
REASON_SECRET = "candidate content matched the anti-secret learning classifier"
REASON_SCREENED = "; held for operator review: the memory-poisoning screen flagged {} (no automation publishes it)"
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
# The schema (JSON Schema, Draft 2020-12)
#
# Shape, types and unconditional bounds are declared here; the §3.2 rules, which depend on other fields and
# keep the reference's order, are LearningPolicy.validate_rules(). A body is checked before any dataclass is
# built, and the FIRST error the validator yields is reported: keywords are listed in the order the
# reference's serde parse meets them (the value's type, unknown fields, required fields, then each property
# in document order), so the field reported is the one a reader scanning the body meets first.
#
# Each error becomes a LearningPolicyError: ``field`` is the dotted path from the policy object
# (``publication.rules[0].min_confidence``; ``policy`` for the object itself) and the message is the
# default for the failing keyword (_default_message), or the literal text that the subschema gives under
# ``x-messages`` (keyword -> template with {field}, {index} = the last list index on the path, {minimum},
# {maximum}). A numeric bound is one keyword: add ``"maximum": N`` to a field and a value above it reads
# "<field> must be between <minimum> and N" (or "... must be N or lower" without a minimum), unless
# ``x-messages`` gives the literal text, as the retrieval bounds do.
# ---------------------------------------------------------------------------------------------------------

MESSAGES = "x-messages"
"""The keyword under which a subschema gives literal error messages (an annotation: validators ignore it)."""


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` that also accepts ``null`` (an optional field; null means "not set")."""
    if "enum" in schema:
        return {**schema, "enum": [*schema["enum"], None]}
    return {**schema, "type": [schema["type"], "null"]}


def _choice(choices: Sequence[str]) -> dict[str, Any]:
    """One of ``choices``; any other value, of any type, reads "must be one of `a`, `b`"."""
    return {"enum": list(choices)}


def _record(properties: dict[str, Any], *, required: Sequence[str] = ()) -> dict[str, Any]:
    """An object with exactly ``properties`` (unknown fields are errors)."""
    schema: dict[str, Any] = {"type": "object", "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    schema["properties"] = properties
    return schema


_FLAG = {"type": "boolean"}
_COUNT = {"type": "integer", "minimum": 0}
# Every number has an upper bound (issue 14.9): a value must be storable, meaningful and safe to sleep on.
MAX_TIMEOUT_MS = 600_000  # 10 minutes for one model call
MAX_OUTPUT_TOKENS_LIMIT = 1_000_000
MAX_DURATION_MS = 100 * 365 * 24 * 3600 * 1000  # a century
MAX_REVISION = 2**63 - 1
_TIMEOUT = _nullable({**_COUNT, "maximum": MAX_TIMEOUT_MS})
_TEXT = _nullable({"type": "string"})

_GENERATION = _nullable(
    _record(
        {
            "model": _TEXT,
            "fallback_model": _TEXT,
            "max_output_tokens": _nullable({**_COUNT, "maximum": MAX_OUTPUT_TOKENS_LIMIT}),
            "temperature": _nullable({"type": "number", "minimum": 0, "maximum": 2}),
        }
    )
)
_MODEL = _nullable(_record({"provider": _TEXT, "generation": _GENERATION}))

_RULE = _record(
    {
        "name": _TEXT,
        "scope_kind": _nullable(_choice(ScopeKind.values)),
        "scope_id": _TEXT,
        "kind": _nullable(_choice(LearningKind.values)),
        "sensitivity": _nullable(_choice(Sensitivity.values)),
        # Any integer: the 0..100 range is a §3.2 rule (validate_rules), reported with its literal message.
        "min_confidence": _nullable({"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1}),
        "require_evidence": _FLAG,
        "require_source_run": _FLAG,
        "require_source_session": _FLAG,
        "action": {"not": {"type": "null"}, **_choice(ACTIONS), MESSAGES: {"not": "{field} is required"}},
        "expires_after_ms": _nullable({**_COUNT, "maximum": MAX_DURATION_MS}),
    },
    required=("action",),
)

POLICY_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "urn:kheish:learning-policy",
    "title": "Learning automation policy (spec §3.2)",
    **_record(
        {
            "mode": _choice(MODES),
            "capture": _record(
                {
                    "run_summary_candidates": _FLAG,
                    "semantic_candidates": _record(
                        {
                            "enabled": _FLAG,
                            "model": _MODEL,
                            "timeout_ms": _TIMEOUT,
                            "max_candidates_per_run": {**_COUNT, "maximum": 2**31 - 1},
                        }
                    ),
                }
            ),
            "publication": _record(
                {
                    "default_action": _choice(ACTIONS),
                    "allow_api_origin_active_publication": _FLAG,
                    "quarantined_rule_names": {"type": "array", "items": {"type": "string"}},
                    "rules": {"type": "array", "items": _RULE},
                }
            ),
            "judge": _record({"enabled": _FLAG, "model": _MODEL, "timeout_ms": _TIMEOUT}),
            "retrieval": _record(
                {
                    "ranker": _choice(RANKERS),
                    "max_tokens": {
                        **_COUNT,
                        "maximum": RETRIEVAL_MAX_TOKENS_LIMIT,
                        MESSAGES: {"maximum": "learning retrieval max_tokens must be between 0 and {maximum}"},
                    },
                    "max_entries": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": RETRIEVAL_MAX_ENTRIES_LIMIT,
                        MESSAGES: {
                            "minimum": "learning retrieval max_entries must be between {minimum} and {maximum}",
                            "maximum": "learning retrieval max_entries must be between {minimum} and {maximum}",
                        },
                    },
                    "standing_tokens": {
                        **_COUNT,
                        "maximum": RETRIEVAL_MAX_TOKENS_LIMIT,
                        MESSAGES: {"maximum": "learning retrieval standing_tokens must be between 0 and {maximum}"},
                    },
                }
            ),
        }
    ),
}
"""The policy object (``GET``/``POST /v1/runtime/learning-policy``'s ``policy``)."""

REQUEST_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "urn:kheish:learning-policy-request",
    "title": "POST /v1/runtime/learning-policy body (the legacy flat form is wrapped first)",
    # The policy schema without "$schema"/"$id": a subschema naming a "$schema" is checked by that dialect's
    # stock validator, without this module's integer rule.
    **_record(
        {
            "policy": {key: value for key, value in POLICY_SCHEMA.items() if not key.startswith("$")},
            "expected_revision": _nullable({**_COUNT, "maximum": MAX_REVISION}),
        }
    ),
}


def _is_integer(_checker: object, instance: object) -> bool:
    # JSON Schema counts 2.0 as an integer; a policy count must be written as one (the reference is serde).
    return isinstance(instance, int) and not isinstance(instance, bool)


_Validator = validators.extend(
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine_many(
        {
            "integer": _is_integer,
            "object": lambda _checker, instance: isinstance(instance, Mapping),
            "array": lambda _checker, instance: isinstance(instance, list | tuple),
        }
    ),
)
_POLICY_VALIDATOR = _Validator(POLICY_SCHEMA)
_REQUEST_VALIDATOR = _Validator(REQUEST_SCHEMA)

_TYPE_NAMES = {
    "object": "an object",
    "boolean": "a boolean",
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "array": "a list",
}


def _field_name(path: Sequence[str | int]) -> str:
    name = ""
    for part in path:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name or "policy"


def _default_message(keyword: str, schema: Mapping[str, Any], name: str) -> str:
    types = schema.get("type", ())
    types = [types] if isinstance(types, str) else [kind for kind in types if kind != "null"]
    minimum, maximum = schema.get("minimum"), schema.get("maximum")
    if keyword == "enum":
        choices = ", ".join(f"`{choice}`" for choice in schema["enum"] if choice is not None)
        return f"{name} must be one of {choices}"
    if keyword == "required":
        return f"{name} is required"
    if keyword in ("type", "minimum") and types == ["integer"] and minimum == 0:
        return f"{name} must be a non-negative integer"
    if keyword == "type" and types:
        return f"{name} must be {_TYPE_NAMES.get(types[0], types[0])}"
    if keyword in ("minimum", "maximum") and minimum is not None and maximum is not None:
        return f"{name} must be between {minimum} and {maximum}"
    if keyword == "minimum":
        return f"{name} must be {minimum} or greater"
    if keyword == "maximum":
        return f"{name} must be {maximum} or lower"
    return f"{name} is invalid"


def _policy_error(error: ValidationError, *, under: str | None = None) -> LearningPolicyError:
    """The :class:`LearningPolicyError` for one schema error; ``under``: the property holding the policy
    object, stripped from the path (the request envelope's ``policy``)."""
    path = list(error.absolute_path)
    if under is not None and path[:1] == [under]:
        path = path[1:]
    # An error a validator yields carries its schema, instance and keyword value (the stubs' ``Unset`` is for
    # errors built by hand); the policy schemas' subschemas are objects, never ``true``/``false``.
    schema = cast("Mapping[str, Any]", error.schema)
    instance: Any = error.instance
    keyword = error.validator
    if keyword == "additionalProperties":
        name = _field_name([*path, next(str(key) for key in instance if key not in schema["properties"])])
        return LearningPolicyError(name, f"unknown field `{name}`")
    if keyword == "required":
        required: Any = error.validator_value
        path.append(next(key for key in required if key not in instance))
    name = _field_name(path)
    template = schema.get(MESSAGES, {}).get(keyword) if isinstance(schema, Mapping) else None
    if template is None:
        return LearningPolicyError(name, _default_message(str(keyword), schema, name))
    indexes = [part for part in path if isinstance(part, int)]
    message = template.format(
        field=name,
        index=indexes[-1] if indexes else "",
        minimum=schema.get("minimum"),
        maximum=schema.get("maximum"),
    )
    return LearningPolicyError(name, message)


def _check(validator: Any, instance: object, *, under: str | None = None) -> None:
    error = next(validator.iter_errors(instance), None)
    if error is not None:
        raise _policy_error(error, under=under)


# ---------------------------------------------------------------------------------------------------------
# The policy (built from a body the schema accepted: defaults for what is omitted, null is "not set")
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
    def from_dict(cls, data: Mapping[str, Any]) -> ModelGeneration:
        return cls(**data)

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
    def from_dict(cls, data: Mapping[str, Any] | None) -> ModelOverride | None:
        if data is None:
            return None
        generation = data.get("generation")
        return cls(
            provider=data.get("provider"),
            generation=None if generation is None else ModelGeneration.from_dict(generation),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "generation": None if self.generation is None else self.generation.to_dict(),
        }


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
    def from_dict(cls, data: Mapping[str, Any]) -> SemanticCaptureConfig:
        return cls(**{**data, "model": ModelOverride.from_dict(data.get("model"))})

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
    def from_dict(cls, data: Mapping[str, Any]) -> CaptureConfig:
        return cls(
            **{**data, "semantic_candidates": SemanticCaptureConfig.from_dict(data.get("semantic_candidates", {}))}
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
    def from_dict(cls, data: Mapping[str, Any]) -> PublicationRule:
        return cls(**data)

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
    def from_dict(cls, data: Mapping[str, Any]) -> PublicationConfig:
        return cls(
            **{
                **data,
                "quarantined_rule_names": tuple(data.get("quarantined_rule_names", ())),
                "rules": tuple(PublicationRule.from_dict(rule) for rule in data.get("rules", ())),
            }
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
    def from_dict(cls, data: Mapping[str, Any]) -> JudgeConfig:
        return cls(**{**data, "model": ModelOverride.from_dict(data.get("model"))})

    def to_dict(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "model": None if self.model is None else self.model.to_dict(),
            "timeout_ms": self.timeout_ms,
        }


@dataclass(frozen=True, kw_only=True)
class RetrievalConfig:
    """How learned context is chosen and bounded (beyond the reference; ``docs/recall.md``).

    ``ranker``: ``hybrid`` (BM25 over stemmed terms fused with embedding similarity, from the recall indexes)
    or ``lexical`` (spec §4.5/§4.7 exactly); it ranks learned_context, recovered_memory and memory-search.
    ``max_tokens`` bounds the learned_context section and ``max_entries`` its entries, both under the spec's
    window budget (whichever is smaller). ``standing_tokens``: the share of that section kept for *standing*
    memory, the preferences and decisions of the session's scopes, which enter whatever the input's words
    (``learnings.standing``; never more than half the section, 0 turns it off; the hybrid ranker only). The
    bounds (0..150000, 1..500, 0..150000) are declared in :data:`POLICY_SCHEMA` with their messages."""

    ranker: str = "hybrid"
    max_tokens: int = DEFAULT_RETRIEVAL_MAX_TOKENS
    max_entries: int = DEFAULT_RETRIEVAL_MAX_ENTRIES
    standing_tokens: int = DEFAULT_RETRIEVAL_STANDING_TOKENS

    FIELDS = ("ranker", "max_tokens", "max_entries", "standing_tokens")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RetrievalConfig:
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ranker": self.ranker,
            "max_tokens": self.max_tokens,
            "max_entries": self.max_entries,
            "standing_tokens": self.standing_tokens,
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
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)

    @property
    def reviews_candidates(self) -> bool:
        """False in ``manual_only`` mode, where the worker evaluates nothing (§3.3)."""
        return self.mode != "manual_only"

    # -- parsing -------------------------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: object) -> LearningPolicy:
        """Parse a policy object against :data:`POLICY_SCHEMA` (does not check the §3.2 rules:
        :meth:`validate_rules`). An omitted ``mode`` is ``manual_only``; other omitted fields take their
        defaults."""
        _check(_POLICY_VALIDATOR, data)
        return cls._build(cast("Mapping[str, Any]", data))  # the schema checked it is a mapping

    @classmethod
    def _build(cls, data: Mapping[str, Any]) -> LearningPolicy:
        return cls(
            mode=data.get("mode", SUBMITTED_MODE_DEFAULT),
            capture=CaptureConfig.from_dict(data.get("capture", {})),
            publication=PublicationConfig.from_dict(data.get("publication", {})),
            judge=JudgeConfig.from_dict(data.get("judge", {})),
            retrieval=RetrievalConfig.from_dict(data.get("retrieval", {})),
        )

    @classmethod
    def from_request(cls, body: object) -> LearningPolicyRequest:
        """Parse and validate a policy-update body.

        Accepted: ``{"policy": {...}, "expected_revision"?: int}``, or the legacy flat policy object (at
        least one of ``mode``/``capture``/``publication``/``judge``/``retrieval``, optionally with
        ``expected_revision``), which is wrapped into the first form before :data:`REQUEST_SCHEMA` checks
        it. Anything else (including ``{}`` and a body with only ``expected_revision``) is rejected.
        """
        if not isinstance(body, Mapping):
            raise LearningPolicyError("policy", "learning-policy request must be an object")
        if "policy" not in body:
            if not any(key in body for key in POLICY_FIELDS):
                raise LearningPolicyError(
                    "policy", "learning-policy request must include policy or legacy policy fields"
                )
            revision = {"expected_revision": body["expected_revision"]} if "expected_revision" in body else {}
            body = {"policy": {key: value for key, value in body.items() if key != "expected_revision"}, **revision}
        _check(_REQUEST_VALIDATOR, body, under="policy")
        policy = cls._build(body["policy"])
        policy.validate_rules()
        return LearningPolicyRequest(policy=policy, expected_revision=body.get("expected_revision"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "capture": self.capture.to_dict(),
            "publication": self.publication.to_dict(),
            "judge": self.judge.to_dict(),
            "retrieval": self.retrieval.to_dict(),
        }

    # -- validation ----------------------------------------------------------------------------------------

    def validate(self) -> None:
        """Raise :class:`LearningPolicyError` for the first schema error of :meth:`to_dict` (a policy built in
        code: types, bounds), then for the first violated rule of §3.2 (:meth:`validate_rules`)."""
        _check(_POLICY_VALIDATOR, self.to_dict())
        self.validate_rules()

    def validate_rules(self) -> None:
        """Raise :class:`LearningPolicyError` with the first violated rule of §3.2 (literal messages, the
        reference's order), for a policy whose shape the schema already accepted (:meth:`from_dict`)."""
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
                raise LearningPolicyError(name_field, "learning publication quarantine names must not be empty")
            if _ascii_lower(trimmed) in seen:
                raise LearningPolicyError(name_field, "learning publication quarantine names must be unique")
            seen.add(_ascii_lower(trimmed))
        if self.judge.enabled and self.judge.timeout_ms == 0:
            raise LearningPolicyError("judge.timeout_ms", "learning judge timeout_ms must be greater than zero")
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
                    f"learning publication rule #{index} cannot use publish_active without an explicit kind filter",
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
    screening: dict | None = field(default=None, compare=False)
    """The candidate's poisoning-screen findings (``learnings.screening``)."""
    rule_action: str | None = field(default=None, compare=False)
    """The action before the screen gate (``action`` is after it); what the judge is asked about."""
    rule_reason: str | None = field(default=None, compare=False)


def candidate_screening(candidate: Any) -> dict:
    """The screen's findings stored on the candidate; a candidate without them (a mapping, or a row written
    before the screen) is screened now."""
    stored = _read(candidate, "screening")
    if isinstance(stored, Mapping):
        return dict(stored)
    return screening.screen(_read(candidate, "content") or "").to_dict()


def screen_gate(action: str, reason: str, findings: Mapping[str, Any] | None) -> tuple[str, str]:
    """No automation publishes a flagged candidate (issue 19.5): ``publish_*`` becomes ``manual_review``
    with the reason saying why; other actions (``reject``, ``manual_review``) are unchanged."""
    if action.startswith("publish_") and screening.is_flagged(findings):
        return "manual_review", reason + REASON_SCREENED.format(screening.summary(findings))
    return action, reason


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
       ``publish_provisional``;
    6. the screen gate: a candidate the poisoning screen flagged is never published — ``publish_*`` →
       ``manual_review`` (:func:`screen_gate`; ``rule_action`` keeps the action before it).
    """
    kind = _read(candidate, "kind")
    candidate_expiry = _read(candidate, "expires_at_ms")
    if kind in SEMANTIC_KINDS and content_has_secret_material(_read(candidate, "content") or ""):
        return Evaluation(
            "reject",
            None,
            REASON_SECRET,
            candidate_expiry,
            screening=candidate_screening(candidate),
            rule_action="reject",
            rule_reason=REASON_SECRET,
        )

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
    findings = candidate_screening(candidate)
    gated_action, gated_reason = screen_gate(action, reason, findings)
    return Evaluation(
        gated_action, matched, gated_reason, expiry, screening=findings, rule_action=action, rule_reason=reason
    )


# ---------------------------------------------------------------------------------------------------------
# Publication metadata (§4.10, §4.12, §4.14)
# ---------------------------------------------------------------------------------------------------------

POLICY_ACTORS: dict[str, str] = {PolicyDecision.MANUAL: "operator", PolicyDecision.AUTOMATIC: "daemon"}


def publish_tier_for_action(action: str) -> str | None:
    """``publish_provisional`` → ``provisional``, ``publish_active`` → ``active``, otherwise ``None``."""
    return {"publish_provisional": PublishTier.PROVISIONAL, "publish_active": PublishTier.ACTIVE}.get(action)


def status_for_tier(publish_tier: str) -> str:
    """A freshly published learning's status follows its tier."""
    return LearningStatus.PROVISIONAL if publish_tier == PublishTier.PROVISIONAL else LearningStatus.ACTIVE


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
