"""Reading learnings for a session: the ``learned_context`` bundle (spec §4.7) and memory-search hits
(§4.21). One indexed query by ``scope_key`` and status, then scoring in Python (``learnings.semantic``).

Both run, for every new run or search, over every learning a session sees (its projects' and the whole
workspace's: a thousand or more). So rows are read as plain tuples (``scoped_rows``) rather than through the
ORM, what no query changes is prepared once per learning, and scoring works column-wise in C."""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from learnings import semantic
from learnings.models import LEARNING_PREFIX, Learning, LearningKind, Sensitivity
from memory.clock import now_ms
from memory.recall import LEARNED_CONTEXT_FORMAT, Block

EXCERPT_CHARS = 180
BROWSE_LIMIT = 200
KIND_TITLES = {value: label for value, label in LearningKind.choices}


class LearnedRecord(NamedTuple):
    """A learning as ``learned_context`` shows it, with its rendered prompt block (``memory.recall``): the
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
def _prepared(row: tuple) -> tuple[LearnedRecord, tuple[int, int, str], semantic.Profile]:
    """What no query changes about a row of ``_PROMPT_FIELDS``: the record (block rendered), its visibility
    order key and its scoring profile. A session sees every learning of its projects and of the whole
    workspace (a thousand or more) on every new run, the same rows again and again; keyed by the whole row,
    a changed row is a new entry, never a stale one."""
    pk, kind, content, scope_kind, scope_id, published_at_ms = row
    learning_id = f"{LEARNING_PREFIX}-{pk}"
    block = LEARNED_CONTEXT_FORMAT.block({"learning_id": learning_id, "kind": kind, "content": content})
    record = LearnedRecord(learning_id, kind, content, published_at_ms, scope_kind, scope_id, block)
    visibility = semantic.visibility_key(scope_kind, published_at_ms, learning_id)
    return record, visibility, semantic.content_terms(content)


def learned_records(
    *, session: object, scope_keys: list[str], query: str | None, usage: str = "prompt"
) -> tuple[list[LearnedRecord], bool]:
    """The learnings that may enter ``learned_context`` for this input, best first (§4.7).

    Visibility (scopes, live, unexpired, unshadowed) and every prompt gate (kind, active tier, not sensitive,
    not failed, automatic ⇒ verified, never escalated) are applied in SQL; scoring, the zero-score omission
    and the explicit-memory fallback in Python (``semantic.prompt_order``), on rows read as plain tuples and
    prepared once per process. Never truncated here: the prompt packer applies the budget.
    """
    rows = Learning.objects.scoped_rows("for_prompt", scope_keys, now_ms(), _PROMPT_FIELDS)
    if not rows:
        return [], False
    records, visibility, profiles = zip(*map(_prepared, rows), strict=True)
    return [records[index] for index in semantic.prompt_order(visibility, profiles, query)], False


def learned_bundle(
    *, session: object, scope_keys: list[str], query: str | None, usage: str = "prompt"
) -> tuple[list[dict], bool]:
    """:func:`learned_records` as the API's bundle entries (memory-context)."""
    records, truncated = learned_records(session=session, scope_keys=scope_keys, query=query, usage=usage)
    return [record.to_dict() for record in records], truncated


def _excerpt(content: str) -> str:
    return content if len(content) <= EXCERPT_CHARS else content[:EXCERPT_CHARS] + "…"


def _prompt_eligible(
    kind: str, status: str, tier: str, verification: str, decision: str | None, sensitivity: str
) -> bool:
    """The prompt gates of §4.7 for a live, unexpired, unshadowed record (mirrors ``prompt_visible()``)."""
    if kind not in semantic.PROMPT_ELIGIBLE_KINDS or status != "active" or tier != "active":
        return False
    if sensitivity == Sensitivity.SENSITIVE or verification == "failed" or decision == "escalated":
        return False
    return decision != "automatic" or verification == "verified"


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


def search_hits(*, session: object, scope_keys: list[str], query: str | None) -> list[dict]:
    """Memory-search hits for learnings (§4.21): the session's visible learnings (not the prompt gates),
    never sensitive ones, scored on content, kind and scope; with a query zero scores are dropped.
    ``prompt_eligible`` says whether the learning passes every prompt gate."""
    normalised = semantic.normalise_query(query)
    if normalised is not None and not semantic.query_terms(normalised):
        return []  # a query of stop-words only scores nothing
    rows = _search_rows(scope_keys, normalised)
    if normalised is None:
        return [_hit(row, 0, []) for row in rows]
    columns = list(zip(*rows, strict=True)) or [()] * len(_SEARCH_FIELDS)
    ranks = semantic.search_ranks(normalised, contents=columns[2], kinds=columns[1], scope_kinds=columns[3]) or {}
    return [_hit(rows[position], score, matched) for position, (score, matched) in ranks.items()]


def _hit(row: tuple, score: int, matched: list[str]) -> dict:
    pk, kind, content, scope_kind, scope_key, published, status, tier, verification, decision, sensitivity = row
    return {
        "kind": "learning",
        "source_id": f"{LEARNING_PREFIX}-{pk}",
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
