"""The skills plane's message catalogue: the literal error texts the reference fixes (spec §4.15, §4.18), the
error domain and subject name, and the two builders every service raises through (409 ``Conflict``,
400 ``ValidationFailed``)."""

from __future__ import annotations

from memory.errors import Conflict, ValidationFailed

DOMAIN = "skills"
SUBJECT = "learning_skill"

MSG_NOT_PROCEDURE = "learning {id} is not a procedure learning"
MSG_NOT_ACTIVE = "learning {id} must be active before promotion"
MSG_NOT_ACTIVE_TIER = "learning {id} must use the active publish tier before promotion"
MSG_NOT_WORKSPACE = "learning {id} must use workspace scope before promotion"
MSG_FORK = "promoted procedure skills must use fork context"
MSG_PROFILE = "promoted procedure skills must use the verification agent profile"
MSG_NEW_DRAFT = "new promoted skills must start in draft status"
MSG_EXISTS = "promoted skill {name} already exists"
MSG_CATALOG_CLASH = "skill {name} already exists in the skill catalog"
MSG_ALREADY_PROMOTED = "learning {id} is already promoted as skill {name}"
MSG_TRANSITION = "cannot transition promoted skill from {from_} to {to}"
MSG_ACTIVE_IMMUTABLE = "active promoted skill definition changes must start a new draft rollout"
MSG_NEEDS_VERIFICATION = "promoted skills require verification evidence recorded by the service"
MSG_NEEDS_CANARY = "active promoted skills require at least one successful canary rollout"
MSG_ZERO_CANARY_FAILURES = "active promoted skills require zero canary failures"
MSG_MARKER_REQUIRED = "expected_output_contains is required"
MSG_REVOKED_EVIDENCE = "revoked promoted skills cannot accept rollout evidence"
MSG_CANARY_STATUS = "canary rollout evidence requires promoted skill status canary"
MSG_FINGERPRINT_GUARD = "rollout evidence definition_fingerprint does not match current promoted skill definition"
MSG_VERIFICATION_FAILED = "verification rollout evidence requires a completed run with matching output"
MSG_STALE_FINGERPRINT = "promoted skill definition fingerprint is stale"
MSG_ROLLBACK_SOURCE = "cannot rollback promoted skill {name}; source learning {id} is not an active procedure learning"
MSG_NO_SNAPSHOT = "no active rollback snapshot exists for learning skill {name}"
MSG_REASON_SECRET = "promoted skill {context} reason appears to contain secret material"
MSG_CHANGED_CONCURRENTLY = "promoted skill {name} changed concurrently; retry"


def status_label(status: str) -> str:
    """Statuses in transition errors are spelled as the reference daemon spells them (``Draft``)."""
    return status.capitalize()


def conflict(message: str, code: str, *, field_name: str | None = None) -> Conflict:
    return Conflict(message, field=field_name, domain=DOMAIN, code=code)


def invalid(message: str, code: str, *, field_name: str | None = None) -> ValidationFailed:
    return ValidationFailed(message, field=field_name, domain=DOMAIN, code=code)
