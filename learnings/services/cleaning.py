"""Input cleaning for the learning plane's writes (spec §2.3, §3.4): scopes, source and evidence references,
expiry, content, and the semantic key digests. Each failure is a 400 ``ValidationFailed`` naming the field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from jsonschema import Draft202012Validator, validators

from learnings import semantic, validation
from learnings.models import key_digest
from learnings.selectors import DOMAIN
from learnings.validation import LearningScope, LearningValidationError
from memory import public_ids
from memory.clock import now_ms
from memory.errors import ValidationFailed

MAX_EVIDENCE_REFS = 32
MAX_REF_TEXT = 500
SOURCE_TEXT_FIELDS = ("run_id", "session_id", "agent_id", "observation_id", "derivation_id")
SOURCE_FIELDS = (*SOURCE_TEXT_FIELDS, "input_event_offset")
EVIDENCE_FIELDS = ("run_id", "artifact_id", "note")

# Source and evidence references, declared as JSON Schema (Draft 2020-12, like the learning policy's in
# learnings.learning_policy). Every constraint names its message under "x-messages" ({field}: the dotted path,
# {key}: an unknown field's name, or the keyword's value: {maxLength}, {maxItems}); an unknown field is the
# alphabetically first one, and the first error the validator yields is the one reported.
MESSAGES = "x-messages"
_TEXT_MESSAGE = "{field} must be a string of at most {maxLength} characters"
_TEXT = {
    "type": ["string", "null"],
    "maxLength": MAX_REF_TEXT,
    MESSAGES: {"type": _TEXT_MESSAGE, "maxLength": _TEXT_MESSAGE},
}
_UNKNOWN = "unknown field {key}"
FIELD_DESCRIPTIONS = {
    "run_id": "a run of the caller's own (run-N) the statement comes from",
    "session_id": "a session of the caller's own (session-N) the statement comes from",
    "agent_id": "the proposing agent's name (only its own)",
    "observation_id": "the caller's own id for the observation behind the statement",
    "derivation_id": "the caller's own id for how the statement was derived",
    "artifact_id": "the caller's own id of an artifact that supports the statement",
    "note": "a short note on what this evidence shows",
}


def _text(name: str) -> dict[str, Any]:
    return {**_TEXT, "description": FIELD_DESCRIPTIONS[name]}


_OFFSET_MESSAGE = "{field} must be a non-negative integer"

SOURCE_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "LearningSourceRef",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        **{name: _text(name) for name in SOURCE_TEXT_FIELDS},
        "input_event_offset": {
            "type": ["integer", "null"],
            "minimum": 0,
            "description": "the journal offset of the input event the statement comes from",
            MESSAGES: {"type": _OFFSET_MESSAGE, "minimum": _OFFSET_MESSAGE},
        },
    },
    MESSAGES: {"type": "{field} must be an object", "additionalProperties": _UNKNOWN},
}
EVIDENCE_REFS_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "LearningEvidenceRef[]",
    "type": "array",
    "maxItems": MAX_EVIDENCE_REFS,
    "items": {
        "type": "object",
        "additionalProperties": False,
        "properties": {name: _text(name) for name in EVIDENCE_FIELDS},
        MESSAGES: {"type": "{field} must be an object", "additionalProperties": _UNKNOWN},
    },
    MESSAGES: {"type": "{field} must be a list", "maxItems": "{field} may hold at most {maxItems} items"},
}

_Validator = validators.extend(  # type: ignore[no-untyped-call]  # the jsonschema stubs leave extend untyped
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine_many(
        {
            # 2.0 is no offset; any mapping is an object (as the hand-written checks had it).
            "integer": lambda _checker, value: isinstance(value, int) and not isinstance(value, bool),
            "object": lambda _checker, value: isinstance(value, Mapping),
        }
    ),
)
_SOURCE = _Validator(SOURCE_SCHEMA)
_EVIDENCE_REFS = _Validator(EVIDENCE_REFS_SCHEMA)


def invalid(exc: LearningValidationError, *, code: str = "invalid_learning") -> ValidationFailed:
    return ValidationFailed(exc.message, field=exc.field, domain=DOMAIN, code=code)


def normalise_scope(kind: object, scope_id: object) -> LearningScope:
    """A scope given as input: ids trimmed, workspace id defaulted (§2.3)."""
    try:
        return validation.normalise_scope(kind, scope_id)
    except LearningValidationError as exc:
        raise invalid(exc) from exc


MSG_SESSION_SCOPE_ID = "session learning scope id must be a session id: session-N, N in ASCII digits"


def scope_to_store(kind: object, scope_id: object) -> LearningScope:
    """``normalise_scope``, and a session scope must name a session by its canonical public id (issue 19.9):
    ``session-١`` or ``session-01`` would be stored under a scope key no session's ever matches."""
    scope = normalise_scope(kind, scope_id)
    if scope.kind == "session" and not public_ids.is_canonical(scope.id, public_ids.SESSION):
        raise ValidationFailed(MSG_SESSION_SCOPE_ID, field="scope.id", domain=DOMAIN, code="invalid_learning")
    return scope


def _check(validator: Any, value: object, root: str) -> None:
    error = next(validator.iter_errors(value), None)
    if error is None:
        return
    path: list[str | int] = [root, *error.absolute_path]
    key = ""
    if error.validator == "additionalProperties":
        key = sorted(set(error.instance) - set(error.schema["properties"]))[0]
        path.append(key)
    field = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path).lstrip(".")
    template = error.schema.get(MESSAGES, {}).get(error.validator)
    message = (
        error.message
        if template is None
        else template.format(
            field=field, key=key, **{name: error.schema.get(name) for name in ("maxLength", "maxItems")}
        )
    )
    raise ValidationFailed(message, field=field, domain=DOMAIN, code="invalid_learning")


def clean_source(value: object) -> dict[str, Any]:
    """A ``LearningSourceRef``: optional run/session/agent/observation/derivation ids and an input offset
    (:data:`SOURCE_SCHEMA`); null fields are dropped."""
    if value is None:
        return {}
    _check(_SOURCE, value, "source")
    source = cast("Mapping[str, Any]", value)  # the schema's object: a mapping
    return {name: source[name] for name in SOURCE_FIELDS if source.get(name) is not None}


def clean_evidence_refs(value: object) -> list[dict[str, Any]]:
    """``LearningEvidenceRef`` items: optional ``run_id``, ``artifact_id``, ``note`` strings
    (:data:`EVIDENCE_REFS_SCHEMA`); null fields are dropped."""
    if value is None:
        return []
    _check(_EVIDENCE_REFS, value, "evidence_refs")
    refs = cast("list[Mapping[str, Any]]", value)  # the schema's array of objects (mappings)
    return [{name: item[name] for name in EVIDENCE_FIELDS if item.get(name) is not None} for item in refs]


def clean_expiry(value: object, field: str = "expires_at_ms") -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**62:
        raise ValidationFailed(
            f"{field} must be a non-negative integer", field=field, domain=DOMAIN, code="invalid_learning"
        )
    return value


STATED_AHEAD_MS = 24 * 3600 * 1000
"""A statement's time may be at most a day ahead of the server clock (clients' clocks drift; a later one is
not a statement that was made)."""


def clean_stated_at(value: object, field: str = "stated_at_ms") -> int | None:
    """When a statement was made (epoch ms): optional; a non-negative integer not in the future."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**62:
        raise ValidationFailed(
            f"{field} must be a non-negative integer", field=field, domain=DOMAIN, code="invalid_learning"
        )
    if value > now_ms() + STATED_AHEAD_MS:
        raise ValidationFailed(f"{field} cannot be in the future", field=field, domain=DOMAIN, code="invalid_learning")
    return value


def clean_content(value: object) -> str:
    try:
        validation.validate_content(value)
    except LearningValidationError as exc:
        raise invalid(exc) from exc
    return str(value).strip()


def semantic_key_digests(content: str) -> tuple[str, str]:
    keys = semantic.semantic_keys(content)
    return key_digest(keys.content_key), key_digest(keys.subject_key)
