"""What a secret-looking key and value are: the one definition the scrubber (step A) and the learning-content
classifier (§4.19) share, and through the classifier the learning-candidate guard, skill metadata checks and
revoke reasons.

* Sensitive keys: the spec's A.1 wording, plus keys whose last word is ``token`` (``SessionToken``,
  ``X-Amz-Security-Token``), URL parameters whose last word names a signature or credential
  (``X-Amz-Signature``, ``X-Goog-Credential``), and never an exception class (``InvalidCredentialsException:``).
* Placeholders and references are not secrets: ``$TOKEN``, ``${VAR}``, ``<your-key-here>``, ``{{ secrets.X }}``,
  ``%VAR%``, ``os.environ[...]``, ``process.env.X``, masks (``***``, ``xxxx``, ``...``), markers, and values
  whose words say they are not real (``your``, ``example``, ``changeme``, ``dummy``, ...).
* Prose is not a value: a "value" that starts with a function word or a participle (``must``, ``is``,
  ``stored``, ``required``) is a sentence about the secret.
* Secret-shaped: token characters only, a length floor and ceiling, letters and digits (or base64 symbols)
  mixed, and a Shannon entropy per character of at least ``clamp(0.75 * log2(len), FLOOR, CEILING)`` bits
  (the floor rejects ``aaaa1111``, the ceiling keeps hex and long values reachable). ``strongly`` asks for three
  character classes and 24+ characters: such a value needs no context word.
"""

from __future__ import annotations

import math
import re

from memory.scrubbing.markers import _is_marker
from memory.scrubbing.scan import _small_cache

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
# Each list searched at once (one C-level scan instead of a Python loop over the needles).
_SENSITIVE_SEARCH, _SEPARATOR_SEARCH, _COMPACT_SEARCH = (
    re.compile("|".join(map(re.escape, needles))).search
    for needles in (_SENSITIVE_SUBSTRINGS, _SEPARATOR_CONTAINS, _COMPACT_CONTAINS)
)


_EXCEPTION_SUFFIXES = ("Exception", "Error", "Warning", "Fault", "Failure")
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def _key_words(key: str) -> list[str]:
    """Lower-cased words of a key: split on non-alphanumerics and camelCase (``X-Amz-Signature`` -> x amz signature)."""
    return [word.lower() for word in _WORDS.findall(key)]


@_small_cache(4096)
def _is_sensitive_key(key: str) -> bool:
    key = key.strip()
    if key.strip("\"'`").endswith(_EXCEPTION_SUFFIXES):
        return False  # ``InvalidCredentialsException: 401`` is an error message, not an assignment
    lowered = key.lower()
    separated = lowered.replace("-", "_")
    if _SENSITIVE_SEARCH(lowered) or _SENSITIVE_SEARCH(separated):
        return True
    if separated == "token" or separated.endswith("_token"):
        return True
    if _SEPARATOR_SEARCH(separated):
        return True
    compact = _NON_ALNUM.sub("", lowered)
    if compact in ("token", "key", "apikey") or compact.endswith("apikey"):
        return True
    if _COMPACT_SEARCH(compact):
        return True
    # Extension: any key whose last word is ``token`` (``SessionToken``, ``X-Amz-Security-Token``, ``csrftoken``),
    # and the ``pwd`` abbreviation of password (``pwd=``, ``DB_PWD``; ``PWD=/home/bob``, a directory, is left by
    # ``is_directory_value``).
    return compact.endswith(("token", "pwd"))


_DIRECTORY = re.compile(r"""["']?(?:/|~|\.{1,2}/|[A-Za-z]:[\\/]|\$)""")


def is_directory_value(key: str, value: str) -> bool:
    """``PWD=/home/bob``: the shell's working directory, not a password, whose value is a path."""
    lowered = key.lower()
    return "pwd" in lowered and _NON_ALNUM.sub("", lowered).endswith("pwd") and _DIRECTORY.match(value) is not None


@_small_cache(1024)
def _is_sensitive_url_key(name: str) -> bool:
    compact = _NON_ALNUM.sub("", name.lower())
    if compact in ("key", "sig", "signature", "code") or _is_sensitive_key(name):
        return True
    # Extension: pre-signed URLs (``X-Amz-Signature``, ``X-Goog-Credential``, ``Signature``, ``sig``).
    words = _key_words(name)
    return bool(words) and words[-1] in _URL_SECRET_WORDS


_URL_SECRET_WORDS = frozenset({"sig", "signature", "credential", "credentials", "token", "secret", "password"})

# --------------------------------------------------------------------------------------------------------
# Placeholders and references
# --------------------------------------------------------------------------------------------------------

_REFERENCE = re.compile(
    r"""(?x)
    \$[A-Za-z_][A-Za-z0-9_]*                      # $TOKEN
    | \$\{[^{}\s]*\}                                # ${VAR}, ${VAR:-default}
    | \$\{\{.*\}\}                                  # ${{ secrets.X }}
    | \$\([^()]*\)                                  # $(pass show x)
    | \{\{.*\}\}                                     # {{ vault_token }}
    | \{[A-Za-z_][\w.\-]*\}                          # {token}
    | %[A-Za-z_][A-Za-z0-9_]*%                      # %API_KEY%
    | %\([A-Za-z_]\w*\)s                             # %(password)s
    | <[^<>\n]{1,80}>                               # <your-key-here>, <token>
    | \[[A-Za-z_][\w \-]{0,60}\]                     # [YOUR_API_KEY]
    | (?:os\.environ|os\.getenv|getenv|ENV|env|process\.env|import\.meta\.env|System\.getenv|Deno\.env
       |secrets|vars|settings|config|credentials\.get|keyring\.get_password)[.\[(].*
    | (?:new\s+|await\s+)?[A-Za-z_]\w{0,63}(?:\.[A-Za-z_]\w{0,63}){0,8}\((?:\)|["'`A-Za-z_$*]).*
                                                  # a call reading one: getpass.getpass('Password: '), input("Key: ")
    """
)
_MASK = re.compile(r"x{4,}|X{4,}|\*{3,}|\.{3}|…|•{3,}|#{4,}|_{4,}|-{4,}")
# Words found only in values that are not real: ``<your-key-here>``, ``changeme``, ``REPLACE_ME``.
_PLACEHOLDER_WORDS = frozenset({
    "your", "yours", "example", "examples", "placeholder", "changeme", "dummy", "replace", "replaceme",
    "insert", "todo", "tbd", "fixme", "here", "redacted", "notset", "unset", "none", "null", "nil",
    "undefined", "empty", "masked", "omitted",
})  # fmt: skip
# A value made only of these words names the secret instead of giving it: ``api_key=API_KEY``, ``token: token``.
_NAME_WORDS = frozenset({
    "api", "key", "keys", "token", "secret", "password", "passwd", "passphrase", "access", "auth", "client",
    "id", "value", "my", "the", "a", "private", "bearer", "credential", "credentials", "pat",
})  # fmt: skip
_VALUE_TRIM = "\"'`.,;:!?()[]"
_SPLIT_WORDS = re.compile(r"[^a-z0-9]+")


def is_reference(value: str) -> bool:
    """A reference to a secret kept elsewhere (``${{ secrets.X }}``, ``os.environ["X"]``), spaces allowed."""
    return _REFERENCE.fullmatch(value.strip().strip("\"'`")) is not None


@_small_cache(4096)
def is_placeholder(value: str) -> bool:
    """A reference to a secret kept elsewhere, a mask, a marker, or a value whose words say it is not real."""
    value = value.strip()
    core = value.strip(_VALUE_TRIM)
    if not core or _is_marker(value) or _is_marker(core):
        return True
    if _REFERENCE.fullmatch(core) or _REFERENCE.fullmatch(value.strip("\"'`")):
        return True
    if _MASK.search(value):
        return True
    lowered = core.lower()
    # (A value merely containing EXAMPLE - AWS's documented AKIAIOSFODNN7EXAMPLE - is not exempt: redacting a
    # well-known example costs nothing, keeping a real key that happens to end in EXAMPLE would not.)
    words = [word for word in _SPLIT_WORDS.split(lowered) if word]
    if any(word in _PLACEHOLDER_WORDS for word in words):
        return True
    return bool(words) and all(word in _NAME_WORDS for word in words)


# --------------------------------------------------------------------------------------------------------
# Prose after a key
# --------------------------------------------------------------------------------------------------------

_PROSE_WORDS = frozenset({
    "a", "an", "the", "is", "are", "was", "were", "be", "been", "will", "would", "should", "must", "can",
    "could", "may", "might", "shall", "not", "no", "never", "always", "only", "now", "still", "then", "also",
    "our", "their", "its", "his", "her", "this", "that", "these", "those", "in", "on", "at", "from", "for",
    "to", "of", "by", "via", "with", "without", "per", "and", "or", "if", "when", "after", "before", "into",
    "as", "set", "required", "optional", "valid", "invalid", "missing", "usually", "typically", "stored",
    "kept", "rotated", "revoked", "expired", "expires", "sent", "passed", "used", "managed", "loaded", "read",
    "provided", "injected", "mounted", "available", "visible", "shown", "configured", "generated", "issued",
    "scoped", "hashed", "encrypted", "opaque", "long", "short", "header", "headers", "field", "parameter",
    "policy", "rotation", "length", "format", "prefix", "budget", "limit", "see", "use", "uses",
    "needed", "refreshed", "ignored", "supported", "mandatory", "disabled", "enabled", "handled",
    "authentication", "authorization", "auth", "scheme", "token", "tokens", "credentials", "keys",
})  # fmt: skip
_PROSE_SUFFIXES = ("ed", "ing", "ly", "able", "ible")


@_small_cache(4096)
def is_prose_word(word: str) -> bool:
    """A function word or participle: what follows a key in a sentence about the secret, not a value."""
    core = word.strip(_VALUE_TRIM).lower()
    if "-" in core and all(part.isalpha() for part in core.split("-")):
        core = core.split("-", 1)[0]  # ``short-lived``
    if not core.isalpha():
        return False
    return core in _PROSE_WORDS or (len(core) > 4 and core.endswith(_PROSE_SUFFIXES))


# Words that describe a secret rather than give it (beyond ``is_prose_word``'s function words and participles).
_DESCRIBING = frozenset({
    "too", "very", "quite", "correct", "incorrect", "wrong", "right", "weak", "strong", "secure", "insecure", "blank",
    "new", "old", "same", "different", "temporary", "unknown", "known", "case", "sensitive", "simple", "complex",
    "good", "bad", "fine", "ok", "okay", "empty", "there", "here", "what", "which", "who", "it", "something",
    "nothing", "anything", "one", "mine", "yours", "ours", "theirs", "hers", "his", "unchanged", "default",
    "public", "private", "secret", "hidden", "unique", "random", "easy", "hard", "obvious", "below", "above",
    "inside", "outside", "somewhere", "elsewhere", "out", "safe", "lost", "gone", "exposed", "compromised",
    "jwt", "base64", "hex", "uuid", "numeric", "alphanumeric", "ascii", "utf-8", "unicode", "single",
    "per", "like", "about", "exactly", "just", "your", "my", "unset", "none", "null", "working", "fixed", "static",
    "dynamic", "global", "local", "shared", "personal", "separate", "part",
    "included", "attached", "enough", "longer", "shorter", "fresh", "stale", "live", "test", "production",
    "staging", "prod", "dev", "development", "ready", "pending", "active", "inactive", "useless", "done",
    "identical", "similar", "easier", "harder", "important", "confidential", "reset",
    "put", "written", "given", "taken", "stolen", "broken", "forgotten", "shown",
    "chosen", "leaked", "rotated", "still", "never", "always",
})  # fmt: skip


def is_describing_word(word: str) -> bool:
    """A word that describes a secret after "<secret noun> is" instead of giving it (prose, or ``_DESCRIBING``)."""
    core = word.strip(_VALUE_TRIM).lower()
    if is_prose_word(word) or core in _DESCRIBING:
        return True
    parts = core.split("-")  # ``case-sensitive``, ``well-known``: a compound of describing words
    return len(parts) > 1 and all(part.isalpha() for part in parts) and any(part in _DESCRIBING for part in parts)


# --------------------------------------------------------------------------------------------------------
# Secret-shaped values
# --------------------------------------------------------------------------------------------------------

MIN_SECRET_CHARS = 8
MAX_SECRET_CHARS = 4096
ENTROPY_FLOOR = 2.5  # bits per character: below this a value is a pattern (``aaaa1111``), never a secret
ENTROPY_CEILING = 3.3  # the requirement never exceeds this (hex carries at most 4 bits a character)
_SHAPE_CHARS = re.compile(r"[A-Za-z0-9+/=_\-.~!@#$%^&*]+")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_PARTS = re.compile(r"[_\-.]")
_HOST_NAME = re.compile(r"(?:[A-Za-z0-9._+\-]{1,64}@)?[a-z0-9\-]{1,63}(?:\.[a-z0-9\-]{1,63}){1,8}\.[a-z]{2,12}")
_WORDISH = re.compile(r"\d{0,3}(?:[A-Z]?[a-z]+|[A-Z]+)(?:[A-Z][a-z]+)*\d{0,3}")
_VERSIONISH = re.compile(r"v?\d+(?:[._\-]\d+)*(?:[._\-][A-Za-z]+\d*)?")


def entropy(value: str) -> float:
    """Shannon entropy in bits per character."""
    n = len(value)
    counts: dict[str, int] = {}
    for ch in value:
        counts[ch] = counts.get(ch, 0) + 1
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def required_entropy(length: int) -> float:
    return min(ENTROPY_CEILING, max(ENTROPY_FLOOR, 0.75 * math.log2(max(length, 2))))


@_small_cache(4096)
def is_secret_shaped(value: str, *, strongly: bool = False) -> bool:
    """A value shaped like a credential: see the module docstring."""
    value = value.strip(_VALUE_TRIM) if value[-1:] != "=" else value.lstrip(_VALUE_TRIM)
    n = len(value)
    if n < (24 if strongly else MIN_SECRET_CHARS) or n > MAX_SECRET_CHARS or not _SHAPE_CHARS.fullmatch(value):
        return False
    if _UUID.fullmatch(value) or _VERSIONISH.fullmatch(value) or is_placeholder(value):
        return False
    lower = any(ch.islower() for ch in value)
    upper = any(ch.isupper() for ch in value)
    digit = any(ch.isdigit() for ch in value)
    symbol = any(ch in "+/=" for ch in value)
    letters = lower or upper
    if not letters:
        return False  # numbers (ids, budgets, timestamps)
    if strongly and lower + upper + digit + symbol < 3:
        return False
    if not (digit or symbol or (lower and upper and n >= 16)):
        return False  # words and identifiers
    if _HOST_NAME.fullmatch(value):
        return False  # ``ubuntu@ec2-1-2-3-4.compute.amazonaws.com``, ``db-1.eu-west-1.rds.amazonaws.com``: a host
    if _WORDISH.fullmatch(value):
        return False  # a word or a name with a number before or after it: ``1Password``, ``Office365``, ``OAuth2``
    parts = _PARTS.split(value)
    if len(parts) > 1 and all(part.isalpha() or len(part) <= 4 for part in parts):
        return False  # identifiers made of words and short numbers: ``user_id_2024``, ``key-2024-v3``
    if _is_path(value):
        return False  # ``/etc/freeradius/3.0/sites-enabled/default``, ``system/branding``
    return entropy(value) >= required_entropy(n)


_PATH_SEGMENT = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*|[A-Z]?[a-z]+|\d+(?:\.\d+)*")


def _is_path(value: str) -> bool:
    """A path or a slash-joined phrase: every ``/``-separated segment is a lowercase word or name (dots and
    dashes allowed), a capitalised word, or a number. Random base64 with ``/`` has mixed-case segments."""
    segments = [segment for segment in value.split("/") if segment]
    return len(segments) >= 2 and "/" in value and all(_PATH_SEGMENT.fullmatch(s) for s in segments)
