"""A skill definition, its validation rules and its fingerprint (spec §1.8, §4.18).

A *definition* is what a skill shows to the model and how it runs: name, description, when_to_use, version,
instructions and the runtime config. The definition fingerprint guards rollout evidence: evidence recorded
against one fingerprint is never counted for another definition.

The same rules validate promoted skills (the API) and catalog skills (``SKILL.md`` files), so a name that
cannot be promoted cannot be loaded either, and a hostile name (``../../etc``, Cyrillic look-alikes, 300
characters) is refused before it gets anywhere near a path.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from memory.errors import ValidationFailed

NAME_MAX_CHARS = 64
ONE_LINE_MAX_CHARS = 1024
VERSION_MAX_CHARS = 64
INSTRUCTIONS_MAX_CHARS = 20_000
TOOL_NAME_MAX_CHARS = 200
MAX_TOOLS = 100

CONTEXT_INLINE = "inline"
CONTEXT_FORK = "fork"
CONTEXTS = (CONTEXT_INLINE, CONTEXT_FORK)
CHILD_ONLY_RUNTIME_FIELDS = ("agent_profile", "provider", "model", "fallback_model")
RUNTIME_FIELDS = ("allowed_tools", "blocked_tools", "context", *CHILD_ONLY_RUNTIME_FIELDS)

# The reference daemon's default, used when a promotion leaves the description empty.
DEFAULT_PROMOTED_DESCRIPTION = "Execute this promoted procedure in a dedicated child agent."

_NAME_EXTRA_CHARS = frozenset(":_-")


def normalize_single_line(value: str) -> str:
    """Collapse every whitespace run (Unicode whitespace, newlines included) into one space and trim."""
    return " ".join(value.split())


def optional_single_line(value: str | None) -> str | None:
    """A one-line optional field: normalised, and absent when blank."""
    if value is None:
        return None
    normalized = normalize_single_line(value)
    return normalized or None


def skill_name_problem(value: object) -> str | None:
    """The first name rule ``value`` breaks, or None. Rules (in order): present; no leading, trailing or
    repeated whitespace; only ASCII letters, digits, ``:``, ``_`` and ``-``; at most 64 characters."""
    if not isinstance(value, str) or not normalize_single_line(value):
        return "skill_name is required"
    if normalize_single_line(value) != value:
        return "skill_name must not contain leading, trailing, or repeated whitespace"
    if not all(ch.isascii() and (ch.isalnum() or ch in _NAME_EXTRA_CHARS) for ch in value):
        return "skill_name may contain only ASCII letters, digits, ':', '_' and '-'"
    if len(value) > NAME_MAX_CHARS:
        return f"skill_name must be at most {NAME_MAX_CHARS} characters"
    return None


def validate_skill_name(value: object, *, field_name: str = "skill_name") -> str:
    problem = skill_name_problem(value)
    if problem:
        raise ValidationFailed(problem, field=field_name, domain="skills", code="invalid_skill_name")
    return value  # type: ignore[return-value]


def validate_single_line(field_name: str, value: str, *, max_chars: int = ONE_LINE_MAX_CHARS) -> str:
    normalized = normalize_single_line(value)
    if not normalized:
        raise ValidationFailed(
            f"{field_name} is required", field=field_name, domain="skills", code="invalid_skill_definition"
        )
    if normalized != value:
        raise ValidationFailed(
            f"{field_name} must not contain leading, trailing, or repeated whitespace",
            field=field_name,
            domain="skills",
            code="invalid_skill_definition",
        )
    if len(value) > max_chars:
        raise ValidationFailed(
            f"{field_name} must be at most {max_chars} characters",
            field=field_name,
            domain="skills",
            code="invalid_skill_definition",
        )
    return value


def validate_instructions(value: str) -> str:
    trimmed = value.strip()
    if not trimmed:
        raise ValidationFailed(
            "instructions are required",
            field="instructions",
            domain="skills",
            code="invalid_skill_definition",
        )
    if len(trimmed) > INSTRUCTIONS_MAX_CHARS:
        raise ValidationFailed(
            f"instructions must be at most {INSTRUCTIONS_MAX_CHARS} characters",
            field="instructions",
            domain="skills",
            code="invalid_skill_definition",
        )
    return trimmed


@dataclass(frozen=True)
class SkillRuntime:
    """SkillRuntimeConfig: tool preferences, execution context and child-agent overrides."""

    allowed_tools: tuple[str, ...] = ()
    blocked_tools: tuple[str, ...] = ()
    context: str = CONTEXT_INLINE
    agent_profile: str | None = None
    provider: str | None = None
    model: str | None = None
    fallback_model: str | None = None

    def to_dict(self) -> dict:
        """The serialised form, in the reference's field order: empty tool lists and absent overrides are
        left out (this exact JSON goes into the fingerprint)."""
        data: dict = {}
        if self.allowed_tools:
            data["allowed_tools"] = list(self.allowed_tools)
        if self.blocked_tools:
            data["blocked_tools"] = list(self.blocked_tools)
        data["context"] = self.context
        for name in CHILD_ONLY_RUNTIME_FIELDS:
            value = getattr(self, name)
            if value is not None:
                data[name] = value
        return data

    def to_view(self) -> dict:
        """The API form: every field present."""
        return {
            "allowed_tools": list(self.allowed_tools),
            "blocked_tools": list(self.blocked_tools),
            "context": self.context,
            **{name: getattr(self, name) for name in CHILD_ONLY_RUNTIME_FIELDS},
        }

    @classmethod
    def from_dict(cls, data: dict | None) -> SkillRuntime:
        """Parse and validate a runtime mapping (the stored JSON, a runtime file, or request fields)."""
        data = data if data is not None else {}
        if not isinstance(data, dict):
            raise ValidationFailed(
                "runtime must be a mapping", field="runtime", domain="skills", code="invalid_skill_runtime"
            )
        unknown = sorted(set(data) - set(RUNTIME_FIELDS))
        if unknown:
            raise ValidationFailed(
                f"unknown runtime field {unknown[0]}",
                field=unknown[0],
                domain="skills",
                code="invalid_skill_runtime",
            )
        context = data.get("context")
        context = CONTEXT_INLINE if context is None else context
        if context not in CONTEXTS:
            raise ValidationFailed(
                "context must be `inline` or `fork`",
                field="context",
                domain="skills",
                code="invalid_skill_runtime",
            )
        overrides = {}
        for name in CHILD_ONLY_RUNTIME_FIELDS:
            value = data.get(name)
            if value is not None and not isinstance(value, str):
                raise ValidationFailed(
                    f"{name} must be a string", field=name, domain="skills", code="invalid_skill_runtime"
                )
            value = value.strip() if value else None
            if value is not None:
                validate_single_line(name, value, max_chars=TOOL_NAME_MAX_CHARS)
            overrides[name] = value or None
        runtime = cls(
            allowed_tools=_tool_list(data.get("allowed_tools"), "allowed_tools"),
            blocked_tools=_tool_list(data.get("blocked_tools"), "blocked_tools"),
            context=context,
            **overrides,
        )
        if runtime.context == CONTEXT_INLINE and any(overrides.values()):
            raise ValidationFailed(
                "inline promoted skills cannot declare child-only runtime overrides",
                field="context",
                domain="skills",
                code="invalid_skill_runtime",
            )
        return runtime

    def text_fields(self) -> Iterable[tuple[str, str]]:
        """(field, value) for every string in the runtime, for the secret checks."""
        for tool in self.allowed_tools:
            yield "allowed_tools", tool
        for tool in self.blocked_tools:
            yield "blocked_tools", tool
        yield "context", self.context
        for name in CHILD_ONLY_RUNTIME_FIELDS:
            value = getattr(self, name)
            if value is not None:
                yield name, value


def _tool_list(value: object, field_name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        raise ValidationFailed(
            f"{field_name} must be a list of tool names",
            field=field_name,
            domain="skills",
            code="invalid_skill_runtime",
        )
    if len(value) > MAX_TOOLS:
        raise ValidationFailed(
            f"{field_name} may hold at most {MAX_TOOLS} tools",
            field=field_name,
            domain="skills",
            code="invalid_skill_runtime",
        )
    tools = []
    for item in value:
        tool = validate_single_line(field_name, item.strip(), max_chars=TOOL_NAME_MAX_CHARS)
        if tool not in tools:
            tools.append(tool)
    return tuple(tools)


@dataclass(frozen=True)
class SkillDefinition:
    """The prompt-visible and runtime definition of one skill."""

    name: str
    description: str
    instructions: str
    when_to_use: str | None = None
    version: str | None = None
    runtime: SkillRuntime = field(default_factory=SkillRuntime)

    def fingerprint(self) -> str:
        return definition_fingerprint(self)

    def same_definition(self, other: SkillDefinition) -> bool:
        return (
            self.name,
            self.description,
            self.when_to_use,
            self.version,
            self.instructions.strip(),
            self.runtime,
        ) == (
            other.name,
            other.description,
            other.when_to_use,
            other.version,
            other.instructions.strip(),
            other.runtime,
        )


def runtime_json(runtime: SkillRuntime) -> str:
    """Compact JSON (serde_json style: no spaces, non-ASCII kept) of the runtime config."""
    return json.dumps(runtime.to_dict(), separators=(",", ":"), ensure_ascii=False)


def definition_fingerprint(definition: SkillDefinition) -> str:
    """SHA-256 hex over name, ``\\0description\\0``, description, ``\\0when_to_use\\0``, when_to_use (or
    nothing), ``\\0version\\0``, version (or nothing), ``\\0instructions\\0``, trimmed instructions,
    ``\\0runtime\\0`` and the JSON-serialised runtime (spec §1.8)."""
    digest = hashlib.sha256()
    digest.update(definition.name.encode())
    digest.update(b"\0description\0")
    digest.update(definition.description.encode())
    digest.update(b"\0when_to_use\0")
    digest.update((definition.when_to_use or "").encode())
    digest.update(b"\0version\0")
    digest.update((definition.version or "").encode())
    digest.update(b"\0instructions\0")
    digest.update(definition.instructions.strip().encode())
    digest.update(b"\0runtime\0")
    digest.update(runtime_json(definition.runtime).encode())
    return digest.hexdigest()
