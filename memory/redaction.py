"""Secret and PII scrubbing (spec §4.2) and the learning-content secret classifier (spec §4.19).

Pure functions: no database, no Django models. Scrubbing applies to the *derived* planes (recovered run
memory, learnings, previews); the canonical session journal is never scrubbed - that is the callers' rule.

* ``redact_secrets(text)`` - step A, the "debug redactor": PEM private keys, sensitive assignments,
  provider tokens (the spec's prefixes plus the shapes in ``memory.secret_patterns``), Bearer and other
  Authorization credentials, JWTs, sensitive URL query parameters and URL passwords, then the operator's
  literal tokens (``KHEISH_REDACT_TOKENS`` / ``KHEISH_REDACT_TOKENS_FILE``, longest first).
* ``scrub(text, redact_pii=True)`` - step A, then step B (PII): the spec's number-run pass (Luhn cards,
  NANP-shaped phones), the whitespace-token pass (email, SSN, card, phone), e-mails and SSNs embedded in
  larger tokens, and international phone numbers found by ``phonenumbers`` (``Leniency.VALID``) over the
  regions in ``KHEISH_PHONE_REGIONS``.
* ``looks_like_secret(text)`` - §4.19 ``learning_content_has_secret_material``.

Counting: ``redaction_count`` is the spec's number (step A +1 if it changed the text at all, +1 per step-B
replacement); ``redactions`` counts every individual replacement per kind.

Speed: every pass is a precompiled regex whose Python callback runs only on candidate matches; the
assignment pass is driven by a search for sensitive-key words; PII passes are skipped when the text has no
digit / no ``@``; phone candidates need 7+ digits and are validated once per distinct snippet (cached).
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import os
import re
from collections.abc import Callable, Iterable
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
    redacted, counts = _step_a(text)
    return ScrubResult(text=redacted, redaction_count=int(redacted != text), redactions=counts)


def scrub(text: str, *, redact_pii: bool = True) -> ScrubResult:
    """Spec §4.2: step A, then (if ``redact_pii``) step B, each step-B replacement counting +1."""
    redacted, counts = _step_a(text)
    count = int(redacted != text)
    if redact_pii and redacted != CONFIG_ERROR_MARKER:
        redacted, pii_counts = _step_b(redacted)
        count += sum(pii_counts.values())
        for kind, n in pii_counts.items():
            counts[kind] = counts.get(kind, 0) + n
    return ScrubResult(text=redacted, redaction_count=count, redactions=counts)


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


def _is_marker(value: str) -> bool:
    """True for a value that is already just a marker (keeps scrubbing idempotent and counts honest)."""
    return _MARKER_VALUE.fullmatch(value) is not None


# --------------------------------------------------------------------------------------------------------
# Configuration (settings when Django is configured, else the environment)
# --------------------------------------------------------------------------------------------------------


def _setting(name: str) -> str:
    value: object = None
    try:
        from django.conf import settings

        if settings.configured:
            value = getattr(settings, name, None)
    except ImportError:  # pragma: no cover - Django is a dependency; the module still works without it
        value = None
    if value is None or value == "" or value == [] or value == ():
        value = os.environ.get(name, "")
    if isinstance(value, list | tuple | set | frozenset):
        return "\n".join(str(item) for item in value)
    return str(value)


class _ConfigError(Exception):
    pass


@dataclass(frozen=True)
class _LiteralTokens:
    pattern: re.Pattern[str] | None

    def apply(self, text: str, counts: dict[str, int]) -> str:
        if self.pattern is None or not text:
            return text

        def replace(m: re.Match[str]) -> str:
            if m.group(1) is not None:  # an existing marker: never rewrite markers
                return m.group(0)
            _bump(counts, KIND_OPERATOR_TOKEN)
            return REDACTED

        return self.pattern.sub(replace, text)


_literal_cache: tuple[object, _LiteralTokens] | None = None


def _split_tokens(raw: str, *, commas: bool) -> list[str]:
    parts = re.split(r"[,\n]" if commas else r"\n", raw)
    return [part.strip() for part in parts if part.strip()]


def _literal_tokens() -> _LiteralTokens:
    """Operator tokens, read per call, compiled once per (value, file mtime/size, extra sources)."""
    global _literal_cache
    raw = _setting(SETTING_TOKENS)
    path = _setting(SETTING_TOKENS_FILE).strip()
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
    unique = sorted(set(tokens), key=lambda token: (-len(token), token))
    pattern = None
    if unique:
        alternatives = "|".join(re.escape(token) for token in unique)
        pattern = re.compile(rf"(<redacted(?::[a-z-]+)?>)|(?:{alternatives})")
    literal = _LiteralTokens(pattern)
    _literal_cache = (key, literal)
    return literal


# --------------------------------------------------------------------------------------------------------
# Step A - the debug redactor
# --------------------------------------------------------------------------------------------------------


def _step_a(text: str) -> tuple[str, dict[str, int]]:
    counts: dict[str, int] = {}
    if not text:
        return text, counts
    try:
        literal = _literal_tokens()
    except _ConfigError:
        # Fail closed: an unreadable token file hides the whole payload (spec §4.2 A.7).
        return CONFIG_ERROR_MARKER, {KIND_OPERATOR_TOKEN: 1}
    out = text
    if "-----BEGIN " in out:
        out = _redact_pem(out, counts)
    out = _redact_assignments(out, counts)
    out = _redact_prefixed_tokens(out, counts)
    out = _redact_provider_tokens(out, counts)
    out = _redact_authorization(out, counts)
    if "eyJ" in out:
        out = _redact_jwts(out, counts)
    if "?" in out or "&" in out or "://" in out:
        out = _redact_urls(out, counts)
    out = literal.apply(out, counts)
    return out, counts


# A.5 PEM private keys. Run first, so an assignment such as ``private_key: -----BEGIN …`` cannot cut the
# header off and leave the body behind. A block written on one line (JSON with ``\n`` escapes) ends at its
# END marker on that line; a block with no END marker is redacted to the end of the text.
_PEM_BEGIN = re.compile(r"-----BEGIN [^\n]*?PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END [^\n]*?PRIVATE KEY(?: BLOCK)?-----")


def _redact_pem(text: str, counts: dict[str, int]) -> str:
    parts: list[str] = []
    pos = 0
    while True:
        begin = _PEM_BEGIN.search(text, pos)
        if begin is None:
            break
        end = _PEM_END.search(text, begin.end())
        parts.append(text[pos : begin.start()])
        parts.append(PRIVATE_KEY_MARKER)
        _bump(counts, KIND_PRIVATE_KEY)
        if end is None:
            pos = len(text)
            break
        pos = end.end()
    if not parts:
        return text
    parts.append(text[pos:])
    return "".join(parts)


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


# Words without which no key can be sensitive under the rules above (a pre-filter: only lines and pairs
# around one of these are examined). ``token(?!s)`` skips ``max_tokens`` / ``prompt_tokens``.
_KEY_NEEDLE = re.compile(
    r"authorization|auth.?tokens?|api.{0,3}key|private.?key|subscription.?key|key(?![a-z])|token(?!s)"
    r"|(?:access|refresh|id|bearer).?tokens|secret|pass(?:word|wd|phrase)|cookie|credential|error-json",
    re.IGNORECASE,
)
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_QUOTED_KEY_CHARS = _KEY_CHARS | {" "}
_PAIR_LEFT = frozenset(" \t\r\n,;{([|")
_VALUE_STOP = re.compile(r"""[\s"',;&)\]}<]""")


def _first_separator(text: str, start: int, end: int) -> int:
    equals = text.find("=", start, end)
    colon = text.find(":", start, end)
    if equals < 0:
        return colon
    if colon < 0:
        return equals
    return min(equals, colon)


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


def _pair_value_span(text: str, i: int, j: int, line_start: int, line_end: int) -> tuple[int, int] | None:
    """Extension of A.1: a ``"key": "value"`` / ``key=value`` pair anywhere on a line (JSON, logfmt)."""
    n = len(text)
    # Quoted key: "…needle…" followed by : or =
    ks = i
    while ks > line_start and text[ks - 1] in _QUOTED_KEY_CHARS and i - ks < 64:
        ks -= 1
    ke = j
    while ke < line_end and text[ke] in _QUOTED_KEY_CHARS and ke - j < 64:
        ke += 1
    quote = text[ks - 1] if ks > line_start else ""
    vstart = -1
    key = ""
    if quote in ('"', "'") and ke < n and text[ke] == quote:
        key = text[ks:ke]
        k = ke + 1
        while k < line_end and text[k] in " \t":
            k += 1
        if k < line_end and text[k] in ":=":
            k += 1
            while k < line_end and text[k] in " \t":
                k += 1
            vstart = k
    if vstart < 0:
        # Unquoted logfmt key: key=value, the key starting a field.
        ks = i
        while ks > line_start and text[ks - 1] in _KEY_CHARS and i - ks < 64:
            ks -= 1
        ke = j
        while ke < line_end and text[ke] in _KEY_CHARS and ke - j < 64:
            ke += 1
        if ke >= line_end or text[ke] != "=" or (ks > 0 and text[ks - 1] not in _PAIR_LEFT):
            return None
        key = text[ks:ke]
        if key.lower() == "key":  # ``the key=value syntax`` is prose far more often than a credential
            return None
        vstart = ke + 1
    if vstart >= line_end:
        return None
    if text[vstart] in "\"'":
        close = _quoted_end(text, vstart, line_end)
        if close < 0:
            return None
        span = (vstart + 1, close)
    else:
        stop = _VALUE_STOP.search(text, vstart, line_end)
        span = (vstart, stop.start() if stop else line_end)
    if span[1] <= span[0] or _is_marker(text[span[0] : span[1]]) or not _is_sensitive_key(key):
        return None
    return span


def _redact_assignments(text: str, counts: dict[str, int]) -> str:
    parts: list[str] = []
    last = 0
    pos = 0
    n = len(text)
    checked_line = -1
    search = _KEY_NEEDLE.search
    while True:
        m = search(text, pos)
        if m is None:
            break
        i, j = m.span()
        line_start = text.rfind("\n", 0, i) + 1
        line_end = text.find("\n", j)
        if line_end < 0:
            line_end = n
        if line_start != checked_line:
            # A.1 proper: the first needle of a line decides whether the line's key is sensitive.
            checked_line = line_start
            sep = _first_separator(text, line_start, line_end)
            if sep >= j:
                span = _line_value_span(text, line_start, sep, line_end)
                if span is not None:
                    parts.append(text[last : span[0]])
                    parts.append(REDACTED)
                    _bump(counts, KIND_ASSIGNMENT)
                    last = span[1]
                    pos = line_end
                    continue
        span = _pair_value_span(text, i, j, line_start, line_end)
        if span is not None and span[0] >= last:
            parts.append(text[last : span[0]])
            parts.append(REDACTED)
            _bump(counts, KIND_ASSIGNMENT)
            last = span[1]
            pos = span[1]
            continue
        pos = j
    if not parts:
        return text
    parts.append(text[last:])
    return "".join(parts)


# Token delimiters (spec): whitespace, " ' , ; ( ) [ ] { }.
_DELIMITERS = "\"',;()[]{}"


def _is_delimiter(ch: str) -> bool:
    return ch.isspace() or ch in _DELIMITERS


# A.2 prefixed tokens: at text start or after a delimiter, the token up to the next delimiter.
_SPEC_PREFIXED = re.compile(r"""(?:sk-|ghp_|github_pat_|xox[bp]-|AKIA)[^\s"',;()\[\]{}]*""")
_NOT_A_TOKEN = re.compile(r"sk-learn\W*", re.IGNORECASE)  # the scikit-learn nickname, not a key


def _redact_prefixed_tokens(text: str, counts: dict[str, int]) -> str:
    def replace(m: re.Match[str]) -> str:
        start = m.start()
        token = m.group(0)
        if start and not _is_delimiter(m.string[start - 1]):
            return token
        if _NOT_A_TOKEN.fullmatch(token):
            return token
        _bump(counts, KIND_TOKEN)
        return REDACTED

    return _SPEC_PREFIXED.sub(replace, text)


# Provider shapes beyond the spec (memory.secret_patterns), one alternation.
_SHAPES = tuple((shape, re.compile(shape.pattern), re.compile(shape.keep) if shape.keep else None)
                for shape in TOKEN_SHAPES)  # fmt: skip
_PROVIDERS = re.compile("|".join(shape.pattern for shape in TOKEN_SHAPES))
_WORDISH = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def _redact_provider_tokens(text: str, counts: dict[str, int]) -> str:
    def replace(m: re.Match[str]) -> str:
        source = m.string
        start = m.start()
        token = m.group(0)
        for shape, pattern, keep in _SHAPES:
            hit = pattern.match(source, start)
            if hit is None or hit.end() != m.end():
                continue
            if shape.left == "word" and start and source[start - 1] in _WORDISH:
                return token
            kept = keep.match(token).group(0) if keep is not None else ""
            _bump(counts, KIND_TOKEN)
            return kept + REDACTED
        return token  # pragma: no cover - the alternation only matches one of the shapes

    return _PROVIDERS.sub(replace, text)


# A.3 Bearer tokens, plus (extension) the credential of other Authorization schemes.
_BEARER = re.compile(r"""(Bearer |bearer )([^\s"',;()\[\]{}]+)""")
_AUTH_SCHEME = re.compile(
    r"""((?i:authorization)["']?\s*[:=]\s*["']?"""
    r"""(?i:basic|digest|token|bot|apikey|api-key|sso-key|ssws|negotiate|ntlm)\s+)"""
    r"""([^\s"',;()\[\]{}<]{6,})"""
)


def _redact_authorization(text: str, counts: dict[str, int]) -> str:
    def replace(m: re.Match[str]) -> str:
        if _is_marker(m.group(2)):
            return m.group(0)
        _bump(counts, KIND_TOKEN)
        return m.group(1) + REDACTED

    if "earer " in text:
        text = _BEARER.sub(replace, text)
    if "uthorization" in text or "UTHORIZATION" in text:
        text = _AUTH_SCHEME.sub(replace, text)
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
        if (not previous or _is_delimiter(previous)) and (
            _jwt_shaped(token) or _labelled_jwt(source, start, token)
        ):
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


# A.6 URL query parameters, plus (extension) the password of ``scheme://user:password@host``.
_URL_PARAM = re.compile(r"""[?&]([^\s&"'<>)\]}?=]+)=([^\s&"'<>)\]}]*)""")
_URL_USERINFO = re.compile(r"""(://[^\s/:@"'<>]+:)([^\s/@"'<>]+)(?=@)""")


def _redact_urls(text: str, counts: dict[str, int]) -> str:
    def replace_param(m: re.Match[str]) -> str:
        value = m.group(2)
        if not value or _is_marker(value) or not _is_sensitive_url_key(m.group(1)):
            return m.group(0)
        _bump(counts, KIND_URL_PARAM)
        return m.group(0)[: m.start(2) - m.start()] + REDACTED

    def replace_password(m: re.Match[str]) -> str:
        if _is_marker(m.group(2)):
            return m.group(0)
        _bump(counts, KIND_URL_PARAM)
        return m.group(1) + REDACTED

    if "?" in text or "&" in text:
        text = _URL_PARAM.sub(replace_param, text)
    if "://" in text:
        text = _URL_USERINFO.sub(replace_password, text)
    return text


# --------------------------------------------------------------------------------------------------------
# Step B - PII
# --------------------------------------------------------------------------------------------------------

_DIGIT = re.compile(r"\d")


def _step_b(text: str) -> tuple[str, dict[str, int]]:
    counts: dict[str, int] = {}
    if not text:
        return text, counts
    has_digit = _DIGIT.search(text) is not None
    has_at = "@" in text
    if not has_digit and not has_at:
        return text, counts
    if has_digit:
        text = _redact_number_runs(text, counts)
    if has_at:
        text = _EMAIL_TOKEN.sub(functools.partial(_replace_email_token, counts), text)
    if has_digit:
        text = _NUMERIC_TOKEN.sub(functools.partial(_replace_numeric_token, counts), text)
        if "-" in text:
            text = _EMBEDDED_SSN.sub(functools.partial(_replace_with, SSN_MARKER, KIND_SSN, counts), text)
    if has_at and "@" in text:
        text = _EMBEDDED_EMAIL.sub(functools.partial(_replace_with, EMAIL_MARKER, KIND_EMAIL, counts), text)
    if has_digit:
        text = _redact_international_phones(text, counts)
    return text, counts


def _replace_with(marker: str, kind: str, counts: dict[str, int], m: re.Match[str]) -> str:
    _bump(counts, kind)
    return marker


# Shapes (spec §4.2 step B).
_EMAIL_CHARS = re.compile(r"[A-Za-z0-9@._%+\-]+")
_SSN = re.compile(r"\d{3}-\d{2}-\d{4}")
_CARD_CHARS = re.compile(r"[\d\- ]+")
_PHONE_CHARS = re.compile(r"[\d\s+\-().]+")
_PHONE_SEPARATOR = re.compile(r"[\s+\-().]")
_NON_DIGITS = re.compile(r"\D+")
_DIGIT_GROUPS = re.compile(r"\d+")
_TRIM = ".,;:!?\"'()[]{}<>"


def _looks_like_email(token: str) -> bool:
    if "@" not in token or not _EMAIL_CHARS.fullmatch(token):
        return False
    local, domain = token.split("@", 1)
    return bool(local) and "." in domain and not domain.startswith(".") and not domain.endswith(".")


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
    """The spec's phone shape, restricted to NANP digit grouping (3-3-4, 1-3-3-4, +1…).

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
    r"[+(]*\d(?:(?:[+\-().]|\s+(?=\(?\d))*\d){9,}"
)


def _start_allowed(text: str, index: int) -> bool:
    if index == 0:
        return True
    previous = text[index - 1]
    if previous.isalnum() or previous == "_":
        return False
    return not (previous in "-./" and index >= 2 and (text[index - 2].isalnum() or text[index - 2] == "_"))


def _end_allowed(text: str, index: int) -> bool:
    return index >= len(text) or not (text[index].isalnum() or text[index] == "_")


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
            if _looks_like_card(candidate):
                found.append((pos, end, CARD_MARKER, KIND_CARD))
                break
            if _looks_like_phone(candidate):
                found.append((pos, end, PHONE_MARKER, KIND_PHONE))
                break
        if ch in "+(":
            # The prefix walk: at the 10th or 11th digit, a phone-shaped prefix is redacted on its own.
            seen = 0
            stop = pos
            prefix_end = -1
            while stop < end and seen < 11:
                if text[stop].isdigit():
                    seen += 1
                    if (
                        seen >= 10
                        and _end_allowed(text, stop + 1)
                        and _looks_like_phone(text[pos : stop + 1])
                    ):
                        prefix_end = stop + 1
                        break
                stop += 1
            if prefix_end > 0:
                found.append((pos, prefix_end, PHONE_MARKER, KIND_PHONE))
                pos = prefix_end
                continue
        pos += 1
    return found


def _redact_number_runs(text: str, counts: dict[str, int]) -> str:
    parts: list[str] = []
    last = 0
    for m in _RUN.finditer(text):
        for start, end, marker, kind in _run_redactions(text, m.start(), m.end()):
            parts.append(text[last:start])
            parts.append(marker)
            _bump(counts, kind)
            last = end
    if not parts:
        return text
    parts.append(text[last:])
    return "".join(parts)


# B.2 whitespace-token pass: tokens are checked trimmed but replaced whole.
_EMAIL_TOKEN = re.compile(r"(?<!\S)[^\s@]*@\S*")
_NUMERIC_TOKEN = re.compile(r"""(?<!\S)(?=(?:[^\s\d]*\d){9})[\d+\-().,;:!?"'\[\]{}<>]+(?!\S)""")


def _replace_email_token(counts: dict[str, int], m: re.Match[str]) -> str:
    if _looks_like_email(m.group(0).strip(_TRIM)):
        _bump(counts, KIND_EMAIL)
        return EMAIL_MARKER
    return m.group(0)


def _replace_numeric_token(counts: dict[str, int], m: re.Match[str]) -> str:
    token = m.group(0).strip(_TRIM)
    if _SSN.fullmatch(token):
        _bump(counts, KIND_SSN)
        return SSN_MARKER
    if _looks_like_card(token):
        _bump(counts, KIND_CARD)
        return CARD_MARKER
    if _looks_like_phone(token):
        _bump(counts, KIND_PHONE)
        return PHONE_MARKER
    return m.group(0)


# Extensions: e-mail addresses and SSNs glued to other text (``"email":"a@b.co"``, ``ssn=123-45-6789``).
_EMBEDDED_EMAIL = re.compile(
    r"(?<![A-Za-z0-9._%+\-])[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}"
    r"(?![A-Za-z0-9\-])"
)
_EMBEDDED_SSN = re.compile(r"(?<![\w\-])\d{3}-\d{2}-\d{4}(?![\w\-])")


# International phones (phonenumbers). Candidates: 7+ digits on a token boundary, not a date, not an IPv4.
_PHONE_CANDIDATE = re.compile(
    r"(?<![\w@#$€£¥%])(?<![\w][\-./])"
    r"(?!(?:19|20)\d\d[\-/.]\d{1,2}[\-/.]\d{1,2}(?!\d))"
    r"(?!\d{1,3}(?:\.\d{1,3}){3}(?![\d.]))"
    r"(?:\+|\(\+?)?\d(?:[ \t\u00a0().\-/]{0,3}\d){6,}"
)
_CANDIDATE_SEPARATOR = re.compile(r"[ \t\u00a0().\-/]")
_IPV4 = re.compile(r"(?<![\d.])\d{1,3}(?:\.\d{1,3}){3}(?![\d.])")
_DATE_PREFIX = re.compile(
    r"\(?(?:(?:19|20)\d\d[\-/.]\d{1,2}[\-/.]\d{1,2}|\d{1,2}[\-/.]\d{1,2}[\-/.](?:19|20)\d\d)"
)
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
        regions.append(
            (
                code,
                _RegionInfo(
                    national_prefix=re.compile(prefix) if prefix else None,
                    general=re.compile(general.national_number_pattern)
                    if general is not None and general.national_number_pattern
                    else None,
                    lengths=frozenset(general.possible_length or ()) if general is not None else frozenset(),
                ),
            )
        )
    return tuple(regions)


def _configured_regions() -> str:
    return _setting(SETTING_PHONE_REGIONS).strip() or DEFAULT_PHONE_REGIONS


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
def _phone_spans(
    snippet: str, digits: str, international: bool, regions_raw: str
) -> tuple[tuple[int, int], ...]:
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


def _redact_international_phones(text: str, counts: dict[str, int]) -> str:
    regions = _configured_regions()
    if not _phone_regions(regions):
        return text
    parts: list[str] = []
    last = 0
    n = len(text)
    for m in _PHONE_CANDIDATE.finditer(text):
        candidate = m.group(0)
        digits = _NON_DIGITS.sub("", candidate)
        if len(digits) > 24:
            continue
        international = candidate.startswith(("+", "(+"))
        if not international and not digits.startswith("0") and not _CANDIDATE_SEPARATOR.search(candidate):
            continue  # a bare run of digits (ids, timestamps) is not given to libphonenumber
        start, end = m.span()
        context_start = max(0, start - 1)
        snippet = text[context_start : min(n, end + 3)]
        for rel_start, rel_end in _phone_spans(snippet, digits, international, regions):
            a = max(start, context_start + rel_start)
            b = min(end, context_start + rel_end)
            if b <= a or a < last:
                continue
            parts.append(text[last:a])
            parts.append(PHONE_MARKER)
            _bump(counts, KIND_PHONE)
            last = b
    if not parts:
        return text
    parts.append(text[last:])
    return "".join(parts)


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


def looks_like_secret(text: str) -> bool:
    """Spec §4.19 ``learning_content_has_secret_material``: a redaction marker, anything step A would
    redact, or an assignment-shaped secret (word, squashed and structured markers)."""
    trimmed = text.strip()
    if not trimmed:
        return False
    lowered = trimmed.lower()
    if "<redacted" in lowered:
        return True
    if _step_a(trimmed)[0] != trimmed:
        return True
    return _has_secret_assignment(lowered)
