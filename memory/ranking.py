"""The hybrid ranker shared by every recall path (learned_context, recovered_memory, memory-search).

Pure functions, no database: callers hand in the candidates (texts, embeddings, priors) and get an order.

* **Lexical**: Okapi BM25 (k1 1.2, b 0.75) over Snowball-stemmed English terms without stop-words, so
  "sneakers" finds "sneaker" and a rare name outweighs a common verb. Document frequencies are counted over
  the candidates handed in (the visible set, or the pool an index lookup returned for this query).
* **Semantic**: cosine similarity of L2-normalised sentence embeddings (``memory.embedding``).
* **Fusion**: each signal min-max normalised over the candidates, weighted (lexical 0.3, semantic 0.7:
  measured on the recall benchmark, ``benchmarks/recall.py``), plus small priors the caller supplies (scope
  and recency, as the spec's orders use them) that only break near-ties.
* **Relevance floor**: a candidate with no query term and a low cosine is not relevant; it is dropped, so an
  input about nothing remembered gets no memory rather than a budget full of noise.

The spec's lexical rankers (§4.5, §4.7) stay where they are (``memory.recall``, ``learnings.lexical_ranking``) and
remain selectable through the learning policy's ``retrieval.ranker``."""

from __future__ import annotations

import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import NamedTuple

import numpy as np
import Stemmer

from memory import embedding
from memory.lru import BoundedLRU

K1 = 1.2
B = 0.75
LEXICAL_WEIGHT = 0.3
SEMANTIC_WEIGHT = 1.0 - LEXICAL_WEIGHT
MIN_COSINE = 0.2
"""Below this cosine, a candidate that shares no stemmed term with the query is not relevant."""
SEARCH_SCORE_SCALE = 1000
"""memory-search scores of hybrid hits (learnings, recovered runs): the fused score × 1000, rounded (the API's
scores are integers)."""
FEEDBACK_DOCS = 3
FEEDBACK_WEIGHT = 0.6
"""Pseudo-relevance feedback: the query moves towards the mean of the 3 best candidates, weight 0.6."""

_STOP_WORDS_TEXT = """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have having
    he her here hers herself him himself his how i if in into is it its itself just me more most my myself no
    nor not now of off on once only or other our ours ourselves out over own same she should so some such than
    that the their theirs them themselves then there these they this those through to too under until up very
    was we were what when where which while who whom why will with would you your yours yourself yourselves
    de des du et la le les un une est avec pour ou"""
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_local = threading.local()


def _stemmer() -> Stemmer.Stemmer:
    """PyStemmer objects are not thread-safe: one per thread."""
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = Stemmer.Stemmer("english")
    return stemmer


def stem_words(words: list[str]) -> list[str]:
    """Snowball English stems of lowercased words (PostgreSQL's ``english`` configuration stems the same way)."""
    return _stemmer().stemWords(words) if words else []


def terms(text: str) -> list[str]:
    """The stemmed, lowercased words of ``text`` without stop-words, in order (repeats kept)."""
    words = [word for word in _WORD.findall(text.lower()) if word not in STOP_WORDS]
    return _stemmer().stemWords(words) if words else []


class Profile(NamedTuple):
    """A text's term frequencies and length in terms: what BM25 reads of a document."""

    frequencies: dict[str, int]
    length: int


@lru_cache(maxsize=65536)
def profile(text: str) -> Profile:
    """Cached by text: the same learnings are ranked for every run of every session in their scopes."""
    found = terms(text)
    return Profile(dict(Counter(found)), len(found))


def query_terms(text: str | None) -> tuple[str, ...]:
    """The distinct stemmed terms of a query, in first-seen order."""
    return tuple(dict.fromkeys(terms(text or "")))


def bm25(query: Sequence[str], profiles: Sequence[Profile]) -> np.ndarray:
    """Okapi BM25 of every profile for these query terms, document frequencies over ``profiles``."""
    count = len(profiles)
    scores = np.zeros(count, dtype=np.float64)
    if not count or not query:
        return scores
    average = max(1.0, sum(p.length for p in profiles) / count)
    for term in query:
        hits = [(index, p.frequencies[term], p.length) for index, p in enumerate(profiles) if term in p.frequencies]
        if not hits:
            continue
        idf = math.log(1.0 + (count - len(hits) + 0.5) / (len(hits) + 0.5))
        for index, frequency, length in hits:
            scores[index] += idf * frequency * (K1 + 1) / (frequency + K1 * (1 - B + B * length / average))
    return scores


def _unit(values: np.ndarray) -> np.ndarray:
    """Min-max normalised to [0, 1] (all zeros when every value is the same)."""
    if not len(values):
        return values
    low, high = float(values.min()), float(values.max())
    return (values - low) / (high - low) if high > low else np.zeros_like(values)


class Ranked(NamedTuple):
    order: list[int]  # candidate positions, best first, relevant ones only
    scores: np.ndarray  # fused score of every candidate (position-indexed)


Feedback = Callable[[list[int]], np.ndarray]
"""Given the positions of the best candidates, the candidates' cosine similarity to the fed-back query."""


def _vector_feedback(embeddings: np.ndarray, query_embedding: np.ndarray) -> Feedback:
    def fed_back(top: list[int]) -> np.ndarray:
        expanded = query_embedding + FEEDBACK_WEIGHT * embeddings[top].mean(axis=0)
        norm = np.linalg.norm(expanded)
        return embeddings @ (expanded / norm) if norm > 0 else embeddings @ query_embedding

    return fed_back


def rank(
    query: str | None,
    texts: Sequence[str],
    embeddings: np.ndarray | None,
    query_embedding: np.ndarray | None,
    *,
    priors: Sequence[float] | None = None,
    cosines: np.ndarray | None = None,
    feedback: Feedback | None = None,
    also_relevant: np.ndarray | None = None,
) -> Ranked:
    """Fuse BM25 and cosine similarity over the candidates and order them, dropping irrelevant ones.

    ``cosines`` may be given directly (computed by the database); otherwise they are ``embeddings @
    query_embedding``. ``priors`` (small, e.g. ≤ 0.05) are added to the fused score; equal scores keep the
    candidates' given order. Pseudo-relevance feedback (Rocchio): the query is moved towards the
    ``FEEDBACK_DOCS`` best candidates of a first ranking and the candidates are ranked again with their
    similarity to that query (``feedback``, or computed from ``embeddings``): what the best matches talk about
    finds the other places the same thing was said. ``also_relevant`` marks candidates kept whatever their
    scores (the turns of a speaker the question names)."""
    count = len(texts)
    if count == 0:
        return Ranked([], np.zeros(0))
    lexical = bm25(query_terms(query), [profile(text) for text in texts])
    if cosines is None and embeddings is not None and query_embedding is not None:
        cosines = embeddings @ query_embedding
    semantic = np.zeros(count) if cosines is None else np.asarray(cosines, dtype=np.float64)
    prior = np.zeros(count) if priors is None else np.asarray(priors, dtype=np.float64)
    lexical_part = LEXICAL_WEIGHT * _unit(lexical)
    fused = lexical_part + SEMANTIC_WEIGHT * _unit(semantic) + prior
    relevant = (lexical > 0) | (semantic >= MIN_COSINE)
    if also_relevant is not None:
        relevant = relevant | np.asarray(also_relevant, dtype=bool)
    if feedback is None and embeddings is not None and query_embedding is not None:
        feedback = _vector_feedback(embeddings, query_embedding)
    if feedback is not None and cosines is not None and count > FEEDBACK_DOCS:
        top = [int(i) for i in np.argsort(-fused, kind="stable") if relevant[i]][:FEEDBACK_DOCS]
        if top:
            semantic = np.asarray(feedback(top), dtype=np.float64)
            fused = lexical_part + SEMANTIC_WEIGHT * _unit(semantic) + prior
    order = [int(index) for index in np.argsort(-fused, kind="stable") if relevant[index]]
    return Ranked(order, fused)


class _VectorCache:
    """Embeddings of texts ranked in memory (run-memory entries without a stored vector), by text, bounded."""

    def __init__(self, size: int) -> None:
        self._vectors: BoundedLRU[str, np.ndarray] = BoundedLRU(size)

    def many(self, texts: Sequence[str]) -> np.ndarray:
        found = self._vectors.get_many(texts)
        missing = [text for text in dict.fromkeys(texts) if text not in found]
        if missing:
            fresh = dict(zip(missing, embedding.embed_many(missing), strict=True))
            found.update(fresh)
            self._vectors.put_many(fresh)
        return np.array([found[text] for text in texts], dtype=np.float64)


_VECTORS = _VectorCache(8192)


def rank_texts(query: str, texts: Sequence[str], *, priors: Sequence[float] | None = None) -> Ranked:
    """:func:`rank` for candidates that carry no stored embedding: theirs are computed (and kept, bounded)."""
    if not texts:
        return Ranked([], np.zeros(0))
    vectors = _VECTORS.many(list(texts))
    query_vector = embedding.embed_query(query)
    return rank(query, texts, vectors, query_vector, priors=priors)
