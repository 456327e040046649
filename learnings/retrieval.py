"""Reading learnings for a session: the ``learned_context`` bundle (spec §4.7) and memory-search hits
(§4.21). One indexed query by ``scope_key`` and status, then scoring in Python (``learnings.semantic``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from learnings import semantic
from learnings.models import Learning, LearningKind, Sensitivity
from memory.clock import now_ms

EXCERPT_CHARS = 180
BROWSE_LIMIT = 200
KIND_TITLES = {value: label for value, label in LearningKind.choices}


@dataclass(slots=True)
class _Row:
    """What scoring reads (the ``PromptRecord`` protocol of ``learnings.semantic``)."""

    pk: int
    learning_id: str
    kind: str
    content: str
    scope_kind: str
    scope_id: str
    scope_key: str
    published_at_ms: int


_ROW_FIELDS = ("pk", "kind", "content", "scope_kind", "scope_id", "scope_key", "published_at_ms")


def _rows(queryset) -> list[_Row]:
    return [
        _Row(pk, f"learning-{pk}", kind, content, scope_kind, scope_id, scope_key, published)
        for pk, kind, content, scope_kind, scope_id, scope_key, published in queryset.values_list(*_ROW_FIELDS)
    ]


def learned_bundle(
    *, session: object, scope_keys: list[str], query: str | None, usage: str = "prompt"
) -> tuple[list[dict], bool]:
    """The learnings that may enter ``learned_context`` for this input, best first.

    Visibility (scopes, live, unexpired, unshadowed) and every prompt gate (kind, active tier, not sensitive,
    not failed, automatic ⇒ verified, never escalated) are applied in SQL; scoring, the zero-score omission
    and the explicit-memory fallback in Python. Never truncated here: the prompt packer applies the budget.
    """
    rows = _rows(Learning.objects.for_prompt(scope_keys, now_ms()).order_by())
    selected = select(rows, query)
    entries = [
        {
            "learning_id": row.learning_id,
            "kind": row.kind,
            "published_at_ms": row.published_at_ms,
            "content": row.content,
            "scope": {"kind": row.scope_kind, "id": row.scope_id},
        }
        for row in selected
    ]
    return entries, False


def _scorer(query: str, terms: list[str]):
    """A test for "can this text score against the query" (§4.7): it contains the whole query, or one query
    term equals one of its tokens. Tokens are runs of ``str.isalnum()`` characters of the lowercased text, as
    in ``learnings.semantic``; in CPython ``[^\\W_]`` is exactly ``isalnum()``, so "a term bounded by
    non-alphanumerics" is "a term equal to a token" and records failing the test are exactly the zero scores.
    One compiled search per record instead of tokenising it."""
    alternation = "|".join(re.escape(term) for term in sorted(set(terms), key=len, reverse=True))
    token = re.compile(rf"(?<![^\W_])(?:{alternation})(?![^\W_])")

    def may_score(text: str) -> bool:
        lowered = text.lower()
        if query in lowered:
            return True
        # a token equal to a term is a substring first: the plain test rules out most records cheaply
        return any(term in lowered for term in terms) and token.search(lowered) is not None

    return may_score


def select(rows: list[_Row], query: str | None) -> list[_Row]:
    """``semantic.select_for_prompt`` with a prefilter, so scoring (tokenising every content) runs only on
    the few records that can score. Same result: records that cannot score would be dropped as zero scores,
    and when nothing can score the answer is the explicit-memory fallback or nothing."""
    normalised = semantic.normalise_query(query)
    if normalised is None:
        return semantic.select_for_prompt(rows, None)
    terms = semantic.query_terms(normalised)
    may_score = _scorer(normalised, terms) if terms else None
    hopeful = [row for row in rows if may_score(row.content)] if may_score else []
    if hopeful:
        selected = semantic.select_for_prompt(hopeful, normalised)
        if selected and semantic.score_for_prompt(selected[0].content, normalised) > 0:
            return selected  # the positive scores (those the prefilter dropped all score zero)
    if semantic.is_explicit_memory_request(normalised):
        return semantic.select_for_prompt(rows, None)
    return []


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


def search_hits(*, session: object, scope_keys: list[str], query: str | None) -> list[dict]:
    """Memory-search hits for learnings (§4.21): the session's visible learnings (not the prompt gates),
    never sensitive ones, scored on content, kind and scope; with a query zero scores are dropped.
    ``prompt_eligible`` says whether the learning passes every prompt gate."""
    at = now_ms()
    visible = Learning.objects.in_scopes(scope_keys).live(at).unshadowed(at).exclude(sensitivity=Sensitivity.SENSITIVE)
    normalised = semantic.normalise_query(query)
    terms = semantic.query_terms(normalised) if normalised else []
    if normalised is None:
        visible = visible.order_by("-published_at_ms", "id")[:BROWSE_LIMIT]
    elif not terms:
        return []  # a query of stop-words only scores nothing
    else:
        visible = visible.order_by()
        may_score = _scorer(normalised, terms)
    fields = (
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
        "expires_at_ms",
    )
    hits = []
    for (
        pk,
        kind,
        content,
        scope_kind,
        scope_key,
        published,
        status,
        tier,
        verification,
        decision,
        sensitivity,
        _expires,
    ) in visible.values_list(*fields):
        if normalised is not None and not (
            may_score(content) or may_score(semantic.KIND_LABELS.get(kind, kind)) or may_score(scope_kind)
        ):
            continue  # cannot score: skip the tokenising
        score, matched = semantic.rank_for_search(content, kind, scope_kind, normalised)
        if normalised is not None and score == 0:
            continue
        hits.append(
            {
                "kind": "learning",
                "source_id": f"learning-{pk}",
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
        )
    return hits
