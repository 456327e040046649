"""Secret and PII scrubbing (spec §4.2) and the learning-content secret classifier (spec §4.19): the public API.

Pure functions: no database, no Django models. Scrubbing applies to the *derived* planes (recovered run
memory, learnings, previews); the canonical session journal is never scrubbed - that is the callers' rule.

* ``redact_secrets(text)`` - step A, the "debug redactor": PEM private keys, sensitive assignments,
  provider tokens (the spec's prefixes plus the shapes in ``provider_tokens``), Bearer and other
  Authorization credentials, JWTs, sensitive URL query parameters and URL passwords, then the operator's
  literal tokens (``KHEISH_REDACT_TOKENS`` / ``KHEISH_REDACT_TOKENS_FILE``, longest first).
* ``scrub(text, redact_pii=True)`` - step A, then step B (PII): the spec's number-run pass (Luhn cards,
  NANP-shaped phones), SSNs, e-mail tokens (and e-mails glued to other text), and international phone
  numbers found by ``phonenumbers`` (``Leniency.VALID``) over the regions in ``KHEISH_PHONE_REGIONS``.
* ``looks_like_secret(text)`` - §4.19 ``learning_content_has_secret_material``.

Counting: ``redaction_count`` is the spec's number (step A +1 if it changed the text at all, +1 per step-B
replacement); ``redactions`` counts every individual replacement per kind.

Speed. CPython's ``re`` costs ~100 ns for every position where a match attempt starts, so a pattern that
begins with a common character class (letters, digits) - or with an alternation of different first characters,
which ``re`` also tries at every position - reads only a few MB/s, while a pattern that begins with a literal is
scanned at ~2 GB/s: as fast as ``bytes.find`` / ``in`` / ``split`` of a literal in wall time (measured on the bench
corpus; ``split`` also copies the text, and callgrind's instruction counts, lower for ``find``, mislead here), and
only a one-character ``find`` (memchr) is much faster. ``bytes.translate`` and ``bytes.lower`` run at ~1 GB/s
(``str.lower`` of non-ASCII text is ten times slower: the lower-cased copy is made as bytes). Every pass here is
therefore anchored on a literal: sensitive-key words (``key``, ``token``, ``cre`` for secret/credential, ``pass``,
...) in a lower-cased copy; provider tokens as runs of 20+ token characters in a character-class copy
(`` aaaa…``), checked against the known prefixes; PII through a digit-class copy in which a few literal
digit/separator shapes (``000s0000``, ``00s00s00s00``, ``p0``, ...) locate the only clusters of digits worth a closer
look (three scans, for ``00s00``, ``00d00`` and ``00o00``, each shape checked around the one it holds). Before any
of that, one pass over the lower-cased copy finds which rules' trigger literals occur at all (``scan._TRIGGERS``,
an RE2 set: a DFA reads the text once for all of them, at ~600 MB/s): a rule whose triggers are all absent -
``-----begin``, `` is ``, each key needle, ``sk-``, ``earer ``, ``eyj``, ``://``, ``ssh``, ... - is skipped, and
a redaction never adds a trigger (markers hold none), so the lookup stays true for the rules after it. Rare
literals are also ruled out by a capital letter they contain (``AKIA``, ``Key=``) and ``@`` / ``+`` / ``&`` are
looked up directly. Python code runs per candidate, never per character, and it is kept short: ``split``
gives the offsets of dense hits in one search, ``findall`` collects the URL parameter keys without match objects,
one ``finditer`` per rule collects the matches that are then spliced (never a ``findall`` and a ``sub`` over the
same text), and what depends on a short string alone is cached - keys, values, digit clusters, and an assignment
line's value spans (logs repeat their lines). ``make bench BENCH_ARGS="--only scrubbing"`` prints the throughput on
the mixed corpus of ``benchmarks.plane2``.

Linear in the input, for every rule (issue 19): no pattern can re-read a run from each of its positions -
quantifiers that a failed start would rescan are bounded or possessive, each value and each digit run is read
once, overlap checks are binary searches, caches only hold short keys. ``benchmarks/scrubbing.py`` times 71
pathological families at 100k and 200k characters (``make bench``); ``tests/memory/scrubbing/test_linear.py``
holds each to a bound. Run memory scrubs only a bounded window of each field (``memory.run_records``).

Layout (one module per seam): ``markers`` (literal markers, kinds, ``ScrubResult``) · ``scan`` (fast-scan
helpers) · ``config`` (settings, operator tokens) · ``values`` (what a secret-looking value is: sensitive keys,
placeholders and references, secret-shaped values - the one definition the scrubber and the classifier share) ·
``provider_tokens`` (provider credential shapes) · ``credentials`` (step A) · ``pii`` and ``phones`` (step B) ·
``classifier`` (§4.19).
"""

from __future__ import annotations

from memory.scrubbing.classifier import _has_secret_assignment
from memory.scrubbing.config import (
    DEFAULT_PHONE_REGIONS,
    SETTING_PHONE_REGIONS,
    SETTING_TOKENS,
    SETTING_TOKENS_FILE,
    _config,
    register_literal_token_source,
)
from memory.scrubbing.credentials import _step_a, _step_a_triggers
from memory.scrubbing.markers import (
    CARD_MARKER,
    CONFIG_ERROR_MARKER,
    EMAIL_MARKER,
    KIND_ASSIGNMENT,
    KIND_CARD,
    KIND_EMAIL,
    KIND_OPERATOR_TOKEN,
    KIND_PHONE,
    KIND_PRIVATE_KEY,
    KIND_SSN,
    KIND_TOKEN,
    KIND_URL_PARAM,
    PHONE_MARKER,
    PRIVATE_KEY_MARKER,
    REDACTED,
    SSN_MARKER,
    ScrubResult,
)
from memory.scrubbing.pii import _step_b

__all__ = [
    "CARD_MARKER", "CONFIG_ERROR_MARKER", "DEFAULT_PHONE_REGIONS", "EMAIL_MARKER", "KIND_ASSIGNMENT", "KIND_CARD",
    "KIND_EMAIL", "KIND_OPERATOR_TOKEN", "KIND_PHONE", "KIND_PRIVATE_KEY", "KIND_SSN", "KIND_TOKEN",
    "KIND_URL_PARAM", "PHONE_MARKER", "PRIVATE_KEY_MARKER", "REDACTED", "SETTING_PHONE_REGIONS", "SETTING_TOKENS",
    "SETTING_TOKENS_FILE", "SSN_MARKER", "ScrubResult", "looks_like_secret", "redact_secrets",
    "register_literal_token_source", "scrub",
]  # fmt: skip


def redact_secrets(text: str) -> ScrubResult:
    """Spec §4.2 step A (always applied). ``redaction_count`` is 1 if the text changed, else 0."""
    redacted, counts = _step_a(text, _config())
    return ScrubResult(text=redacted, redaction_count=int(redacted != text), redactions=counts)


def scrub(text: str, *, redact_pii: bool = True) -> ScrubResult:
    """Spec §4.2: step A, then (if ``redact_pii``) step B, each step-B replacement counting +1."""
    config = _config()
    redacted, counts, present = _step_a_triggers(text, config)
    count = int(redacted != text)
    if redact_pii and redacted != CONFIG_ERROR_MARKER:
        redacted, pii_counts = _step_b(redacted, config.phone_regions, present)
        count += sum(pii_counts.values())
        for kind, n in pii_counts.items():
            counts[kind] = counts.get(kind, 0) + n
    return ScrubResult(text=redacted, redaction_count=count, redactions=counts)


def looks_like_secret(text: str) -> bool:
    """Spec §4.19 ``learning_content_has_secret_material``: anything step A would redact, or an assignment-shaped
    secret (word, squashed and structured markers). Text that is already redacted (``secret_token=<redacted>``)
    holds no secret: a marker is not one (issue 20)."""
    trimmed = text.strip()
    if not trimmed:
        return False
    if _step_a(trimmed, _config())[0] != trimmed:
        return True
    return _has_secret_assignment(trimmed)
