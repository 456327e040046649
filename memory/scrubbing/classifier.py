"""Spec §4.19 ``learning_content_has_secret_material``: the learning-content secret classifier.

Used by the learning-candidate guard, skill metadata checks and revoke reasons (through ``looks_like_secret``).

The spec's word, squashed and structured markers find where content *names* a secret; a marker only counts
when a value follows it, judged by the definition in ``values`` that the scrubber uses too: a placeholder or
reference (``$TOKEN``, ``os.environ[...]``) is not a value, nor is prose (``The API key is stored in Vault``,
``Password: must be 12+ characters``), nor a small number (``token: 1000``). Beyond the markers (extension),
content is secret when a secret-shaped value is given to a key, signing secret, encryption key or passphrase
(any key or phrase with such a word in the few words before the value), or when a value is strongly
secret-shaped wherever it appears - except right after a word saying it is a digest or an identifier.
"""

from __future__ import annotations

import re

from memory.scrubbing.values import _key_words, is_describing_word, is_placeholder, is_secret_shaped

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
_VALUE_TRIM = "\"'`.,;:!?()[]{}"
_SMALL_NUMBER = re.compile(r"\d{1,6}")
# Whitespace around a separator, taken from the start of a whitespace run only (possessive): each run is read
# once, however long.
# One pattern per separator, so the replacement is a literal (no template expanded per match, in Python).
_SQUASH = tuple((sep, re.compile(rf"(?:(?<!\s)\s++)?+{re.escape(sep)}\s*+")) for sep in ":=_-")
# What follows a marker: the value is its first word, so a bounded window of the text after it is read.
_AFTER_MARKER_CHARS = 256
_BOUNDARY = re.compile(r"[a-z0-9]")
# Words that name a secret when they come shortly before a secret-shaped value.
_SECRET_NOUNS = frozenset({
    "key", "keys", "apikey", "secret", "secrets", "passphrase", "password", "passwd", "pwd", "pw", "pass",
    "token", "credential", "credentials", "signing", "signature", "hmac", "salt", "seed", "encryption",
    "cipher", "private", "auth", "pin", "pat", "bearer", "webhook", "master",
})  # fmt: skip
# Words saying the value after them is a digest or an identifier, not a credential.
_BENIGN_BEFORE = frozenset({
    "commit", "sha", "sha1", "sha256", "sha512", "md5", "hash", "digest", "checksum", "fingerprint", "uuid",
    "build", "version", "revision", "rev", "etag", "id", "ids", "request", "trace", "span", "image", "tag",
})  # fmt: skip
_LOOKBACK = 6


def _key_looks_secret(key: str) -> bool:
    words = _NON_WORD.sub(" ", key).split()
    if not words:
        return False
    return any(tuple(words[-len(phrase) :]) == phrase for phrase in _SECRET_KEY_PHRASES)


def _gives_value(rest: str) -> bool:
    """Whether the text after a marker gives a value (see the module docstring)."""
    words = rest.lstrip("=").split(None, 1)  # ``password := …``: the ``=`` of Go's declaration
    if not words:
        return False
    word = words[0]
    core = word.strip(_VALUE_TRIM)
    if not core or is_describing_word(word) or is_placeholder(word) or _SMALL_NUMBER.fullmatch(core):
        return False
    return not (core.lower() in ("bearer", "basic") and len(words) == 1)


def _marker_gives_value(text: str, marker: str, *, boundary: bool) -> bool:
    pos = text.find(marker)
    while pos >= 0:
        after = pos + len(marker)
        if not (boundary and pos and _BOUNDARY.match(text, pos - 1)) and _gives_value(
            text[after : after + _AFTER_MARKER_CHARS]
        ):
            return True
        pos = text.find(marker, pos + 1)
    return False


# Every marker above, and every key a line's ``key: value`` is judged by (``_SECRET_KEY_PHRASES``, by its last
# word), holds one of these words: a text holding none of them (most prose) skips those checks. A word of letters
# is in the whitespace-collapsed and the squashed text exactly when it is in the lowered text.
_NAMING_WORDS = ("token", "key", "secret", "password", "passphrase", "pat", "bearer")


def _has_secret_assignment(text: str) -> bool:
    lowered = text.lower()
    if not any(map(lowered.__contains__, _NAMING_WORDS)):
        return _has_secret_shaped_value(text)
    words = " ".join(lowered.split())
    if any(marker in words and _marker_gives_value(words, marker, boundary=False) for marker in _WORD_MARKERS):
        return True
    squashed = lowered
    for sep, pattern in _SQUASH:
        if sep in squashed:
            squashed = pattern.sub(sep, squashed)
    if any(marker in squashed and _marker_gives_value(squashed, marker, boundary=True) for marker in _SQUASHED_MARKERS):
        return True
    for line in lowered.split("\n"):
        for delimiter in (":", "="):
            key, found, value = line.partition(delimiter)
            if found and _gives_value(value) and _key_looks_secret(key):
                return True
    return _has_secret_shaped_value(text)


_URL = re.compile(r"(?:\b[a-z][a-z0-9+.-]{0,31}://|\bwww\.)[^\s<>\"'`]+", re.IGNORECASE)
"""A URL: its path and query are a location, not a value (a share link's id, a short link's slug); a secret
in its query (``?token=…``) is found by the redactor's URL-parameter rule, which the classifier runs first."""


# A token (between the separators below) that ``is_secret_shaped`` could accept: a secret-shaped value has 8+
# characters and an ASCII digit, ``+`` or ``/`` (``=`` separates tokens), or 16+ characters (values.py); a text
# with no such token skips the per-token loop (most prose).
_SHAPED_TOKEN = re.compile(r"(?<![^\s:=,;&?])(?:[^\s:=,;&?]{16}|(?=[^\s:=,;&?]{8})[^\s:=,;&?0-9+/]*[0-9+/])")


def _has_secret_shaped_value(text: str) -> bool:
    """Extension: a secret-shaped value after a secret noun, or a strongly secret-shaped value anywhere
    outside a URL."""
    outside = _URL.sub(" ", text)
    if _SHAPED_TOKEN.search(outside) is None:
        return False
    tokens = re.split(r"[\s:=,;&?]+", outside)
    for index, token in enumerate(tokens):
        value = token.strip(_VALUE_TRIM)
        if len(value) < 8 or not is_secret_shaped(value):
            continue
        before = [word for tok in tokens[max(0, index - _LOOKBACK) : index] for word in _key_words(tok)]
        if before[-2:] and any(word in _BENIGN_BEFORE for word in before[-2:]):
            continue
        if any(word in _SECRET_NOUNS for word in before) or is_secret_shaped(value, strongly=True):
            return True
    return False
