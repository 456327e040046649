"""The run-memory policy (Plane 2): its defaults, parsing and validation (spec §3.1).

Pure Python: no Django import, so it can be used by settings checks, services, serializers and tests alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

SEARCH_VISIBILITY_SESSION_ONLY = "session_only"
SEARCH_VISIBILITY_LEARNING_SCOPES = "learning_scopes"
SEARCH_VISIBILITY_WORKSPACE = "workspace"
SEARCH_VISIBILITIES = (SEARCH_VISIBILITY_SESSION_ONLY, SEARCH_VISIBILITY_LEARNING_SCOPES, SEARCH_VISIBILITY_WORKSPACE)
"""What memory-search shows of recovered runs (issue 19.3): ``session_only`` - the session's own runs;
``learning_scopes`` - also the runs of other sessions that share a persona or project with it, both sessions'
owners being granted that persona or project now (never through the workspace alone); ``workspace`` - every
session's runs, an explicit operator choice. Injection into prompts is session-only whatever the value."""

DEFAULT_RETENTION_MS = 30 * 24 * 60 * 60 * 1000  # 2_592_000_000
DEFAULT_MAX_TRACKED_PER_SESSION = 32
DEFAULT_MAX_PROMPT_ENTRIES = 3

# Counts and durations are stored in PostgreSQL bigint columns / JSON; refuse what cannot round-trip.
MAX_INT_VALUE = 2**63 - 1
# ... and bound each to what it can mean (issue 14.9): a century of retention, records a session can use.
MAX_RETENTION_MS = 100 * 365 * 24 * 3600 * 1000
MAX_TRACKED_PER_SESSION_LIMIT = 10_000
MAX_PROMPT_ENTRIES_LIMIT = 1_000

_BOOL_FIELDS = ("enabled", "redact_pii")
_INT_FIELDS = {
    "retention_ms": MAX_RETENTION_MS,
    "max_tracked_per_session": MAX_TRACKED_PER_SESSION_LIMIT,
    "max_prompt_entries": MAX_PROMPT_ENTRIES_LIMIT,
}


class PolicyValidationError(ValueError):
    """An invalid run-memory policy; ``field`` names the offending field (``None`` for the whole object)."""

    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class RunMemoryPolicy:
    """``RunMemoryPolicyConfig``: the single runtime policy that bounds recovered run memory."""

    enabled: bool = True
    retention_ms: int = DEFAULT_RETENTION_MS
    max_tracked_per_session: int = DEFAULT_MAX_TRACKED_PER_SESSION
    max_prompt_entries: int = DEFAULT_MAX_PROMPT_ENTRIES
    redact_pii: bool = True
    search_visibility: str = SEARCH_VISIBILITY_SESSION_ONLY

    FIELDS: ClassVar[tuple[str, ...]] = (
        "enabled",
        "retention_ms",
        "max_tracked_per_session",
        "max_prompt_entries",
        "redact_pii",
        "search_visibility",
    )

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.FIELDS}

    @classmethod
    def from_dict(cls, data: object) -> RunMemoryPolicy:
        """Parse an operator-supplied policy object and validate it.

        Missing fields take their defaults. Unknown fields, wrong types (a bool is not an integer, integers
        are >= 0) and unknown ``search_visibility`` values are rejected, and so is a policy that breaks the
        spec §3.1 rules, so every policy built here is valid.
        """
        if not isinstance(data, dict):
            raise PolicyValidationError(None, "run memory policy must be a JSON object")
        unknown = sorted(str(key) for key in data if key not in cls.FIELDS)
        if unknown:
            expected = ", ".join(cls.FIELDS)
            raise PolicyValidationError(
                unknown[0], f"run memory policy has unknown field `{unknown[0]}`; expected one of {expected}"
            )
        policy = cls(**data)
        policy.validate()
        return policy

    def validate(self) -> None:
        """Raise :class:`PolicyValidationError` unless the policy is valid (spec §3.1, messages literal)."""
        for name in _BOOL_FIELDS:
            if not isinstance(getattr(self, name), bool):
                raise PolicyValidationError(name, f"run memory {name} must be a boolean")
        for name, maximum in _INT_FIELDS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
                raise PolicyValidationError(name, f"run memory {name} must be an integer between 0 and {maximum}")
        if not isinstance(self.search_visibility, str) or self.search_visibility not in SEARCH_VISIBILITIES:
            raise PolicyValidationError(
                "search_visibility",
                f"run memory search_visibility must be one of {', '.join(SEARCH_VISIBILITIES)}",
            )
        if self.enabled:
            if self.retention_ms == 0:
                raise PolicyValidationError(
                    "retention_ms", "run memory retention_ms must be greater than zero when enabled"
                )
            if self.max_tracked_per_session == 0:
                raise PolicyValidationError(
                    "max_tracked_per_session",
                    "run memory max_tracked_per_session must be greater than zero when enabled",
                )
            if self.max_prompt_entries == 0:
                raise PolicyValidationError(
                    "max_prompt_entries",
                    "run memory max_prompt_entries must be greater than zero when enabled",
                )
        if self.max_prompt_entries > self.max_tracked_per_session:
            raise PolicyValidationError(
                "max_prompt_entries",
                "run memory max_prompt_entries must be lower than or equal to max_tracked_per_session",
            )

    def is_expired(self, recorded_at_ms: int, now_ms: int) -> bool:
        """Spec §4.4: a record is expired when the policy is disabled or older than ``retention_ms``."""
        return not self.enabled or max(0, now_ms - recorded_at_ms) > self.retention_ms
