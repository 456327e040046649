"""Markers, redaction kinds and the result type (spec §4.2 [literal] markers and counters).

Also the marker test that keeps scrubbing idempotent: a value that is already a marker is never redacted again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Markers [literal] (spec §4.2).
REDACTED = "<redacted>"
PRIVATE_KEY_MARKER = "<redacted:private-key>"
EMAIL_MARKER = "<redacted:email>"
SSN_MARKER = "<redacted:ssn>"
CARD_MARKER = "<redacted:card>"
PHONE_MARKER = "<redacted:phone>"
CONFIG_ERROR_MARKER = "<redacted:debug-redaction-config-error>"
_MARKERS = (REDACTED, PRIVATE_KEY_MARKER, EMAIL_MARKER, SSN_MARKER, CARD_MARKER, PHONE_MARKER, CONFIG_ERROR_MARKER)

# Redaction kinds reported in ``ScrubResult.redactions``.
KIND_TOKEN = "token"
KIND_PRIVATE_KEY = "private_key"
KIND_URL_PARAM = "url_param"
KIND_ASSIGNMENT = "assignment"
KIND_OPERATOR_TOKEN = "operator_token"
KIND_EMAIL = "email"
KIND_SSN = "ssn"
KIND_CARD = "card"
KIND_PHONE = "phone"

SETTING_TOKENS = "KHEISH_REDACT_TOKENS"
SETTING_TOKENS_FILE = "KHEISH_REDACT_TOKENS_FILE"
SETTING_PHONE_REGIONS = "KHEISH_PHONE_REGIONS"
DEFAULT_PHONE_REGIONS = "US,GB,FR,DE,ES,IT,NL,BE,CH,IN,BR,JP,AU,CA,MX,SG"


@dataclass(frozen=True)
class ScrubResult:
    text: str
    redaction_count: int
    redactions: dict[str, int] = field(default_factory=dict)


def _bump(counts: dict[str, int], kind: str, n: int = 1) -> None:
    counts[kind] = counts.get(kind, 0) + n


_MARKER_VALUE = re.compile(r"""["']?<redacted(?::[a-z-]+)?>["']?[.,;:!?]*""")
_MARKER_FIRST = ("<", '"', "'")


def _is_marker(value: str) -> bool:
    """True for a value that is already just a marker (keeps scrubbing idempotent and counts honest)."""
    return value[:1] in _MARKER_FIRST and _MARKER_VALUE.fullmatch(value) is not None
