"""/v1 skills (spec §2.5): the runtime catalog and the promoted-skill governance surface.

* ``GET /v1/skills?query``, ``GET /v1/skills/{name}`` — catalog skills plus **active** promoted skills;
* ``GET /v1/sessions/{id}/skills?query`` — what that session may see (its own sessions only for agents);
* ``POST /v1/learnings/{id}/promote-skill`` — promotion, and status changes by promoting again (operators);
* ``GET /v1/learning-skills?source_learning_id&status``, ``GET /v1/learning-skills/{name}`` — every record;
* ``POST /v1/learning-skills/{name}/rollout-result | revoke | rollback`` (operators).

Every write goes through ``skills.services``. Names in paths go through the same name rules as promotion,
so a hostile name (``..%2F..%2Fetc``, a Cyrillic look-alike, 300 characters) is a 400, never a path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema_field, inline_serializer
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from kheish.api.fields import StrictCharField, StrictSerializer
from kheish.api.pagination import (
    MAX_QUERY_CHARS,
    page_parameters,
    paginated,
    query_parameter,
    query_text,
)
from kheish.api.permissions import IsOperator, authenticated_user, caller_is_operator
from kheish.api.schema import OPERATOR, described
from kheish.api.sessions import SessionScopedMixin
from learnings.models import Learning
from memory.sessions import learning_scope_keys
from memory.vocabulary import listing
from skills import selectors, services
from skills.models import LearningSkill
from skills.vocabulary import LADDER, RolloutKind, SkillStatus

if TYPE_CHECKING:
    from rest_framework.permissions import _SupportsHasPermission

STATUS_HELP = listing(SkillStatus.values)
NAME_PARAMETER = OpenApiParameter(
    "name",
    {"type": "string", "pattern": "^[A-Za-z0-9:_-]{1,64}$"},
    OpenApiParameter.PATH,
    description="skill name (ASCII letters, digits, :, _, -)",
)


# ---- serializers ------------------------------------------------------------------------------------------


class SkillRuntimeConfigSerializer(serializers.Serializer[dict[str, Any]]):
    allowed_tools = serializers.ListField(child=serializers.CharField())
    blocked_tools = serializers.ListField(child=serializers.CharField())
    context = serializers.CharField(help_text="inline | fork")  # type: ignore[assignment]  # DRF allows the name; its stubs do not
    agent_profile = serializers.CharField(allow_null=True)
    provider = serializers.CharField(allow_null=True)
    model = serializers.CharField(allow_null=True)
    fallback_model = serializers.CharField(allow_null=True)


class SkillSummarySerializer(serializers.Serializer[dict[str, Any]]):
    """An item of the runtime catalog."""

    name = serializers.CharField()
    description = serializers.CharField()
    when_to_use = serializers.CharField(allow_null=True)
    version = serializers.CharField(allow_null=True)
    source = serializers.CharField(help_text="catalog | promoted")  # type: ignore[assignment]  # DRF allows the name; its stubs do not
    source_learning_id = serializers.CharField(allow_null=True)
    scope = serializers.CharField(allow_null=True, help_text="source scope key of a promoted skill")
    skill_path = serializers.CharField()
    skill_root = serializers.CharField()
    digest = serializers.CharField()
    runtime = SkillRuntimeConfigSerializer()


class SkillDetailSerializer(SkillSummarySerializer):
    instructions = serializers.CharField()


class LearningSkillLifecycleEventSerializer(serializers.Serializer[dict[str, Any]]):
    event = serializers.CharField(help_text="promote | rollout_result | revoke | rollback")
    recorded_at_ms = serializers.IntegerField()
    from_status = serializers.CharField(required=False, help_text=STATUS_HELP)
    to_status = serializers.CharField(help_text=STATUS_HELP)
    rollout_kind = serializers.CharField(required=False, help_text="verification | canary")
    run_id = serializers.CharField(required=False)
    session_id = serializers.CharField(required=False)
    success = serializers.BooleanField(required=False)
    definition_fingerprint = serializers.CharField(required=False)
    reason = serializers.CharField(required=False)


class LearningSkillViewSerializer(serializers.Serializer[dict[str, Any]]):
    """``LearningSkillView`` (spec §1.8)."""

    skill_name = serializers.CharField()
    source_learning_id = serializers.CharField()
    source_scope = inline_serializer(
        "LearningSkillSourceScope", fields={"kind": serializers.CharField(), "id": serializers.CharField()}
    )
    status = serializers.CharField(help_text=STATUS_HELP)
    description = serializers.CharField()
    when_to_use = serializers.CharField(allow_null=True)
    version = serializers.CharField(allow_null=True)
    instructions = serializers.CharField()
    skill_path = serializers.CharField()
    skill_root = serializers.CharField()
    digest = serializers.CharField()
    definition_fingerprint = serializers.CharField()
    runtime = SkillRuntimeConfigSerializer()
    evidence_refs = serializers.ListField(child=serializers.DictField())
    lifecycle_events = LearningSkillLifecycleEventSerializer(many=True)
    verification_status = serializers.CharField()
    successful_run_count = serializers.IntegerField()
    distinct_session_count = serializers.IntegerField()
    verifier_run_ids = serializers.ListField(child=serializers.CharField())
    real_daemon_verified = serializers.BooleanField()
    last_verified_workspace_digest = serializers.CharField(allow_null=True)
    canary_success_count = serializers.IntegerField()
    canary_failure_count = serializers.IntegerField()
    promoted_at_ms = serializers.IntegerField()
    revoked_at_ms = serializers.IntegerField(allow_null=True)
    revoked_reason = serializers.CharField(allow_null=True)


def _text(max_length: int, **kwargs: Any) -> StrictCharField:
    """Lenient at the edge (the service owns the rules and their literal messages), bounded in size."""
    return StrictCharField(
        required=False, allow_null=True, allow_blank=True, trim_whitespace=False, max_length=max_length, **kwargs
    )


@extend_schema_field({"type": "string", "enum": RolloutKind.values})
class RolloutKindField(StrictCharField):
    """verification | canary (``RolloutKind``), checked by the service with its literal message; the schema says
    so."""


@extend_schema_field({"type": "string", "nullable": True, "maxLength": 2000})
class SkillReasonField(StrictCharField):
    """At most 2,000 characters, checked by the service with its literal message; the schema says so."""


@extend_schema_field({"type": "string", "pattern": "^[A-Za-z0-9:_-]{1,64}$"})
class SkillNameField(StrictCharField):
    """A skill name (the service's rules, with their literal messages; the schema says so)."""


class CreateLearningSkillSerializer(StrictSerializer):
    field_help = {
        "skill_name": (
            "the skill's name (unique among promoted and catalog skills); the same name again moves its status"
        ),
        "description": "what the skill does (searched, shown to agents)",
        "when_to_use": "when an agent should use it (searched)",
        "version": "the skill's version label",
        "instructions": "the skill's instructions (the SKILL.md body)",
        "allowed_tools": "tools the skill may use",
        "blocked_tools": "tools the skill may not use",
        "context": "inline (default) | fork",
        "agent_profile": "the agent profile to run the skill with",
        "provider": "the model provider to run it with",
        "model": "the model to run it with",
        "fallback_model": "the model to fall back to",
        "status": listing(LADDER, {SkillStatus.DRAFT: "a new skill"}) + ": the rollout step to move to",
    }

    skill_name = SkillNameField(
        required=False, allow_null=True, allow_blank=True, trim_whitespace=False, max_length=1000
    )
    description = _text(10_000)
    when_to_use = _text(10_000)
    version = _text(1000)
    instructions = _text(100_000)
    allowed_tools = serializers.ListField(child=_text(1000), required=False, default=list, max_length=200)
    blocked_tools = serializers.ListField(child=_text(1000), required=False, default=list, max_length=200)
    context = _text(100)  # type: ignore[assignment]  # DRF allows the name; its stubs do not
    agent_profile = _text(1000)
    provider = _text(1000)
    model = _text(1000)
    fallback_model = _text(1000)
    status = _text(100)


class RolloutResultSerializer(StrictSerializer):
    field_help = {
        "run_id": "the run that exercised the skill",
        "expected_output_contains": "the text the run's latest output must contain to count as a success",
        "definition_fingerprint": "the definition the evidence is for (refused when the skill changed since)",
    }

    kind = RolloutKindField(max_length=40, help_text="verification | canary")
    run_id = StrictCharField(max_length=40)
    expected_output_contains = _text(10_000)
    definition_fingerprint = _text(200)


class SkillReasonSerializer(StrictSerializer):
    field_help = {
        "reason": "why (kept in the skill's lifecycle events and the audit trail)",
    }

    reason = SkillReasonField(
        required=False, allow_null=True, allow_blank=True, trim_whitespace=False, max_length=10_000
    )


# ---- helpers ----------------------------------------------------------------------------------------------


def _query(request: Request) -> str | None:
    return query_text(request)


# skills.selectors.without_server_paths is not annotated on this branch yet: the contract this module relies on


def _hide_paths(request: Request, item: dict[str, Any]) -> dict[str, Any]:
    """Agents see a skill's location relative to its skills directory (``code-review/SKILL.md``), never the
    server's absolute paths (issue 14.5), and a learning-skill record's evidence without another agent's run
    or session ids (``selectors.without_foreign_ids``); operators see them whole."""
    if caller_is_operator(request):
        return item
    if isinstance(item, dict) and "lifecycle_events" in item:
        item = selectors.without_foreign_ids([item], authenticated_user(request))[0]
    return selectors.without_server_paths(item)


def _visible_learnings(request: Request) -> QuerySet[Learning] | None:
    """What bounds the promoted skills a caller sees: for an agent the learnings it can see (a skill promoted
    from a project it is not granted stays out of every list and detail); ``None`` (all) for an operator."""
    if caller_is_operator(request):
        return None
    return Learning.objects.visible_to(request.user, operator=False)


def _shown(request: Request, item: dict[str, Any]) -> Response:
    return Response(_hide_paths(request, item))


def _paginated(view: _SkillsViewSet, request: Request, items: list[dict[str, Any]]) -> Response:
    page: list[dict[str, Any]] | None = view.paginate_queryset(items)  # type: ignore[arg-type]  # DRF pages any sequence; the stubs say QuerySet
    assert page is not None  # DEFAULT_PAGINATION_CLASS pages every list
    return view.get_paginated_response([_hide_paths(request, item) for item in page])


def _validated(serializer_class: type[StrictSerializer], request: Request) -> dict[str, Any]:
    body: object = request.data  # any JSON value (SafeJSONParser), or nothing
    data = body if body not in (None, "") else {}
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    validated: dict[str, Any] = serializer.validated_data
    return validated


# ---- the runtime catalog ----------------------------------------------------------------------------------


class _SkillsViewSet(viewsets.GenericViewSet[LearningSkill]):
    """Skill records are not one model's rows: no filter backend; pages of what the selectors return (the
    promoted skills' records are LearningSkill rows; catalog skills are files)."""

    filter_backends = []
    lookup_field = "name"
    # ``[\s\S]+`` (not ``[^/]+``): an encoded ``/`` in a hostile name reaches the name rules and gets a 400
    # instead of falling through to "unknown route", and a name with a newline (%0A) is a name too (a 400 or 404
    # problem), never Django's HTML 404. Django matches the router's ``^...$`` patterns whole (fullmatch).
    lookup_value_regex = r"[\s\S]+"


class SkillViewSet(_SkillsViewSet):
    """``GET /v1/skills`` and ``GET /v1/skills/{name}``: the runtime catalog."""

    @described(
        "List skills",
        "The runtime catalog: catalog skills plus active promoted skills, filtered by query (name, "
        "description, when_to_use). Agents see skill paths relative to the skills directory. Paged (limit, "
        f"offset). 400 for a query over {MAX_QUERY_CHARS} characters.",
        operation_id="skills_list",
        parameters=[query_parameter(), *page_parameters()],
        responses=paginated(SkillSummarySerializer),
    )
    def list(self, request: Request) -> Response:
        return _paginated(
            self, request, selectors.catalog_skills(_query(request), visible_learnings=_visible_learnings(request))
        )

    @described(
        "Get a skill",
        "One skill of the runtime catalog with its instructions (the SKILL.md body). 400 for a name "
        "the name rules refuse; 404 when no catalog or active promoted skill has that name.",
        operation_id="skills_retrieve",
        parameters=[NAME_PARAMETER],
        responses=SkillDetailSerializer,
    )
    def retrieve(self, request: Request, name: str) -> Response:
        return _shown(request, selectors.catalog_skill(name, visible_learnings=_visible_learnings(request)))


class SessionSkillViewSet(SessionScopedMixin, _SkillsViewSet):
    """``GET /v1/sessions/{session_id}/skills``."""

    @described(
        "Skills a session may see",
        "The skills a session's runs may use: catalog skills plus promoted skills active for the "
        "session's learning scopes (canary ones for canary sessions), filtered by query. Paged (limit, offset). "
        "404 when the session is not the calling agent's.",
        operation_id="sessions_skills_list",
        parameters=[query_parameter(), *page_parameters()],
        responses=paginated(SkillSummarySerializer),
    )
    def list(self, request: Request, session_id: str) -> Response:
        session = self.get_visible_session(session_id)
        skills = selectors.session_visible_skills(
            session=session, scope_keys=learning_scope_keys(session), query=_query(request)
        )
        return _paginated(self, request, skills)


# ---- promotion and governance -----------------------------------------------------------------------------


class PromoteSkillViewSet(_SkillsViewSet):
    """``POST /v1/learnings/{learning_id}/promote-skill`` (a singleton action under a learning)."""

    permission_classes = [IsOperator]

    @described(
        "Promote a learning to a skill",
        "Promotes a procedure learning to a skill (status draft unless given) or, for a skill already "
        "promoted from it, changes its definition or status (draft → verified → canary → active). Answers the "
        "skill record. 400 when the name, instructions or a tool list break the skill rules or contain a secret; "
        "404 for an unknown learning; 409 when the name is taken by another skill or the status change is not "
        "allowed (e.g. active without rollout evidence).",
        caller=OPERATOR,
        operation_id="learnings_promote_skill",
        request=CreateLearningSkillSerializer,
        responses=LearningSkillViewSerializer,
    )
    def submit(self, request: Request, learning_id: str) -> Response:
        data = _validated(CreateLearningSkillSerializer, request)
        from learnings.selectors import get_learning

        learning = get_learning(learning_id)
        promotion = services.PromotionRequest(
            skill_name=data.get("skill_name") or "",
            instructions=data.get("instructions") or "",
            description=data.get("description"),
            when_to_use=data.get("when_to_use"),
            version=data.get("version"),
            allowed_tools=tuple(data.get("allowed_tools") or ()),
            blocked_tools=tuple(data.get("blocked_tools") or ()),
            context=data.get("context") or "fork",
            agent_profile=data.get("agent_profile"),
            provider=data.get("provider"),
            model=data.get("model"),
            fallback_model=data.get("fallback_model"),
            status=data.get("status") or SkillStatus.DRAFT,
        )
        skill = services.skill_promote(learning=learning, request=promotion, actor=request.user)
        return _shown(request, selectors.learning_skill_view(selectors.get_learning_skill(skill.skill_name)))


class LearningSkillViewSet(_SkillsViewSet):
    """``/v1/learning-skills``: every promoted-skill record, and its governance actions (operators)."""

    operator_actions = frozenset({"rollout_result", "revoke", "rollback"})

    def get_permissions(self) -> Sequence[_SupportsHasPermission]:
        if self.action in self.operator_actions:
            return [IsOperator()]
        return super().get_permissions()

    @described(
        "List promoted skills",
        "Every promoted-skill record, whatever its status, filtered by source_learning_id and status. "
        "Paged (limit, offset).",
        operation_id="learning_skills_list",
        parameters=[
            OpenApiParameter("source_learning_id", str),
            OpenApiParameter("status", str, enum=[*SkillStatus.values, ""], description="blank: no filter"),
            *page_parameters(),
        ],
        responses=paginated(LearningSkillViewSerializer),
    )
    def list(self, request: Request) -> Response:
        qs = selectors.learning_skills(
            source_learning_id=request.query_params.get("source_learning_id"),
            status=request.query_params.get("status"),
            visible_learnings=_visible_learnings(request),
        )
        page = self.paginate_queryset(qs)
        assert page is not None  # DEFAULT_PAGINATION_CLASS pages every list
        views = [selectors.learning_skill_view(skill) for skill in page]
        if not caller_is_operator(request):  # one pass for the page: two queries, not two per record
            mine = selectors.without_foreign_ids(views, authenticated_user(request))
            views = [selectors.without_server_paths(v) for v in mine]
        return self.get_paginated_response(views)

    @described(
        "Get a promoted skill",
        "One promoted-skill record: its definition, status, lifecycle events and rollout evidence. 400 "
        "for a name the name rules refuse; 404 for an unknown skill.",
        operation_id="learning_skills_retrieve",
        parameters=[NAME_PARAMETER],
        responses=LearningSkillViewSerializer,
    )
    def retrieve(self, request: Request, name: str) -> Response:
        return _shown(
            request,
            selectors.learning_skill_view(
                selectors.get_learning_skill(name, visible_learnings=_visible_learnings(request))
            ),
        )

    @described(
        "Record rollout evidence",
        "Records the result of a verification or canary run of a promoted skill (kind, run_id; "
        "expected_output_contains is checked against the run's outputs). The evidence decides whether it may "
        "move to canary or active. 400 for an unknown kind; 404 for an unknown skill or run; 409 "
        "rollout_rejected (a revoked skill, a status that takes no evidence of that kind, a failed "
        "verification) or fingerprint_mismatch (definition_fingerprint is stale).",
        caller=OPERATOR,
        operation_id="learning_skills_rollout_result",
        parameters=[NAME_PARAMETER],
        request=RolloutResultSerializer,
        responses=LearningSkillViewSerializer,
    )
    @action(detail=True, methods=["post"], url_path="rollout-result")
    def rollout_result(self, request: Request, name: str) -> Response:
        data = _validated(RolloutResultSerializer, request)
        skill = services.skill_record_rollout(
            skill_name=name,
            kind=data["kind"],
            run_id=data["run_id"],
            expected_output_contains=data.get("expected_output_contains"),
            definition_fingerprint=data.get("definition_fingerprint"),
            actor=request.user,
        )
        return _shown(request, selectors.learning_skill_view(selectors.get_learning_skill(skill.skill_name)))

    @described(
        "Revoke a promoted skill",
        "Revokes a promoted skill (optional reason): it leaves every catalog and session view at once. "
        "Revoking a revoked skill answers it unchanged. 404 for an unknown skill.",
        caller=OPERATOR,
        operation_id="learning_skills_revoke",
        parameters=[NAME_PARAMETER],
        request=SkillReasonSerializer,
        responses=LearningSkillViewSerializer,
    )
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, name: str) -> Response:
        data = _validated(SkillReasonSerializer, request)
        skill = services.skill_revoke(skill_name=name, reason=data.get("reason"), actor=request.user)
        return _shown(request, selectors.learning_skill_view(selectors.get_learning_skill(skill.skill_name)))

    @described(
        "Roll back a promoted skill",
        "Restores the skill's newest active snapshot (its definition as it was when last active) and "
        "remounts it, with an optional reason. 404 for an unknown skill; 409 rollback_refused when the source "
        "learning is no longer an active procedure, no_rollback_snapshot when it was never active.",
        caller=OPERATOR,
        operation_id="learning_skills_rollback",
        parameters=[NAME_PARAMETER],
        request=SkillReasonSerializer,
        responses=LearningSkillViewSerializer,
    )
    @action(detail=True, methods=["post"])
    def rollback(self, request: Request, name: str) -> Response:
        data = _validated(SkillReasonSerializer, request)
        skill = services.skill_rollback(skill_name=name, reason=data.get("reason"), actor=request.user)
        return _shown(request, selectors.learning_skill_view(selectors.get_learning_skill(skill.skill_name)))
