"""Settings read on every call (Django settings when configured, else the environment) and the operator's
literal tokens (spec §4.2 A.7: ``KHEISH_REDACT_TOKENS``, ``KHEISH_REDACT_TOKENS_FILE``, registered sources).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from memory.scrubbing.markers import _MARKERS, KIND_OPERATOR_TOKEN, REDACTED, _bump

SETTING_TOKENS = "KHEISH_REDACT_TOKENS"
SETTING_TOKENS_FILE = "KHEISH_REDACT_TOKENS_FILE"
SETTING_PHONE_REGIONS = "KHEISH_PHONE_REGIONS"
DEFAULT_PHONE_REGIONS = "US,GB,FR,DE,ES,IT,NL,BE,CH,IN,BR,JP,AU,CA,MX,SG"

# Literal-token sources beyond settings/env (spec §4.2 A.7 "credential tokens known to the auth store").
_TOKEN_SOURCES: list[Callable[[], Iterable[str]]] = []


def register_literal_token_source(source: Callable[[], Iterable[str]]) -> None:
    """Add a callable returning literal tokens to redact (e.g. the API-key store's live credentials).

    Called on every redaction, so it must be cheap; its result is part of the compiled-pattern cache key.
    """
    if source not in _TOKEN_SOURCES:
        _TOKEN_SOURCES.append(source)


@dataclass(frozen=True)
class _Config:
    tokens: str
    tokens_file: str
    phone_regions: str


def _config() -> _Config:
    """The three settings, read on every call: Django settings when configured, else the environment."""
    holder: object = None
    try:
        from django.conf import settings

        if settings.configured:
            # The loaded Settings object (plain attribute reads, ~20x cheaper than through LazySettings).
            holder = getattr(settings, "_wrapped", settings)
    except ImportError:  # pragma: no cover - Django is a dependency; the module still works without it
        holder = None
    values = []
    for name in (SETTING_TOKENS, SETTING_TOKENS_FILE, SETTING_PHONE_REGIONS):
        value = getattr(holder, name, None) if holder is not None else None
        if value is None or value == "" or value == [] or value == ():
            value = os.environ.get(name, "")
        if isinstance(value, list | tuple | set | frozenset):
            value = "\n".join(str(item) for item in value)
        values.append(str(value))
    return _Config(values[0], values[1].strip(), values[2].strip() or DEFAULT_PHONE_REGIONS)


class _ConfigError(Exception):
    pass


@dataclass(frozen=True)
class _LiteralTokens:
    """Operator tokens, longest first (spec A.7: the reference replaces them one after the other)."""

    tokens: tuple[str, ...]
    guarded: re.Pattern[str] | None  # used when a token could match inside a marker

    def apply(self, text: str, counts: dict[str, int]) -> str:
        if not self.tokens or not text:
            return text
        if self.guarded is not None:

            def replace(m: re.Match[str]) -> str:
                if m.group(1) is not None:  # an existing marker: never rewrite markers
                    return m.group(0)
                _bump(counts, KIND_OPERATOR_TOKEN)
                return REDACTED

            return self.guarded.sub(replace, text)
        for token in self.tokens:
            if token in text:
                _bump(counts, KIND_OPERATOR_TOKEN, text.count(token))
                text = text.replace(token, REDACTED)
        return text


_literal_cache: tuple[object, _LiteralTokens] | None = None


def _split_tokens(raw: str, *, commas: bool) -> list[str]:
    parts = re.split(r"[,\n]" if commas else r"\n", raw)
    return [part.strip() for part in parts if part.strip()]


def _literal_tokens(config: _Config) -> _LiteralTokens:
    """Operator tokens, read per call, compiled once per (value, file mtime/size, extra sources)."""
    global _literal_cache
    raw = config.tokens
    path = config.tokens_file
    file_key: tuple[str, int, int] | None = None
    if path:
        try:
            st = os.stat(path)
        except OSError as exc:
            raise _ConfigError(f"failed to read redaction token file {path}: {exc}") from exc
        file_key = (path, st.st_mtime_ns, st.st_size)
    extra: tuple[str, ...] = ()
    if _TOKEN_SOURCES:
        extra = tuple(str(token) for source in _TOKEN_SOURCES for token in source() if token)
    key = (raw, file_key, extra)
    cached = _literal_cache
    if cached is not None and cached[0] == key:
        return cached[1]
    tokens = _split_tokens(raw, commas=True)
    if path:
        try:
            with open(path, encoding="utf-8") as handle:
                tokens.extend(_split_tokens(handle.read(), commas=False))
        except (OSError, UnicodeDecodeError) as exc:
            raise _ConfigError(f"failed to read redaction token file {path}: {exc}") from exc
    tokens.extend(token.strip() for token in extra if token.strip())
    unique = tuple(sorted(set(tokens), key=lambda token: (-len(token), token)))
    guarded = None
    if any("<" in token or ">" in token or any(token in marker for marker in _MARKERS) for token in unique):
        alternatives = "|".join(re.escape(token) for token in unique)
        guarded = re.compile(rf"(<redacted(?::[a-z-]+)?>)|(?:{alternatives})")
    literal = _LiteralTokens(unique, guarded)
    _literal_cache = (key, literal)
    return literal
