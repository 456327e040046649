"""Spec §4.2 step A, the "debug redactor": PEM private keys, sensitive assignments and headers, prefixed and
provider tokens, Bearer and other Authorization credentials, JWTs, URL parameters, then the operator's tokens.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import re

from memory.scrubbing.config import _Config, _ConfigError, _literal_tokens
from memory.scrubbing.markers import (
    CONFIG_ERROR_MARKER,
    KIND_ASSIGNMENT,
    KIND_OPERATOR_TOKEN,
    KIND_PRIVATE_KEY,
    KIND_TOKEN,
    KIND_URL_PARAM,
    PRIVATE_KEY_MARKER,
    REDACTED,
    _bump,
    _is_marker,
)
from memory.scrubbing.provider_tokens import TOKEN_SHAPES
from memory.scrubbing.scan import _capital, _class_table, _classify, _lowered, _splice


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


# Provider shapes beyond the spec (``provider_tokens``). Long runs of token characters are located in a
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

