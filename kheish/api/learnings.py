"""/v1 learning plane: candidates (§2.3), learnings (§2.4) and the learning policy (§2.1).

Agents create candidates and read learnings only within their effective scopes - the scopes of the sessions
they own, narrowed to what they are granted now - and read only the candidates they proposed (others are 404);
publish, reject, revoke, revoke-matching, supersede and the policy are operator-only.
Every write goes through ``learnings.services`` / ``learnings.policy_in_force``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from django.db.models import Model, QuerySet
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.utils import (
    Direction,
    OpenApiParameter,
    extend_schema_field,
    extend_schema_serializer,
    inline_serializer,
)
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from kheish.api.fields import StrictBooleanField, StrictCharField, StrictSerializer
from kheish.api.permissions import IsOperator, caller_is_operator
from kheish.api.runtime import POLICY_RESPONSE
from kheish.api.schema import OPERATOR, described, openapi_schema, policy_request
from learnings import policy_in_force, selectors, services
from learnings.models import (
    MAX_CONTENT_CHARS,
    CandidateOrigin,
    CandidateState,
    Learning,
    LearningCandidate,
    LearningKind,
    LearningStatus,
    PolicyDecision,
    PublishTier,
    ScopeKind,
    Sensitivity,
)
from learnings.services.cleaning import EVIDENCE_REFS_SCHEMA, SOURCE_SCHEMA
from learnings.validation import LearningScope
from learnings.vocabulary import (
    CAPTURED_ONLY_KINDS,
    DEFAULT_WORKSPACE_SCOPE_ID,
    KIND_NOTES,
    PROPOSABLE_KINDS,
    SENSITIVITY_NOTES,
    TIER_NOTES,
    listing,
)
from memory import public_ids, run_memory
from memory.errors import ValidationFailed

if TYPE_CHECKING:
    from drf_spectacular.openapi import AutoSchema

MAX_INPUT_CONTENT = 100_000


def _active_first(tier: str) -> int:
    return tier != PublishTier.ACTIVE  # the 1600-character rule is the service's, with its literal message


# ---- serializers ------------------------------------------------------------------------------------------


class LearningKindField(serializers.ChoiceField):
    """A learning kind: the ``LearningKindEnum`` component (SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"]), named so
    that it does not collide with the other ``kind`` enums of the API (runs, scopes)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(choices=LearningKind.choices, **kwargs)


_NAMED_SCOPE_KINDS = [kind for kind in ScopeKind.values if kind not in (ScopeKind.SESSION, ScopeKind.WORKSPACE)]
"""Scope kinds whose id is a name its owner chose (personas, projects)."""

SCOPE_SCHEMA = {
    "description": "A learning scope: a session (its id, session-N), a persona or project (its id), or the workspace "
    "(id default, blank or null). Ids are trimmed.",
    "type": "object",
    "properties": {"kind": {"type": "string"}, "id": {"type": "string", "nullable": True}},
    "required": ["kind"],
    "oneOf": [
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["kind", "id"],
            "properties": {
                "kind": {"type": "string", "pattern": f"^{ScopeKind.SESSION}$"},
                "id": {"type": "string", "pattern": "^\\s*" + public_ids.pattern(public_ids.SESSION)[1:-1] + "\\s*$"},
            },
        },
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["kind", "id"],
            "properties": {
                "kind": {"type": "string", "pattern": "^(" + "|".join(_NAMED_SCOPE_KINDS) + ")$"},
                "id": {"type": "string", "maxLength": 200, "pattern": "\\S"},
            },
        },
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["kind"],
            "properties": {
                "kind": {"type": "string", "pattern": f"^{ScopeKind.WORKSPACE}$"},
                "id": {
                    "type": "string",
                    "nullable": True,
                    "maxLength": 200,
                    "pattern": f"^\\s*({DEFAULT_WORKSPACE_SCOPE_ID})?\\s*$",
                },
            },
        },
    ],
}
"""What the scope rules accept (§2.3 and issue 19.9), stated in the schema (issue 22.5). Each branch names its
kinds with a pattern, not an enum: the enum postprocessing hook would merge the three into one component."""


@extend_schema_serializer(component_name="LearningScope")
class LearningScopeSerializer(StrictSerializer):
    field_help = {
        "kind": listing(ScopeKind.values),
        "id": 'the session, persona or project id (for workspace: omitted or "default")',
    }

    kind = serializers.ChoiceField(choices=ScopeKind.choices)
    id = StrictCharField(required=False, allow_blank=True, allow_null=True, trim_whitespace=False, max_length=200)


# drf-spectacular's extensions register themselves in an unannotated __init_subclass__
class LearningScopeSchema(OpenApiSerializerExtension):  # type: ignore[no-untyped-call]
    target_class = LearningScopeSerializer
    priority = 1  # before StrictSerializerSchema, which matches every StrictSerializer

    def map_serializer(self, auto_schema: AutoSchema, direction: Direction) -> dict[str, Any]:
        return SCOPE_SCHEMA


class LearningSourceRefSerializer(serializers.Serializer[dict[str, Any]]):
    run_id = serializers.CharField(required=False, allow_null=True)
    session_id = serializers.CharField(required=False, allow_null=True)
    agent_id = serializers.CharField(required=False, allow_null=True)
    input_event_offset = serializers.IntegerField(required=False, allow_null=True)
    observation_id = serializers.CharField(required=False, allow_null=True)
    derivation_id = serializers.CharField(required=False, allow_null=True)


class LearningEvidenceRefSerializer(serializers.Serializer[dict[str, Any]]):
    run_id = serializers.CharField(required=False, allow_null=True)
    artifact_id = serializers.CharField(required=False, allow_null=True)
    note = serializers.CharField(required=False, allow_null=True)


class LearningCandidateViewSerializer(serializers.Serializer[LearningCandidate]):
    """``LearningCandidateView`` (§1.5)."""

    candidate_id = serializers.CharField()
    origin = serializers.CharField()
    scope = LearningScopeSerializer()
    kind = serializers.CharField()
    sensitivity = serializers.CharField()
    content = serializers.CharField()
    confidence = serializers.IntegerField()
    source = LearningSourceRefSerializer()  # type: ignore[assignment]  # a field, not the stubs' Field.source
    evidence_refs = LearningEvidenceRefSerializer(many=True)
    created_at_ms = serializers.IntegerField()
    expires_at_ms = serializers.IntegerField(allow_null=True)
    stated_at_ms = serializers.IntegerField(
        help_text="When the statement was made (epoch ms); its creation time when none was given."
    )
    state = serializers.CharField()
    automation_review = serializers.JSONField(allow_null=True)
    published_learning_id = serializers.CharField(allow_null=True)
    screening = serializers.JSONField(
        allow_null=True,
        help_text="Operators only (null for agents): what the memory-poisoning screen found when the candidate was "
        "written, {version, flagged, categories, findings: [{category, rule, excerpt}]}. A flagged candidate is "
        "never published by automation.",
    )

    def to_representation(self, instance: LearningCandidate) -> dict[str, Any]:
        view = selectors.candidate_view(instance)
        request = self.context.get("request")
        view["screening"] = instance.screening if request is not None and caller_is_operator(request) else None
        return cast("dict[str, Any]", view)  # a CandidateView; DRF's signature names a plain dict


class LearningViewSerializer(serializers.Serializer[Learning]):
    """``LearningView`` (§1.6)."""

    learning_id = serializers.CharField()
    scope = LearningScopeSerializer()
    kind = serializers.CharField()
    sensitivity = serializers.CharField()
    content = serializers.CharField()
    confidence = serializers.IntegerField()
    source = LearningSourceRefSerializer()  # type: ignore[assignment]  # a field, not the stubs' Field.source
    evidence_refs = LearningEvidenceRefSerializer(many=True)
    source_candidate_id = serializers.CharField(allow_null=True)
    created_at_ms = serializers.IntegerField()
    published_at_ms = serializers.IntegerField()
    expires_at_ms = serializers.IntegerField(allow_null=True)
    stated_at_ms = serializers.IntegerField(
        help_text="When the statement was made (epoch ms); its publication time when none was given."
    )
    status = serializers.CharField()
    publish_tier = serializers.CharField()
    policy_decision = serializers.CharField(allow_null=True)
    policy_actor = serializers.CharField(allow_null=True)
    verification_status = serializers.CharField()
    supersedes = serializers.CharField(allow_null=True)
    superseded_by = serializers.CharField(allow_null=True)
    revoked_at_ms = serializers.IntegerField(allow_null=True)
    revoked_reason = serializers.CharField(allow_null=True)

    def to_representation(self, instance: Learning) -> dict[str, Any]:
        return cast("dict[str, Any]", selectors.learning_view(instance))  # a LearningView; DRF names a plain dict


@extend_schema_field(
    {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_CONTENT_CHARS,
        "pattern": "\\S",
        "description": f"at most {MAX_CONTENT_CHARS} characters once trimmed, not blank",
    }
)
class ContentField(StrictCharField):
    """Learning content: the service trims it and keeps the 1,600-character rule with its literal message; the
    schema says so (issue 22.5)."""


@extend_schema_field(
    {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_CONTENT_CHARS,
        "pattern": "\\S",
        "nullable": True,
        "description": "null keeps the current content",
    }
)
class NullableContentField(ContentField):
    pass


def _content_field(**kwargs: Any) -> StrictCharField:
    field = NullableContentField if kwargs.get("allow_null") else ContentField
    return field(allow_blank=True, trim_whitespace=False, max_length=MAX_INPUT_CONTENT, **kwargs)


@extend_schema_field(openapi_schema(SOURCE_SCHEMA) | {"nullable": True})
class SourceField(serializers.JSONField):
    """``LearningSourceRef`` (null: none), checked by the service against the schema it declares."""


@extend_schema_field(openapi_schema(EVIDENCE_REFS_SCHEMA) | {"nullable": True})
class EvidenceRefsField(serializers.JSONField):
    """``LearningEvidenceRef[]`` (null: none), checked by the service against the schema it declares."""


@extend_schema_field({"type": "integer", "minimum": 0, "maximum": 100})
class ConfidenceField(serializers.IntegerField):
    """0..100, checked by the service with its literal message; the schema says so."""


@extend_schema_field({"type": "integer", "minimum": 0, "maximum": 100, "nullable": True})
class NullableConfidenceField(ConfidenceField):
    """0..100 or null (keep the current value)."""


@extend_schema_field(
    {
        "allOf": [
            {"$ref": "#/components/schemas/LearningKindEnum"},
            {"not": {"type": "string", "enum": list(CAPTURED_ONLY_KINDS)}},
        ],
        "description": listing(PROPOSABLE_KINDS, sep=", ", last=" or ")
        + f" ({listing(CAPTURED_ONLY_KINDS, sep=', ', last=' and ')} written by capture only)",
    }
)
class ProposableKindField(LearningKindField):
    """The kinds an API caller may propose; run_summary is refused by the service with its literal message."""


def _expiry_field() -> serializers.IntegerField:
    return serializers.IntegerField(required=False, allow_null=True, default=None, min_value=0, max_value=2**62)


class CreateLearningCandidateSerializer(StrictSerializer):
    reuse_fields = True  # plain input fields: built once per thread (POST /v1/learnings, /v1/learning-candidates)
    field_help = {
        "scope": "where the learning would apply: one of your sessions' scopes",
        "kind": listing(PROPOSABLE_KINDS, KIND_NOTES),
        "sensitivity": listing(Sensitivity.values, SENSITIVITY_NOTES),
        "content": "the statement itself (at most 1,600 characters; no secrets)",
        "confidence": "0..100 (default 80)",
        "source": "where it comes from: {run_id?, session_id?, agent_id?, ...}; only your own runs and sessions",
        "evidence_refs": "supporting references: [{run_id?, artifact_id?, note?}]",
        "expires_at_ms": "when it stops applying (epoch ms); null: never",
    }

    scope = LearningScopeSerializer()
    kind = ProposableKindField()
    sensitivity = serializers.ChoiceField(choices=Sensitivity.choices, required=False, default=Sensitivity.SCOPED)
    content = _content_field()
    confidence = ConfidenceField(required=False, default=80)
    source = SourceField(required=False, default=dict, allow_null=True)  # type: ignore[assignment]  # a field, not Field.source
    # the stubs type a JSONField's default as a mapping; JSON may be a list
    evidence_refs = EvidenceRefsField(required=False, default=list, allow_null=True)  # type: ignore[arg-type]
    expires_at_ms = _expiry_field()
    stated_at_ms = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        min_value=0,
        max_value=2**62,
        help_text="Optional: when the statement was made (epoch ms), e.g. the date of the conversation turn it "
        "comes from; a question naming a time prefers what was stated then. Not in the future.",
    )


class PublishLearningCandidateSerializer(StrictSerializer):
    field_help = {
        "scope": "publish into another scope than the candidate's (optional edit)",
        "kind": "publish as another kind (optional edit)",
        "sensitivity": "publish with another sensitivity (optional edit)",
        "content": "publish with edited content (optional edit)",
        "confidence": "publish with another confidence (optional edit)",
        "expires_at_ms": "when the learning stops applying (epoch ms); null: never",
        "publish_tier": listing(sorted(PublishTier.values, key=_active_first), TIER_NOTES),
        "evidence_refs": "replace the evidence references (optional edit)",
        "supersedes": "the learning id this one replaces (it stops applying)",
    }

    scope = LearningScopeSerializer(required=False, allow_null=True, default=None)
    kind = LearningKindField(required=False, allow_null=True, default=None)
    sensitivity = serializers.ChoiceField(choices=Sensitivity.choices, required=False, allow_null=True, default=None)
    content = _content_field(required=False, allow_null=True, default=None)
    confidence = NullableConfidenceField(required=False, allow_null=True, default=None)
    expires_at_ms = _expiry_field()
    publish_tier = serializers.ChoiceField(choices=PublishTier.choices, required=False, default=PublishTier.ACTIVE)
    evidence_refs = serializers.JSONField(required=False, default=None, allow_null=True)
    supersedes = StrictCharField(required=False, allow_null=True, default=None, max_length=100)


class CreateLearningSerializer(CreateLearningCandidateSerializer):
    """``POST /v1/learnings``: a candidate's fields and what publishing it takes, in one body."""

    stated_at_ms = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        min_value=0,
        max_value=2**62,
        help_text="Optional: when the statement was made (epoch ms); null reads as the publication time.",
    )
    publish_tier = serializers.ChoiceField(
        choices=PublishTier.choices,
        required=False,
        default=PublishTier.ACTIVE,
        help_text="The tier it is published at: "
        + listing(sorted(PublishTier.values, key=_active_first), TIER_NOTES, sep=" or ")
        + ".",
    )
    supersedes = StrictCharField(
        required=False,
        allow_null=True,
        default=None,
        max_length=100,
        help_text="Optional: the learning id (learning-N) this one replaces; required when it conflicts with one.",
    )


class RejectCandidateSerializer(StrictSerializer):
    pass


class RevokeLearningSerializer(StrictSerializer):
    field_help = {
        "reason": "why it is revoked (kept on the learning and in the audit trail)",
    }

    reason = StrictCharField(
        required=False,
        allow_null=True,
        allow_blank=True,
        default=None,
        max_length=2000,
        trim_whitespace=False,
    )


def _filter_text(max_length: int = 200) -> StrictCharField:
    return StrictCharField(
        required=False,
        allow_null=True,
        allow_blank=True,
        default=None,
        max_length=max_length,
        trim_whitespace=False,
    )


class RevokeMatchingLearningsSerializer(StrictSerializer):
    field_help = {
        "query": "revoke learnings whose content matches this text",
        "scope_kind": f"only learnings of this scope kind ({listing(ScopeKind.values)})",
        "scope_id": "only learnings of this scope id",
        "kind": f"only learnings of this kind ({listing(LearningKind.values)})",
        "status": f"only learnings with this status ({listing(LearningStatus.values)})",
        "policy_decision": f"only learnings published by this decision ({listing(PolicyDecision.values)})",
        "policy_actor": "only learnings published by this actor (operator | daemon: the automated review)",
        "matched_rule_name": "only learnings whose candidate matched this learning-policy rule",
        "reason": "why they are revoked (kept on each learning and in the audit trail)",
    }

    query = _filter_text(1000)
    scope_kind = _filter_text(20)
    scope_id = _filter_text()
    kind = _filter_text(20)
    status = _filter_text(20)
    policy_decision = _filter_text(20)
    policy_actor = _filter_text(150)
    matched_rule_name = _filter_text()
    reason = _filter_text(2000)
    all = StrictBooleanField(
        required=False, default=False, help_text="required (true) to revoke with no filter: every matching learning"
    )


class SupersedeLearningSerializer(StrictSerializer):
    field_help = {
        "scope": "the replacement's scope (default: the old learning's)",
        "kind": "the replacement's kind (default: the old learning's)",
        "sensitivity": "the replacement's sensitivity (default: the old learning's)",
        "content": "the replacement's content",
        "confidence": "the replacement's confidence (default: the old learning's)",
        "expires_at_ms": "when the replacement stops applying (epoch ms); null: never",
    }

    scope = LearningScopeSerializer(required=False, allow_null=True, default=None)
    kind = LearningKindField(required=False, allow_null=True, default=None)
    sensitivity = serializers.ChoiceField(choices=Sensitivity.choices, required=False, allow_null=True, default=None)
    content = _content_field()
    confidence = NullableConfidenceField(required=False, allow_null=True, default=None)
    expires_at_ms = serializers.IntegerField(required=False, allow_null=True, min_value=0, max_value=2**62)


def _scope(data: dict[str, Any] | None) -> LearningScope | None:
    if data is None:
        return None
    return services.normalise_scope(data["kind"], data.get("id"))


def _candidate_fields(body: dict[str, Any]) -> dict[str, Any]:
    """A validated ``CreateLearningCandidateSerializer`` body as the candidate services' keyword arguments (the
    propose and the create-and-publish paths take the same candidate fields)."""
    return {
        "scope": _scope(body["scope"]),
        **{
            name: body[name]
            for name in (
                "kind",
                "content",
                "sensitivity",
                "confidence",
                "source",
                "evidence_refs",
                "expires_at_ms",
                "stated_at_ms",
            )
        },
    }


# ---- views ------------------------------------------------------------------------------------------------


_M = TypeVar("_M", bound=Model)


class _LearningPlaneViewSet(viewsets.GenericViewSet[_M]):
    lookup_value_regex = "[^/]+"
    operator_actions: tuple[str, ...] = ()

    def get_permissions(self) -> Sequence[BasePermission]:
        if self.action in self.operator_actions:
            return [IsOperator()]
        return [IsAuthenticated()]

    def _operator(self) -> bool:
        return caller_is_operator(self.request)

    def _page(self, queryset: QuerySet[_M], serializer_class: type[serializers.Serializer[_M]]) -> Response:
        page = self.paginate_queryset(self.filter_queryset(queryset))
        # the stubs take one instance, never the list many=True takes
        serializer = serializer_class(page, many=True, context={"request": self.request})  # type: ignore[arg-type]
        return self.get_paginated_response(serializer.data)


_FILTER_ENUMS = {
    "scope_kind": ScopeKind.values,
    "kind": LearningKind.values,
    "state": CandidateState.values,
    "origin": CandidateOrigin.values,
    "status": LearningStatus.values,
    "policy_decision": PolicyDecision.values,
}


def _filter_parameters(names: tuple[str, ...]) -> list[OpenApiParameter]:
    """The list filters as query parameters, enums typed as enums (issue 14.15)."""
    return [
        OpenApiParameter(
            name,
            str,
            enum=[*_FILTER_ENUMS[name], ""] if name in _FILTER_ENUMS else None,
            description="blank: no filter",
        )
        for name in names
    ]


_CANDIDATE_FILTERS = _filter_parameters(("query", "scope_kind", "scope_id", "kind", "state", "origin"))
_LEARNING_FILTERS = _filter_parameters(
    ("query", "scope_kind", "scope_id", "kind", "status", "policy_decision", "policy_actor", "matched_rule_name")
)


class LearningCandidateViewSet(_LearningPlaneViewSet[LearningCandidate]):
    serializer_class = LearningCandidateViewSerializer
    filterset_class = selectors.LearningCandidateFilter
    lookup_field = "candidate_id"
    operator_actions = ("publish", "reject")

    def get_queryset(self) -> QuerySet[LearningCandidate]:
        return LearningCandidate.objects.visible_to(self.request.user, operator=self._operator()).order_by("-id")

    @described(
        "List learning candidates",
        "Proposed learnings, newest first, filtered by query (text), scope, kind, state and origin. An "
        "agent sees only the candidates it proposed or that were captured from its runs, in scopes it "
        "can still see; an operator sees all (the review queue is state=pending). A scope_kind other than "
        "workspace needs scope_id (400 otherwise); blank filters are no filter. Paged (limit, offset).",
        parameters=_CANDIDATE_FILTERS,
        responses=LearningCandidateViewSerializer(many=True),
    )
    def list(self, request: Request) -> Response:
        return self._page(self.get_queryset(), LearningCandidateViewSerializer)

    @described(
        "Propose a learning",
        f"Proposes a learning (a {listing(PROPOSABLE_KINDS, sep=', ', last=' or ')}) for a scope; the "
        "learning policy "
        "then publishes it, holds it for operator review, or rejects it (see state and "
        "automation_review). Answers 200 with the candidate. 400 for invalid content (over 1,600 "
        "characters, a secret, an invalid scope); 403 scope_forbidden when the scope is not one the "
        "calling agent can see (its sessions, or a persona or project it is bound to and granted), 403 "
        "provenance_forbidden when source or evidence_refs name another "
        "agent's runs or sessions.",
        request=CreateLearningCandidateSerializer,
        responses={200: LearningCandidateViewSerializer},
    )
    def create(self, request: Request) -> Response:
        data = CreateLearningCandidateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        body = data.validated_data
        candidate = services.candidate_create(
            actor=request.user, operator=caller_is_operator(request), **_candidate_fields(body)
        )
        return Response(LearningCandidateViewSerializer(candidate, context={"request": request}).data)

    @described(
        "Get a learning candidate",
        "One candidate, with its review state and, once published, the "
        "learning it became. 404 when the calling agent did not propose it.",
    )
    def retrieve(self, request: Request, candidate_id: str) -> Response:
        candidate = selectors.get_candidate(candidate_id, queryset=self.get_queryset())
        return Response(LearningCandidateViewSerializer(candidate, context={"request": request}).data)

    @described(
        "Publish a candidate",
        f"Publishes a pending candidate as a learning (publish_tier {listing(PublishTier.values, sep=' or ')}; "
        "the status follows the tier), optionally editing "
        "its scope, kind, sensitivity, content, confidence or expiry, or superseding an existing learning. "
        "Answers the new learning. 404 for an unknown candidate; 409 when it was rejected or already published.",
        caller=OPERATOR,
        request=PublishLearningCandidateSerializer,
        responses=LearningViewSerializer,
    )
    @action(detail=True, methods=["post"], filterset_class=None)
    def publish(self, request: Request, candidate_id: str) -> Response:
        candidate = selectors.get_candidate(candidate_id)
        data = PublishLearningCandidateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        body = data.validated_data
        learning = services.candidate_publish(
            candidate=candidate,
            actor=request.user,
            options=services.PublishOptions.manual(
                publish_tier=body["publish_tier"],
                supersedes=body["supersedes"],
                scope=_scope(body["scope"]),
                kind=body["kind"],
                sensitivity=body["sensitivity"],
                content=body["content"],
                confidence=body["confidence"],
                expires_at_ms=body["expires_at_ms"],
                evidence_refs=body["evidence_refs"],
            ),
        )
        return Response(LearningViewSerializer(learning).data)

    @described(
        "Reject a candidate",
        "Rejects a pending or escalated candidate; it never reaches a prompt. "
        "Body: {}. Rejecting a rejected candidate answers it unchanged. 404 for an unknown candidate; 409 "
        "when it was already published.",
        caller=OPERATOR,
        request=RejectCandidateSerializer,
        responses=LearningCandidateViewSerializer,
    )
    @action(detail=True, methods=["post"], filterset_class=None)
    def reject(self, request: Request, candidate_id: str) -> Response:
        candidate = selectors.get_candidate(candidate_id)
        RejectCandidateSerializer(data=request.data).is_valid(raise_exception=True)  # null is 400, not {}
        candidate = services.candidate_reject(candidate=candidate, actor=request.user)
        return Response(LearningCandidateViewSerializer(candidate, context={"request": request}).data)


class LearningViewSet(_LearningPlaneViewSet[Learning]):
    serializer_class = LearningViewSerializer
    filterset_class = selectors.LearningFilter
    lookup_field = "learning_id"
    operator_actions = ("create", "revoke", "revoke_matching", "supersede")

    def get_queryset(self) -> QuerySet[Learning]:
        return Learning.objects.visible_to(self.request.user, operator=self._operator()).order_by("-id")

    @described(
        "Create and publish a learning",
        "An operator's fact in one request: creates the candidate (every validation of POST "
        "/v1/learning-candidates: content rules, the secret guard, the scope) and publishes it manually in "
        "the same transaction (the checks of POST /v1/learning-candidates/{id}/publish: an equivalent live "
        "learning is reused, a same-subject conflict is 409 learning_conflict unless it supersedes). "
        "Optional stated_at_ms: when the statement was made. Answers 201 with the learning (200 when an "
        "equivalent one was reused); the candidate and its audit rows are kept as on the two-step path.",
        caller=OPERATOR,
        request=CreateLearningSerializer,
        responses={201: LearningViewSerializer, 200: LearningViewSerializer},
    )
    def create(self, request: Request) -> Response:
        data = CreateLearningSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        body = data.validated_data
        learning, candidate = services.learning_create_published(
            actor=request.user,
            **_candidate_fields(body),
            publish_tier=body["publish_tier"],
            supersedes=body["supersedes"],
        )
        status = 201 if learning.source_candidate_id == candidate.pk else 200  # 200: an equivalent reused
        return Response(LearningViewSerializer(learning).data, status=status)

    @described(
        "List learnings",
        "Published learnings, newest first, filtered by query (text), scope, kind, status, policy decision, "
        "policy actor and matched rule. An agent sees the learnings of the scopes of its own sessions that "
        "it is still granted; an operator sees all. A scope_kind other than workspace needs scope_id (400 "
        "otherwise); blank filters are no filter. Paged (limit, offset).",
        parameters=_LEARNING_FILTERS,
        responses=LearningViewSerializer(many=True),
    )
    def list(self, request: Request) -> Response:
        return self._page(self.get_queryset(), LearningViewSerializer)

    @described(
        "Get a learning",
        f"One learning, with its status ({listing(LearningStatus.values, sep=', ')}), "
        "provenance and policy decision. 404 when it is not in a scope of the calling agent's sessions.",
    )
    def retrieve(self, request: Request, learning_id: str) -> Response:
        learning = selectors.get_learning(learning_id, queryset=self.get_queryset())
        return Response(LearningViewSerializer(learning).data)

    @described(
        "Revoke a learning",
        "Revokes a learning (with an optional reason): it leaves every prompt at "
        "once, and a skill promoted from it is revoked first. Revoking a revoked learning answers it "
        "unchanged. 404 for an unknown learning.",
        caller=OPERATOR,
        request=RevokeLearningSerializer,
        responses=LearningViewSerializer,
    )
    @action(detail=True, methods=["post"], filterset_class=None)
    def revoke(self, request: Request, learning_id: str) -> Response:
        learning = selectors.get_learning(learning_id)
        data = RevokeLearningSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        learning = services.learning_revoke(learning=learning, actor=request.user, reason=data.validated_data["reason"])
        return Response(LearningViewSerializer(learning).data)

    @described(
        "Revoke matching learnings",
        "Revokes every learning the filters match (the filters of GET /v1/learnings) and answers the "
        "revoked learnings as an array. At least one filter, or all: true, is required (400 "
        "filter_required), so an empty body never revokes everything.",
        caller=OPERATOR,
        request=RevokeMatchingLearningsSerializer,
        responses=LearningViewSerializer(many=True),
    )
    @action(detail=False, methods=["post"], url_path="revoke-matching", filterset_class=None, pagination_class=None)
    def revoke_matching(self, request: Request) -> Response:
        data = RevokeMatchingLearningsSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        body = {k: v for k, v in data.validated_data.items() if v is not None}
        reason = body.pop("reason", None)
        revoke_all = body.pop("all")
        if not any(str(v).strip() for v in body.values()) and not revoke_all:
            raise ValidationFailed(
                'revoke-matching needs at least one filter, or "all": true to revoke every learning',
                field="all",
                domain="learnings",
                code="filter_required",
            )
        matching = selectors.filter_learnings(body)
        revoked = services.learnings_revoke_matching(queryset=matching, actor=request.user, reason=reason)
        # the stubs take one instance, never the list many=True takes
        return Response(LearningViewSerializer(revoked, many=True).data)  # type: ignore[arg-type]

    @described(
        "Supersede a learning",
        "Replaces a learning with a new one (new content; scope, kind, sensitivity, confidence and expiry "
        "kept unless given): the old one becomes superseded and points to the replacement, which is "
        "answered. 404 for an unknown learning; 409 when it is revoked or already superseded.",
        caller=OPERATOR,
        request=SupersedeLearningSerializer,
        responses=LearningViewSerializer,
    )
    @action(detail=True, methods=["post"], filterset_class=None)
    def supersede(self, request: Request, learning_id: str) -> Response:
        learning = selectors.get_learning(learning_id)
        data = SupersedeLearningSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        body = data.validated_data
        # ``expires_at_ms?`` as every optional override (§4.15 "overrides or current values"; publish too): null
        # or absent keeps the current value.
        extra = {"expires_at_ms": body["expires_at_ms"]} if body.get("expires_at_ms") is not None else {}
        replacement = services.learning_supersede(
            learning=learning,
            actor=request.user,
            content=body["content"],
            scope=_scope(body["scope"]),
            kind=body["kind"],
            sensitivity=body["sensitivity"],
            confidence=body["confidence"],
            **extra,
        )
        return Response(LearningViewSerializer(replacement).data)


class LearningPolicyViewSet(viewsets.ViewSet):
    """``GET`` the learning policy in force; ``POST {policy, expected_revision?}`` replaces it whole."""

    permission_classes = [IsOperator]

    @described(
        "Get the learning policy",
        "The learning automation policy in force: mode, what is captured from runs, which candidates are "
        "published without review, and the judge.",
        caller=OPERATOR,
        responses=inline_serializer(
            "LearningAutomationPolicyConfig",
            fields={
                "mode": serializers.CharField(),
                "capture": serializers.JSONField(),
                "publication": serializers.JSONField(),
                "judge": serializers.JSONField(),
            },
        ),
    )
    def read(self, request: Request) -> Response:
        return Response(policy_in_force.current_policy().to_dict())

    @described(
        "Replace the learning policy",
        "Replaces the learning policy whole ({policy, expected_revision?}). 400 for an invalid policy (the field "
        "is named); 409 when expected_revision is not the current revision.",
        caller=OPERATOR,
        request=policy_request("SetLearningPolicy", "learning"),
        responses=POLICY_RESPONSE,
    )
    def submit(self, request: Request) -> Response:
        policy, revision = services.set_policy(request.data, actor=request.user)
        return Response(
            {
                "run_memory_policy": run_memory.current_policy().to_dict(),
                "learning_policy": policy.to_dict(),
                "revision": revision,
            }
        )
