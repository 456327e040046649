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
from memory.scrubbing.scan import (
    _TRIGGERS,
    _capital,
    _class_table,
    _classify,
    _find_all,
    _lowered,
    _small_cache,
    _splice,
)
from memory.scrubbing.values import (
    _is_sensitive_key,
    _is_sensitive_url_key,
    is_describing_word,
    is_directory_value,
    is_placeholder,
    is_prose_word,
    is_reference,
    is_secret_shaped,
)


def _step_a(text: str, config: _Config) -> tuple[str, dict[str, int]]:
    redacted, counts, _ = _step_a_triggers(text, config)
    return redacted, counts


def _step_a_triggers(text: str, config: _Config) -> tuple[str, dict[str, int], frozenset[bytes] | None]:
    """Step A, and the triggers present in the text (``_TRIGGERS``; None when not looked up): a superset of those
    in the redacted text, which step B's rules use too."""
    counts: dict[str, int] = {}
    if not text:
        return text, counts, None
    try:
        literal = _literal_tokens(config)
    except _ConfigError:
        # Fail closed: an unreadable token file hides the whole payload (spec §4.2 A.7).
        return CONFIG_ERROR_MARKER, {KIND_OPERATOR_TOKEN: 1}, None
    low = _lowered(text)
    # The trigger literals that occur (one pass, ``_TRIGGERS``): a rule whose triggers are all absent is skipped.
    # A redaction only removes text and adds markers, which hold no trigger, so what is absent stays absent -
    # except after a PEM block, whose marker holds "key": the triggers are looked up again then.
    present = _TRIGGERS.present(low)
    if _PEM_TRIGGER in present and "-----BEGIN " in text:
        pem = _redact_pem(text, counts)
        if pem is not text:
            text, low = pem, _lowered(pem)
            present = _TRIGGERS.present(low)
    spoken = _redact_spoken(text, low, counts, present)
    if spoken is not text:
        text, low = spoken, _lowered(spoken)
    text = _redact_assignments(text, low, counts, present)
    text = _redact_prefixed_tokens(text, counts, present)
    text = _redact_provider_tokens(text, counts, present)
    text = _redact_bearer(text, counts, present)
    if _JWT_TRIGGER in present and "eyJ" in text:
        text = _redact_jwts(text, counts)
    text = _redact_urls(text, counts, present)
    text = literal.apply(text, counts)
    return text, counts, present


# A.5 PEM private keys. Run first, so an assignment such as ``private_key: -----BEGIN …`` cannot cut the
# header off and leave the body behind. A block written on one line (JSON with ``\n`` escapes) ends at its
# END marker on that line. A block with no END marker (a truncated paste) ends where its body ends: after the
# header lines (``Proc-Type: …``), the base64 lines and the line breaks between them - the text after it (a
# question, a certificate path) is not part of the key. The label between ``BEGIN`` and ``PRIVATE KEY`` is
# bounded (``RSA``, ``ENCRYPTED``, ``OPENSSH``, ``PGP``…), so an opener costs the same wherever it stands.
_PEM_TRIGGER = b"-----begin "
_TRIGGERS.add(_PEM_TRIGGER)
_PEM_BEGIN = re.compile(r"-----BEGIN [^\n]{0,40}?PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END [^\n]{0,40}?PRIVATE KEY(?: BLOCK)?-----")
# The body of a truncated block, in one possessive pass: header lines right after the opener, a blank line,
# base64 lines of 40+ characters (one per line, JSON-escaped ``\n`` line breaks, or flattened with spaces) and a
# last partial line (it has a digit or ``+/=``: a word of prose after the block is not part of it).
_NL = r"[ \t]*+(?:\r?\n|\\r?\\n)"
_PEM_BODY = re.compile(
    rf"(?:{_NL}[ \t]*+[A-Za-z][A-Za-z0-9-]{{0,40}}: [^\n\\]{{0,200}}+)*+"
    rf"(?:{_NL}(?={_NL}))?+"
    rf"(?:(?:{_NL}|[ \t]++)[ \t]*+[A-Za-z0-9+/=]{{40,}}+)*+"
    rf"(?:{_NL}[ \t]*+(?=[A-Za-z]{{0,39}}[0-9+/=])[A-Za-z0-9+/=]{{1,39}}+(?=[\s\"'\\.…,]|\Z))?+"
)


def _redact_pem(text: str, counts: dict[str, int]) -> str:
    edits: list[tuple[int, int, str]] = []
    pos = 0
    no_end = False  # no END marker after some opener: none after a later one either (one search in all)
    while True:
        begin = _PEM_BEGIN.search(text, pos)
        if begin is None:
            break
        end = None if no_end else _PEM_END.search(text, begin.end())
        no_end = end is None
        if end is not None:
            stop = end.end()
        else:
            stop = _PEM_BODY.match(text, begin.end()).end()  # type: ignore[union-attr]  # matches empty
            while stop > begin.end() and text[stop - 1] in " \t\r\n":
                stop -= 1  # the line break after the body is the text's, not the key's
        edits.append((begin.start(), stop, PRIVATE_KEY_MARKER))
        _bump(counts, KIND_PRIVATE_KEY)
        pos = max(stop, begin.end())
    return _splice(text, edits)


# Words without which no key is sensitive under the rules above, searched in the lower-cased text. Each
# pattern starts with a rare literal (see the module docstring); ``tokens`` only counts after access /
# refresh / id / auth / bearer, so ``max_tokens`` and ``prompt_tokens`` are not even looked at.
_PLURAL_TOKENS = "|".join(
    f"(?<={word}{sep}tokens)"
    for word in ("access", "refresh", "id", "auth", "bearer")
    for sep in ("", "_", "-", ".", " ")
)
# Each needle with its trigger literals (``_TRIGGERS``): one of them occurs wherever the needle matches.
# The ``token`` needle's trigger: a pattern (RE2's syntax, no look-around) that matches wherever the needle does.
_TOKEN_TRIGGER = b"token(?!s), or tokens after access/refresh/id/auth/bearer"
_TRIGGERS.add(_TOKEN_TRIGGER, pattern=rb"token(?:[^s]|\z)|(?:access|refresh|id|auth|bearer)[_. \-]?tokens")
_KEY_NEEDLES = tuple(
    (re.compile(pattern.encode()), triggers)  # searched in the lower-cased bytes copy (``_lowered``)
    for pattern, triggers in (
        ("key", (b"key",)),
        # ``tokens`` counts only after access/refresh/id/auth/bearer; a one-letter look-behind rejects
        # ``prompt_tokens`` / ``max_tokens`` before the full check.
        (rf"token(?:(?!s)|s(?:(?<=[shdr]tokens)|(?<=[shdr][_. \-]tokens))(?:{_PLURAL_TOKENS}))", (_TOKEN_TRIGGER,)),
        ("cookie", (b"cookie",)),
        (r"cre(?:t(?<=secret)|dential)", (b"secret", b"credential")),
        (r"pass(?:w|phrase)", (b"passw", b"passphrase")),
        ("pwd", (b"pwd",)),
        ("authoriz", (b"authoriz",)),
        ("error-json", (b"error-json",)),
    )
)
_TRIGGERS.add(*(trigger for _, triggers in _KEY_NEEDLES for trigger in triggers if trigger != _TOKEN_TRIGGER))
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
# ``"key": v`` / ``'key'=v``, ``key=v``, and a header-style ``key: v`` inside a line (``-H x-api-key: v``).
_PAIR_TAIL = re.compile(r"""([A-Za-z0-9_.\-]{0,64}+)(?:(["'])[ \t]*+[:=]|=|:(?=[ \t]))[ \t]*+""")
_PAIR_LEFT = frozenset(" \t\r\n,;{([|")
_VALUE_STOP = re.compile(r"""[\s"',;&)\]}<]""")


_SEPARATOR = re.compile(b"[=:]")


_AUTH_SCHEMES = frozenset(
    {"basic", "bearer", "digest", "token", "bot", "apikey", "api-key", "sso-key", "ssws", "negotiate", "ntlm"}
)
_YAML_BLOCK = frozenset({"|", ">", "|-", ">-", "|+", ">+"})
_COOKIE_ATTRIBUTES = frozenset(
    {"path", "domain", "expires", "max-age", "samesite", "secure", "httponly", "priority", "partitioned", "version",
     "comment"}
)  # fmt: skip
_COOKIE_ITEM = re.compile(r"""[ \t]*([!#$%&'*+\-.^_`|~0-9A-Za-z]+)(?:=("[^"\n]*"|[^\s;]*))?[ \t]*""")
_WORD_END = re.compile(r"\S+")
_URL_START = re.compile(r"[ \t][A-Za-z][A-Za-z0-9+.\-]{0,31}://")  # one space: a run is searched once
_TRAILING = ".,;:!?)]}"
_URLISH = re.compile(r"[/?#&]")
_FORM_NEXT = re.compile(r"&[A-Za-z_][A-Za-z0-9_.\-]{0,64}=")


_YAML_VALUE = object()  # ``_line_value_spans(..., local=True)``: the value is a YAML block, it reads the next lines


def _line_spans(text: str, line_start: int, sep: int, line_end: int) -> list[tuple[int, int]] | None:
    """``_line_value_spans``, from a cache of lines: the spans depend on the line alone (offsets relative to it),
    except a YAML block's, which reads the lines after it. Logs repeat their lines (the same header or setting in
    every request), so a line is analysed once."""
    spans = _spans_in_line(text[line_start:line_end], sep - line_start)
    if spans is _YAML_VALUE:
        return _line_value_spans(text, line_start, sep, line_end)
    if spans is None:
        return None
    return [(a + line_start, b + line_start) for a, b in spans]


@_small_cache(4096)
def _spans_in_line(line: str, sep: int):
    spans = _line_value_spans(line, 0, sep, len(line), local=True)
    return tuple(spans) if isinstance(spans, list) else spans


def _line_value_spans(
    text: str, line_start: int, sep: int, line_end: int, *, local: bool = False
) -> list[tuple[int, int]] | None:
    """A.1: the spans of the value to redact on this line, or None when the key is not sensitive.

    The value ends where it ends, not at the end of the line: a quoted value at its closing quote, a
    bracketed one at its closing bracket, a YAML block scalar (``|``) at the dedent, a cookie header's values
    one by one (names and attributes stay), a passphrase at the end of the line (it is a phrase), anything
    else at the end of its token (an auth scheme takes the credential after it). Placeholders, references
    and prose (``Password: must be 12+ characters``) are not values.
    """
    key = text[line_start:sep].strip()
    if not _is_sensitive_key(key):
        return None
    bare = key.strip("\"'\\`").lower()
    last_word = bare.rsplit(None, 1)[-1] if bare else ""
    if text[sep] == ":" and last_word.strip("\"'`") == "authorization":
        return None  # the header's credential is the Bearer / scheme rules' (spec: ``authorization`` keys)
    if _URLISH.search(last_word):
        return None  # a URL: its parameters are the URL rule's
    if not _is_sensitive_key(key):
        return None
    start = sep + 1
    if text[sep] == ":" and text.startswith("=", start):
        start += 1  # ``password := readPassword()``: Go's declaration, one separator
    while start < line_end and text[start] in " \t":
        start += 1
    end = line_end
    while end > start and text[end - 1].isspace():
        end -= 1
    if end <= start:
        return None
    first = text[start]
    if first == "`":
        return None  # ``api_key:`` quoted in documentation, no value follows
    if bare.replace("_", "-").endswith("cookie"):
        return _cookie_spans(text, start, end)
    if first in "\"'":
        close = _quoted_end(text, start, end)
        span = (start + 1, close) if close > 0 else (start, end)
    elif first in "{[":
        close = _bracket_end(text, start, end)
        span = (start, close + 1 if close > 0 else end)
    elif text[start:end] in _YAML_BLOCK:
        if local:
            return _YAML_VALUE  # type: ignore[return-value]
        block = _yaml_block_span(text, line_start, end)
        if block is not None and _is_marker(text[block[0][0] : block[0][1]]):
            return []  # ``key: |`` holding a PEM block already redacted: the line is done, the marker stays
        return block
    elif is_reference(text[start : min(end, start + _REFERENCE_CHARS)]):
        return None  # ``${{ secrets.GITHUB_TOKEN }}``
    else:
        word = _WORD_END.match(text, start, end)
        stop = word.end() if word else end
        form = _FORM_NEXT.search(text, start, stop)
        if form is not None:
            stop = form.start()  # ``access_token=…&token_type=Bearer``: the next form field is not the value
        if is_placeholder(text[start:stop]) or is_directory_value(bare, text[start:stop]):
            return None
        if "passphrase" in bare or "pass phrase" in bare:
            url = _URL_START.search(text, start, end)
            stop = len(text[start : url.start()].rstrip()) + start if url else end
        elif text[start:stop].lower() in _AUTH_SCHEMES and stop < end:
            following = _WORD_END.search(text, stop, end)
            stop = following.end() if following else stop
        elif is_prose_word(text[start:stop]):
            return None
        while stop > start + 1 and text[stop - 1] in _TRAILING:
            closing = text[stop - 1]
            if closing in ")]}" and "([{"[")]}".index(closing)] in text[start:stop]:
                break  # the bracket belongs to the value: ``f(x)``
            stop -= 1
        span = (start, stop)
    value = text[span[0] : span[1]]
    if span[1] <= span[0] or _is_marker(value) or is_placeholder(value):
        return None
    return [span]


def _cookie_spans(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """``Cookie: a=1; b=2`` / ``Set-Cookie: sid=x; Path=/; HttpOnly``: each cookie value, not the names or
    the attributes, and nothing after the last ``;``-separated item."""
    spans: list[tuple[int, int]] = []
    pos = start
    while pos < end:
        item = _COOKIE_ITEM.match(text, pos, end)
        if item is None or item.end() == pos:
            break
        name, value = item.group(1), item.group(2)
        if value and name.lower() not in _COOKIE_ATTRIBUTES:
            a, b = item.span(2)
            if value.startswith('"') and len(value) > 1:
                a, b = a + 1, b - 1
            if b > a and not _is_marker(text[a:b]) and not is_placeholder(text[a:b]):
                spans.append((a, b))
        pos = item.end()
        if name.lower() == "expires" and pos < end and text[pos] == ",":  # Expires=Wed, 21 Oct 2015 …
            semi = text.find(";", pos, end)
            pos = semi if semi >= 0 else end
        if pos >= end or text[pos] != ";":
            break
        pos += 1
    return spans  # empty: a cookie header whose values are all markers or placeholders (the line is done)


def _bracket_end(text: str, start: int, limit: int) -> int:
    """Index of the bracket closing ``text[start]`` on this line (quoted strings skipped), or -1."""
    depth = 0
    i = start
    while i < limit:
        ch = text[i]
        if ch in "\"'":
            close = _quoted_end(text, i, limit)
            if close < 0:
                return -1
            i = close
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _yaml_block_span(text: str, line_start: int, value_end: int) -> list[tuple[int, int]] | None:
    """The lines of a YAML block scalar (``password: |``): every following line indented deeper than the key."""
    indent = len(text[line_start:value_end]) - len(text[line_start:value_end].lstrip(" \t"))
    pos = text.find("\n", value_end)
    first = last = -1
    while pos >= 0:
        line = pos + 1
        nxt = text.find("\n", line)
        stop = len(text) if nxt < 0 else nxt
        body = text[line:stop]
        if body.strip():
            if len(body) - len(body.lstrip(" \t")) <= indent:
                break
            if first < 0:
                first = line + len(body) - len(body.lstrip(" \t"))
            last = line + len(body.rstrip())
        pos = nxt
    return [(first, last)] if first >= 0 and last > first else None


_QUOTED_REST = {quote: re.compile(rf"(?:[^{quote}\\]++|\\.)*+{quote}", re.DOTALL) for quote in "\"'`"}


def _quoted_end(text: str, start: int, limit: int) -> int:
    """Index of the closing quote matching ``text[start]`` (backslash escapes honoured), or -1 (one pass)."""
    pattern = _QUOTED_REST.get(text[start])
    rest = pattern.match(text, start + 1, limit) if pattern is not None else None
    return rest.end() - 1 if rest is not None else -1


# A reference (``${{ secrets.X }}``, ``os.environ[...]``) is short: only that much of a value is looked at.
_REFERENCE_CHARS = 256


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
    if value_start >= line_end or not _is_sensitive_key(key):
        return None
    if is_reference(text[value_start : min(line_end, value_start + _REFERENCE_CHARS)]):
        return None
    if text[value_start] in "\"'":
        close = _quoted_end(text, value_start, line_end)
        if close < 0:
            return None
        span = (value_start + 1, close)
    else:
        stop = _VALUE_STOP.search(text, value_start, line_end)
        span = (value_start, stop.start() if stop else line_end)
    value = text[span[0] : span[1]]
    if (
        span[1] <= span[0]
        or _is_marker(value)
        or is_directory_value(key, value)
        or _url_placeholder(text, span[1], value)
        or text.startswith("<redacted", span[1])  # ``sid=<redacted>``: the value was redacted already
        or (not quote and text[key_end] == ":" and is_prose_word(value))  # ``the token: required``
    ):
        # Not a secret value; the key words inside it (``token={token=…``) are not keys either: later hits skip
        # it, so a value is read once however many key words it holds.
        raise _NotAValue(span[1])
    return span


class _NotAValue(Exception):
    def __init__(self, end: int) -> None:
        self.end = end


_PAIR_NEXT = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-\"'=:")


def _redact_assignments(text: str, low: bytes, counts: dict[str, int], present: frozenset[bytes]) -> str:
    hits = sorted(
        m.span() for needle, triggers in _KEY_NEEDLES if not present.isdisjoint(triggers) for m in needle.finditer(low)
    )
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
                    spans = _line_spans(text, line_start, sep.start(), line_end)
                    if spans == []:
                        done = line_end
                        continue
                    if spans:
                        for a, b in spans:
                            edits.append((a, b, REDACTED))
                            _bump(counts, KIND_ASSIGNMENT)
                        done = max(b for _, b in spans)
                        if done > line_end:  # a YAML block: its lines are done
                            line_end = done
                        continue
        if low.startswith(b"authorization", i):
            # Extension: the credential of a non-Bearer scheme (``Authorization: Basic dXNlcjpwYXNz``; the
            # spec leaves ``Authorization:`` lines to the Bearer rule).
            scheme = _AUTH_SCHEME.match(text, i) or _AUTH_RAW.match(text, i)
            if (
                scheme is not None
                and scheme.start(1) >= done
                and not is_placeholder(scheme.group(1))
                and (scheme.re is _AUTH_SCHEME or is_secret_shaped(scheme.group(1)))
            ):
                edits.append((scheme.start(1), scheme.end(1), REDACTED))
                _bump(counts, KIND_TOKEN)
                done = scheme.end()
            continue  # an Authorization value is the scheme / Bearer rules', never a pair
        if j < n and text[j] in _WORD_GOES_ON:
            bare = _bare_hex_after(text, i, j)
            if bare is not None and bare[0] >= done:
                edits.append((bare[0], bare[1], REDACTED))
                _bump(counts, KIND_TOKEN)
                done = bare[1]
                continue
        # Extension: a ``"key": "value"`` / ``key=value`` pair inside the line.
        if j >= n or text[j] not in _PAIR_NEXT:
            continue
        tail = _PAIR_TAIL.match(text, j)
        if tail is None:
            continue
        try:
            span = _pair_value_span(text, i, tail, line_start, line_end)
        except _NotAValue as rejected:
            done = max(done, rejected.end)
            continue
        if span is not None and span[0] >= done:
            edits.append((span[0], span[1], REDACTED))
            _bump(counts, KIND_ASSIGNMENT)
            done = span[1]
    return _splice(text, edits)


# Extension: a bare hex token (32-128 hex digits: classic GitHub/GitLab tokens, API keys) right after a word naming
# a token ("deploy token 3f2a…", "with API key 9c1e…", "auth token: …"); after a digest word it is a hash
# ("commit 3f2a…", "sha256 9f86…"), and "token is 3f2a…" is the spoken-secret rule's. Looked at only where the
# assignment pass found a key word followed by a space, so it costs nothing elsewhere.
_BARE_HEX_AFTER = re.compile(r"[ \t]{1,4}((?:[0-9a-f]{32,128}|[0-9A-F]{32,128}))(?![A-Za-z0-9_\-])")
_WORD_REST = re.compile(r"[A-Za-z0-9_]{0,32}")
_WORD_GOES_ON = frozenset(" \tsowrd")  # after the key needle: a space, or the rest of tokens/password/passwd
_TOKEN_NOUNS = frozenset({"token", "tokens", "key", "apikey", "secret", "credential", "credentials", "password",
                          "passwd", "pwd"})  # fmt: skip


def _bare_hex_after(text: str, i: int, j: int) -> tuple[int, int] | None:
    """The span of a bare hex token after the key word found at ``text[i:j]``, or None."""
    end = _WORD_REST.match(text, j).end()  # type: ignore[union-attr]  # {0,32}: matches everywhere
    m = _BARE_HEX_AFTER.match(text, end)
    if m is None:
        return None
    start = i
    while start > 0 and start > i - 32 and (text[start - 1].isalnum() or text[start - 1] == "_"):
        start -= 1
    word = text[start:end].lower()
    if not (word in _TOKEN_NOUNS or word.endswith(("token", "apikey"))):
        return None
    return m.span(1)


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
    (triggers, _capital(prefix), re.compile(prefix + _TOKEN_REST))
    for prefix, triggers in (
        ("sk-", (b"sk-",)),
        ("ghp_", (b"ghp_",)),
        ("github_pat_", (b"github_pat_",)),
        ("xox[bp]-", (b"xoxb-", b"xoxp-")),
        ("AKIA", (b"akia",)),
    )
)
_TRIGGERS.add(*(trigger for triggers, _, _ in _SPEC_PREFIXED for trigger in triggers))
_NOT_A_TOKEN = re.compile(r"sk-learn\W*", re.IGNORECASE)  # the scikit-learn nickname, not a key
# A prefix described in prose (``keys start with sk-proj-``) has no body: at least 6 characters must follow
# the longest known prefix, and the whole token must not be a placeholder (``sk-...``, ``ghp_xxxx``).
_KNOWN_PREFIXES = ("sk-ant-", "sk-proj-", "sk-svcacct-", "sk-admin-", "sk-", "ghp_", "github_pat_", "xoxb-", "xoxp-",
                   "AKIA")  # fmt: skip
_MIN_BODY = 6


def _token_has_body(token: str) -> bool:
    prefix = next((p for p in _KNOWN_PREFIXES if token.startswith(p)), "")
    body = token[len(prefix) :].rstrip(".,:;!?")
    return len(body) >= _MIN_BODY and not is_placeholder(token)


def _redact_prefixed_tokens(text: str, counts: dict[str, int], present: frozenset[bytes]) -> str:
    edits: list[tuple[int, int, str]] = []
    for triggers, capital, pattern in _SPEC_PREFIXED:
        if present.isdisjoint(triggers) or (capital and capital not in text):
            continue  # no ``sk-`` anywhere, no sk- token; no capital K, no AKIA key
        for m in pattern.finditer(text):
            start = m.start()
            token = m.group()
            if (
                (not start or _is_delimiter(text[start - 1]))
                and not _NOT_A_TOKEN.fullmatch(token)
                and _token_has_body(token)
            ):
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
_TRIGGERS.add(*(prefix.lower().encode() for prefix, _, _, _ in _CONTEXT_SHAPES))
_SHAPE_PREFIXES = tuple(sorted({prefix for shape, _, _ in _SHAPES for prefix in shape.prefixes}))
_SHAPE_FIRSTS = frozenset(prefix[0] for prefix in _SHAPE_PREFIXES)


def _redact_provider_tokens(text: str, counts: dict[str, int], present: frozenset[bytes]) -> str:
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
                if hit is not None and not is_placeholder(hit.group(0)):
                    edits.append((pos, hit.end(), REDACTED))
                    _bump(counts, KIND_TOKEN)
                    break
    text = _splice(text, edits)
    for prefix, capital, pattern, keep in _CONTEXT_SHAPES:
        if prefix.lower().encode() not in present or (capital and capital not in text) or prefix not in text:
            continue

        def replace(m: re.Match[str], keep: re.Pattern[str] | None = keep) -> str:
            kept = keep.match(m.group(0)).group(0) if keep is not None else ""  # type: ignore[union-attr]  # a prefix
            _bump(counts, KIND_TOKEN)
            return kept + REDACTED

        text = pattern.sub(replace, text)
    return text


# A.3 Bearer tokens (``Bearer `` / ``bearer `` + token; one literal-prefixed pattern), plus (extension, in
# the assignment pass) the credential of other Authorization schemes: ``Authorization: Basic dXNlcjpwYXNz``
# keeps its scheme and loses the credential.
# The token (up to a delimiter) is replaced unless it is already a marker.
_BEARER_TRIGGER = b"earer "
_TRIGGERS.add(_BEARER_TRIGGER)
_BEARER = re.compile(
    r"""earer (?<=[Bb]earer )(?!<redacted(?::[a-z-]+)?>[.:!?]*(?![^\s"',;()\[\]{}]))[^\s"',;()\[\]{}]+"""
)
_AUTH_SCHEME = re.compile(
    r"""(?i:authorization)["']?\s*[:=]\s*["']?"""
    r"""(?i:basic|digest|token|bot|apikey|api-key|sso-key|ssws|negotiate|ntlm)\s+"""
    r"""([^\s"',;()\[\]{}<]{6,})"""
)


_AUTH_RAW = re.compile(r"""(?i:authorization)["']?[ \t]*[:=][ \t]*["']?([^\s"',;()\[\]{}<]{8,})""")
_WHOLE_TOKEN = re.compile(r"\S*")


def _bearer_kept(token: str) -> bool:
    """After ``Bearer ``: a word of prose, a placeholder, or the next key of a printed response
    (``token_type: Bearer expires_in: 3600``) - a key ends with ``:``, a credential never does."""
    return is_prose_word(token) or is_placeholder(token) or token.endswith(":")


def _redact_bearer(text: str, counts: dict[str, int], present: frozenset[bytes]) -> str:
    """The token after ``Bearer ``, unless it is a placeholder or reference (``Bearer $TOKEN``,
    ``Bearer ${API_TOKEN}``, ``Bearer <token>``) or a word of prose (``Bearer authentication``)."""
    if _BEARER_TRIGGER not in present:
        return text
    matches = list(_BEARER.finditer(text))  # one scan; the tokens are then looked at in Python
    if not matches:
        return text
    # Nothing to keep (a placeholder always starts its token, or is one): every token goes. Otherwise each token
    # is looked at with the whitespace token around it.
    looked_at = any(_bearer_kept(token) or token[:1] in "$<%" for token in {m.group()[6:] for m in matches})
    edits = []
    for m in matches:
        if looked_at:
            token = m.group()[6:]
            if _bearer_kept(token) or is_placeholder(_WHOLE_TOKEN.match(text, m.start() + 6).group()):  # type: ignore[union-attr]  # \S*
                continue
        edits.append((m.start() + 6, m.end(), REDACTED))
    if edits:
        _bump(counts, KIND_TOKEN, len(edits))
    return _splice(text, edits)


# A.4 JWTs.
_JWT_TRIGGER = b"eyj"
_TRIGGERS.add(_JWT_TRIGGER)
_JWT_TOKEN = re.compile(r"""eyJ[^\s"',;()\[\]{}]*""")
_JWT_CORE = re.compile(r"eyJ[A-Za-z0-9_\-]*(?:\.[A-Za-z0-9_\-]*){0,2}")
_JWT_PART = re.compile(r"[A-Za-z0-9_\-]{8,}")
_JWT_FRAGMENT = re.compile(r"eyJ[A-Za-z0-9_\-.]{9,}")
_JWT_LABELS = ("jwt", "id_token", "access_token", "refresh_token")
_LABEL_TAIL = re.compile(r"[\s:=]+\Z")


def _jwt_shaped(token: str) -> bool:
    parts = token.split(".")
    return len(parts) == 3 and all(_JWT_PART.fullmatch(part) for part in parts)


def _unsigned_jwt(token: str) -> bool:
    """``alg: none``: header and payload, an empty signature after the last dot (the header must decode)."""
    parts = token.split(".")
    return (
        len(parts) == 3
        and parts[2] == ""
        and all(_JWT_PART.fullmatch(part) for part in parts[:2])
        and _jwt_header_decodes(token)
    )


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
            _jwt_shaped(token) or _labelled_jwt(source, start, token) or _unsigned_jwt(token)
        ):
            _bump(counts, KIND_TOKEN)
            return REDACTED
        if previous and (previous.isalnum() or previous in "_-."):
            return token
        # Extension: a JWT glued to other text (``id_token=eyJ…&``, ``…sig.``) - its header must decode.
        full = _JWT_CORE.match(token).group(0)  # type: ignore[union-attr]  # token starts with eyJ
        core = full if _unsigned_jwt(full) else full.rstrip(".")
        if (
            (_jwt_shaped(core) and _jwt_header_decodes(core))
            or _labelled_jwt(source, start, core)
            or _unsigned_jwt(core)
        ):
            _bump(counts, KIND_TOKEN)
            return REDACTED + token[len(core) :]
        return token

    return _JWT_TOKEN.sub(replace, text)


# Extension: secrets given in prose after a secret noun - "my password is correcthorsebatterystaple", "the wifi
# passphrase for the lab is tangerine-owl-42", "I set the root password to hunter2", "the deploy token was
# 3f2a…". Searched in the lower-cased copy (one pattern, anchored on the noun's rare letters); the value is one
# word or a quoted phrase. Prose is not a value ("the password is stored in Vault", "is too short", "is the same
# as…"), nor a placeholder, a reference, a marker, or - after token/key/secret nouns - a small number
# ("the token is 40 characters long").
_SECRET_NOUN = (
    rb"(?:pass(?:word|phrase|code)|passwd|pwd|pin(?:[ \t]+code)?|secret|api[ _-]?key|access[ _-]?key|token)s?"
)
_SPOKEN = re.compile(
    rb"(?<![a-z0-9_\-])"
    rb"(?:"
    + _SECRET_NOUN
    + rb"(?:[ \t]+(?:for|of|on|at|in|to)(?:[ \t]+[a-z0-9_.'\-]{1,30}){1,4}?)?"  # "for the lab", "of the router"
    rb"[ \t]+(?:is|was)(?:[ \t]+(?:now|still|just|currently|set[ \t]+to|changed[ \t]+to))?"
    rb"|(?:set|changed|reset|updated)[ \t]+(?:the[ \t]+|my[ \t]+|our[ \t]+|its[ \t]+|his[ \t]+|her[ \t]+)?"
    rb"(?:[a-z0-9_\-]{1,20}[ \t]+){0,2}?" + _SECRET_NOUN + rb"[ \t]+to"
    rb")[ \t]+"
)
_SPOKEN_WORD = re.compile(r"""[^\s"'`]{1,200}""")
_SPOKEN_QUOTED = {q: re.compile(rf"{q}([^{q}\n]{{1,200}}){q}") for q in "\"'`"}
_SPOKEN_TRAILING = ".,;:!?)]}"
_CONNECTORS = (b" is ", b" was ", b" to ")
_TRIGGERS.add(*_CONNECTORS)
# Every match of ``_SPOKEN`` holds one of ``_SECRET_NOUN``'s words, so one of these: a text with none of them
# (most prose, where " is " and " to " are everywhere) is not searched at its connectors.
_SPOKEN_NOUNS = (b"pass", b"pwd", b"pin", b"secret", b"key", b"token")
_TRIGGERS.add(*_SPOKEN_NOUNS)
_SPOKEN_REACH = 112  # how far before a connector its noun may stand ("the wifi passphrase for the lab is")


def _redact_spoken(text: str, low: bytes, counts: dict[str, int], present: frozenset[bytes]) -> str:
    """Anchored on the connectors (literal counts and splits of the lower-cased copy ``low``, in C): each is
    checked with ``_SPOKEN`` in a window that ends just after it, so that pattern never runs over the whole text.
    Runs before the assignment rules, on the same copy (the text itself is returned when nothing is said)."""
    if present.isdisjoint(_SPOKEN_NOUNS):
        return text
    hits = sorted(pos for connector in _CONNECTORS if connector in present for pos in _find_all(low, connector))
    if not hits:
        return text
    edits: list[tuple[int, int, str]] = []
    done = 0
    for pos in hits:
        m = _SPOKEN.search(low, max(done, pos - _SPOKEN_REACH), pos + 40)
        while m is not None and m.end() <= pos:  # a match that ends before this connector is another's
            m = _SPOKEN.search(low, m.end(), pos + 40)
        if m is None:
            continue
        start = m.end()
        if start < done or start >= len(text):
            continue
        quote = text[start]
        if quote in _SPOKEN_QUOTED:
            quoted = _SPOKEN_QUOTED[quote].match(text, start)
            if quoted is None:
                continue
            a, b = quoted.span(1)
        else:
            word = _SPOKEN_WORD.match(text, start)
            if word is None:
                continue
            a, b = word.span()
            while b > a and text[b - 1] in _SPOKEN_TRAILING:
                b -= 1
        value = text[a:b]
        if not value or not _spoken_value(value, m.group()):
            continue
        edits.append((a, b, REDACTED))
        _bump(counts, KIND_ASSIGNMENT)
        done = b
    return _splice(text, edits)


def _spoken_value(value: str, said: bytes) -> bool:
    """Whether ``value`` after "<secret noun> is" gives the secret (see ``_SPOKEN``)."""
    lowered = value.lower()
    if is_describing_word(lowered) or _is_marker(value) or is_placeholder(value):
        return False
    if value[:1] in "<$%{" or is_reference(value):
        return False
    counted = not any(noun in said for noun in (b"pass", b"pwd", b"pin"))  # a PIN or a password may be digits
    return not (counted and value.isdigit() and len(value) <= 6)


# A.6 URL query parameters (after '?' or '&'; extension: the first parameter of a fragment, ``#access_token=``),
# plus (extension) the password of ``scheme://user:pw@host``. Neither a parameter value nor a URL password can
# hold '<', so neither is ever a marker already; placeholders and references (``?key=$KEY``) stay.
_PARAM_KEY = r"""([^\s&"'<>)\]}?=#]{1,256})="""  # bounded: a key is short, and a start fails fast
_PARAM_VALUE = r"""[^\s&"'<>)\]}]"""
# One pattern per introducer, each starting with a literal (a character class would lose the fast scan).
_QUERY_PARAMS = tuple(re.compile(rf"{lead}{_PARAM_KEY}({_PARAM_VALUE}*)") for lead in (r"\?", "#"))
_QUERY_KEYS = tuple(re.compile(rf"{lead}{_PARAM_KEY}") for lead in (r"\?", "#"))
_AMP_KEY = re.compile(f"&{_PARAM_KEY}")
_AMP_PARAM = re.compile(f"&{_PARAM_KEY}({_PARAM_VALUE}+)")
_AMP_KEYS_AT_ONCE = 8
_USERINFO_TRIGGER = b"://"
_TRIGGERS.add(_USERINFO_TRIGGER)
_URL_USERINFO = re.compile(r"""(://[^\s/:@"'<>]+:)([^\s/@"'<>]+)(?=@)""")


@functools.lru_cache(maxsize=64)
def _amp_values(keys: frozenset[str]) -> re.Pattern[str]:
    """``&key=value`` for one of ``keys``, the value captured."""
    alternatives = "|".join(re.escape(key) for key in sorted(keys))
    return re.compile(f"&(?:{alternatives})=({_PARAM_VALUE}+)")


def _redact_urls(text: str, counts: dict[str, int], present: frozenset[bytes]) -> str:
    # Parameters after '?' (a value may hold another '?': matches as the spec's pattern finds them), then after
    # '&'. The keys are collected first (``findall``, no match objects); most texts have no sensitive one.
    for lead, query_key, query_param in zip("?#", _QUERY_KEYS, _QUERY_PARAMS, strict=True):
        if lead not in text or not any(map(_is_sensitive_url_key, set(query_key.findall(text)))):
            continue
        edits = [
            (m.start(2), m.end(2), REDACTED)
            for m in query_param.finditer(text)
            if m.group(2) and _is_sensitive_url_key(m.group(1)) and not _url_placeholder(m.string, m.end(2), m.group(2))
        ]
        if edits:
            _bump(counts, KIND_URL_PARAM, len(edits))
            text = _splice(text, edits)
    # '&' parameters hold no '&', so each is matched on its own: one substitution for the sensitive keys.
    keys = frozenset(filter(_is_sensitive_url_key, set(_AMP_KEY.findall(text)))) if "&" in text else frozenset()
    if len(keys) > _AMP_KEYS_AT_ONCE:
        # Many distinct sensitive keys (one look-behind each would make every '=' cost them all): one pass that
        # checks each parameter's key instead.
        def replace(m: re.Match[str]) -> str:
            value = m.group(2)
            following = m.string[m.end() : m.end() + 1]
            if m.group(1) not in keys or is_placeholder(value + following if following in ")]}" else value):
                return m.group(0)
            _bump(counts, KIND_URL_PARAM)
            return f"&{m.group(1)}={REDACTED}"

        text = _AMP_PARAM.sub(replace, text)
    elif keys:
        # One scan anchored on '&' (a pattern starting at '=' would try every '=' of the text): the values after
        # these keys.
        edits = [
            (m.start(1), m.end(1), REDACTED)
            for m in _amp_values(keys).finditer(text)
            if not _url_placeholder(text, m.end(1), m.group(1))
        ]
        if edits:
            _bump(counts, KIND_URL_PARAM, len(edits))
            text = _splice(text, edits)
    if _USERINFO_TRIGGER in present:

        def replace_password(m: re.Match[str]) -> str:
            if is_placeholder(m.group(2)):
                return m.group(0)
            _bump(counts, KIND_URL_PARAM)
            return m.group(1) + REDACTED

        text = _URL_USERINFO.sub(replace_password, text)
    return text


def _url_placeholder(text: str, end: int, value: str) -> bool:
    """``?key=$KEY``, ``?token={token}``, ``?key=YOUR_API_KEY``: a parameter value that stands for one."""
    closing = text[end : end + 1]
    return is_placeholder(value + closing if closing in ")]}" else value)
