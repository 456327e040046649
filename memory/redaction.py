"""Secret and PII scrubbing (spec §4.2) and the learning-content secret classifier (spec §4.19).

Pure functions: no database, no Django models. Scrubbing applies to the *derived* planes (recovered run
memory, learnings, previews); the canonical session journal is never scrubbed - that is the callers' rule.

* ``redact_secrets(text)`` - step A, the "debug redactor": PEM private keys, sensitive assignments,
  provider tokens (the spec's prefixes plus the shapes in ``memory.secret_patterns``), Bearer and other
  Authorization credentials, JWTs, sensitive URL query parameters and URL passwords, then the operator's
  literal tokens (``KHEISH_REDACT_TOKENS`` / ``KHEISH_REDACT_TOKENS_FILE``, longest first).
* ``scrub(text, redact_pii=True)`` - step A, then step B (PII): the spec's number-run pass (Luhn cards,
  NANP-shaped phones), SSNs, e-mail tokens (and e-mails glued to other text), and international phone
  numbers found by ``phonenumbers`` (``Leniency.VALID``) over the regions in ``KHEISH_PHONE_REGIONS``.
* ``looks_like_secret(text)`` - §4.19 ``learning_content_has_secret_material``.

Counting: ``redaction_count`` is the spec's number (step A +1 if it changed the text at all, +1 per step-B
replacement); ``redactions`` counts every individual replacement per kind.

Speed. CPython's ``re`` costs ~100 ns for every position where a match attempt starts, so a pattern that
begins with a common character class (letters, digits) reads only a few MB/s, while a pattern that begins
with a literal is scanned at hundreds of MB/s, as are ``bytes.find``, ``bytes.translate`` and
``bytes.lower`` (``str.lower`` of non-ASCII text is ten times slower: the lower-cased copy is made as bytes).
Every pass here is therefore anchored on a literal: sensitive-key words (``key``, ``token``, ``cre`` for
secret/credential, ``pass``, ...) in a lower-cased copy; provider tokens as runs of 20+ token characters in
a character-class copy (`` aaaa…``), checked against the known prefixes; PII through a digit-class copy in
which a few literal digit/separator shapes (``000s0000``, ``00s00s00s00``, ``p0``, ...) locate the only
clusters of digits worth a closer look. Each such scan still costs ~3 ms per 5 MB; only a one-character
search (memchr) is much cheaper, so rare literals are ruled out first by a capital letter they contain
(``AKIA``, ``eyJ``, ``Key=``) and ``@`` / ``+`` are looked up directly. Python code runs per candidate, never
per character, and it is kept short: ``split`` gives the offsets of dense hits in one search, ``findall``
collects the URL parameter keys without match objects, and ``re.subn`` with a literal replacement (no
callback, no template) redacts the Bearer tokens and the ``&`` parameters with a sensitive key.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import phonenumbers
from phonenumbers import Leniency, PhoneMetadata, PhoneNumberMatcher

from memory.secret_patterns import TOKEN_SHAPES

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


def redact_secrets(text: str) -> ScrubResult:
    """Spec §4.2 step A (always applied). ``redaction_count`` is 1 if the text changed, else 0."""
    redacted, counts = _step_a(text, _config())
    return ScrubResult(text=redacted, redaction_count=int(redacted != text), redactions=counts)


def scrub(text: str, *, redact_pii: bool = True) -> ScrubResult:
    """Spec §4.2: step A, then (if ``redact_pii``) step B, each step-B replacement counting +1."""
    config = _config()
    redacted, counts = _step_a(text, config)
    count = int(redacted != text)
    if redact_pii and redacted != CONFIG_ERROR_MARKER:
        redacted, pii_counts = _step_b(redacted, config.phone_regions)
        count += sum(pii_counts.values())
        for kind, n in pii_counts.items():
            counts[kind] = counts.get(kind, 0) + n
    return ScrubResult(text=redacted, redaction_count=count, redactions=counts)


def looks_like_secret(text: str) -> bool:
    """Spec §4.19 ``learning_content_has_secret_material``: a redaction marker, anything step A would
    redact, or an assignment-shaped secret (word, squashed and structured markers)."""
    trimmed = text.strip()
    if not trimmed:
        return False
    lowered = trimmed.lower()
    if "<redacted" in lowered:
        return True
    if _step_a(trimmed, _config())[0] != trimmed:
        return True
    return _has_secret_assignment(lowered)


# Literal-token sources beyond settings/env (spec §4.2 A.7 "credential tokens known to the auth store").
_TOKEN_SOURCES: list[Callable[[], Iterable[str]]] = []


def register_literal_token_source(source: Callable[[], Iterable[str]]) -> None:
    """Add a callable returning literal tokens to redact (e.g. the API-key store's live credentials).

    Called on every redaction, so it must be cheap; its result is part of the compiled-pattern cache key.
    """
    if source not in _TOKEN_SOURCES:
        _TOKEN_SOURCES.append(source)


def _bump(counts: dict[str, int], kind: str, n: int = 1) -> None:
    counts[kind] = counts.get(kind, 0) + n


_MARKER_VALUE = re.compile(r"""["']?<redacted(?::[a-z-]+)?>["']?[.,;:!?]*""")
_MARKER_FIRST = ("<", '"', "'")


def _is_marker(value: str) -> bool:
    """True for a value that is already just a marker (keeps scrubbing idempotent and counts honest)."""
    return value[:1] in _MARKER_FIRST and _MARKER_VALUE.fullmatch(value) is not None


def _class_table(classes: dict[str, str], default: str) -> bytes:
    """A 256-entry ``bytes.translate`` table: characters in ``classes`` map to their class, others to default."""
    table = bytearray(default.encode() * 256)
    for chars, cls in classes.items():
        for ch in chars:
            table[ord(ch)] = ord(cls)
    return bytes(table)


def _classify(text: str, table: bytes) -> bytes:
    """One class byte per character of ``text`` (same offsets). Characters above U+00FF become ``?`` first;
    ``bytes.translate`` is fast where ``str.translate`` crawls on non-ASCII text."""
    data = text.encode("ascii") if text.isascii() else text.encode("latin-1", "replace")
    return data.translate(table)


def _literal_matches(haystack: bytes, literal: bytes, pattern: re.Pattern[bytes]) -> Iterator[re.Match[bytes]]:
    """``pattern.finditer(haystack)`` for a pattern whose every match starts with ``literal`` (a long one: ``find``
    then skips ahead faster than ``re``'s own scan)."""
    find = haystack.find
    pos = find(literal)
    while pos >= 0:
        match = pattern.match(haystack, pos)
        if match is None:
            pos = find(literal, pos + 1)
        else:
            yield match
            pos = find(literal, match.end())


def _capital(literal: str) -> str:
    """The literal's first capital letter, or "". Capitals are rare in text and a one-character search runs at
    memory speed (~20 times a pattern scan), so a text without it is ruled out before any scan for the literal."""
    return next((ch for ch in literal if ch.isupper()), "")


def _find_all(haystack: bytes, needle: bytes) -> list[int]:
    """Offsets of the non-overlapping occurrences of ``needle``, left to right: one ``split`` (a single search
    setup, where a ``find`` loop would set the search up again for every hit)."""
    offsets: list[int] = []
    pos = -len(needle)
    for piece in haystack.split(needle)[:-1]:
        pos += len(piece) + len(needle)
        offsets.append(pos)
    return offsets


def _splice(text: str, replacements: list[tuple[int, int, str]]) -> str:
    """Apply sorted, non-overlapping ``(start, end, replacement)`` edits."""
    if not replacements:
        return text
    parts: list[str] = []
    last = 0
    for start, end, replacement in replacements:
        parts.append(text[last:start])
        parts.append(replacement)
        last = end
    parts.append(text[last:])
    return "".join(parts)


# --------------------------------------------------------------------------------------------------------
# Configuration (settings when Django is configured, else the environment)
# --------------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------------
# Step A - the debug redactor
# --------------------------------------------------------------------------------------------------------


def _step_a(text: str, config: _Config) -> tuple[str, dict[str, int]]:
    counts: dict[str, int] = {}
    if not text:
        return text, counts
    try:
        literal = _literal_tokens(config)
    except _ConfigError:
        # Fail closed: an unreadable token file hides the whole payload (spec §4.2 A.7).
        return CONFIG_ERROR_MARKER, {KIND_OPERATOR_TOKEN: 1}
    if "-----BEGIN " in text:
        text = _redact_pem(text, counts)
    text = _redact_assignments(text, _lowered(text), counts)
    text = _redact_prefixed_tokens(text, counts)
    text = _redact_provider_tokens(text, counts)
    text = _redact_bearer(text, counts)
    if "J" in text and "eyJ" in text:  # see _capital
        text = _redact_jwts(text, counts)
    text = _redact_urls(text, counts)
    text = literal.apply(text, counts)
    return text, counts


_ASCII_LOWER = {code: code + 32 for code in range(ord("A"), ord("Z") + 1)}


def _lowered(text: str) -> bytes:
    """Lower-cased copy, one byte per character (so offsets line up), for the ASCII key needles.

    For Latin-1 text ``bytes.lower`` lowers exactly the ASCII positions ``str.lower`` would (no Latin-1
    character lowers to ASCII), ten times faster. Other text is lowered as ``str`` (the Kelvin sign becomes
    ``k``), by ASCII rules alone when that would change the length (``İ``); characters above U+00FF then
    become ``?``. Only ASCII positions matter: every needle is ASCII.
    """
    try:
        return text.encode("latin-1").lower()
    except UnicodeEncodeError:
        low = text.lower()
        if len(low) != len(text):
            low = text.translate(_ASCII_LOWER)
        return low.encode("latin-1", "replace")


# A.5 PEM private keys. Run first, so an assignment such as ``private_key: -----BEGIN …`` cannot cut the
# header off and leave the body behind. A block written on one line (JSON with ``\n`` escapes) ends at its
# END marker on that line; a block with no END marker is redacted to the end of the text.
_PEM_BEGIN = re.compile(r"-----BEGIN [^\n]*?PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END [^\n]*?PRIVATE KEY(?: BLOCK)?-----")


def _redact_pem(text: str, counts: dict[str, int]) -> str:
    edits: list[tuple[int, int, str]] = []
    pos = 0
    while True:
        begin = _PEM_BEGIN.search(text, pos)
        if begin is None:
            break
        end = _PEM_END.search(text, begin.end())
        stop = end.end() if end is not None else len(text)
        edits.append((begin.start(), stop, PRIVATE_KEY_MARKER))
        _bump(counts, KIND_PRIVATE_KEY)
        if end is None:
            break
        pos = stop
    return _splice(text, edits)


# A.1 sensitive-key rules (exact spec wording; cached because keys repeat a lot).
_SENSITIVE_SUBSTRINGS = (
    "authorization", "api_key", "api-key", "x-api-key", "x_goog_api_key", "error-json", "cookie",
    "set-cookie", "proxy-authorization", "password", "passwd", "passphrase", "private_key", "privatekey",
    "credential",
)  # fmt: skip
_SEPARATOR_CONTAINS = (
    "access_token", "refresh_token", "id_token", "auth_token", "bearer_token", "secret", "password",
    "passwd", "passphrase", "private_key", "privatekey", "credential",
)  # fmt: skip
_COMPACT_CONTAINS = (
    "accesstoken", "refreshtoken", "idtoken", "authtoken", "bearertoken", "oauthtoken", "clientsecret",
    "subscriptionkey", "secret", "password", "passphrase", "privatekey", "credential",
)  # fmt: skip
_NON_ALNUM = re.compile(r"[^a-z0-9]")


@functools.lru_cache(maxsize=4096)
def _is_sensitive_key(key: str) -> bool:
    lowered = key.lower()
    separated = lowered.replace("-", "_")
    if any(needle in lowered or needle in separated for needle in _SENSITIVE_SUBSTRINGS):
        return True
    if separated == "token" or separated.endswith("_token"):
        return True
    if any(needle in separated for needle in _SEPARATOR_CONTAINS):
        return True
    compact = _NON_ALNUM.sub("", lowered)
    if compact in ("token", "key", "apikey") or compact.endswith("apikey"):
        return True
    return any(needle in compact for needle in _COMPACT_CONTAINS)


@functools.lru_cache(maxsize=1024)
def _is_sensitive_url_key(name: str) -> bool:
    compact = _NON_ALNUM.sub("", name.lower())
    return compact in ("key", "sig", "signature", "code") or _is_sensitive_key(name)


# Words without which no key is sensitive under the rules above, searched in the lower-cased text. Each
# pattern starts with a rare literal (see the module docstring); ``tokens`` only counts after access /
# refresh / id / auth / bearer, so ``max_tokens`` and ``prompt_tokens`` are not even looked at.
_PLURAL_TOKENS = "|".join(
    f"(?<={word}{sep}tokens)"
    for word in ("access", "refresh", "id", "auth", "bearer")
    for sep in ("", "_", "-", ".", " ")
)
_KEY_NEEDLES = tuple(
    re.compile(pattern.encode())  # searched in the lower-cased bytes copy (``_lowered``)
    for pattern in (
        "key",
        # ``tokens`` counts only after access/refresh/id/auth/bearer; a one-letter look-behind rejects
        # ``prompt_tokens`` / ``max_tokens`` before the full check.
        rf"token(?:(?!s)|s(?:(?<=[shdr]tokens)|(?<=[shdr][_. \-]tokens))(?:{_PLURAL_TOKENS}))",
        "cookie",
        r"cre(?:t(?<=secret)|dential)",
        r"pass(?:w|phrase)",
        "authoriz",
        "error-json",
    )
)
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_PAIR_TAIL = re.compile(r"""([A-Za-z0-9_.\-]*)(?:(["'])[ \t]*[:=]|=)[ \t]*""")
_PAIR_LEFT = frozenset(" \t\r\n,;{([|")
_VALUE_STOP = re.compile(r"""[\s"',;&)\]}<]""")


_SEPARATOR = re.compile(b"[=:]")


def _line_value_span(text: str, line_start: int, sep: int, line_end: int) -> tuple[int, int] | None:
    """A.1: the span of the value to redact on this line, or None when the key is not sensitive."""
    key = text[line_start:sep].strip()
    if text[sep] == ":" and key.strip("\"'\\").lower() == "authorization":
        return None
    if not _is_sensitive_key(key):
        return None
    start = sep + 1
    while start < line_end and text[start].isspace():
        start += 1
    end = line_end
    while end > start and text[end - 1].isspace():
        end -= 1
    if end <= start or _is_marker(text[start:end]):
        return None
    return start, end


def _quoted_end(text: str, start: int, limit: int) -> int:
    """Index of the closing quote matching ``text[start]`` (backslash escapes honoured), or -1."""
    quote = text[start]
    i = start + 1
    while i < limit:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == quote:
            return i
        i += 1
    return -1


def _pair_value_span(text: str, i: int, tail: re.Match[str], line_start: int, line_end: int) -> tuple[int, int] | None:
    """Extension of A.1: a ``"key": "value"`` / ``key=value`` pair anywhere on a line (JSON, logfmt)."""
    key_end = tail.end(1)
    quote = tail.group(2)
    key_start = i
    while key_start > line_start and text[key_start - 1] in _KEY_CHARS and i - key_start < 64:
        key_start -= 1
    key = text[key_start:key_end]
    if quote:
        if key_start == 0 or text[key_start - 1] != quote:
            return None
    elif (key_start > 0 and text[key_start - 1] not in _PAIR_LEFT) or key.lower() == "key":
        return None  # ``the key=value syntax`` is prose far more often than a credential
    value_start = tail.end()
    if value_start >= line_end:
        return None
    if text[value_start] in "\"'":
        close = _quoted_end(text, value_start, line_end)
        if close < 0:
            return None
        span = (value_start + 1, close)
    else:
        stop = _VALUE_STOP.search(text, value_start, line_end)
        span = (value_start, stop.start() if stop else line_end)
    if span[1] <= span[0] or _is_marker(text[span[0] : span[1]]) or not _is_sensitive_key(key):
        return None
    return span


_PAIR_NEXT = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-\"'=")


def _redact_assignments(text: str, low: bytes, counts: dict[str, int]) -> str:
    hits = sorted(m.span() for needle in _KEY_NEEDLES for m in needle.finditer(low))
    if not hits:
        return text
    edits: list[tuple[int, int, str]] = []
    done = 0
    line_start = line_end = -1
    n = len(text)
    find = low.find
    separator = _SEPARATOR.search
    for i, j in hits:
        if i < done:
            continue
        if i >= line_end:
            # First needle of a new line. A.1 proper: the key is everything before the line's first '='
            # or ':', so the rule applies when no separator precedes this needle on the line.
            line_start = low.rfind(b"\n", 0, i) + 1
            line_end = find(b"\n", j)
            if line_end < 0:
                line_end = n
            if separator(low, line_start, i) is None:
                sep = separator(low, j, line_end)
                if sep is not None:
                    span = _line_value_span(text, line_start, sep.start(), line_end)
                    if span is not None:
                        edits.append((span[0], span[1], REDACTED))
                        _bump(counts, KIND_ASSIGNMENT)
                        done = line_end
                        continue
        if low.startswith(b"authorization", i):
            # Extension: the credential of a non-Bearer scheme (``Authorization: Basic dXNlcjpwYXNz``; the
            # spec leaves ``Authorization:`` lines to the Bearer rule).
            scheme = _AUTH_SCHEME.match(text, i)
            if scheme is not None and not _is_marker(scheme.group(1)) and scheme.start(1) >= done:
                edits.append((scheme.start(1), scheme.end(1), REDACTED))
                _bump(counts, KIND_TOKEN)
                done = scheme.end()
                continue
        # Extension: a ``"key": "value"`` / ``key=value`` pair inside the line.
        if j >= n or text[j] not in _PAIR_NEXT:
            continue
        tail = _PAIR_TAIL.match(text, j)
        if tail is None:
            continue
        span = _pair_value_span(text, i, tail, line_start, line_end)
        if span is not None and span[0] >= done:
            edits.append((span[0], span[1], REDACTED))
            _bump(counts, KIND_ASSIGNMENT)
            done = span[1]
    return _splice(text, edits)


# Token delimiters (spec): whitespace, " ' , ; ( ) [ ] { }.
_DELIMITERS = "\"',;()[]{}"


def _is_delimiter(ch: str) -> bool:
    return ch.isspace() or ch in _DELIMITERS


# A.2 prefixed tokens: at text start or after a delimiter, the token up to the next delimiter. One pattern
# per prefix, so each is a fast literal scan (skipped when the prefix has a capital the text lacks). A
# redacted token runs from a delimiter to the next one, so tokens found for different prefixes never overlap
# and one splice applies them all, as the spec's one-prefix-after-the-other would.
_TOKEN_REST = r"""[^\s"',;()\[\]{}]*"""
_SPEC_PREFIXED = tuple(
    (_capital(prefix), re.compile(prefix + _TOKEN_REST))
    for prefix in ("sk-", "ghp_", "github_pat_", "xox[bp]-", "AKIA")
)
_NOT_A_TOKEN = re.compile(r"sk-learn\W*", re.IGNORECASE)  # the scikit-learn nickname, not a key


def _redact_prefixed_tokens(text: str, counts: dict[str, int]) -> str:
    edits: list[tuple[int, int, str]] = []
    for capital, pattern in _SPEC_PREFIXED:
        if capital and capital not in text:
            continue  # no capital K, no AKIA key
        for m in pattern.finditer(text):
            start = m.start()
            if (not start or _is_delimiter(text[start - 1])) and not _NOT_A_TOKEN.fullmatch(m.group()):
                edits.append((start, m.end(), REDACTED))
    if not edits:
        return text
    _bump(counts, KIND_TOKEN, len(edits))
    edits.sort()
    return _splice(text, edits)


# Provider shapes beyond the spec (memory.secret_patterns). Long runs of token characters are located in a
# translated copy (token characters -> "a", others -> " "): a run starts the text or follows a " ", so its
# start is found with the literal " aaa…". Only runs starting with a known prefix are matched.
_LONG_TOKEN = 20  # real provider tokens are longer; short ones at a delimiter are caught by the A.2 pass
_TOKEN_CLASS = _class_table({"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.": "a"}, " ")
_LONG_RUN = b"a" * _LONG_TOKEN
_RUN_AFTER_GAP = re.compile(b" " + _LONG_RUN)
_SHAPES = tuple(
    (shape, re.compile(shape.pattern), re.compile(shape.keep) if shape.keep else None)
    for shape in TOKEN_SHAPES
    if shape.left == "word"
)
_CONTEXT_SHAPES = tuple(
    (
        shape.prefixes[0],
        _capital(shape.prefixes[0]),
        re.compile(shape.pattern),
        re.compile(shape.keep) if shape.keep else None,
    )
    for shape in TOKEN_SHAPES
    if shape.left != "word"
)
_SHAPE_PREFIXES = tuple(sorted({prefix for shape, _, _ in _SHAPES for prefix in shape.prefixes}))
_SHAPE_FIRSTS = frozenset(prefix[0] for prefix in _SHAPE_PREFIXES)


def _redact_provider_tokens(text: str, counts: dict[str, int]) -> str:
    edits: list[tuple[int, int, str]] = []
    starts = text.startswith
    classes = _classify(text, _TOKEN_CLASS)
    runs = [0] if classes.startswith(_LONG_RUN) else []
    runs.extend([m.start() + 1 for m in _RUN_AFTER_GAP.finditer(classes)])
    for pos in runs:
        if text[pos] not in _SHAPE_FIRSTS or not starts(_SHAPE_PREFIXES, pos):
            continue
        for shape, pattern, _ in _SHAPES:
            if starts(shape.prefixes, pos):
                hit = pattern.match(text, pos)
                if hit is not None:
                    edits.append((pos, hit.end(), REDACTED))
                    _bump(counts, KIND_TOKEN)
                    break
    text = _splice(text, edits)
    for prefix, capital, pattern, keep in _CONTEXT_SHAPES:
        if (capital and capital not in text) or prefix not in text:
            continue

        def replace(m: re.Match[str], keep: re.Pattern[str] | None = keep) -> str:
            kept = keep.match(m.group(0)).group(0) if keep is not None else ""
            _bump(counts, KIND_TOKEN)
            return kept + REDACTED

        text = pattern.sub(replace, text)
    return text


# A.3 Bearer tokens (``Bearer `` / ``bearer `` + token; one literal-prefixed pattern), plus (extension, in
# the assignment pass) the credential of other Authorization schemes: ``Authorization: Basic dXNlcjpwYXNz``
# keeps its scheme and loses the credential.
# The token (up to a delimiter) is replaced unless it is already a marker.
_BEARER = re.compile(
    r"""earer (?<=[Bb]earer )(?!<redacted(?::[a-z-]+)?>[.:!?]*(?![^\s"',;()\[\]{}]))[^\s"',;()\[\]{}]+"""
)
_AUTH_SCHEME = re.compile(
    r"""(?i:authorization)["']?\s*[:=]\s*["']?"""
    r"""(?i:basic|digest|token|bot|apikey|api-key|sso-key|ssws|negotiate|ntlm)\s+"""
    r"""([^\s"',;()\[\]{}<]{6,})"""
)


def _redact_bearer(text: str, counts: dict[str, int]) -> str:
    text, n = _BEARER.subn("earer " + REDACTED, text)
    if n:
        _bump(counts, KIND_TOKEN, n)
    return text


# A.4 JWTs.
_JWT_TOKEN = re.compile(r"""eyJ[^\s"',;()\[\]{}]*""")
_JWT_CORE = re.compile(r"eyJ[A-Za-z0-9_\-]*(?:\.[A-Za-z0-9_\-]*){0,2}")
_JWT_PART = re.compile(r"[A-Za-z0-9_\-]{8,}")
_JWT_FRAGMENT = re.compile(r"eyJ[A-Za-z0-9_\-.]{9,}")
_JWT_LABELS = ("jwt", "id_token", "access_token", "refresh_token")
_LABEL_TAIL = re.compile(r"[\s:=]+\Z")


def _jwt_shaped(token: str) -> bool:
    parts = token.split(".")
    return len(parts) == 3 and all(_JWT_PART.fullmatch(part) for part in parts)


def _jwt_header_decodes(token: str) -> bool:
    header = token.split(".", 1)[0]
    try:
        decoded = base64.urlsafe_b64decode(header + "=" * (-len(header) % 4))
        return isinstance(json.loads(decoded), dict)
    except (binascii.Error, ValueError):
        return False


def _labelled_jwt(source: str, start: int, token: str) -> bool:
    if not _JWT_FRAGMENT.fullmatch(token):
        return False
    prefix = _LABEL_TAIL.sub("", source[max(0, start - 33) : start]).lower()
    return prefix.endswith(_JWT_LABELS)


def _redact_jwts(text: str, counts: dict[str, int]) -> str:
    def replace(m: re.Match[str]) -> str:
        source = m.string
        start = m.start()
        token = m.group(0)
        previous = source[start - 1] if start else ""
        if (not previous or _is_delimiter(previous)) and (_jwt_shaped(token) or _labelled_jwt(source, start, token)):
            _bump(counts, KIND_TOKEN)
            return REDACTED
        if previous and (previous.isalnum() or previous in "_-."):
            return token
        # Extension: a JWT glued to other text (``id_token=eyJ…&``, ``…sig.``) - its header must decode.
        core = _JWT_CORE.match(token).group(0).rstrip(".")
        if (_jwt_shaped(core) and _jwt_header_decodes(core)) or _labelled_jwt(source, start, core):
            _bump(counts, KIND_TOKEN)
            return REDACTED + token[len(core) :]
        return token

    return _JWT_TOKEN.sub(replace, text)


# A.6 URL query parameters (after '?' or '&'), plus (extension) the password of ``scheme://user:pw@host``.
# Neither a parameter value nor a URL password can hold '<', so neither is ever a marker already.
_PARAM_KEY = r"""([^\s&"'<>)\]}?=]+)="""
_PARAM_VALUE = r"""[^\s&"'<>)\]}]"""
_QUERY_PARAM = re.compile(rf"\?{_PARAM_KEY}({_PARAM_VALUE}*)")
_QUERY_KEY = re.compile(rf"\?{_PARAM_KEY}")
_AMP_KEY = re.compile(f"&{_PARAM_KEY}")
_URL_USERINFO = re.compile(r"""(://[^\s/:@"'<>]+:)[^\s/@"'<>]+(?=@)""")


@functools.lru_cache(maxsize=64)
def _amp_values(keys: frozenset[str]) -> re.Pattern[str]:
    """``=value`` after ``&key`` for one of ``keys`` (a literal replacement keeps ``re.sub`` in C)."""
    after = "|".join(f"(?<=&{re.escape(key)}=)" for key in sorted(keys))
    return re.compile(f"=(?:{after}){_PARAM_VALUE}+")


def _redact_urls(text: str, counts: dict[str, int]) -> str:
    # Parameters after '?' (a value may hold another '?': matches as the spec's pattern finds them), then after
    # '&'. The keys are collected first (``findall``, no match objects); most texts have no sensitive one.
    if any(map(_is_sensitive_url_key, set(_QUERY_KEY.findall(text)))):
        edits = [
            (m.start(2), m.end(2), REDACTED)
            for m in _QUERY_PARAM.finditer(text)
            if m.group(2) and _is_sensitive_url_key(m.group(1))
        ]
        if edits:
            _bump(counts, KIND_URL_PARAM, len(edits))
            text = _splice(text, edits)
    # '&' parameters hold no '&', so each is matched on its own: one substitution for the sensitive keys.
    keys = frozenset(filter(_is_sensitive_url_key, set(_AMP_KEY.findall(text))))
    if keys:
        text, n = _amp_values(keys).subn("=" + REDACTED, text)
        if n:
            _bump(counts, KIND_URL_PARAM, n)
    if "://" in text:
        text, n = _URL_USERINFO.subn(r"\1" + REDACTED, text)
        if n:
            _bump(counts, KIND_URL_PARAM, n)
    return text


# --------------------------------------------------------------------------------------------------------
# Step B - PII
# --------------------------------------------------------------------------------------------------------

# Digit-class copy of the text: digits -> 0, '-' -> d, '.' -> o, '+' -> p, other number separators
# (space, tab, parentheses, slash) -> s, anything else -> x. Line breaks end a cluster (a phone number does
# not span lines); '-' has its own class so that a date-time (0000d00d00s00) never looks like a number
# written in pairs (00s00s00s00).
_DIGIT_CLASS = _class_table({"0123456789": "0", " \t()/\u00a0": "s", "-": "d", ".": "o", "+": "p"}, "x")
# Literal shapes of the digit-class copy that every phone / card / SSN candidate contains: 3 then 4 digits
# (NANP, grouped cards and most national formats), dotted NANP / French, 3-3-2 and 2-2-2-2 groupings, a
# 2-digit area code before a long block, the SSN, and +digit; plus runs of 13+ bare digits (cards written
# without separators).
_ANCHORS = (
    b"000s0000", b"000d0000", b"000o000o0000", b"00o00o00o00", b"000s000s00", b"000d000d00", b"00s00s00s00",
    b"00d00d00d00", b"00s000000", b"0d00d0000",
)  # fmt: skip
_PLUS_DIGIT = b"p0"  # the last anchor: '+' is rare, so its occurrences are found with a one-byte search
_BARE_DIGITS = b"0" * 13
_DIGIT_RUN = re.compile(b"0+")
_CARD_FIRST_DIGITS = frozenset("234568")
_INNER_START = re.compile(r"[\s(+]|[\-./][\-./]")


def _has_digit(text: str) -> bool:
    return (
        "0" in text or "1" in text or "2" in text or "3" in text or "4" in text
        or "5" in text or "6" in text or "7" in text or "8" in text or "9" in text
    )  # fmt: skip


def _step_b(text: str, regions: str) -> tuple[str, dict[str, int]]:
    counts: dict[str, int] = {}
    if not text:
        return text, counts
    if _has_digit(text):
        edits = _digit_pii(text, counts, regions)
        text = _splice(text, edits)
    if "@" in text:
        text = _redact_emails(text, counts)
    return text, counts


def _digit_clusters(text: str) -> list[tuple[int, int]]:
    """Maximal runs of digits and number separators that contain an anchor shape, as sorted (start, end)."""
    classes = _classify(text, _DIGIT_CLASS)
    find = classes.find
    hits: list[int] = []
    for anchor in _ANCHORS:
        hits.extend(_find_all(classes, anchor))
    pos = find(b"p")
    while pos >= 0:
        if classes.startswith(_PLUS_DIGIT, pos):
            hits.append(pos)
        pos = find(b"p", pos + 1)
    hits.extend(
        run.start()
        for run in _literal_matches(classes, _BARE_DIGITS, _DIGIT_RUN)
        if text[run.start()] in _CARD_FIRST_DIGITS and run.end() - run.start() <= 19
    )
    hits.sort()
    clusters: list[tuple[int, int]] = []
    right = -1
    for pos in hits:
        if pos >= right:  # not in the cluster just found
            right = find(b"x", pos)
            if right < 0:
                right = len(classes)
            clusters.append((classes.rfind(b"x", 0, pos) + 1, right))
    return clusters


_CONTEXT = 3  # characters each side of a cluster that any rule looks at (look-arounds, matcher context)


def _digit_pii(text: str, counts: dict[str, int], regions: str) -> list[tuple[int, int, str]]:
    edits: list[tuple[int, int, str]] = []
    last = 0
    for left, right in _digit_clusters(text):
        if left < last:
            continue
        base = left - _CONTEXT if left > _CONTEXT else 0
        found = _cluster_pii(text[base : right + _CONTEXT], left - base, right - base, regions)
        for start, end, marker, kind in found:
            start += base
            end += base
            if kind == KIND_SSN:
                token_start, token_end = _token_bounds(text, start, end)
                if text[token_start:token_end].strip(_TRIM) == text[start:end] and token_start >= last:
                    start, end = token_start, token_end  # spec: the whole whitespace token is replaced
            edits.append((start, end, marker))
            _bump(counts, kind)
            last = end
    return edits


@functools.lru_cache(maxsize=65536)
def _cluster_pii(snippet: str, left: int, right: int, regions: str) -> tuple[tuple[int, int, str, str], ...]:
    """The PII of one digit cluster ``snippet[left:right]`` (with a little context around it), in spec
    order: number runs, SSNs, then phonenumbers. Cached: logs repeat the same numbers a lot."""
    if not _start_allowed(snippet, left) and _INNER_START.search(snippet, left, right) is None:
        return ()  # glued to a word on the left with no other place to start (ORD-2024-000123, UUIDs)
    edits: list[tuple[int, int, str, str]] = []
    # Scans end two characters past the cluster so that look-aheads see the real context (the character at
    # ``right`` is never a digit or separator, so no match can start there).
    stop = min(len(snippet), right + 2)
    for m in _RUN.finditer(snippet, left, stop):
        edits.extend(_run_redactions(snippet, m.start(), m.end()))
    for m in _SSN_SHAPE.finditer(snippet, left, stop):
        start, end = m.span()
        if not any(a < end and start < b for a, b, _, _ in edits):
            edits.append((start, end, SSN_MARKER, KIND_SSN))
    edits.sort()
    for start, end in _international_phones(snippet, left, stop, regions):
        if not any(a < end and start < b for a, b, _, _ in edits):
            edits.append((start, end, PHONE_MARKER, KIND_PHONE))
    edits.sort()
    return tuple(edits)


_NON_SPACE = re.compile(r"\S*")


def _token_bounds(text: str, start: int, end: int) -> tuple[int, int]:
    """The whitespace-delimited token around ``text[start:end]`` (reaching at most 256 characters left)."""
    floor = max(0, start - 256)
    space = text.rfind(" ", floor, start)
    head = floor if space < 0 else space + 1
    if not text[head:start].isprintable():  # maybe other whitespace (all of it is unprintable): full check
        window = text[floor:start]
        head = start - (0 if not window or window[-1].isspace() else len(window.rsplit(None, 1)[-1]))
    return head, _NON_SPACE.match(text, end).end()


# Shapes (spec §4.2 step B).
_EMAIL_CHARS = re.compile(r"[A-Za-z0-9@._%+\-]+")
_SSN_SHAPE = re.compile(r"(?<![\w\-])\d{3}-\d{2}-\d{4}(?![\w\-])")
_CARD_CHARS = re.compile(r"[\d\- ]+")
_PHONE_CHARS = re.compile(r"[\d\s+\-().]+")
_PHONE_SEPARATOR = re.compile(r"[\s+\-().]")
_NON_DIGITS = re.compile(r"\D+")
_DIGIT_GROUPS = re.compile(r"\d+")
_TRIM = ".,;:!?\"'()[]{}<>"


@functools.lru_cache(maxsize=8192)
def _looks_like_email(token: str) -> bool:
    if "@" not in token or not _EMAIL_CHARS.fullmatch(token):
        return False
    local, domain = token.split("@", 1)
    if not local or "." not in domain or domain.startswith(".") or domain.endswith("."):
        return False
    # Extension: the top-level label has a letter, so ``react@18.2.0`` (a package version) is not an e-mail.
    return any(ch.isalpha() for ch in domain.rsplit(".", 1)[1])


def _luhn_valid(digits: str) -> bool:
    total = 0
    for index, ch in enumerate(reversed(digits)):
        value = ord(ch) - 48
        if index % 2:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total != 0 and total % 10 == 0


def _card_issuer_known(digits: str) -> bool:
    """Issuer (IIN) ranges of the major networks: keeps Luhn-valid timestamps and ids out."""
    n = len(digits)
    p2, p3, p4, p6 = int(digits[:2]), int(digits[:3]), int(digits[:4]), int(digits[:6])
    if digits[0] == "4":  # Visa
        return True
    if 51 <= p2 <= 55 or 2221 <= p4 <= 2720:  # Mastercard
        return n == 16
    if p2 in (34, 37):  # American Express
        return n == 15
    if 300 <= p3 <= 305 or p4 == 3095 or p2 in (36, 38, 39):  # Diners Club
        return n >= 14
    if 3528 <= p4 <= 3589:  # JCB
        return n >= 16
    if p4 == 6011 or 644 <= p3 <= 649 or p2 == 65 or 622126 <= p6 <= 622925:  # Discover
        return n >= 16
    if p2 in (62, 81) or 2200 <= p4 <= 2204:  # UnionPay, Mir
        return n >= 16
    return p2 in (50, 56, 57, 58, 60, 63, 67)  # Maestro, RuPay


def _looks_like_card(token: str) -> bool:
    if not _CARD_CHARS.fullmatch(token):
        return False
    digits = _NON_DIGITS.sub("", token)
    return 13 <= len(digits) <= 19 and _luhn_valid(digits) and _card_issuer_known(digits)


def _looks_like_phone(token: str) -> bool:
    """The spec's phone shape, restricted to NANP numbers: grouping 3-3-4 / 1-3-3-4 / +1…, area code 2-9.

    The spec's bare "10 digits with a separator" also matches ``2024-01-15 10:30``, ``192.168.10.10`` and
    ``48.8566 2.3522``; other countries' numbers are found by ``phonenumbers`` instead.
    """
    if not _PHONE_CHARS.fullmatch(token) or not _PHONE_SEPARATOR.search(token):
        return False
    digits = _NON_DIGITS.sub("", token)
    plus = token.startswith("+")
    if plus:
        if len(digits) != 11 or digits[0] != "1":
            return False
    elif not (len(digits) == 10 or (len(digits) == 11 and digits[0] == "1")):
        return False
    if digits[-10] in "01":
        return False  # NANP area codes start with 2-9 (the exchange rule would reject the spec's 555-123-4567)
    groups = [len(group) for group in _DIGIT_GROUPS.findall(token)]
    if groups in ([3, 3, 4], [1, 3, 3, 4]):
        return True
    if plus and groups in ([11], [1, 10]):
        return True
    return "(" in token and groups in ([3, 7], [1, 3, 7])


# B.1 number-run pass. A run starts at a digit, + or ( on a token boundary and extends over digits and
# separators; whitespace is only taken when a digit (or "(digit") follows. Only runs with 10+ digits can be
# a phone or a card, so the regex asks for them; a date-time prefix (``2024-01-15 10:30``) never starts one.
_RUN = re.compile(
    r"(?<![\w])(?<![\w][\-./])(?!(?:19|20)\d\d[\-/.][01]?\d[\-/.][0-3]?\d\s)"
    r"[+(]*\d(?:(?:[+\-().]|[ \t]+(?=\(?\d))*\d){9,}"
)


_PLUS_ONE = re.compile(r"\+[\s(]*1")


def _start_allowed(text: str, index: int) -> bool:
    if index == 0:
        return True
    previous = text[index - 1]
    if previous.isalnum() or previous == "_":
        return False
    return not (previous in "-./" and index >= 2 and (text[index - 2].isalnum() or text[index - 2] == "_"))


def _end_allowed(text: str, index: int) -> bool:
    """Not glued to a word on the right: ``4567abc`` and ``0076-ce4d`` (a UUID) do not end a number."""
    if index >= len(text):
        return True
    following = text[index]
    if following.isalnum() or following == "_":
        return False
    return not (following in "-./" and index + 1 < len(text) and (text[index + 1].isalnum() or text[index + 1] == "_"))


def _run_redactions(text: str, start: int, end: int) -> list[tuple[int, int, str, str]]:
    """Replacements inside one run ``text[start:end]`` (``end`` is just after its last digit).

    As in the spec, every boundary position of the run is tried as a start: the candidate from there to
    the end is a card, else a phone, else (starting with ``+``/``(``) a phone-shaped prefix ending at its
    10th or 11th digit. Work per start is bounded: a whole candidate is only examined when it has at most
    19 digits (no card or phone has more), and the prefix walk stops after 11 digits.
    """
    found: list[tuple[int, int, str, str]] = []
    digits_after = [0] * (end - start + 1)  # digits in text[start + k : end]
    for k in range(end - start - 1, -1, -1):
        digits_after[k] = digits_after[k + 1] + text[start + k].isdigit()
    whole_ok = _end_allowed(text, end)
    pos = start
    while pos < end:
        ch = text[pos]
        remaining = digits_after[pos - start]
        if remaining < 10:
            break
        if not (ch.isdigit() or ch in "+(") or not _start_allowed(text, pos):
            pos += 1
            continue
        if whole_ok and remaining <= 19:
            candidate = text[pos:end]
            if remaining >= 13 and _looks_like_card(candidate):
                found.append((pos, end, CARD_MARKER, KIND_CARD))
                break
            if remaining <= 11 and _looks_like_phone(candidate):
                found.append((pos, end, PHONE_MARKER, KIND_PHONE))
                break
        if ch == "(" or (ch == "+" and _PLUS_ONE.match(text, pos)):  # only +1… can start a NANP prefix
            # The prefix walk: at the 10th or 11th digit, a phone-shaped prefix is redacted on its own.
            seen = 0
            stop = pos
            prefix_end = -1
            while stop < end and seen < 11:
                if text[stop].isdigit():
                    seen += 1
                    if seen >= 10 and _end_allowed(text, stop + 1) and _looks_like_phone(text[pos : stop + 1]):
                        prefix_end = stop + 1
                        break
                stop += 1
            if prefix_end > 0:
                found.append((pos, prefix_end, PHONE_MARKER, KIND_PHONE))
                pos = prefix_end
                continue
        pos += 1
    return found


# B.2 e-mail tokens (checked trimmed, replaced whole), plus (extension) e-mails glued to other text
# (``"email":"a@b.co"``, ``mailto:a@b.co``), replaced alone.
_EMBEDDED_EMAIL = re.compile(
    r"(?<![A-Za-z0-9._%+\-])[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}"
    r"(?![A-Za-z0-9\-])"
)


def _redact_emails(text: str, counts: dict[str, int]) -> str:
    edits: list[tuple[int, int, str]] = []
    find = text.find
    at = find("@")
    while at >= 0:
        start, end = _token_bounds(text, at, at + 1)
        if _looks_like_email(text[start:end].strip(_TRIM)):
            edits.append((start, end, EMAIL_MARKER))
        else:
            edits.extend((m.start(), m.end(), EMAIL_MARKER) for m in _EMBEDDED_EMAIL.finditer(text, start, end))
        at = find("@", max(end, at + 1))
    if edits:
        _bump(counts, KIND_EMAIL, len(edits))
    return _splice(text, edits)


# International phones (phonenumbers). Candidates: 7+ digits on token boundaries, not a date, not an IPv4.
_PHONE_CANDIDATE = re.compile(
    r"(?<![\w@#$€£¥%])(?<![\w][\-./])"
    r"(?!(?:19|20)\d\d[\-/.]\d{1,2}[\-/.]\d{1,2}(?!\d))"
    r"(?!\d{1,3}(?:\.\d{1,3}){3}(?![\d.]))"
    r"(?:\+|\(\+?)?\d(?:[ \t\u00a0().\-/]{0,3}\d){6,}"
    r"(?!\w)(?![\-./]\w)"  # and not glued to a word on the right (04125588-4944-ec87-… is a UUID)
)
_CANDIDATE_SEPARATOR = re.compile(r"[ \t\u00a0().\-/]")
_IPV4 = re.compile(r"(?<![\d.])\d{1,3}(?:\.\d{1,3}){3}(?![\d.])")
_DATE_PREFIX = re.compile(r"\(?(?:(?:19|20)\d\d[\-/.]\d{1,2}[\-/.]\d{1,2}|\d{1,2}[\-/.]\d{1,2}[\-/.](?:19|20)\d\d)")
_COORDINATES = re.compile(r"-?\d{1,3}\.\d+[\s,]+-?\d{1,3}\.\d+")


@dataclass(frozen=True)
class _RegionInfo:
    national_prefix: re.Pattern[str] | None
    general: re.Pattern[str] | None
    lengths: frozenset[int]


@functools.lru_cache(maxsize=32)
def _phone_regions(raw: str) -> tuple[tuple[str, _RegionInfo], ...]:
    regions: list[tuple[str, _RegionInfo]] = []
    for code in re.split(r"[\s,;]+", raw.upper()):
        if not code or code not in phonenumbers.SUPPORTED_REGIONS or code in dict(regions):
            continue
        metadata = PhoneMetadata.metadata_for_region(code)
        general = metadata.general_desc
        prefix = metadata.national_prefix_for_parsing or metadata.national_prefix
        pattern = general.national_number_pattern if general is not None else None
        lengths = frozenset(general.possible_length or ()) if general is not None else frozenset()
        regions.append((code, _RegionInfo(re.compile(prefix) if prefix else None, _compile(pattern), lengths)))
    return tuple(regions)


def _compile(pattern: str | None) -> re.Pattern[str] | None:
    return re.compile(pattern) if pattern else None


def _plausible_in(info: _RegionInfo, digits: str) -> bool:
    """Cheap check against the region's number lengths and pattern before running the matcher."""
    candidates = [digits]
    if info.national_prefix is not None:
        stripped = info.national_prefix.match(digits)
        if stripped is not None and stripped.end():
            candidates.append(digits[stripped.end() :])
    for number in candidates:
        if info.lengths and len(number) not in info.lengths:
            continue
        if info.general is None or info.general.fullmatch(number):
            return True
    return False


def _acceptable_phone(raw: str) -> bool:
    """Shapes libphonenumber can accept that are not phone numbers here."""
    if _IPV4.search(raw) or _DATE_PREFIX.match(raw) or _COORDINATES.fullmatch(raw):
        return False
    if raw.count(".") >= 2 and sum(len(group.strip()) == 1 for group in raw.split(".")) >= 2:
        return False  # a version number such as 1.2.3.4567890
    return bool(raw.startswith(("+", "0", "(")) or _CANDIDATE_SEPARATOR.search(raw))


@functools.lru_cache(maxsize=16384)
def _phone_spans(snippet: str, digits: str, international: bool, regions_raw: str) -> tuple[tuple[int, int], ...]:
    """Spans of valid phone numbers in ``snippet`` (a candidate with a little context), cached."""
    regions = _phone_regions(regions_raw)
    if not regions:
        return ()
    if international:
        tried = [regions[0][0]]  # the country code decides; the default region does not matter
    elif digits.startswith("00") or len(digits) > 13:
        tried = [code for code, _ in regions]
    else:
        tried = [code for code, info in regions if _plausible_in(info, digits)]
    many = len(digits) > 13  # possibly several numbers in one candidate: collect from every region
    spans: list[tuple[int, int]] = []
    for code in tried:
        for match in PhoneNumberMatcher(snippet, code, leniency=Leniency.VALID):
            raw = match.raw_string
            if not _acceptable_phone(raw.strip()):
                continue
            start = match.start + (len(raw) - len(raw.lstrip()))
            end = match.end - (len(raw) - len(raw.rstrip()))
            if all(end <= other_start or start >= other_end for other_start, other_end in spans):
                spans.append((start, end))
        if spans and not many:
            break
    return tuple(sorted(spans))


def _international_phones(text: str, left: int, right: int, regions: str) -> list[tuple[int, int]]:
    if not _phone_regions(regions):
        return []
    found: list[tuple[int, int]] = []
    n = len(text)
    for m in _PHONE_CANDIDATE.finditer(text, left, right):
        candidate = m.group(0)
        digits = _NON_DIGITS.sub("", candidate)
        if len(digits) > 24:
            continue
        international = candidate.startswith(("+", "(+"))
        if not international and not digits.startswith("0") and not _CANDIDATE_SEPARATOR.search(candidate):
            continue  # a bare run of digits (ids, timestamps) is not given to libphonenumber
        start, end = m.span()
        context_start = max(0, start - 1)
        spans = _phone_spans(text[context_start : min(n, end + 3)], digits, international, regions)
        cut = end
        while not spans and international:
            # ``+44 20 7946 0958 12``: a number followed by another group is rejected whole; retry without
            # the trailing groups (at most twice).
            cut = text.rfind(" ", start, cut)
            digits = _NON_DIGITS.sub("", text[start:cut]) if cut > start else ""
            if len(digits) < 8 or end - cut > 16:
                break
            spans = _phone_spans(text[context_start : cut + 1], digits, True, regions)
        for rel_start, rel_end in spans:
            a = max(start, context_start + rel_start)
            b = min(end, context_start + rel_end)
            if b > a and (not found or a >= found[-1][1]):
                found.append((a, b))
    return found


# --------------------------------------------------------------------------------------------------------
# §4.19 - secret classifier for learning content
# --------------------------------------------------------------------------------------------------------

_WORD_MARKERS = (
    "access token is", "access token:", "access token =", "api key is", "api key:", "api key =",
    "authorization bearer", "authorization: bearer", "bearer token is", "bearer token:", "bearer token =",
    "clientsecret:", "clientsecret =", "clientsecret is", "client secret is", "client secret:",
    "client secret =", "password is", "password:", "password =", "passphrase is", "passphrase:",
    "passphrase =", "private key is", "private key:", "private key =", "personal access token is",
    "personal access token:", "personal access token =", "refresh token is", "refresh token:",
    "refresh token =", "secret key is", "secret key:", "secret key =", "secret token is", "secret token:",
    "secret token =", "token is", "token:", "token =",
)  # fmt: skip
_SQUASHED_MARKERS = (
    "access_token=", "apikey=", "api_key=", "api-key:", "api-key=", "authorization:bearer", "bearer=",
    "clientsecret:", "clientsecret=", "client_secret=", "client-secret:", "client-secret=", "pat:", "pat=",
    "password=", "passphrase=", "personal_access_token=", "personal-access-token:",
    "personal-access-token=", "personalaccesstoken:", "personalaccesstoken=", "privatekey:", "privatekey=",
    "private_key=", "refresh_token=", "secret_key=", "secret_token=", "token=", "x-api-key:", "x-api-key=",
    "x_api_key=", "xapikey:", "xapikey=",
)  # fmt: skip
_SECRET_KEY_PHRASES = (
    ("access", "token"), ("api", "key"), ("x", "api", "key"), ("auth", "token"), ("bearer", "token"),
    ("client", "secret"), ("clientsecret",), ("password",), ("passphrase",), ("pat",),
    ("personal", "access", "token"), ("personalaccesstoken",), ("private", "key"), ("privatekey",),
    ("refresh", "token"), ("secret", "key"), ("secret", "token"), ("token",),
)  # fmt: skip
_NON_WORD = re.compile(r"[^\w]|_")


def _key_looks_secret(key: str) -> bool:
    words = _NON_WORD.sub(" ", key).split()
    if not words:
        return False
    return any(tuple(words[-len(phrase) :]) == phrase for phrase in _SECRET_KEY_PHRASES)


def _has_secret_assignment(lowered: str) -> bool:
    words = " ".join(lowered.split())
    if any(marker in words for marker in _WORD_MARKERS):
        return True
    squashed = "".join(lowered.split())
    if any(marker in squashed for marker in _SQUASHED_MARKERS):
        return True
    for line in lowered.split("\n"):
        for delimiter in (":", "="):
            key, found, value = line.partition(delimiter)
            if found and value.strip() and _key_looks_secret(key):
                return True
    return False
