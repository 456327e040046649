"""Standing memory: the preferences and decisions of a session's scopes, which govern every input they apply to
whatever its words ("Preference: always report sizes in gigabytes" answers "How big is /var/log?" and
"hello" as much as "How big is the disk?").

The query-ranked selection (``learnings.retrieval``) keeps a relevance floor so an input about nothing
remembered gets no noise; a standing preference often shares no word and little meaning with the input it
governs, and that floor would drop it. So ``learned_context`` is composed of two separate steps:

1. **standing** (this module): a small budget inside the section (the learning policy's
   ``retrieval.standing_tokens``, never more than half the section's budget) holds the session's
   prompt-visible preferences and decisions, ordered
   * first those *relevant* to the input, best first: every one sharing a stemmed term with it, and the
     ``SEMANTIC_ENTRIES`` nearest of those with a cosine of at least ``STANDING_FLOOR``;
   * then the others by scope specificity (session > persona > project > workspace), then recency; at most
     ``AMBIENT_ENTRIES`` of those, so an unrelated input ("hello") still gets the most specific, newest
     preference of its session, and is never handed a budget full of unrelated preferences;
   packed while they fit the standing budget. The floor of the query-ranked step does not apply here.
2. **query-ranked** (``retrieval``): facts, and whatever preferences and decisions did not take a standing
   place, ranked on the input as before, in the rest of the budget.

Reads are bounded: one indexed statement returns at most ``STANDING_POOL`` rows (the most specific and
newest standing learnings), with the prompt gates of ``recall_sql`` (the same SQL the pool uses), and their
stored embeddings (cached per learning). The lexical ranker (spec §4.7 exactly) has no standing step."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from learnings import recall_sql
from memory import embedding, ranking
from memory import sql as memory_sql
from memory.sections import TOKENS_PER_BYTE

STANDING_KINDS = ("preference", "decision")
STANDING_POOL = 200
"""At most this many standing learnings (most specific scope first, newest first) are considered per input."""
STANDING_FLOOR = 0.12
"""A standing learning whose cosine to the input reaches this is relevant (among the ``SEMANTIC_ENTRIES``
nearest); one that shares a stemmed term with the input always is. Chosen on ``benchmarks/loop.py``'s standing
set (static embeddings are noisy: unrelated inputs reach 0.1 against a few of 30 preferences)."""
SEMANTIC_ENTRIES = 3
"""At most this many standing learnings are relevant by cosine alone."""
AMBIENT_ENTRIES = 1
"""At most this many standing learnings that are not relevant to the input enter (scope, then recency order)."""
MAX_SHARE = 0.5
"""The standing budget never takes more than half of the section's budget."""

_SCOPE_ORDER = recall_sql._SCOPE_PRIORITY  # the same scope order the pool's recent arm uses


class Standing(NamedTuple):
    rows: list[tuple]  # recall_sql.PROMPT_COLUMNS, in standing order
    relevant: list[bool]  # per row: relevant to the input (else ambient)


def budget_for(standing_tokens: int, section_tokens: int) -> int:
    """The standing budget of a section of ``section_tokens``: the policy's share, at most half the section."""
    return max(0, min(standing_tokens, int(section_tokens * MAX_SHARE)))


def standing_rows(scope_keys: list[str], at_ms: int, limit: int = STANDING_POOL) -> list[tuple]:
    """The prompt-visible preferences and decisions of these scopes, most specific scope first, newest first."""
    # Built from recall_sql's constants only; every value is a parameter.
    columns = ", ".join("l." + column for column in recall_sql.PROMPT_COLUMNS)
    sql = (
        f"SELECT {columns} FROM learnings_learning l "  # noqa: S608
        f"WHERE {recall_sql.GATES['prompt']} AND l.kind IN ('preference', 'decision') "
        f"ORDER BY {_SCOPE_ORDER}, l.published_at_ms DESC, l.id LIMIT %(k)s"
    )
    with memory_sql.prepared_cursor() as cursor:  # planned once per connection, as the pool is
        cursor.execute(sql, {"keys": list(scope_keys), "at": at_ms, "k": limit})
        return cursor.fetchall()


def relevance(query: str | None, rows: Sequence[tuple]) -> tuple[np.ndarray, np.ndarray]:
    """Per row: its cosine to the input (plus 1 when they share a stemmed term) and whether it is relevant."""
    count = len(rows)
    if not count or not query or not query.strip():
        return np.zeros(count), np.zeros(count, dtype=bool)
    query_vector = embedding.embed_query(query)
    cosines = recall_sql.stored_embeddings([row[0] for row in rows]) @ query_vector
    terms = set(ranking.query_terms(query))
    shared = np.array([bool(terms & ranking.profile(row[2]).frequencies.keys()) for row in rows], dtype=bool)
    scores = cosines + shared.astype(np.float64)
    near = [int(i) for i in np.argsort(-cosines, kind="stable") if not shared[i] and cosines[i] >= STANDING_FLOOR]
    relevant = shared.copy()
    relevant[near[:SEMANTIC_ENTRIES]] = True
    return scores, relevant


def select(
    rows: Sequence[tuple], query: str | None, budget_tokens: int, sizes: Sequence[int], max_entries: int
) -> Standing:
    """Order ``rows`` (in scope-then-recency order, as :func:`standing_rows` returns them) for this input and
    keep those that fit ``budget_tokens``; ``sizes`` are the rows' rendered block sizes in bytes."""
    if budget_tokens <= 0 or not rows or max_entries <= 0:
        return Standing([], [])
    scores, relevant = relevance(query, rows)
    relevant_order = sorted((i for i in range(len(rows)) if relevant[i]), key=lambda i: -scores[i])
    ambient_order = [i for i in range(len(rows)) if not relevant[i]][:AMBIENT_ENTRIES]
    budget_bytes = budget_tokens / TOKENS_PER_BYTE
    used = 0.0
    chosen: list[int] = []
    for index in relevant_order + ambient_order:
        cost = sizes[index] + 2  # the block and its separator
        if used + cost > budget_bytes:
            continue  # a long one does not keep shorter ones out
        used += cost
        chosen.append(index)
        if len(chosen) >= max_entries:
            break
    return Standing([rows[i] for i in chosen], [bool(relevant[i]) for i in chosen])
