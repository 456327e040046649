"""Semantic keys and evidence terms of the learning plane (pure text logic, no database):

* semantic keys used for dedup and same-subject conflicts (spec §4.13);
* evidence terms and the run-memory support check used by verification (§4.12).

Prompt scoring, selection and the memory-search ranking are ``learnings.lexical_ranking``'s; both cut text with
``learnings.tokens``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from learnings.tokens import alnum_tokens


def _alnum_count(text: str) -> int:
    return sum(map(str.isalnum, text))


# ---------------------------------------------------------------------------------------------------------
# §4.13 Semantic keys
# ---------------------------------------------------------------------------------------------------------

_DELIMITERS = (" is ", " are ", " est ", " sont ", "=", ":")
_SUBJECT_ARTICLES = ("the ", "le ", "la ", "les ")
_UNUSABLE_SUBJECTS = frozenset({"a", "an", "it", "the", "this", "that", "ce", "cela", "il", "elle"})


@dataclass(frozen=True)
class SemanticKeys:
    """``content_key`` identifies equivalent statements; ``subject_key`` (when the content reads as
    ``<subject> is <value>``) identifies statements about the same thing."""

    content_key: str
    subject_key: str | None


def normalise_content(content: str) -> str:
    """Collapse whitespace, trim, strip ``.``/``;``/``,`` from both ends, lowercase."""
    return " ".join(content.split()).strip(".;,").lower()


def _subject_part(text: str) -> str:
    keyed = " ".join(alnum_tokens(text))
    for article in _SUBJECT_ARTICLES:
        if keyed.startswith(article):
            return keyed[len(article) :]
    return keyed


def _subject_is_usable(subject: str) -> bool:
    return _alnum_count(subject) >= 3 and subject not in _UNUSABLE_SUBJECTS


def _value_is_usable(value: str) -> bool:
    return _alnum_count(value) >= 2


# Beyond the reference's rule (which keys the first usable delimiter of any text): a subject is a short noun
# phrase at the start of one statement. Without these guards a chat turn such as "What is the best way to…",
# "User: …" or "I think the problem is …" gets "what" / "user" / "i think the problem" as its subject, and every
# other turn of that shape "conflicts" with it. The spec's own examples (§4.13) keep their keys.
MAX_SUBJECT_TOKENS = 6
MAX_VALUE_TOKENS = 12
_CLAUSE_STARTER_WORDS = (
    "what who whom whose where when why how which whether is are was were do does did can could would should "
    "will shall may might must have has had am i im we you he she they it its there here this that these those "
    "so but and or also if because hey hi hello thanks thank please yes no ok okay well"
)
_CLAUSE_STARTERS = frozenset(_CLAUSE_STARTER_WORDS.split())
_SPEAKER_LABEL_WORDS = (
    "user assistant system human ai bot me q a question answer note example input output prompt reply response"
)
_SPEAKER_LABELS = frozenset(_SPEAKER_LABEL_WORDS.split())
_SENTENCE_BREAK = re.compile(r"[.?!](\s|$)|[,;:?!]")


SPEECH_MIN_TOKENS = 5


def _is_speech(value: str) -> bool:
    """What follows a one-word ``Name:`` is a spoken turn, not a value, when it opens a clause ("I …", "we …",
    "so …") or is a sentence of five words or more."""
    words = value.split()
    return bool(words) and (words[0] in _CLAUSE_STARTERS or len(words) >= SPEECH_MIN_TOKENS)


def _keyable(left: str, right: str, delimiter: str, subject: str, value: str) -> bool:
    """Whether ``left <delimiter> right`` reads as one short statement about ``subject``."""
    tokens = subject.split()
    if not tokens or len(tokens) > MAX_SUBJECT_TOKENS or tokens[0] in _CLAUSE_STARTERS:
        return False
    if delimiter == ":" and len(tokens) == 1 and tokens[0] in _SPEAKER_LABELS:
        return False
    if delimiter == ":" and len(tokens) == 1 and _is_speech(value):
        return False  # "Caroline: I painted a sunset…" is a turn of a conversation, not a value of "caroline"
    if _SENTENCE_BREAK.search(left):
        return False
    return len(value.split()) <= MAX_VALUE_TOKENS and not re.search(r"[.?!]\s", right)


_LEADING_LABEL = re.compile(r"^[^\W_]+:\s+")


def _without_label(normalised: str) -> str:
    """``note: the editor is helix`` → ``the editor is helix``: a one-word label before a statement that has
    its own delimiter is not part of its subject (``codename: atlas`` keeps its colon: it is the statement)."""
    match = _LEADING_LABEL.match(normalised)
    if match is None:
        return normalised
    rest = normalised[match.end() :]
    return rest if any(delimiter in rest for delimiter in _DELIMITERS[:-1]) else normalised


def _subject_and_value(content: str) -> tuple[str, str] | None:
    normalised = _without_label(normalise_content(content))
    if not normalised:
        return None
    for delimiter in _DELIMITERS:
        index = normalised.find(delimiter)
        if index < 0:
            continue
        left, right = normalised[:index], normalised[index + len(delimiter) :]
        subject = _subject_part(left)
        value = " ".join(alnum_tokens(right))
        if _subject_is_usable(subject) and _value_is_usable(value):
            if not _keyable(left, right, delimiter, subject, value):
                return None
            return subject, value
    return None


def semantic_keys(content: str) -> SemanticKeys:
    """§4.13: ``"The project codename is Atlas."`` and ``"project codename: atlas"`` share the content key
    ``project codename=atlas`` and the subject key ``project codename``. Content with no usable
    ``subject <delimiter> value`` shape is keyed by all of its tokens and has no subject."""
    parts = _subject_and_value(content)
    if parts is None:
        return SemanticKeys(content_key=" ".join(alnum_tokens(content)), subject_key=None)
    subject, value = parts
    return SemanticKeys(content_key=f"{subject}={value}", subject_key=subject)


# ---------------------------------------------------------------------------------------------------------
# §4.12 Evidence support
# ---------------------------------------------------------------------------------------------------------

EVIDENCE_STOP_WORDS = frozenset(
    {"a", "an", "and", "are", "de", "des", "du", "est", "et", "is", "la", "le", "les", "of", "the", "to"}
    | {"un", "une"}
)


def evidence_terms(text: str) -> frozenset[str]:
    """Lowercase alphanumeric tokens of ``text`` minus the evidence stop-words, as a set."""
    return frozenset(term for term in alnum_tokens(text) if term not in EVIDENCE_STOP_WORDS)


def run_memory_supports_content(fields: Iterable[str | None], needle: str) -> bool:
    """Whether a run-memory record attests ``needle`` (§4.12 ``run_memory_supports_candidate_content``).

    ``fields`` are the record's request_preview, outcome_preview, summary and each failure marker (``None``
    entries are skipped). A field supports the needle when it contains the trimmed needle verbatim
    (case-sensitive) or, for a needle with at least two evidence terms, when every needle term is also a
    term of the field. A blank needle is never supported.
    """
    needle = needle.strip()
    if not needle:
        return False
    needle_terms = evidence_terms(needle)
    for field in fields:
        if field is None:
            continue
        if needle in field:
            return True
        if len(needle_terms) >= 2 and needle_terms <= evidence_terms(field):
            return True
    return False
