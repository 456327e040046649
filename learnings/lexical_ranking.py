"""The lexical ranker of the learning plane (pure text logic, no database; the kinds and scopes are
``learnings.vocabulary``'s):

* prompt scoring and selection of ``learned_context`` entries (§4.7);
* the memory-search ranking of a learning (§4.7 "Search ranking", §4.21).

Terms are ``learnings.tokens``' (the same tokeniser as the semantic keys of ``learnings.semantic``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from functools import lru_cache
from itertools import repeat
from operator import add
from typing import Protocol, TypeVar

from learnings.tokens import alnum_tokens
from learnings.vocabulary import PROMPT_KINDS, SCOPE_PRIORITY, LearningKind, kind_label

_PROMPT_KINDS = frozenset(PROMPT_KINDS)
"""Learning kinds that may reach ``learned_context`` (``learnings.vocabulary.PROMPT_KINDS``)."""

_UNKNOWN_SCOPE_PRIORITY = len(SCOPE_PRIORITY)


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

KIND_LABELS = {kind: kind_label(kind) for kind in LearningKind.values}
"""The kind labels search scores (weight 1): ``fact`` … ``run summary``."""


def normalise_query(query: str | None) -> str | None:
    """Trimmed, Unicode-lowercased query; ``None`` when absent or blank."""
    if query is None:
        return None
    normalised = query.strip().lower()
    return normalised or None


def query_terms(query: str) -> list[str]:
    """Lowercased alphanumeric terms of ``query`` minus :data:`STOP_WORDS`, in order. Duplicates are kept:
    a repeated query term scores once per occurrence, as in the reference."""
    return [term for term in alnum_tokens(query) if term not in STOP_WORDS]


def is_explicit_memory_request(query: str) -> bool:
    """Whether a query explicitly asks for remembered context (keeps the recency/scope fallback)."""
    normalised = normalise_query(query)
    if normalised is None:
        return False
    if any(term in EXPLICIT_MEMORY_TERMS for term in query_terms(normalised)):
        return True
    return any(phrase in normalised for phrase in EXPLICIT_MEMORY_PHRASES)


Profile = tuple[str, frozenset[str]]
"""A field as scoring reads it: its lowercased text and its term set (:func:`content_terms`)."""


@lru_cache(maxsize=32768)
def content_terms(value: str) -> Profile:
    """A field's lowercased text and its term set. Learning contents repeat across every prompt of every
    session in their scopes, so tokenising each once (per process) keeps retrieval cheap."""
    lowered = value.lower()
    return lowered, frozenset(query_terms(lowered))


def field_scores(query: str, fields: Sequence[Profile], weight: int) -> list[int]:
    """The score of each field against a normalised query: +100·w when the lowercased field contains the whole
    query, +10·w per query term equal to one of its terms (a term repeated in the query counts once per
    occurrence); zero throughout when the query has no term left after stop-word removal."""
    if not fields:
        return []
    lowered, term_sets = zip(*fields, strict=True)
    return column_scores(query, lowered, term_sets, weight)


def column_scores(query: str, lowered: Sequence[str], term_sets: Sequence[frozenset[str]], weight: int) -> list[int]:
    """:func:`field_scores` of fields given column by column (their lowercased texts, their term sets).

    This scores every learning a session sees for every new run, so the per-field work runs in C: ``map``
    over bound methods, one set intersection per field, and no Python call per field unless a query term is
    repeated."""
    terms = query_terms(query)
    if not terms or not lowered:
        return [0] * len(lowered)
    counts = Counter(terms)
    wanted = frozenset(counts)
    matched: Iterable[int]
    if len(counts) == len(terms):
        matched = map(len, map(wanted.intersection, term_sets))
    else:
        matched = (sum(counts[term] for term in wanted.intersection(term_set)) for term_set in term_sets)
    whole = _WHOLE_QUERY_POINTS * weight
    per_term = _TERM_POINTS * weight
    contained = map(str.__contains__, lowered, repeat(query))
    return [per_term * count + (whole if inside else 0) for count, inside in zip(matched, contained, strict=True)]


def score_for_prompt(content: str, query: str | None) -> int:
    """Prompt score of a learning's content (§4.7): +400 when the lowercased content contains the whole
    normalised query, +40 per query term equal to a content term. Zero without a query, and zero when the
    query has no terms left after stop-word removal. Kind and scope never count here."""
    normalised = normalise_query(query)
    return 0 if normalised is None else field_scores(normalised, [content_terms(content)], CONTENT_WEIGHT)[0]


_SEARCH_FIELD_NAMES = ("content", "kind", "scope")


def search_ranks(
    query: str | None, contents: Sequence[str], kinds: Sequence[str], scope_kinds: Sequence[str]
) -> dict[int, tuple[int, list[str]]] | None:
    """:func:`rank_for_search` of many learnings at once (given column by column), for those that score: their
    positions and ranks; ``None`` when nothing can score (no query, or no term left after stop-word
    removal). The few kind labels and scope kinds are each scored once, and the totals add up in C."""
    normalised = normalise_query(query)
    if normalised is None or not query_terms(normalised):
        return None
    content_points = field_scores(normalised, list(map(content_terms, contents)), CONTENT_WEIGHT)
    kind_labels = [KIND_LABELS.get(kind, kind) for kind in kinds]
    labels = list(set(kind_labels) | set(scope_kinds))
    label_scores = field_scores(normalised, list(map(content_terms, labels)), LABEL_WEIGHT)
    label_points = dict(zip(labels, label_scores, strict=True))
    kind_points = list(map(label_points.__getitem__, kind_labels))
    scope_points = list(map(label_points.__getitem__, scope_kinds))
    totals = map(add, map(add, content_points, kind_points), scope_points)
    ranks = {}
    for position, total in enumerate(totals):
        if total:
            scores = (content_points[position], kind_points[position], scope_points[position])
            ranks[position] = total, _matched_fields(scores)
    return ranks


def _matched_fields(scores: tuple[int, int, int]) -> list[str]:
    return [name for name, score in zip(_SEARCH_FIELD_NAMES, scores, strict=True) if score]


def rank_for_search(content: str, kind: str, scope_kind: str, query: str | None) -> tuple[int, list[str]]:
    """Memory-search score of a learning and the fields that matched (§4.7 ``rank_learning_record``).

    Fields, in order: ``content`` (weight 4), ``kind`` (its label, e.g. ``run summary``; weight 1) and
    ``scope`` (the scope kind; weight 1); each scores +100·w for the whole query and +10·w per matching
    term. The query is normalised here (trim + lowercase), so an already ASCII-lowercased query from
    §4.21 gives the same result.
    """
    ranks = search_ranks(query, [content], [kind], [scope_kind])
    return ranks.get(0, (0, [])) if ranks else (0, [])


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


def visibility_key(scope_kind: str, published_at_ms: int, learning_id: str) -> tuple[int, int, str]:
    """The visibility order of §4.7: scope priority, ``published_at_ms`` desc, ``learning_id`` asc."""
    return scope_priority(scope_kind), -published_at_ms, learning_id


def prompt_order(
    visibility: Sequence[tuple[int, int, str]], profiles: Sequence[Profile], query: str | None
) -> list[int]:
    """Which prompt-eligible records enter ``learned_context`` and in what order, as indexes into the two
    sequences (one :func:`visibility_key` and one :func:`content_terms` per record); see
    :func:`select_for_prompt`."""
    order = sorted(range(len(visibility)), key=visibility.__getitem__)
    lowered = [profiles[index][0] for index in order]
    term_sets = [profiles[index][1] for index in order]
    return [order[index] for index in prompt_order_of_visible(lowered, term_sets, query)]


def prompt_order_of_visible(
    lowered: Sequence[str], term_sets: Sequence[frozenset[str]], query: str | None
) -> Sequence[int]:
    """:func:`prompt_order` of records already in visibility order, given by their content profiles column by
    column (lowercased contents, term sets). Python's sort is stable (with ``reverse`` too), so sorting
    the positive scores desc keeps the visibility order among equal scores: score, then visibility."""
    normalised = normalise_query(query)
    if normalised is not None:
        scores = column_scores(normalised, lowered, term_sets, CONTENT_WEIGHT)
        positive = [index for index, score in enumerate(scores) if score > 0]
        if positive:
            positive.sort(key=scores.__getitem__, reverse=True)
            return positive
        if not is_explicit_memory_request(normalised):
            return []  # a query that scores nothing and does not ask for memory
    return range(len(lowered))  # no query, or the recency fallback


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
    eligible = [record for record in records if record.kind in _PROMPT_KINDS]
    visibility = [visibility_key(r.scope_kind, r.published_at_ms, r.learning_id) for r in eligible]
    profiles = [content_terms(record.content) for record in eligible]
    return [eligible[index] for index in prompt_order(visibility, profiles, query)]
