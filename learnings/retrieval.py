"""Reading learnings for a session: the ``learned_context`` bundle (spec §4.7) and memory-search hits
(§4.21), with the ranker the learning policy's ``retrieval.ranker`` selects.

* ``hybrid`` (the default): a candidate pool from the recall indexes (``learnings.recall_sql``: full-text GIN
  and pgvector HNSW), ordered by the shared hybrid ranker (``memory.ranking``: BM25 over stemmed terms fused
  with embedding similarity, scope and recency priors). A query reads a bounded pool, never the whole
  visible set, so its cost does not grow with the number of learnings a session sees.
* ``lexical``: the spec's §4.7 scoring exactly. One indexed query by ``scope_key`` and status, rows read as
  plain tuples (``scoped_rows``), what no query changes prepared once per learning, scoring column-wise.

Either way the §4.7 visibility and prompt gates are applied in SQL: ranking only chooses among the
prompt-visible set."""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from functools import lru_cache
from operator import itemgetter
from typing import NamedTuple

import numpy as np

from learnings import gate, lexical_ranking, policy_in_force, recall_sql, standing, when
from learnings import speakers as speakers_module
from learnings.learning_policy import RetrievalConfig
from learnings.models import LEARNING_PREFIX, Learning, LearningKind
from learnings.querysets import versions_digest
from learnings.sections import LEARNED_CONTEXT_FORMAT
from learnings.vocabulary import SCOPE_PRIORITY
from memory import embedding, public_ids, ranking
from memory.clock import now_ms
from memory.lru import BoundedLRU
from memory.ranking import SEARCH_SCORE_SCALE
from memory.sections import Block

EXCERPT_CHARS = 180
BROWSE_LIMIT = 200
VISIBLE_SETS_CACHED = 256
"""Prepared visible sets kept per process: about one per project whose sessions run (its learnings and the
workspace's), each a few tuples of references to rows prepared once (``_prepared``)."""
KIND_TITLES = {value: label for value, label in LearningKind.choices}


class LearnedRecord(NamedTuple):
    """A learning as ``learned_context`` shows it, with its rendered prompt block (``learnings.sections``): the
    same learnings enter every prompt of every session in their scopes, so each is rendered once."""

    learning_id: str
    kind: str
    content: str
    published_at_ms: int
    scope_kind: str
    scope_id: str
    block: Block

    def to_dict(self) -> dict:
        """The bundle entry of the API (memory-context)."""
        return {
            "learning_id": self.learning_id,
            "kind": self.kind,
            "published_at_ms": self.published_at_ms,
            "content": self.content,
            "scope": {"kind": self.scope_kind, "id": self.scope_id},
        }


_PROMPT_FIELDS = ("pk", "kind", "content", "scope_kind", "scope_id", "published_at_ms")


@lru_cache(maxsize=32768)
def _prepared(row: tuple) -> tuple[LearnedRecord, tuple[int, int, str], lexical_ranking.Profile]:
    """What no query changes about a row of ``_PROMPT_FIELDS``: the record (block rendered), its visibility
    order key and its scoring profile. A learning is seen by every session of its scopes, and its row is the
    same in each of their visible sets, so it is prepared once per process; keyed by the whole row, a changed
    row is a new entry, never a stale one."""
    pk, kind, content, scope_kind, scope_id, published_at_ms = row
    learning_id = public_ids.format_id(LEARNING_PREFIX, pk)
    block = LEARNED_CONTEXT_FORMAT.block({"learning_id": learning_id, "kind": kind, "content": content})
    record = LearnedRecord(learning_id, kind, content, published_at_ms, scope_kind, scope_id, block)
    visibility = lexical_ranking.visibility_key(scope_kind, published_at_ms, learning_id)
    return record, visibility, lexical_ranking.content_terms(content)


class _VisibleSet(NamedTuple):
    """A set of prompt-visible rows, prepared and put in visibility order once: the records and their
    content profiles column by column (lowercased contents, term sets), as scoring reads them."""

    records: tuple[LearnedRecord, ...]
    lowered: tuple[str, ...]
    term_sets: tuple[frozenset[str], ...]


def _visible_set(rows: Iterable[tuple]) -> _VisibleSet:
    prepared = sorted(map(_prepared, rows), key=itemgetter(1))
    return _VisibleSet(
        tuple(record for record, _, _ in prepared),
        tuple(profile[0] for _, _, profile in prepared),
        tuple(profile[1] for _, _, profile in prepared),
    )


_VISIBLE_SETS: BoundedLRU[bytes, _VisibleSet] = BoundedLRU(VISIBLE_SETS_CACHED)
"""Visible sets by the fingerprint of their rows (``Learning.objects.scoped_fingerprint``). The sessions of a
project all see the same rows (its learnings and the workspace's) until one of them changes, so most new runs
only read a fingerprint - one small row - and score. Any write to a row changes the fingerprint: a changed,
added, hidden or removed row means another key, never a stale answer."""


def clear_prepared() -> None:
    """Forget every prepared row and set (benchmarks measure a cold process with it)."""
    _VISIBLE_SETS.clear()
    _prepared.cache_clear()


def _prompt_visible(at: int, scope_keys: list[str]) -> _VisibleSet | None:
    """The prompt-visible rows of these scopes at ``at``, prepared; ``None`` when there are none."""
    fingerprint = Learning.objects.scoped_fingerprint("for_prompt", scope_keys, at)
    if fingerprint.count == 0:
        return None
    visible = _VISIBLE_SETS.get(fingerprint.digest)
    if visible is None:
        rows = Learning.objects.scoped_rows("for_prompt", scope_keys, at, _PROMPT_FIELDS, versioned=True)
        if not rows:
            return None
        visible = _visible_set(row[:-1] for row in rows)
        _VISIBLE_SETS.put(versions_digest(rows), visible)  # these rows' own key: they may be newer
    return visible


def _lexical_records(scope_keys: list[str], query: str | None) -> list[LearnedRecord]:
    """§4.7 exactly: every prompt-visible learning scored on content, zero scores dropped unless the query
    explicitly asks for memory, over the visible set prepared once per process."""
    visible = _prompt_visible(now_ms(), scope_keys)
    if visible is None:
        return []
    order = lexical_ranking.prompt_order_of_visible(visible.lowered, visible.term_sets, query)
    return [visible.records[index] for index in order]


SCOPE_PRIOR = 0.02
"""Fused-score bonus per scope level nearer the session (session > persona > project > workspace)."""
RECENCY_PRIOR = 0.01
"""Fused-score bonus of the newest candidate of a pool (the oldest gets none)."""


def _priors(scope_kinds: list[str], published: list[int]) -> np.ndarray:
    priority = np.array([SCOPE_PRIORITY.get(kind, 3) for kind in scope_kinds], dtype=np.float64)
    times = np.array(published, dtype=np.float64)
    span = times.max() - times.min() if len(times) else 0.0
    recency = (times - times.min()) / span if span > 0 else np.zeros_like(times)
    return SCOPE_PRIOR * (3 - priority) + RECENCY_PRIOR * recency


TIME_PRIOR = 0.2
"""Fused-score bonus of a candidate stated in the time the question names (``learnings.when``)."""


def reference_time(session: object) -> int:
    """What "now" means for a session's questions ("yesterday", "last month"): the server's clock, or the
    session's ``metadata.reference_time_ms`` (a replay or import of a past conversation pins its own)."""
    metadata = getattr(session, "metadata", None) or {}
    pinned = metadata.get("reference_time_ms") if isinstance(metadata, dict) else None
    if isinstance(pinned, int) and not isinstance(pinned, bool) and 0 < pinned < 2**62:
        return pinned
    return now_ms()


SPEAKER_PRIOR = 0.15
"""Fused-score bonus of a candidate spoken by a person the question names, in a multi-speaker conversation
(``learnings.speakers``): about a sixth of the fused range, so the named speaker's relevant turns come before
the other speaker's, while a clearly better match by someone else still ranks."""


def _speakers_named(query: str, texts: list[str]) -> tuple[list[str | None], set[str]]:
    """Each pool row's speaker, and the speakers the question names, when the pool holds at least two."""
    speakers = [speakers_module.speaker_of(text) for text in texts]
    distinct = {speaker for speaker in speakers if speaker}
    if len(distinct) < 2:
        return speakers, set()
    return speakers, speakers_module.named_in(query, distinct)


def _speaker_priors(query: str, texts: list[str]) -> np.ndarray | None:
    """SPEAKER_PRIOR for the pool rows whose speaker label ("Caroline: …", "Caroline said: …") names a person
    the question names, when the pool holds at least two speakers; ``None`` otherwise."""
    speakers, wanted = _speakers_named(query, texts)
    if not wanted:
        return None
    return SPEAKER_PRIOR * np.array([speaker in wanted for speaker in speakers], dtype=np.float64)


def _time_priors(query: str, ids: list[int], reference_ms: int, texts: list[str] | None = None) -> np.ndarray | None:
    """TIME_PRIOR for the pool rows stated in the window the question names, or whose text names a time in it
    (resolved against when it was stated: ``when.in_window``); ``None`` when the question names none."""
    found = when.window(query, reference_ms)
    if found is None or not ids:
        return None
    stated = stated_times([public_ids.format_id(LEARNING_PREFIX, pk) for pk in ids])
    times = [stated.get(public_ids.format_id(LEARNING_PREFIX, pk), 0) for pk in ids]
    return TIME_PRIOR * np.array(when.in_window(times, found, texts), dtype=np.float64)


def hybrid_pool_order(
    shape: str, scope_keys: list[str], query: str, at: int, reference_ms: int | None = None
) -> tuple[list[tuple], np.ndarray]:
    """The pool of a query (``recall_sql.pool``: ``recall_sql.SIZES[shape]`` candidates per arm) in hybrid
    order, irrelevant candidates dropped, with the fused score of each row returned. A question that names a
    time (``learnings.when``, relative to ``reference_ms``, now by default) prefers the candidates stated
    then."""
    query_vector = embedding.embed_query(query)
    words = [word for word in lexical_ranking.query_terms(query.lower())][:64]
    found = recall_sql.pool(shape, scope_keys=scope_keys, at_ms=at, words=words, query_vector=query_vector)
    if not found.rows:
        return [], np.zeros(0)
    scope_kind_column = 3
    published_column = 5
    priors = _priors([row[scope_kind_column] for row in found.rows], [row[published_column] for row in found.rows])
    timed = _time_priors(
        query,
        [row[0] for row in found.rows],
        at if reference_ms is None else reference_ms,
        [row[2] for row in found.rows],
    )
    if timed is not None:
        priors = priors + timed
    texts = [row[2] for row in found.rows]
    spoken = _speaker_priors(query, texts)
    lexical_query, named_rows = query, None
    if spoken is not None:
        named_rows = spoken > 0  # the named speaker's turns: the name was a term they all matched
        priors = priors + spoken
        lexical_query = speakers_module.without_names(query, _speakers_named(query, texts)[1])
    # The pool's vectors are here (read with the rows, or from the stored embeddings without pgvector): the
    # cosines and the pseudo-relevance feedback are computed from them.
    ranked = ranking.rank(
        lexical_query,
        texts,
        found.embeddings,
        query_vector,
        priors=priors,  # type: ignore[arg-type]  # rank reads them with np.asarray; memory.ranking annotates Sequence[float]
        also_relevant=named_rows,
    )
    return [found.rows[index] for index in ranked.order], ranked.scores[ranked.order]


class Selection(NamedTuple):
    """What may enter ``learned_context``, best first; whether relevant ones were left out by
    ``max_entries``; and which of them hold a standing place (``learnings.standing``)."""

    records: list[LearnedRecord]
    truncated: bool
    standing_ids: frozenset[str] = frozenset()


def _query_ranked_rows(scope_keys: list[str], query: str | None, limit: int, at: int, reference_ms: int) -> list[tuple]:
    if query is None or (normalised := lexical_ranking.normalise_query(query)) is None:
        return recall_sql.recent("prompt", scope_keys=scope_keys, at_ms=at, limit=limit + 1)
    rows, _ = hybrid_pool_order("prompt", scope_keys, query.strip(), at, reference_ms)
    if not rows and lexical_ranking.is_explicit_memory_request(normalised):
        rows = recall_sql.recent("prompt", scope_keys=scope_keys, at_ms=at, limit=limit + 1)
    return rows


def _standing_rows(
    scope_keys: list[str], query: str | None, config: RetrievalConfig, budget_tokens: int, at: int
) -> list[tuple]:
    """The standing step, separate from the query-ranked one and composed before it."""
    budget = standing.budget_for(config.standing_tokens, budget_tokens)
    if budget <= 0:
        return []
    rows = standing.standing_rows(scope_keys, at)
    sizes = [_prepared(row)[0].block.size for row in rows]
    return standing.select(rows, query, budget, sizes, config.max_entries).rows


def _hybrid_selection(
    session: object, scope_keys: list[str], query: str | None, config: RetrievalConfig, budget_tokens: int
) -> Selection:
    at = now_ms()
    limit = config.max_entries
    standing_rows = _standing_rows(scope_keys, query, config, budget_tokens, at)
    taken = {row[0] for row in standing_rows}
    ranked = [
        row for row in _query_ranked_rows(scope_keys, query, limit, at, reference_time(session)) if row[0] not in taken
    ]
    rows = standing_rows + ranked
    records = [_prepared(row)[0] for row in rows[:limit]]
    return Selection(records, len(rows) > limit, frozenset(_prepared(row)[0].learning_id for row in standing_rows))


def learned_selection(
    *,
    session: object,
    scope_keys: list[str],
    query: str | None,
    usage: str = "prompt",
    config: RetrievalConfig | None = None,
    budget_tokens: int | None = None,
) -> Selection:
    """The learnings that may enter ``learned_context`` for this input, best first (see :func:`learned_records`).

    ``budget_tokens`` is the section's budget (the policy's ``max_tokens`` under the window's, as the prompt
    packer computes it; ``max_tokens`` when not given): the standing share is taken from it."""
    config = config or current_retrieval()
    if config.ranker == "lexical":
        records = _lexical_records(scope_keys, query)
        limit = config.max_entries
        return Selection(records[:limit], len(records) > limit)
    budget = config.max_tokens if budget_tokens is None else min(budget_tokens, config.max_tokens)
    return _hybrid_selection(session, scope_keys, query, config, budget)


def learned_records(
    *,
    session: object,
    scope_keys: list[str],
    query: str | None,
    usage: str = "prompt",
    config: RetrievalConfig | None = None,
    budget_tokens: int | None = None,
) -> tuple[list[LearnedRecord], bool]:
    """The learnings that may enter ``learned_context`` for this input, best first, and whether relevant ones
    were left out by ``retrieval.max_entries``.

    Visibility (scopes, live, unexpired, unshadowed) and every prompt gate (kind, active tier, not sensitive,
    not failed, automatic ⇒ verified, never escalated) are applied in SQL; the ranker the policy selects
    orders the visible learnings; the explicit-memory fallback (§4.7) works with both. With the hybrid ranker
    the standing preferences and decisions (``learnings.standing``) come first, within their share of the
    section. The token budget is the prompt packer's (``kheish.composition``).
    """
    selection = learned_selection(
        session=session, scope_keys=scope_keys, query=query, usage=usage, config=config, budget_tokens=budget_tokens
    )
    return selection.records, selection.truncated


def current_retrieval() -> RetrievalConfig:
    return policy_in_force.current_policy().retrieval


def learned_bundle(
    *,
    session: object,
    scope_keys: list[str],
    query: str | None,
    usage: str = "prompt",
    config: RetrievalConfig | None = None,
    budget_tokens: int | None = None,
) -> tuple[list[dict], bool]:
    """:func:`learned_records` as the API's bundle entries (memory-context), each saying whether it holds a
    standing place and when it was stated (``stated_at_ms``; its publication time when none was given)."""
    selection = learned_selection(
        session=session, scope_keys=scope_keys, query=query, usage=usage, config=config, budget_tokens=budget_tokens
    )
    stated = stated_times([record.learning_id for record in selection.records])
    entries = []
    for record in selection.records:
        entry = record.to_dict()
        entry["stated_at_ms"] = stated.get(record.learning_id, record.published_at_ms)
        entry["standing"] = record.learning_id in selection.standing_ids
        entries.append(entry)
    return entries, selection.truncated


def stated_times(learning_ids: list[str]) -> dict[str, int]:
    """When each of these learnings was stated: ``stated_at_ms``, or its publication time when none was given."""
    pks = [public_ids.parse_id(learning_id, LEARNING_PREFIX) for learning_id in learning_ids]
    rows = Learning.objects.filter(pk__in=pks).values_list("pk", "stated_at_ms", "published_at_ms")
    return {
        public_ids.format_id(LEARNING_PREFIX, pk): stated if stated is not None else published
        for pk, stated, published in rows
    }


def _excerpt(content: str) -> str:
    return content if len(content) <= EXCERPT_CHARS else content[:EXCERPT_CHARS] + "…"


_HIT_GATES = gate.predicate((gate.PROMPT_KIND, *gate.PROMPT_VISIBLE), mapping=True)


def _prompt_eligible(
    kind: str, status: str, tier: str, verification: str, decision: str | None, sensitivity: str
) -> bool:
    """The prompt gates of §4.7 (``learnings.gate``) for a live, unexpired, unshadowed record."""
    record = {
        "kind": kind,
        "status": status,
        "publish_tier": tier,
        "verification_status": verification,
        "policy_decision": decision,
        "sensitivity": sensitivity,
    }
    return _HIT_GATES(record, 0)


_SEARCH_FIELDS = (
    "pk",
    "kind",
    "content",
    "scope_kind",
    "scope_key",
    "published_at_ms",
    "status",
    "publish_tier",
    "verification_status",
    "policy_decision",
    "sensitivity",
)


def _search_rows(scope_keys: list[str], normalised: str | None) -> list[tuple]:
    """Every visible row for a query (scored in Python); without one the newest ``BROWSE_LIMIT``."""
    at = now_ms()
    if normalised is not None:
        return Learning.objects.scoped_rows("search_visible", scope_keys, at, _SEARCH_FIELDS)
    browse = Learning.objects.search_visible(scope_keys, at).order_by("-published_at_ms", "id")[:BROWSE_LIMIT]
    return list(browse.values_list(*_SEARCH_FIELDS))


def search_hits(
    *,
    session: object,
    scope_keys: list[str],
    query: str | None,
    config: RetrievalConfig | None = None,
    limit: int | None = None,
) -> list[dict]:
    """Memory-search hits for learnings (§4.21): the session's visible learnings (not the prompt gates),
    never sensitive ones; with a query irrelevant ones are dropped. ``lexical``: scored on content, kind and
    scope as the spec says; ``hybrid``: the pool of the query in hybrid order. ``prompt_eligible`` says whether
    the learning passes every prompt gate. With ``limit``, the hybrid path builds only the ``limit`` first hits
    in memory-search's order (score, then newest, then id), which are all a page of that size can show."""
    config = config or current_retrieval()
    normalised = lexical_ranking.normalise_query(query)
    if config.ranker != "lexical" and normalised is not None:
        rows, scores = hybrid_pool_order("search", scope_keys, normalised, now_ms(), reference_time(session))
        scored = [(round(float(score) * SEARCH_SCORE_SCALE), row) for row, score in zip(rows, scores, strict=True)]
        if limit is not None and len(scored) > limit:
            scored = heapq.nsmallest(
                limit, scored, key=lambda hit: (-hit[0], -hit[1][5], public_ids.format_id(LEARNING_PREFIX, hit[1][0]))
            )
        return [_hit(row, score, ["content"]) for score, row in scored]
    if normalised is not None and not lexical_ranking.query_terms(normalised):
        return []  # a query of stop-words only scores nothing
    rows = _search_rows(scope_keys, normalised)
    if normalised is None:
        return [_hit(row, 0, []) for row in rows]
    columns = list(zip(*rows, strict=True)) or [()] * len(_SEARCH_FIELDS)
    ranks = (
        lexical_ranking.search_ranks(normalised, contents=columns[2], kinds=columns[1], scope_kinds=columns[3]) or {}
    )
    return [_hit(rows[position], score, matched) for position, (score, matched) in ranks.items()]


def _hit(row: tuple, score: int, matched: list[str]) -> dict:
    pk, kind, content, scope_kind, scope_key, published, status, tier, verification, decision, sensitivity = row
    return {
        "kind": "learning",
        "source_id": public_ids.format_id(LEARNING_PREFIX, pk),
        "title": f"{KIND_TITLES.get(kind, kind)} learning",
        "excerpt": _excerpt(content),
        "score": score,
        "timestamp_ms": published,
        "scope": scope_key,
        "prompt_eligible": _prompt_eligible(kind, status, tier, verification, decision, sensitivity),
        "learning_status": status,
        "publish_tier": tier,
        "verification_status": verification,
        "matched_fields": matched,
    }
