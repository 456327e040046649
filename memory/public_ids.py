"""Public ids (issue 19.9): the one place that formats and parses ``<prefix>-<number>`` ids such as
``session-7``, ``run-12``, ``learning-3`` and ``learning-candidate-4``.

A public id is canonical ASCII: the prefix, one hyphen, then the row number in ASCII digits ``0-9`` without a
sign, spaces or leading zeros, at most 18 digits (a PostgreSQL ``bigint`` holds every such value). Anything
else names no record: ``session-01``, ``session- 1``, ``session-+1`` and ``session-١`` (an Arabic-Indic digit,
which Python's ``str.isdigit`` and ``int`` accept) are not ``session-1``. Parsing is strict so that one record
has one name: a lookup, a filter, a scope key and an audit row all agree on it.
"""

from __future__ import annotations

import re

from memory.errors import NotFound

MAX_DIGITS = 18
_NUMBER = re.compile(r"[1-9][0-9]{0,17}", re.ASCII)

SESSION = "session"
RUN = "run"
LEARNING = "learning"
LEARNING_CANDIDATE = "learning-candidate"
PREFIXES = (SESSION, RUN, LEARNING, LEARNING_CANDIDATE)
"""Every kind of public id the service hands out (agents, personas and projects are named by their owners)."""


def format_id(prefix: str, pk: int) -> str:
    """``format_id("run", 12)`` → ``"run-12"``."""
    return f"{prefix}-{int(pk)}"


def session_id(pk: int) -> str:
    return format_id(SESSION, pk)


def run_id(pk: int) -> str:
    return format_id(RUN, pk)


def learning_id(pk: int) -> str:
    return format_id(LEARNING, pk)


def candidate_id(pk: int) -> str:
    return format_id(LEARNING_CANDIDATE, pk)


def parse_id(value: object, prefix: str) -> int | None:
    """The row number of a canonical ``<prefix>-<number>`` id, or None for anything else (another prefix,
    non-ASCII digits, leading zeros, signs, whitespace, a non-string)."""
    if not isinstance(value, str) or not value.startswith(prefix + "-"):
        return None
    digits = value[len(prefix) + 1 :]
    if _NUMBER.fullmatch(digits) is None:
        return None
    return int(digits)


def is_canonical(value: object, prefix: str) -> bool:
    return parse_id(value, prefix) is not None


def pattern(prefix: str) -> str:
    """A JSON Schema / OpenAPI ``pattern`` for the canonical ids of ``prefix`` (anchored, no whitespace)."""
    return f"^{re.escape(prefix)}-{_NUMBER.pattern}$"


def parse_or_404(value: object, prefix: str, *, domain: str, code: str, noun: str) -> int:
    """``parse_id`` or the 404 problem an unknown id gets (a malformed id names no record)."""
    pk = parse_id(value, prefix)
    if pk is None:
        raise NotFound(f"unknown {noun} {value}", domain=domain, code=code)
    return pk
