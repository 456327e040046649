"""The hybrid ranker's candidate pool for learnings, as hand-written SQL over the recall indexes.

A query never reads every visible learning: the pool is the union of
* the lexical candidates: ``search_tsv @@ to_tsquery('english', 'w1 | w2 …')`` through the GIN index on the
  generated full-text column, best ``ts_rank`` first, ``POOL`` at most;
* the semantic candidates: ``embedding_vec <=> :query``, nearest first, ``POOL`` at most - exactly over the
  visible rows when the scopes hold at most ``EXACT_LIMIT`` live learnings, else through the HNSW index
  (pgvector, iterative scan); on a server without pgvector, the ``POOL`` newest visible learnings
  instead, with the stored embeddings (cached per learning);
each row with its vector (read in binary with the rows on the pgvector path), from which the cosines and the
ranker's pseudo-relevance feedback are computed here; and the ranker (``memory.ranking``) orders that pool.
Both arms apply the gates ``learnings.gate`` renders, as the ORM's ``Learning.objects.for_prompt`` (prompt
shape) and ``search_visible`` (search shape) do; ``tests/learnings/test_hybrid_retrieval.py``,
``test_scoped_sql.py`` and ``test_gate.py`` check that equivalence on PostgreSQL.

The generated columns are created by migration ``learnings/0002`` and are not model fields."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
from django.db import connection
from psycopg import pq
from psycopg.abc import Buffer
from psycopg.adapt import Loader

from learnings import gate
from memory import ranking
from memory import sql as memory_sql
from memory.embedding import DIMENSIONS
from memory.lru import BoundedLRU

POOL = 120
"""Candidates per arm. The fused ranking reorders the pool; 2 × 120 covers budgets of a few thousand tokens."""
SEARCH_POOL = 60
"""Candidates per arm for memory-search: a page holds at most 50 hits (and one more says it was truncated), and
reranking 2 × 60 candidates, not 2 × 120, halves the nearest-neighbour arm's index reads, the costliest part of a
search. One size for every page, so that a page of ten is the head of a page of fifty, score for score."""
SIZES = {"prompt": POOL, "search": SEARCH_POOL}
EXACT_LIMIT = 2000
"""Scopes with at most this many live learnings get the exact nearest neighbours as their semantic arm (every
visible row's distance, read through the scope index: ~1 ms per thousand rows here); larger ones ask the HNSW
index, which is approximate and, under selective gates, reads many rows to find few. The statement counts (at
most ``EXACT_LIMIT + 1`` index entries) and picks; the result never depends on the plan the server chose."""
LARGE_SCOPE_SECONDS = 60.0
"""A set of scopes counted above ``EXACT_LIMIT`` is taken as large, without counting, for this long: the count
is the one part of a pool that does not depend on the query. Scopes rarely shrink by thousands of rows; if
they do, the index arm answers (approximately) until the next count, a minute later at most."""
# HNSW iterative scans are a connection option (kheish/settings.py, with hnsw.ef_search 120 as the default).
EF_SEARCH = {"prompt": 120, "search": 60}
"""The HNSW candidate list of each shape's nearest-neighbour arm, at least its pool size: set by the statement
itself (``set_config(..., true)``: this statement's transaction only) before the index is read, since its
one-time filter waits for ``scope_size``. Memory-search's 60 reads ~45% fewer index pages than 120 (10,000
learnings: 1,900 -> 1,100 buffers, the arm 2.4 -> 1.7 ms), and its top 10 held an evidence turn for the same
LongMemEval questions at 10,000 and 100,000 learnings (82 questions; docs/recall.md)."""

_large_lock = threading.Lock()
_large: dict[tuple, float] = {}


def _large_key(scope_keys: Sequence[str]) -> tuple:
    return (connection.settings_dict.get("NAME"), EXACT_LIMIT, *sorted(scope_keys))


def scope_seen_large(scope_keys: Sequence[str]) -> bool:
    """Whether these scopes were counted above ``EXACT_LIMIT`` live rows in the last ``LARGE_SCOPE_SECONDS``."""
    seen = _large.get(_large_key(scope_keys))
    return seen is not None and time.monotonic() - seen < LARGE_SCOPE_SECONDS


def _seen_large(scope_keys: Sequence[str]) -> None:
    with _large_lock:
        if len(_large) >= 10_000:  # bounded: a process serving many scope sets forgets them all at once
            _large.clear()
        _large[_large_key(scope_keys)] = time.monotonic()


GATES = {"prompt": gate.shape_sql("prompt"), "search": gate.shape_sql("search")}
"""Each shape's WHERE clause over ``learnings_learning l``, rendered by ``learnings.gate`` (the one definition of
the prompt and search gates), with ``%(keys)s`` and ``%(at)s``."""

PROMPT_COLUMNS = ("id", "kind", "content", "scope_kind", "scope_id", "published_at_ms")
SEARCH_COLUMNS = (
    "id",
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
COLUMNS = {"prompt": PROMPT_COLUMNS, "search": SEARCH_COLUMNS}

_SCOPE_PRIORITY = "CASE l.scope_kind WHEN 'session' THEN 0 WHEN 'persona' THEN 1 WHEN 'project' THEN 2 ELSE 3 END"


class Pool(NamedTuple):
    rows: list[tuple]  # the shape's columns
    cosines: np.ndarray | None  # one per row, None when no query embedding was given
    embeddings: np.ndarray | None = None  # the rows' vectors (one row each), when a query embedding was given


_state = threading.local()


def has_vectors() -> bool:
    """Whether this database has the pgvector column (migration ``learnings/0002`` made it where it could)."""
    cached = getattr(_state, "has_vectors", None)
    key = connection.settings_dict.get("NAME")
    if cached is None or cached[0] != key:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT 1 FROM information_schema.columns WHERE table_name = 'learnings_learning' "
                "AND column_name = 'embedding_vec'"
            )
            cached = (key, cursor.fetchone() is not None)
        _state.has_vectors = cached
    return cached[1]


COMMON_TERM_FREQUENCY = 0.02
"""A term in more than this share of live learnings (PostgreSQL's own statistics of ``search_tsv``) is left
out of the lexical arm's query: it would match thousands of rows and tells little (the ranker still scores it
with BM25 over the pool)."""
LARGE_SCOPE_TERM_ROWS = 100
"""In a large scope (more than ``EXACT_LIMIT`` live learnings) a term the statistics expect in more than this
many rows of the table is left out as well: the arm reads every row its terms match (up to
``LEXICAL_SCAN_LIMIT``) and ranks them, so without a bound in rows its cost grew with the table, and the
thousand rows it ranked were the first it met, not the best. 100,000 learnings in one scope, 82 LongMemEval
questions whose evidence is among them: the lexical arm 7.4 -> 0.8 ms p50, the search top 10 holding an
evidence turn for 49 questions (48 before), the prompt pool's for 47 (47); a scope of at most ``EXACT_LIMIT``
is never affected (docs/recall.md)."""
LEXICAL_SCAN_LIMIT = 1000
"""At most this many matching rows are ranked by the lexical arm (a bound, whatever the terms)."""
LEXICAL_RANK = "ts_rank"
"""How the lexical arm orders its matches. ``ts_rank`` (term frequencies), not ``ts_rank_cd`` (cover density):
the pool only has to hold the right candidates, which BM25 and the cosines then order, and cover density costs
~3x as much over a long input's many terms (10,000 learnings, 66 inputs: 8.1 -> 2.5 ms p50 for the arm; 100,000:
33 -> 16 ms), with the memory-search top 10 the same for 99.4% of hits and the LongMemEval dev figures within one
question of each other either way (docs/recall.md)."""
STATS_SECONDS = 300.0


class CommonTerms(NamedTuple):
    """The lexemes the lexical arm leaves out: ``small`` for any scope (more than ``COMMON_TERM_FREQUENCY`` of
    the rows), ``large`` for a scope above ``EXACT_LIMIT`` (also those expected in more than
    ``LARGE_SCOPE_TERM_ROWS`` rows)."""

    small: frozenset[str] = frozenset()
    large: frozenset[str] = frozenset()


_stats_lock = threading.Lock()
_common: dict[str, tuple[float, CommonTerms]] = {}


def common_terms() -> CommonTerms:
    """The lexemes PostgreSQL's ``ANALYZE`` found frequent (``pg_stats.most_common_elems``, with the table's
    estimated row count), read at most every ``STATS_SECONDS`` per database."""
    key = str(connection.settings_dict.get("NAME"))
    now = time.monotonic()
    with _stats_lock:
        cached = _common.get(key)
        if cached is not None and now - cached[0] < STATS_SECONDS:
            return cached[1]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT s.most_common_elems::text::text[], s.most_common_elem_freqs, c.reltuples FROM pg_stats s "
            "JOIN pg_class c ON c.relname = s.tablename AND c.relnamespace = to_regnamespace(s.schemaname) "
            "WHERE s.tablename = 'learnings_learning' AND s.attname = 'search_tsv' "
            "AND s.schemaname = current_schema()"
        )
        row = cursor.fetchone()
    terms = CommonTerms()
    if row is not None and row[0] is not None:
        frequencies = list(zip(row[0], row[1] or [], strict=False))
        rows = max(float(row[2] or 0), 1.0)
        large_cut = min(COMMON_TERM_FREQUENCY, LARGE_SCOPE_TERM_ROWS / rows)
        terms = CommonTerms(
            small=frozenset(t for t, f in frequencies if f > COMMON_TERM_FREQUENCY),
            large=frozenset(t for t, f in frequencies if f > large_cut),
        )
    with _stats_lock:
        _common[key] = (now, terms)
    return terms


def _alnum(word: str) -> str:
    return "".join(ch for ch in word if ch.isalnum())


def tsquery_text(words: Sequence[str], common: frozenset[str] = frozenset()) -> str:
    """``to_tsquery`` input (alphanumeric words only, so nothing is read as an operator): the words whose stem
    is not common OR-ed; when every word is common, all of them AND-ed (a selective query either way)."""
    clean = list(dict.fromkeys(word for word in map(_alnum, words) if word))
    if not clean:
        return ""
    stems = ranking.stem_words([word.lower() for word in clean])
    rare = [word for word, stem in zip(clean, stems, strict=True) if stem not in common]
    return " | ".join(rare) if rare else " & ".join(clean)


def vector_literal(vector: np.ndarray) -> str:
    return "[" + ",".join(map("{:.6f}".format, vector.tolist())) + "]"  # Python floats format faster


def _select(shape: str, extra: str = "") -> str:
    return ", ".join(f"l.{column}" for column in COLUMNS[shape]) + extra


def pool_statement(
    shape: str,
    *,
    scope_keys: list[str],
    at_ms: int,
    words: Sequence[str],
    query_vector: np.ndarray | None,
    size: int | None = None,
) -> tuple[str, dict, bool]:
    """The pool's SQL and parameters, and whether it reads the rows' vectors (pgvector present and a vector
    given). Each arm returns its rows whole (the shape's columns, then the vector where read, then the scope
    count where counted), and the arms are concatenated (``UNION ALL``): a row two arms found comes back twice,
    and :func:`pool` keeps it once - cheaper than the server joining the arms' ids back to their rows, the
    rows having been read already to apply the gates."""
    gates = GATES[shape]
    # Values are parameters and the text depends only on the shape, the arms and the sizes, so the statement
    # is prepared once per connection (memory.sql.prepared_cursor). The sizes are written into the text: they
    # are this module's constants, and with them a generic plan knows the pool is small.
    params: dict = {"keys": list(scope_keys), "at": at_ms}
    k = int(size if size is not None else SIZES[shape])
    vectors = query_vector is not None and has_vectors()
    extra = ", l.embedding_vec" if vectors else ""
    columns = _select(shape, extra)
    names = [*COLUMNS[shape], *(["embedding_vec"] if vectors else [])]
    arms = []
    ctes = []
    common = common_terms() if words else CommonTerms()
    text = tsquery_text(words, common.small) if words else ""
    if text:
        params["tsq"] = text
        # In a large scope (the statement's own count below, ``scope_size``) the query without the terms
        # common in rows (``LARGE_SCOPE_TERM_ROWS``): the same for every call on that scope, whichever counted.
        # The query is parsed once, in its own CTE (an initplan): written inline, a prepared statement's generic
        # plan parsed it again for every row it ranked (~20 µs a row for a long input).
        chosen = "%(tsq)s"
        if vectors:
            params["tsq_large"] = tsquery_text(words, common.large)
            chosen = f"CASE WHEN (SELECT n FROM scope_size) > {int(EXACT_LIMIT)} THEN %(tsq_large)s ELSE %(tsq)s END"
        ctes.append(f"lexical_query AS (SELECT to_tsquery('english', {chosen}) AS q)")
        query = "(SELECT q FROM lexical_query)"
        arms.append(
            f"(SELECT {', '.join(f'm.{name}' for name in names)} FROM (SELECT {columns}, l.search_tsv "
            f"FROM learnings_learning l WHERE {gates} AND l.search_tsv @@ {query} "
            f"LIMIT {int(LEXICAL_SCAN_LIMIT)}) m "
            f"ORDER BY {LEXICAL_RANK}(m.search_tsv, {query}) DESC, m.id DESC LIMIT {k})"
        )
    if vectors:
        assert query_vector is not None
        params["vec"] = vector_literal(query_vector)
        exact = int(EXACT_LIMIT)
        # Which semantic arm answers is decided by the statement from a bounded count of the scopes' live rows
        # (the partial scope index, nothing else read), never by the planner: a cached generic plan and a fresh
        # custom one give the same pool. Each arm sits under a one-time filter, so only one of them runs.
        # A scope seen large lately (``LARGE_SCOPE_SECONDS``) is not counted again: ``%(large)s`` stands for
        # the count, and the CASE never runs the other branch.
        params["large"] = scope_seen_large(scope_keys)
        # ``set_config`` first: every arm below reads ``scope_size`` (the HNSW arm in its one-time filter, before
        # its first index tuple), so the candidate list is this shape's whatever ran before on the connection.
        ctes.insert(
            0,
            f"scope_size AS (SELECT CASE WHEN set_config('hnsw.ef_search', '{int(EF_SEARCH[shape])}', true) IS NULL "
            f"THEN NULL WHEN %(large)s THEN {exact + 1} ELSE (SELECT count(*) FROM "
            "(SELECT 1 FROM learnings_learning c WHERE c.scope_key = ANY(%(keys)s) "
            f"AND c.status IN ('active', 'provisional') LIMIT {exact + 1}) c) END AS n)",
        )
        # A small scope: every visible row's distance, exactly (the inner order is the scope index's, so the
        # rows come from that index whatever the plan estimates; the count bounds them by ``EXACT_LIMIT``).
        arms.append(
            f"(SELECT {', '.join(f'e.{name}' for name in names)} FROM (SELECT {columns}, "
            "l.embedding_vec <=> %(vec)s::vector AS d FROM learnings_learning l "
            f"WHERE (SELECT n FROM scope_size) <= {exact} AND {gates} AND l.embedding_vec IS NOT NULL "
            f"ORDER BY l.scope_key, l.published_at_ms DESC LIMIT {exact}) e ORDER BY e.d, e.id LIMIT {k})"
        )
        # A large one: the HNSW index (approximate; iterative scan until the gates are met).
        arms.append(
            f"(SELECT {columns} FROM learnings_learning l WHERE (SELECT n FROM scope_size) > {exact} AND {gates} "
            f"AND l.embedding_vec IS NOT NULL ORDER BY l.embedding_vec <=> %(vec)s::vector LIMIT {k})"
        )
    else:
        arms.append(
            f"(SELECT {columns} FROM learnings_learning l WHERE {gates} "
            f"ORDER BY {_SCOPE_PRIORITY}, l.published_at_ms DESC, l.id LIMIT {k})"
        )
    # The rows' vectors come back with them (binary, see ``pool``): cosines and the feedback centroid are then
    # computed here, in one statement, rather than by the server and a second statement over the pool.
    count = ", (SELECT n FROM scope_size)" if vectors else ""
    head = f"WITH {', '.join(ctes)} " if ctes else ""
    sql = f"{head}SELECT pool.*{count} FROM ({' UNION ALL '.join(arms)}) pool"
    return sql, params, vectors


def pool(
    shape: str,
    *,
    scope_keys: list[str],
    at_ms: int,
    words: Sequence[str],
    query_vector: np.ndarray | None,
    size: int | None = None,
) -> Pool:
    """The candidates of a query (lexical ∪ semantic-or-recent, ``size`` per arm: the shape's ``SIZES`` by
    default), each once and in id order, with their cosines."""
    sql, params, vectors = pool_statement(
        shape, scope_keys=scope_keys, at_ms=at_ms, words=words, query_vector=query_vector, size=size
    )
    with memory_sql.prepared_cursor() as cursor:
        if vectors:
            binary_results(cursor)
        cursor.execute(sql, params)
        found = cursor.fetchall()
    once: dict[int, tuple] = {}
    for row in found:  # a row two arms found, once
        once.setdefault(row[0], row)
    fetched = [once[pk] for pk in sorted(once)]
    if query_vector is None:
        return Pool(fetched, None)
    if vectors:
        if found and found[0][-1] > EXACT_LIMIT and not params["large"]:
            _seen_large(scope_keys)
        embeddings = vectors_of([row[-2] for row in fetched])
        return Pool([row[:-2] for row in fetched], embeddings @ query_vector, embeddings)
    embeddings = stored_embeddings([row[0] for row in fetched])
    return Pool(fetched, embeddings @ query_vector if len(fetched) else np.zeros(0), embeddings)


class _VectorBinaryLoader(Loader):
    """pgvector's binary ``vector`` as it comes (int16 dimensions, int16 unused, then big-endian float4s): the
    rows' vectors are decoded together, by :func:`vectors_of`."""

    format = pq.Format.BINARY

    def load(self, data: Buffer) -> bytes:
        return bytes(data)


_VECTOR_BYTES = 4 + 4 * DIMENSIONS
_ZERO_VECTOR = bytes(_VECTOR_BYTES)  # a header slot and zeros: a row without a vector


def vectors_of(values: Sequence[bytes | None]) -> np.ndarray:
    """Binary ``vector`` values (``_VectorBinaryLoader``; None where a row has none: zeros) as one float64 matrix,
    a row each, decoded in one pass: the 4-byte header is one float4 slot, dropped."""
    if not values:
        return np.zeros((0, DIMENSIONS), dtype=np.float64)
    raw = b"".join(_ZERO_VECTOR if value is None else value for value in values)
    return np.frombuffer(raw, dtype=">f4").reshape(len(values), DIMENSIONS + 1)[:, 1:].astype(np.float64)


def binary_results(cursor: Any) -> None:
    """Make a Django cursor return its next results in PostgreSQL's binary format, with ``vector`` columns as
    their binary values (:func:`vectors_of` decodes them): a pool's 240 vectors arrive as 1 KB each, not as 3 KB
    of decimal text to parse."""
    raw = cursor.cursor
    oid = _vector_oid()
    raw.adapters.register_loader(oid, _VectorBinaryLoader)
    raw.format = pq.Format.BINARY


def _vector_oid() -> int:
    key = connection.settings_dict.get("NAME")
    cached = getattr(_state, "vector_oid", None)
    if cached is None or cached[0] != key:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 'vector'::regtype::oid")
            cached = (key, int(cursor.fetchone()[0]))
        _state.vector_oid = cached
    return cached[1]


def recent(shape: str, *, scope_keys: list[str], at_ms: int, limit: int) -> list[tuple]:
    """The visible learnings in the spec's visibility order (scope priority, newest first), ``limit`` at most:
    what an input with no query (or an explicit memory request with no match) gets."""
    sql = (
        f"SELECT {_select(shape)} FROM learnings_learning l WHERE {GATES[shape]} "
        f"ORDER BY {_SCOPE_PRIORITY}, l.published_at_ms DESC, l.id LIMIT {int(limit)}"
    )
    with memory_sql.prepared_cursor() as cursor:
        cursor.execute(sql, {"keys": list(scope_keys), "at": at_ms})
        return cursor.fetchall()


_EMBEDDINGS: BoundedLRU[int, np.ndarray] = BoundedLRU(20_000)
"""Stored embeddings by learning id (a learning's content never changes: a new text is a new learning): the
fallback path (no pgvector) reads each learning's vector once per process."""
_ZERO = np.zeros(DIMENSIONS, dtype=np.float64)


def stored_embeddings(ids: Sequence[int]) -> np.ndarray:
    """The stored embeddings of these learnings, one row each (zeros where none is stored yet)."""
    found = _EMBEDDINGS.get_many(ids)
    missing = [pk for pk in ids if pk not in found]
    if missing:
        with connection.cursor() as cursor:
            cursor.execute("SELECT id, embedding FROM learnings_learning WHERE id = ANY(%s)", [missing])
            loaded = {pk: np.asarray(vector, dtype=np.float64) for pk, vector in cursor.fetchall() if vector}
        _EMBEDDINGS.put_many(loaded)
        found.update(loaded)
    return np.array([found.get(pk, _ZERO) for pk in ids], dtype=np.float64).reshape(len(ids), DIMENSIONS)
