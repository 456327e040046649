"""Pure text logic of the learning plane (no database, no Django).

* semantic keys used for dedup and same-subject conflicts (spec §4.13);
* evidence terms and the run-memory support check used by verification (§4.12);
* prompt scoring and selection of ``learned_context`` entries (§4.7);
* the memory-search ranking of a learning (§4.7 "Search ranking", §4.21).

Tokenisation follows the reference: Unicode-lowercase, every non-alphanumeric character is a separator.
Python's ``str.isalnum`` stands in for Rust's ``char::is_alphanumeric`` (they differ only on a few combining
marks of Indic scripts).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol, TypeVar

PROMPT_ELIGIBLE_KINDS = frozenset({"fact", "preference", "decision"})
"""Learning kinds that may reach ``learned_context``; ``run_summary`` and ``procedure`` never do."""

SCOPE_PRIORITY = {"session": 0, "persona": 1, "project": 2, "workspace": 3}
"""Narrowest scope first (§4.6, §4.7)."""

_UNKNOWN_SCOPE_PRIORITY = len(SCOPE_PRIORITY)

# ---------------------------------------------------------------------------------------------------------
# Tokens
# ---------------------------------------------------------------------------------------------------------


def _alnum_tokens(text: str) -> list[str]:
    """Lowercased runs of alphanumeric characters, in order (duplicates kept)."""
    lowered = text.lower()
    return "".join(ch if ch.isalnum() else " " for ch in lowered).split()


def _alnum_count(text: str) -> int:
    return sum(1 for ch in text if ch.isalnum())


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
    keyed = " ".join(_alnum_tokens(text))
    for article in _SUBJECT_ARTICLES:
        if keyed.startswith(article):
            return keyed[len(article) :]
    return keyed


def _subject_is_usable(subject: str) -> bool:
    return _alnum_count(subject) >= 3 and subject not in _UNUSABLE_SUBJECTS


def _value_is_usable(value: str) -> bool:
    return _alnum_count(value) >= 2


def _subject_and_value(content: str) -> tuple[str, str] | None:
    normalised = normalise_content(content)
    if not normalised:
        return None
    for delimiter in _DELIMITERS:
        index = normalised.find(delimiter)
        if index < 0:
            continue
        subject = _subject_part(normalised[:index])
        value = " ".join(_alnum_tokens(normalised[index + len(delimiter) :]))
        if _subject_is_usable(subject) and _value_is_usable(value):
            return subject, value
    return None


def semantic_keys(content: str) -> SemanticKeys:
    """§4.13: ``"The project codename is Atlas."`` and ``"project codename: atlas"`` share the content key
    ``project codename=atlas`` and the subject key ``project codename``. Content with no usable
    ``subject <delimiter> value`` shape is keyed by all of its tokens and has no subject."""
    parts = _subject_and_value(content)
    if parts is None:
        return SemanticKeys(content_key=" ".join(_alnum_tokens(content)), subject_key=None)
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
    return frozenset(term for term in _alnum_tokens(text) if term not in EVIDENCE_STOP_WORDS)


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


# ---------------------------------------------------------------------------------------------------------
# §4.7 Prompt scoring
# ---------------------------------------------------------------------------------------------------------

STOP_WORDS = frozenset(
    {
        "a", "about", "am", "an", "and", "are", "be", "been", "being", "de", "des", "du", "et", "exactly",
        "for", "how", "i", "is", "la", "le", "les", "maintenant", "me", "my", "now", "of", "or", "ou",
        "please", "pour", "quel", "quelle", "reply", "sont", "the", "to", "un", "une", "what", "when",
        "where", "which", "who", "why", "with", "your", "est", "avec",
    }
)  # fmt: skip

EXPLICIT_MEMORY_TERMS = frozenset(
    {"memory", "memories", "memoire", "mémoire", "remember", "remembered", "recall"}
    | {"learning", "learnings", "appris"}
)
EXPLICIT_MEMORY_PHRASES = ("learned context", "durable learning")

CONTENT_WEIGHT = 4
LABEL_WEIGHT = 1
_WHOLE_QUERY_POINTS = 100
_TERM_POINTS = 10

KIND_LABELS = {
    "fact": "fact",
    "preference": "preference",
    "decision": "decision",
    "procedure": "procedure",
    "run_summary": "run summary",
}


def normalise_query(query: str | None) -> str | None:
    """Trimmed, Unicode-lowercased query; ``None`` when absent or blank."""
    if query is None:
        return None
    normalised = query.strip().lower()
    return normalised or None


def query_terms(query: str) -> list[str]:
    """Lowercased alphanumeric terms of ``query`` minus :data:`STOP_WORDS`, in order. Duplicates are kept:
    a repeated query term scores once per occurrence, as in the reference."""
    return [term for term in _alnum_tokens(query) if term not in STOP_WORDS]


def is_explicit_memory_request(query: str) -> bool:
    """Whether a query explicitly asks for remembered context (keeps the recency/scope fallback)."""
    normalised = normalise_query(query)
    if normalised is None:
        return False
    if any(term in EXPLICIT_MEMORY_TERMS for term in query_terms(normalised)):
        return True
    return any(phrase in normalised for phrase in EXPLICIT_MEMORY_PHRASES)


@lru_cache(maxsize=65536)
def _lowered_terms(value: str) -> tuple[str, frozenset[str]]:
    """A field's lowercased text and its term set. Learning contents repeat across every prompt of every
    session in their scopes, so tokenising each once (per process) keeps retrieval cheap."""
    lowered = value.lower()
    return lowered, frozenset(query_terms(lowered))


def _field_score(value: str, query: str, terms: Sequence[str], weight: int) -> int:
    lowered, value_terms = _lowered_terms(value)
    score = _WHOLE_QUERY_POINTS * weight if query in lowered else 0
    score += sum(_TERM_POINTS * weight for term in terms if term in value_terms)
    return score


def score_for_prompt(content: str, query: str | None) -> int:
    """Prompt score of a learning's content (§4.7): +400 when the lowercased content contains the whole
    normalised query, +40 per query term equal to a content term. Zero without a query, and zero when the
    query has no terms left after stop-word removal. Kind and scope never count here."""
    normalised = normalise_query(query)
    if normalised is None:
        return 0
    terms = query_terms(normalised)
    if not terms:
        return 0
    return _field_score(content, normalised, terms, CONTENT_WEIGHT)


def rank_for_search(content: str, kind: str, scope_kind: str, query: str | None) -> tuple[int, list[str]]:
    """Memory-search score of a learning and the fields that matched (§4.7 ``rank_learning_record``).

    Fields, in order: ``content`` (weight 4), ``kind`` (its label, e.g. ``run summary``; weight 1) and
    ``scope`` (the scope kind; weight 1); each scores +100·w for the whole query and +10·w per matching
    term. The query is normalised here (trim + lowercase), so an already ASCII-lowercased query from
    §4.21 gives the same result.
    """
    normalised = normalise_query(query)
    if normalised is None:
        return 0, []
    terms = query_terms(normalised)
    if not terms:
        return 0, []
    total = 0
    matched: list[str] = []
    for field_name, value, weight in (
        ("content", content, CONTENT_WEIGHT),
        ("kind", KIND_LABELS.get(kind, kind), LABEL_WEIGHT),
        ("scope", scope_kind, LABEL_WEIGHT),
    ):
        score = _field_score(value, normalised, terms, weight)
        if score:
            total += score
            matched.append(field_name)
    return total, matched


# ---------------------------------------------------------------------------------------------------------
# §4.7 Selection for the prompt
# ---------------------------------------------------------------------------------------------------------


class PromptRecord(Protocol):
    """What :func:`select_for_prompt` reads from a learning (a model instance or any object will do)."""

    learning_id: str
    kind: str
    content: str
    scope_kind: str
    published_at_ms: int


R = TypeVar("R", bound=PromptRecord)


def scope_priority(scope_kind: str) -> int:
    """0 for session, 1 persona, 2 project, 3 workspace (unknown kinds sort last)."""
    return SCOPE_PRIORITY.get(scope_kind, _UNKNOWN_SCOPE_PRIORITY)


def _visibility_order(record: PromptRecord) -> tuple[int, int, str]:
    return scope_priority(record.scope_kind), -record.published_at_ms, record.learning_id


def select_for_prompt(records: Iterable[R], query: str | None) -> list[R]:
    """Order and filter prompt-visible learnings for ``learned_context`` (§4.7 query handling).

    ``records`` must already have passed the visibility gates (status, tier, sensitivity, verification,
    policy decision, expiry, shadowing); records whose kind is not prompt-eligible are dropped here as well.

    * no (or blank) query: every record, by scope priority, ``published_at_ms`` desc, ``learning_id`` asc;
    * with a query: records are scored on content (:func:`score_for_prompt`). If any scores above zero only
      those are kept; otherwise nothing is returned unless the query explicitly asks for memory
      (:func:`is_explicit_memory_request`), in which case every record is kept. Sorted by score desc, scope
      priority, ``published_at_ms`` desc, ``learning_id`` asc.

    An empty result means the ``learned_context`` section is omitted. Nothing is truncated here; the
    prompt packer applies the budget.
    """
    eligible = [record for record in records if record.kind in PROMPT_ELIGIBLE_KINDS]
    normalised = normalise_query(query)
    if normalised is None:
        return sorted(eligible, key=_visibility_order)
    terms = query_terms(normalised)
    scored = [(record, _field_score(record.content, normalised, terms, CONTENT_WEIGHT) if terms else 0)
              for record in eligible]
    if any(score > 0 for _, score in scored):
        scored = [(record, score) for record, score in scored if score > 0]
    elif not is_explicit_memory_request(normalised):
        return []
    scored.sort(key=lambda pair: (-pair[1], *_visibility_order(pair[0])))
    return [record for record, _ in scored]
