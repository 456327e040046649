"""Input cleaning for the skills services: operator reasons, the promotion request (CreateLearningSkillRequest,
spec §2.5) and rollout evidence input. Everything a caller sends is trimmed, bounded and checked for secret
material here, before any row is locked or any message repeats it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memory import scrubbing as redaction
from skills.fingerprint import (
    CONTEXT_FORK,
    ONE_LINE_MAX_CHARS,
    VERSION_MAX_CHARS,
    SkillRuntime,
    optional_single_line,
    validate_instructions,
    validate_single_line,
    validate_skill_name,
)
from skills.models import RolloutKind, SkillStatus
from skills.services.messages import MSG_FORK, MSG_MARKER_REQUIRED, MSG_PROFILE, MSG_REASON_SECRET, invalid

VERIFICATION_PROFILE = "verification"
MAX_REASON_CHARS = 2000
MAX_MARKER_CHARS = 2000


def has_secret(text: str) -> bool:
    """The §4.19 learning-content classifier (looked up on ``memory.redaction`` at call time)."""
    return bool(redaction.looks_like_secret(text))


def clean_reason(reason: object, context: str) -> str | None:
    """An operator reason: optional, trimmed, bounded, and never secret-looking (§4.15)."""
    if reason is None:
        return None
    if not isinstance(reason, str):
        raise invalid("reason must be a string", "invalid_reason", field_name="reason")
    reason = reason.strip()
    if not reason:
        return None
    if len(reason) > MAX_REASON_CHARS:
        raise invalid(f"reason must be at most {MAX_REASON_CHARS} characters", "invalid_reason", field_name="reason")
    if has_secret(reason):
        raise invalid(MSG_REASON_SECRET.format(context=context), "secret_material", field_name="reason")
    return reason


def clean_rollout_input(*, kind: str, expected_output_contains: str | None) -> str:
    """Check the evidence kind and return the trimmed output marker."""
    if kind not in RolloutKind.values:
        raise invalid("kind must be `verification` or `canary`", "invalid_rollout", field_name="kind")
    marker = expected_output_contains.strip() if isinstance(expected_output_contains, str) else ""
    if not marker:
        raise invalid(MSG_MARKER_REQUIRED, "invalid_rollout", field_name="expected_output_contains")
    if len(marker) > MAX_MARKER_CHARS:
        raise invalid(
            f"expected_output_contains must be at most {MAX_MARKER_CHARS} characters",
            "invalid_rollout",
            field_name="expected_output_contains",
        )
    return marker


@dataclass(frozen=True)
class PromotionRequest:
    """CreateLearningSkillRequest (spec §2.5)."""

    skill_name: str
    instructions: str
    description: str | None = None
    when_to_use: str | None = None
    version: str | None = None
    allowed_tools: tuple[str, ...] | list[str] = field(default_factory=tuple)
    blocked_tools: tuple[str, ...] | list[str] = field(default_factory=tuple)
    context: str = CONTEXT_FORK
    agent_profile: str | None = None
    provider: str | None = None
    model: str | None = None
    fallback_model: str | None = None
    status: str = SkillStatus.DRAFT


@dataclass(frozen=True)
class CleanedRequest:
    name: str
    instructions: str
    description: str | None
    when_to_use: str | None
    version: str | None
    runtime: SkillRuntime
    status: str


def _check_secrets(
    name: str,
    instructions: str,
    description: str | None,
    when_to_use: str | None,
    version: str | None,
    runtime: SkillRuntime,
) -> None:
    if has_secret(name):
        raise invalid(
            "promoted skill name appears to contain secret material",
            "secret_material",
            field_name="skill_name",
        )
    if has_secret(instructions):
        raise invalid(
            "promoted skill instructions appear to contain secret material",
            "secret_material",
            field_name="instructions",
        )
    for field_name, value in (
        ("description", description),
        ("when_to_use", when_to_use),
        ("version", version),
    ):
        if value is not None and has_secret(value):
            raise invalid(
                f"promoted skill {field_name} appears to contain secret material",
                "secret_material",
                field_name=field_name,
            )
    for field_name, value in runtime.text_fields():
        if has_secret(value):
            raise invalid(
                f"promoted skill runtime {field_name} appears to contain secret material",
                "secret_material",
                field_name=field_name,
            )


def clean_request(request: PromotionRequest) -> CleanedRequest:
    name = validate_skill_name(request.skill_name)
    for field_name in ("instructions", "description", "when_to_use", "version"):
        value = getattr(request, field_name)
        if value is not None and not isinstance(value, str):
            raise invalid(f"{field_name} must be a string", "invalid_skill_definition", field_name=field_name)
    if not isinstance(request.instructions, str) or not request.instructions.strip():
        raise invalid("instructions are required", "invalid_skill_definition", field_name="instructions")
    description = optional_single_line(request.description)
    when_to_use = optional_single_line(request.when_to_use)
    version = optional_single_line(request.version)
    runtime_input: dict[str, Any] = {
        "allowed_tools": list(request.allowed_tools or []),
        "blocked_tools": list(request.blocked_tools or []),
        "context": request.context or CONTEXT_FORK,
    }
    for name_ in ("agent_profile", "provider", "model", "fallback_model"):
        value = getattr(request, name_)
        if value is not None and not isinstance(value, str):
            raise invalid(f"{name_} must be a string", "invalid_skill_runtime", field_name=name_)
        runtime_input[name_] = value.strip() if isinstance(value, str) and value.strip() else None
    if runtime_input["agent_profile"] is None:
        runtime_input["agent_profile"] = VERIFICATION_PROFILE
    # Secret checks first: a secret never reaches a later error message or the database.
    _check_secrets(
        name,
        request.instructions,
        description,
        when_to_use,
        version,
        SkillRuntime(
            allowed_tools=tuple(t for t in runtime_input["allowed_tools"] if isinstance(t, str)),
            blocked_tools=tuple(t for t in runtime_input["blocked_tools"] if isinstance(t, str)),
            context=str(runtime_input["context"]),
            **{k: runtime_input[k] for k in ("agent_profile", "provider", "model", "fallback_model")},
        ),
    )
    if runtime_input["context"] != CONTEXT_FORK:
        raise invalid(MSG_FORK, "invalid_skill_runtime", field_name="context")
    if runtime_input["agent_profile"] != VERIFICATION_PROFILE:
        raise invalid(MSG_PROFILE, "invalid_skill_runtime", field_name="agent_profile")
    runtime = SkillRuntime.from_dict(runtime_input)
    if description is not None:
        validate_single_line("description", description)
    if when_to_use is not None:
        validate_single_line("when_to_use", when_to_use, max_chars=ONE_LINE_MAX_CHARS)
    if version is not None:
        validate_single_line("version", version, max_chars=VERSION_MAX_CHARS)
    instructions = validate_instructions(request.instructions)
    status = request.status or SkillStatus.DRAFT
    if status not in SkillStatus.values or status == SkillStatus.REVOKED:
        raise invalid(
            "status must be one of draft, verified, canary, active",
            "invalid_skill_status",
            field_name="status",
        )
    return CleanedRequest(
        name=name,
        instructions=instructions,
        description=description,
        when_to_use=when_to_use,
        version=version,
        runtime=runtime,
        status=status,
    )
