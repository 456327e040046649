"""Input cleaning for the learning plane's writes (spec §2.3, §3.4): scopes, source and evidence references,
expiry, content, and the semantic key digests. Each failure is a 400 ``ValidationFailed`` naming the field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from learnings import semantic, validation
from learnings.models import key_digest
from learnings.selectors import DOMAIN
from learnings.validation import LearningScope, LearningValidationError
from memory.errors import ValidationFailed

MAX_EVIDENCE_REFS = 32
MAX_REF_TEXT = 500
SOURCE_TEXT_FIELDS = ("run_id", "session_id", "agent_id", "observation_id", "derivation_id")
SOURCE_FIELDS = (*SOURCE_TEXT_FIELDS, "input_event_offset")
EVIDENCE_FIELDS = ("run_id", "artifact_id", "note")



def invalid(exc: LearningValidationError, *, code: str = "invalid_learning") -> ValidationFailed:
    return ValidationFailed(exc.message, field=exc.field, domain=DOMAIN, code=code)


def normalise_scope(kind: object, scope_id: object) -> LearningScope:
    """A scope given as input: ids trimmed, workspace id defaulted (§2.3)."""
    try:
        return validation.normalise_scope(kind, scope_id)  # type: ignore[arg-type]
    except LearningValidationError as exc:
        raise invalid(exc) from exc


def clean_source(value: object) -> dict:
    """A ``LearningSourceRef``: optional run/session/agent/observation/derivation ids and an input offset."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationFailed("source must be an object", field="source", domain=DOMAIN, code="invalid_learning")
    unknown = sorted(set(value) - set(SOURCE_FIELDS))
    if unknown:
        raise ValidationFailed(
            f"unknown field {unknown[0]}",
            field=f"source.{unknown[0]}",
            domain=DOMAIN,
            code="invalid_learning",
        )
    cleaned: dict[str, Any] = {}
    for name in SOURCE_TEXT_FIELDS:
        item = value.get(name)
        if item is None:
            continue
        if not isinstance(item, str) or len(item) > MAX_REF_TEXT:
            raise ValidationFailed(
                f"source.{name} must be a string of at most {MAX_REF_TEXT} characters",
                field=f"source.{name}",
                domain=DOMAIN,
                code="invalid_learning",
            )
        cleaned[name] = item
    offset = value.get("input_event_offset")
    if offset is not None:
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValidationFailed(
                "source.input_event_offset must be a non-negative integer",
                field="source.input_event_offset",
                domain=DOMAIN,
                code="invalid_learning",
            )
        cleaned["input_event_offset"] = offset
    return cleaned


def clean_evidence_refs(value: object) -> list[dict]:
    """``LearningEvidenceRef`` items: optional ``run_id``, ``artifact_id``, ``note`` strings."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValidationFailed(
            "evidence_refs must be a list", field="evidence_refs", domain=DOMAIN, code="invalid_learning"
        )
    if len(value) > MAX_EVIDENCE_REFS:
        raise ValidationFailed(
            f"evidence_refs may hold at most {MAX_EVIDENCE_REFS} items",
            field="evidence_refs",
            domain=DOMAIN,
            code="invalid_learning",
        )
    refs = []
    for index, item in enumerate(value):
        where = f"evidence_refs[{index}]"
        if not isinstance(item, Mapping):
            raise ValidationFailed(f"{where} must be an object", field=where, domain=DOMAIN, code="invalid_learning")
        unknown = sorted(set(item) - set(EVIDENCE_FIELDS))
        if unknown:
            raise ValidationFailed(
                f"unknown field {unknown[0]}",
                field=f"{where}.{unknown[0]}",
                domain=DOMAIN,
                code="invalid_learning",
            )
        ref = {}
        for name in EVIDENCE_FIELDS:
            text = item.get(name)
            if text is None:
                continue
            if not isinstance(text, str) or len(text) > MAX_REF_TEXT:
                raise ValidationFailed(
                    f"{where}.{name} must be a string of at most {MAX_REF_TEXT} characters",
                    field=f"{where}.{name}",
                    domain=DOMAIN,
                    code="invalid_learning",
                )
            ref[name] = text
        refs.append(ref)
    return refs


def clean_expiry(value: object, field: str = "expires_at_ms") -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**62:
        raise ValidationFailed(
            f"{field} must be a non-negative integer", field=field, domain=DOMAIN, code="invalid_learning"
        )
    return value


def clean_content(value: object) -> str:
    try:
        validation.validate_content(value)  # type: ignore[arg-type]
    except LearningValidationError as exc:
        raise invalid(exc) from exc
    return str(value).strip()


def semantic_key_digests(content: str) -> tuple[str, str]:
    keys = semantic.semantic_keys(content)
    return key_digest(keys.content_key), key_digest(keys.subject_key)


