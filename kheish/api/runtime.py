"""/v1/runtime (policies, redaction preview), /v1/status, memory-context and memory-search."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import inline_serializer
from rest_framework import serializers, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from kheish import composition
from kheish.api.fields import StrictBooleanField, StrictCharField, StrictSerializer
from kheish.api.pagination import MAX_QUERY_CHARS, int_parameter, query_parameter, query_text
from kheish.api.permissions import IsOperator, caller_is_operator
from kheish.api.schema import OPERATOR, described, policy_request
from kheish.api.sessions import SessionScopedMixin, parse_int_param
from memory import run_memory, sql
from memory.errors import ValidationFailed
from memory.run_memory_policy import SEARCH_VISIBILITIES
from skills import selectors as skill_selectors

POLICY_RESPONSE = inline_serializer(
    "RuntimeSettingsView",
    fields={
        "run_memory_policy": serializers.JSONField(),
        "learning_policy": serializers.JSONField(),
        "revision": serializers.IntegerField(),
    },
)


def learning_policy_dict() -> dict[str, Any] | None:
    try:
        from learnings import policy_in_force
    except ModuleNotFoundError:
        return None
    return policy_in_force.current_policy().to_dict()


def parse_expected_revision(body: dict[str, object]) -> int | None:
    value = body.get("expected_revision")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationFailed("expected_revision must be a non-negative integer", field="expected_revision")
    return value


SEARCH_VISIBILITY_HELP = (
    "Which recovered runs memory-search shows: session_only - the session's own; learning_scopes - also the runs "
    "of sessions sharing a persona or project with it that both agents are granted now (never the workspace "
    "alone); workspace - every session's runs. Prompt injection is session-only whatever the value."
)


class RunMemoryPolicyViewSet(viewsets.ViewSet):
    permission_classes = [IsOperator]

    @described(
        "Get the run-memory policy",
        "The recovered-run-memory policy in force: whether finished runs are remembered, for how long, how "
        "many per session, how many enter a prompt, PII redaction and search visibility.",
        caller=OPERATOR,
        responses=inline_serializer(
            "RunMemoryPolicyConfig",
            fields={
                "enabled": serializers.BooleanField(),
                "retention_ms": serializers.IntegerField(),
                "max_tracked_per_session": serializers.IntegerField(),
                "max_prompt_entries": serializers.IntegerField(),
                "redact_pii": serializers.BooleanField(),
                "search_visibility": serializers.ChoiceField(
                    choices=SEARCH_VISIBILITIES, help_text=SEARCH_VISIBILITY_HELP
                ),
            },
        ),
    )
    def read(self, request: Request) -> Response:
        return Response(run_memory.current_policy().to_dict())

    @described(
        "Replace the run-memory policy",
        "Replaces the run-memory policy whole ({policy, expected_revision?}) and applies it (pruning "
        "records it no longer keeps; the report is in maintenance). 400 for an invalid policy; 409 when "
        "expected_revision is not the current revision (someone changed it first).",
        caller=OPERATOR,
        request=policy_request("SetRunMemoryPolicy", "run-memory"),
        responses=POLICY_RESPONSE,
    )
    def submit(self, request: Request) -> Response:
        body = request.data
        if not isinstance(body, dict):
            raise ValidationFailed("request body must be a JSON object", field="body")
        unknown = sorted(set(body) - {"policy", "expected_revision"})
        if unknown:
            raise ValidationFailed(
                f"unknown field {unknown[0]}", field=unknown[0], domain="runtime", code="invalid_run_memory_policy"
            )
        if "policy" not in body:
            raise ValidationFailed(
                "policy is required", field="policy", domain="runtime", code="invalid_run_memory_policy"
            )
        policy, revision, report = run_memory.set_policy(
            data=body["policy"], expected_revision=parse_expected_revision(body), actor=request.user
        )
        return Response(
            {
                "run_memory_policy": policy.to_dict(),
                "learning_policy": learning_policy_dict(),
                "revision": revision,
                "maintenance": report,
            }
        )


class RedactionPreviewSerializer(StrictSerializer):
    field_help = {
        "text": "the text to scrub (nothing is stored)",
        "redact_pii": "also redact PII (emails, phones, cards...), as run memory does (default true)",
    }

    text = StrictCharField(max_length=500_000, allow_blank=True, trim_whitespace=False)
    redact_pii = StrictBooleanField(required=False, default=True)


class RedactionPreviewViewSet(viewsets.ViewSet):
    permission_classes = [IsOperator]

    @described(
        "Preview redaction",
        "Scrubs a text as run memory would before storing it (secrets always; PII when redact_pii) and "
        "answers the result with counts by kind. Nothing is stored.",
        caller=OPERATOR,
        request=RedactionPreviewSerializer,
        responses=inline_serializer(
            "RedactionPreview",
            fields={
                "text": serializers.CharField(),
                "redaction_count": serializers.IntegerField(),
                "redactions": serializers.DictField(child=serializers.IntegerField()),
            },
        ),
    )
    def submit(self, request: Request) -> Response:
        data = RedactionPreviewSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        from memory.scrubbing import scrub

        result = scrub(data.validated_data["text"], redact_pii=data.validated_data["redact_pii"])
        return Response(
            {"text": result.text, "redaction_count": result.redaction_count, "redactions": result.redactions}
        )


class StatusViewSet(viewsets.ViewSet):
    @described(
        "Service status",
        "Whether the service is healthy and run memory is on. An agent gets health.ok and "
        "run_memory.enabled only; an operator also gets the counters, policies and maintenance reports, "
        "and learnings.screening: the candidates the memory-poisoning screen flagged (flagged_total, "
        "flagged_awaiting_review, flagged_published, flagged_rejected, by_category).",
        responses=inline_serializer(
            "StatusView",
            fields={
                "health": serializers.JSONField(),
                "run_memory": serializers.JSONField(),
                "session_memory": serializers.JSONField(),
                "learnings": serializers.JSONField(required=False, help_text="operators only"),
            },
        ),
    )
    def read(self, request: Request) -> Response:
        view = composition.status_view()
        if caller_is_operator(request):
            return Response(view)
        # Agents get what they need (issue 14.5): whether the service is healthy and whether run memory is on;
        # global counters, policies and maintenance reports are for operators.
        return Response(
            {
                "health": {"ok": view["health"]["ok"], "warnings": []},
                "run_memory": {"enabled": view["run_memory"]["policy"]["enabled"]},
                "session_memory": {},
            }
        )


class LearnedEntrySerializer(serializers.Serializer[dict[str, Any]]):
    learning_id = serializers.CharField()
    kind = serializers.CharField()
    published_at_ms = serializers.IntegerField()
    content = serializers.CharField()
    scope = inline_serializer(
        "LearnedEntryScope", fields={"kind": serializers.CharField(), "id": serializers.CharField(allow_null=True)}
    )


class LearnedContextSerializer(serializers.Serializer[dict[str, Any]]):
    """The learned_context section the next input would receive (null when no learning applies)."""

    entries = LearnedEntrySerializer(many=True)
    truncated = serializers.BooleanField()
    rendered = serializers.CharField(allow_null=True)


class RecoveredEntrySerializer(serializers.Serializer[dict[str, Any]]):
    run_id = serializers.CharField()
    recorded_at_ms = serializers.IntegerField()
    status = serializers.CharField()
    request_preview = serializers.CharField(allow_null=True)
    outcome_preview = serializers.CharField(allow_null=True)
    artifact_ids = serializers.ListField(child=serializers.CharField())
    failure_markers = serializers.ListField(child=serializers.CharField())
    summary = serializers.CharField()


class RecoveredMemorySerializer(serializers.Serializer[dict[str, Any]]):
    """The recovered_memory section the next input would receive (null when no finished run applies)."""

    entries = RecoveredEntrySerializer(many=True)
    truncated = serializers.BooleanField()
    rendered = serializers.CharField(allow_null=True)


class SearchResultSerializer(serializers.Serializer[dict[str, Any]]):
    kind = serializers.CharField(help_text="learning | recovered_run | skill")
    source_id = serializers.CharField()
    title = serializers.CharField()
    excerpt = serializers.CharField()
    score = serializers.FloatField()
    timestamp_ms = serializers.IntegerField()
    scope = serializers.CharField(allow_null=True)
    prompt_eligible = serializers.BooleanField(help_text="the hit would enter the next prompt")
    learning_status = serializers.CharField(required=False, allow_null=True)
    publish_tier = serializers.CharField(required=False, allow_null=True)
    verification_status = serializers.CharField(required=False, allow_null=True)
    matched_fields = serializers.ListField(child=serializers.CharField())


"""``skills.selectors.without_server_paths``, typed here while it is not annotated (calling an unannotated function
is an error under kheish.api's strict flags); a plain call once it is."""


class MemoryContextViewSet(SessionScopedMixin, viewsets.ViewSet):
    @described(
        "Preview a session's memory",
        "What the session's next input would receive, without side effects: the learned_context and "
        "recovered_memory sections (entries and rendered text) for query, and the skills it may see. 400 "
        f"for a query over {MAX_QUERY_CHARS} characters; 404 when the session is not the calling agent's.",
        parameters=[query_parameter()],
        responses=inline_serializer(
            "SessionMemoryContextView",
            fields={
                "session_id": serializers.CharField(),
                "effective_capability_scope": serializers.JSONField(),
                "learning_scopes": serializers.ListField(child=serializers.CharField()),
                "retrieval": serializers.DictField(help_text="the retrieval settings in force (ranker, budgets)"),
                "learned_context": LearnedContextSerializer(allow_null=True),
                "recovered_memory": RecoveredMemorySerializer(allow_null=True),
                "visible_skills": serializers.JSONField(),
            },
        ),
    )
    def read(self, request: Request, session_id: str) -> Response:
        session = self.get_visible_session(session_id)
        with sql.one_policy_read(getattr(session, "policies_read", None)):  # read with the session
            context = composition.memory_context(session, query_text(request))
        if not caller_is_operator(request):  # agents never see server paths (issue 19.7)
            context["visible_skills"] = [skill_selectors.without_server_paths(s) for s in context["visible_skills"]]
        return Response(context)


class MemorySearchViewSet(SessionScopedMixin, viewsets.ViewSet):
    @described(
        "Search a session's memory",
        "Ranked hits for query over what the session may see: published learnings of its scopes, its "
        "recovered runs and its visible skills (limit 1..50, default 12; prompt_eligible says whether a "
        f"hit would enter the next prompt). 400 for a query over {MAX_QUERY_CHARS} characters; 404 when the "
        "session is not the calling agent's.",
        parameters=[
            query_parameter(),
            int_parameter("limit", minimum=-(2**31), maximum=2**31, description="clamped to 1..50 (default 12)"),
        ],
        responses=inline_serializer(
            "SessionMemorySearchView",
            fields={
                "session_id": serializers.CharField(),
                "effective_capability_scope": serializers.JSONField(),
                "learning_scopes": serializers.ListField(child=serializers.CharField()),
                "query": serializers.CharField(allow_null=True),
                "truncated": serializers.BooleanField(),
                "results": SearchResultSerializer(many=True),
            },
        ),
    )
    def read(self, request: Request, session_id: str) -> Response:
        session = self.get_visible_session(session_id)
        limit = parse_int_param(request, "limit", default=12, minimum=-(2**31), maximum=2**31)
        limit = max(1, min(50, limit))
        with sql.one_policy_read(getattr(session, "policies_read", None)):  # read with the session
            return Response(composition.memory_search(session, query_text(request), limit))
