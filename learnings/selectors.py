"""Reads shared by the API, the admin, the review worker and commands: lookups by public id, the list
filters of spec §2.3/§2.4 (django-filter), the record views, and the §4.13 equivalence/conflict lookups."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict, TypeVar

import django_filters
from django.db.models import Count, Q, QuerySet

from learnings import gate
from learnings.models import Learning, LearningCandidate
from learnings.querysets import LearningCandidateQuerySet, LearningQuerySet
from learnings.screening import CATEGORIES
from learnings.validation import LearningValidationError, parse_scope_query
from learnings.vocabulary import (
    CANDIDATE_ID,
    LEARNING_ID,
    REVIEW_STATES,
    SEMANTIC_KINDS,
    CandidateOrigin,
    CandidateState,
    LearningKind,
    LearningStatus,
    PolicyDecision,
    ScopeKind,
)
from memory import public_ids
from memory import sql as memory_sql
from memory.clock import now_ms
from memory.errors import NotFound, ValidationFailed

DOMAIN = "learnings"


# ---- lookups ----------------------------------------------------------------------------------------------


def candidate_not_found(candidate_id: object) -> NotFound:
    return NotFound(f"unknown learning candidate {candidate_id}", domain=DOMAIN, code="learning_candidate_not_found")


def learning_not_found(learning_id: object) -> NotFound:
    return NotFound(f"unknown learning {learning_id}", domain=DOMAIN, code="learning_not_found")


def parse_candidate_id(candidate_id: str) -> int:
    return public_ids.parse_or_404(
        candidate_id, CANDIDATE_ID, domain=DOMAIN, code="learning_candidate_not_found", noun="learning candidate"
    )


def parse_learning_id(learning_id: str) -> int:
    """``learning-N`` (``learning-candidate-N`` names no learning: ``parse_id`` reads only digits after the
    prefix)."""
    return public_ids.parse_or_404(learning_id, LEARNING_ID, domain=DOMAIN, code="learning_not_found", noun="learning")


def get_candidate(candidate_id: str, *, queryset: QuerySet[LearningCandidate] | None = None) -> LearningCandidate:
    pk = parse_candidate_id(candidate_id)
    qs = queryset if queryset is not None else LearningCandidate.objects.all()
    candidate = qs.select_related("published_learning").filter(pk=pk).first()
    if candidate is None:
        raise candidate_not_found(candidate_id)
    return candidate


def get_learning(learning_id: str, *, queryset: QuerySet[Learning] | None = None) -> Learning:
    pk = parse_learning_id(learning_id)
    qs = queryset if queryset is not None else Learning.objects.all()
    learning = qs.filter(pk=pk).first()
    if learning is None:
        raise learning_not_found(learning_id)
    return learning


# ---- views (the JSON shapes of §1.5 / §1.6) ---------------------------------------------------------------


class CandidateView(TypedDict):
    """``LearningCandidateView`` (§1.5)."""

    candidate_id: str
    origin: str
    scope: dict[str, str]
    kind: str
    sensitivity: str
    content: str
    confidence: int
    source: dict[str, Any]
    evidence_refs: list[dict[str, Any]]
    created_at_ms: int
    expires_at_ms: int | None
    stated_at_ms: int
    state: str
    automation_review: dict[str, Any] | None
    published_learning_id: str | None
    screening: NotRequired[dict[str, Any] | None]
    """Not set here: the API's view adds it (operators only)."""


class LearningView(TypedDict):
    """``LearningView`` (§1.6)."""

    learning_id: str
    scope: dict[str, str]
    kind: str
    sensitivity: str
    content: str
    confidence: int
    source: dict[str, Any]
    evidence_refs: list[dict[str, Any]]
    source_candidate_id: str | None
    created_at_ms: int
    published_at_ms: int
    expires_at_ms: int | None
    stated_at_ms: int
    status: str
    publish_tier: str
    policy_decision: str | None
    policy_actor: str | None
    verification_status: str
    supersedes: str | None
    superseded_by: str | None
    revoked_at_ms: int | None
    revoked_reason: str | None


def candidate_view(candidate: LearningCandidate) -> CandidateView:
    return {
        "candidate_id": candidate.public_id,
        "origin": candidate.origin,
        "scope": candidate.scope,
        "kind": candidate.kind,
        "sensitivity": candidate.sensitivity,
        "content": candidate.content,
        "confidence": candidate.confidence,
        "source": candidate.source or {},
        "evidence_refs": candidate.evidence_refs or [],
        "created_at_ms": candidate.created_at_ms,
        "expires_at_ms": candidate.expires_at_ms,
        "stated_at_ms": candidate.stated_at_ms if candidate.stated_at_ms is not None else candidate.created_at_ms,
        "state": candidate.state,
        "automation_review": candidate.automation_review,
        "published_learning_id": (
            public_ids.format_id(LEARNING_ID, candidate.published_learning_id)
            if candidate.published_learning_id
            else None
        ),
    }


def learning_view(learning: Learning) -> LearningView:
    return {
        "learning_id": learning.public_id,
        "scope": learning.scope,
        "kind": learning.kind,
        "sensitivity": learning.sensitivity,
        "content": learning.content,
        "confidence": learning.confidence,
        "source": learning.source or {},
        "evidence_refs": learning.evidence_refs or [],
        "source_candidate_id": (
            public_ids.format_id(CANDIDATE_ID, learning.source_candidate_id) if learning.source_candidate_id else None
        ),
        "created_at_ms": learning.created_at_ms,
        "published_at_ms": learning.published_at_ms,
        "expires_at_ms": learning.expires_at_ms,
        "stated_at_ms": learning.stated_at_ms if learning.stated_at_ms is not None else learning.published_at_ms,
        "status": learning.status,
        "publish_tier": learning.publish_tier,
        "policy_decision": learning.policy_decision,
        "policy_actor": learning.policy_actor,
        "verification_status": learning.verification_status,
        "supersedes": public_ids.format_id(LEARNING_ID, learning.supersedes_id) if learning.supersedes_id else None,
        "superseded_by": (
            public_ids.format_id(LEARNING_ID, learning.superseded_by_id) if learning.superseded_by_id else None
        ),
        "revoked_at_ms": learning.revoked_at_ms,
        "revoked_reason": learning.revoked_reason,
    }


# ---- §4.13 equivalence and conflicts ----------------------------------------------------------------------


def find_equivalent(
    *,
    scope_key: str,
    kind: str,
    content_key: str,
    at_ms: int | None = None,
    exclude_ids: tuple[int, ...] = (),
) -> Learning | None:
    """A prompt-visible, unexpired learning of the same scope and kind with the same content key."""
    at_ms = now_ms() if at_ms is None else at_ms
    return (
        Learning.objects.filter(scope_key=scope_key, kind=kind, content_key=content_key)
        .live(at_ms)
        .prompt_visible()
        .exclude(pk__in=exclude_ids)
        .order_by("id")
        .first()
    )


def find_conflict(
    *,
    scope_key: str,
    kind: str,
    subject_key: str,
    content_key: str,
    at_ms: int | None = None,
    exclude_ids: tuple[int, ...] = (),
) -> Learning | None:
    """A prompt-visible, unexpired fact/preference/decision of the same scope and kind about the same
    subject with a different value."""
    if kind not in SEMANTIC_KINDS or not subject_key:
        return None
    at_ms = now_ms() if at_ms is None else at_ms
    return (
        Learning.objects.filter(scope_key=scope_key, kind=kind, subject_key=subject_key)
        .exclude(content_key=content_key)
        .live(at_ms)
        .prompt_visible()
        .exclude(pk__in=exclude_ids)
        .order_by("id")
        .first()
    )


_GATES = (*gate.VISIBLE, *gate.PROMPT_VISIBLE)


def _same_key_sql(alias: str, key: str) -> str:
    """The id of the first (by id) prompt-visible, unexpired learning of the scope and kind whose ``key`` column
    equals the parameter - ``live(at).prompt_visible()`` of ``learnings.gate`` over ``alias``. Positional
    parameters: scope key, kind, key, (for the subject: the content key it differs from), then the time once
    per ``%(at)s`` of the gates."""
    gates = " AND ".join(condition.sql(alias) for condition in _GATES).replace("%(at)s", "%s")
    different = f" AND {alias}.content_key <> %s" if key == "subject" else ""
    return (
        f'(SELECT {alias}.id FROM "{gate.TABLE}" {alias} WHERE {alias}.scope_key = %s '  # noqa: S608
        f"AND {alias}.kind = %s AND {alias}.{key}_key = %s{different} AND {gates} "
        f"ORDER BY {alias}.id LIMIT 1)"
    )


_AT_MARKS = sum(condition.sql("l").count("%(at)s") for condition in _GATES)
_EQUIVALENT_IDS_SQL = _same_key_sql("e", "content")
_EQUIVALENT_OR_CONFLICT_IDS_SQL = f"{_same_key_sql('e', 'content')} UNION ALL {_same_key_sql('c', 'subject')}"


def equivalent_or_conflict_ids(
    *, scope_key: str, kind: str, subject_key: str, content_key: str, at_ms: int
) -> tuple[str, list[Any]]:
    """The SQL (and its parameters) of the ids of :func:`find_equivalent_or_conflict`'s two rows - at most one
    equivalent, at most one conflict - to read, or to embed in a larger statement
    (``publish.learning_create_published`` stores the new learning only where it reads none)."""
    if kind in SEMANTIC_KINDS and subject_key:
        return _EQUIVALENT_OR_CONFLICT_IDS_SQL, [
            *(scope_key, kind, content_key, *[at_ms] * _AT_MARKS),
            *(scope_key, kind, subject_key, content_key, *[at_ms] * _AT_MARKS),
        ]
    return _EQUIVALENT_IDS_SQL, [scope_key, kind, content_key, *[at_ms] * _AT_MARKS]


def split_equivalent_or_conflict(found: list[Learning], content_key: str) -> tuple[Learning | None, Learning | None]:
    """(equivalent, conflict) among the rows of :func:`equivalent_or_conflict_ids`: the same content key, or not."""
    equivalent = next((row for row in found if row.content_key == content_key), None)
    conflict = next((row for row in found if row.content_key != content_key), None)
    return equivalent, conflict


def find_equivalent_or_conflict(
    *, scope_key: str, kind: str, subject_key: str, content_key: str, at_ms: int | None = None
) -> tuple[Learning | None, Learning | None]:
    """(:func:`find_equivalent`, :func:`find_conflict`) in one hand-written statement, for a publication that
    excludes nothing (no ``supersedes``): the conflict only matters when there is no equivalent, and is read
    only for the semantic kinds with a subject."""
    at_ms = now_ms() if at_ms is None else at_ms
    sql, params = equivalent_or_conflict_ids(
        scope_key=scope_key, kind=kind, subject_key=subject_key, content_key=content_key, at_ms=at_ms
    )
    found = memory_sql.select_instances(Learning, f'WHERE "id" IN ({sql}) ORDER BY "id"', params)
    return split_equivalent_or_conflict(found, content_key)


# ---- list filters (§2.3, §2.4) ----------------------------------------------------------------------------


def scope_filter_error(exc: LearningValidationError) -> ValidationFailed:
    return ValidationFailed(exc.message, field=exc.field, domain=DOMAIN, code="invalid_learning_scope")


_QS = TypeVar("_QS", LearningQuerySet, LearningCandidateQuerySet)


class _ScopedFilter(django_filters.FilterSet):
    """``query`` (substring), ``scope_kind`` + ``scope_id`` (parsed with the literal messages of §2.3)."""

    query = django_filters.CharFilter(method="filter_query", max_length=1000)
    scope_kind = django_filters.CharFilter(method="filter_noop", max_length=20)
    scope_id = django_filters.CharFilter(method="filter_noop", max_length=200)
    kind = django_filters.ChoiceFilter(choices=LearningKind.choices)

    def filter_query(self, queryset: _QS, name: str, value: str) -> _QS:
        return queryset.matching_query(value)

    def filter_noop(self, queryset: _QS, name: str, value: str) -> _QS:
        return queryset

    def filter_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        data = self.form.cleaned_data
        try:
            scope = parse_scope_query(data.get("scope_kind"), data.get("scope_id"))
        except LearningValidationError as exc:
            raise scope_filter_error(exc) from exc
        queryset = super().filter_queryset(queryset)
        if scope is not None:
            queryset = queryset.filter(scope_key=scope.scope_key)
        return queryset


class LearningCandidateFilter(_ScopedFilter):
    state = django_filters.ChoiceFilter(choices=CandidateState.choices)
    origin = django_filters.ChoiceFilter(choices=CandidateOrigin.choices)

    class Meta:
        model = LearningCandidate
        fields = ["query", "scope_kind", "scope_id", "kind", "state", "origin"]


class LearningFilter(_ScopedFilter):
    status = django_filters.ChoiceFilter(choices=LearningStatus.choices)
    policy_decision = django_filters.ChoiceFilter(choices=PolicyDecision.choices)
    policy_actor = django_filters.CharFilter(field_name="policy_actor", lookup_expr="iexact", max_length=150)
    matched_rule_name = django_filters.CharFilter(
        field_name="source_candidate__matched_rule_name", lookup_expr="iexact", max_length=200
    )

    class Meta:
        model = Learning
        fields = [
            "query",
            "scope_kind",
            "scope_id",
            "kind",
            "status",
            "policy_decision",
            "policy_actor",
            "matched_rule_name",
        ]


def filter_errors(filterset: django_filters.FilterSet) -> ValidationFailed | None:
    """The first form error of a filterset as a 400 problem (None when valid)."""
    if filterset.is_valid():
        return None
    field, messages = next(iter(filterset.errors.items()))
    return ValidationFailed(f"{field}: {messages[0]}", field=field)


def filter_learnings(params: dict[str, Any], queryset: QuerySet[Learning] | None = None) -> QuerySet[Learning]:
    """Learnings matching the §2.4 filters given as strings (API query, revoke-matching body, admin)."""
    filterset = LearningFilter(data=params, queryset=queryset if queryset is not None else Learning.objects.all())
    error = filter_errors(filterset)
    if error is not None:
        raise error
    return filterset.qs


SCOPE_KIND_CHOICES = ScopeKind.choices


# ---- the memory-poisoning screen (issue 19.5) ----------------------------------------------------------------


class ScreeningCounts(TypedDict):
    flagged_total: int
    flagged_awaiting_review: int
    flagged_published: int
    flagged_rejected: int
    by_category: dict[str, int]


def screening_counts() -> ScreeningCounts:
    """What ``/v1/status`` reports about the screen (one query over the flagged rows' partial index):
    flagged candidates in all, those waiting for an operator (pending or escalated), those an operator
    published anyway, those rejected, and the flagged count per category."""
    counts = LearningCandidate.objects.filter(screen_flagged=True).aggregate(
        flagged_total=Count("id"),
        flagged_awaiting_review=Count("id", filter=Q(state__in=REVIEW_STATES)),
        flagged_published=Count("id", filter=Q(state=CandidateState.PUBLISHED)),
        flagged_rejected=Count("id", filter=Q(state=CandidateState.REJECTED)),
        **{f"category_{name}": Count("id", filter=Q(screening__categories__contains=[name])) for name in CATEGORIES},
    )
    return {
        "flagged_total": counts["flagged_total"],
        "flagged_awaiting_review": counts["flagged_awaiting_review"],
        "flagged_published": counts["flagged_published"],
        "flagged_rejected": counts["flagged_rejected"],
        "by_category": {name: counts[f"category_{name}"] for name in CATEGORIES},
    }
