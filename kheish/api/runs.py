"""/v1 runs: open a run (with memory injection), run actions, lists and events."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypedDict, cast

from django.db import transaction
from django.db.models import QuerySet
from django_filters import rest_framework as filters
from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from kheish import composition
from kheish.api.fields import StrictBooleanField, StrictCharField, StrictSerializer
from kheish.api.pagination import int_parameter
from kheish.api.permissions import authenticated_user, caller_is_operator
from kheish.api.schema import described
from kheish.api.sessions import LogEntrySerializer, SessionScopedMixin, parse_int_param
from memory import public_ids
from memory import runs as run_service
from memory.errors import ValidationFailed
from memory.journal import log_entry
from memory.models import EventType, JournalEvent, Run, RunKind, RunStatus

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from rest_framework.decorators import ViewSetAction

OUTPUTS_IN_VIEW = 8
"""A run view carries at most this many outputs (the newest) ... """
OUTPUTS_VIEW_CHARS = 32_000
"""... and at most this much of their content (the newest output is cut to it, marked ``content_truncated``);
every output, whole, is paged at ``GET /v1/runs/{id}/outputs`` (issue 14.10)."""


def view_outputs(outputs: list[Any]) -> tuple[list[Any], bool]:
    """The newest outputs that fit the view's count and content budget, oldest first; and whether any was
    left out or cut. Outputs are the run's JSON items (dicts as the service writes them; anything else counts
    as no content)."""
    kept: list[Any] = []
    budget = OUTPUTS_VIEW_CHARS
    for output in reversed(outputs[-OUTPUTS_IN_VIEW:]):
        content = output.get("content") if isinstance(output, dict) else None
        text = content if isinstance(content, str) else ""
        size = len(text)
        if size > budget:
            if not kept:  # the newest output is always shown, cut to the budget
                kept.append({**output, "content": text[:budget], "content_truncated": True})
            break
        budget -= size
        kept.append(output)
    kept.reverse()
    return kept, len(kept) < len(outputs) or any(o.get("content_truncated") for o in kept if isinstance(o, dict))


class PromptSectionSerializer(serializers.Serializer[dict[str, Any]]):
    """One packed memory section a new run receives."""

    name = serializers.CharField(help_text="learned_context | recovered_memory")
    content = serializers.CharField(help_text="the fenced section text, as the model should receive it")
    entries = serializers.ListField(child=serializers.CharField(), help_text="the learning or run ids packed")
    truncated = serializers.BooleanField()


class RunPromptSerializer(serializers.Serializer[dict[str, Any]]):
    """The injection ledger of a run: what was put in front of the model, and its token estimate."""

    sections = PromptSectionSerializer(many=True)
    estimated_tokens = serializers.IntegerField(required=False)
    budget_tokens = serializers.IntegerField(required=False, allow_null=True)


class RunViewSerializer(serializers.Serializer[Run]):
    run_id = StrictCharField(source="public_id")
    session_id = serializers.SerializerMethodField()
    agent_id = StrictCharField(source="session.owner.username")
    kind = StrictCharField()
    status = StrictCharField()
    submitted_at_ms = serializers.IntegerField()
    updated_at_ms = serializers.IntegerField()
    started_at_ms = serializers.IntegerField(allow_null=True)
    finished_at_ms = serializers.IntegerField(allow_null=True)
    queued_position = serializers.SerializerMethodField()
    request = serializers.JSONField()
    input_attachments = serializers.SerializerMethodField()
    input_metadata = serializers.SerializerMethodField()
    pending_approval_ids = serializers.JSONField()
    pending_approvals = serializers.SerializerMethodField()
    pending_question_ids = serializers.JSONField()
    pending_questions = serializers.SerializerMethodField()
    outputs = serializers.SerializerMethodField(
        help_text=f"the newest outputs (at most {OUTPUTS_IN_VIEW}, "
        f"{OUTPUTS_VIEW_CHARS} characters of content); all "
        "of them at /v1/runs/{id}/outputs"
    )
    outputs_truncated = serializers.SerializerMethodField(
        help_text="some outputs are left out or cut: page them at /v1/runs/{id}/outputs"
    )
    deliveries = serializers.SerializerMethodField()
    error = StrictCharField(allow_null=True)
    prompt = RunPromptSerializer(allow_null=True)

    # The return annotations are the schema drf-spectacular serves for these fields.
    def get_session_id(self, obj: Run) -> str:
        return public_ids.session_id(obj.session_id)

    def get_queued_position(self, obj: Run) -> int | None:
        return 0 if obj.status == RunStatus.QUEUED else None

    def get_input_attachments(self, obj: Run) -> list[Any]:
        attachments: list[Any] = obj.input.get("attachments", [])
        return attachments

    def get_input_metadata(self, obj: Run) -> dict[str, Any] | None:
        metadata: dict[str, Any] | None = obj.input.get("metadata")
        return metadata

    def get_pending_approvals(self, obj: Run) -> list[Any]:
        return pending_requests(obj.pending_approval_ids, obj.pending_question)

    def get_pending_questions(self, obj: Run) -> list[Any]:
        return pending_requests(obj.pending_question_ids, obj.pending_question)

    def get_outputs(self, obj: Run) -> list[dict[str, Any]]:
        return view_outputs(obj.outputs or [])[0]

    def get_outputs_truncated(self, obj: Run) -> bool:
        return view_outputs(obj.outputs or [])[1]

    def get_deliveries(self, obj: Run) -> list[Any]:
        return []


def pending_requests(request_ids: list[str], question: str) -> list[dict[str, str]]:
    """``pending_approvals`` / ``pending_questions``: one item per request id, with the question the agent asked
    (``wait-for-approval`` / ``wait-for-user-question`` ``question``) when it asked one."""
    return [{"request_id": rid, "question": question} if question else {"request_id": rid} for rid in request_ids]


class RunView(TypedDict):
    """The RunView (spec §1.2), as ``run_view`` builds it."""

    run_id: str
    session_id: str
    agent_id: str
    kind: str
    status: str
    submitted_at_ms: int
    updated_at_ms: int
    started_at_ms: int | None
    finished_at_ms: int | None
    queued_position: int | None
    request: Any
    input_attachments: Any
    input_metadata: Any
    pending_approval_ids: Any
    pending_approvals: list[dict[str, str]]
    pending_question_ids: Any
    pending_questions: list[dict[str, str]]
    outputs: list[Any]
    outputs_truncated: bool
    deliveries: list[Any]
    error: str | None
    prompt: Any


def run_view(run: Run) -> RunView:
    """The RunView (spec §1.2) as a plain dict: the hot path of every run action, so it avoids building a
    serializer per response. RunViewSerializer above documents the same shape for the schema (a test keeps
    them in step)."""
    data = run.input or {}
    outputs, truncated = view_outputs(run.outputs or [])
    return {
        "run_id": run.public_id,
        "session_id": public_ids.session_id(run.session_id),
        "agent_id": run.session.owner.username,
        "kind": run.kind,
        "status": run.status,
        "submitted_at_ms": run.submitted_at_ms,
        "updated_at_ms": run.updated_at_ms,
        "started_at_ms": run.started_at_ms,
        "finished_at_ms": run.finished_at_ms,
        "queued_position": 0 if run.status == RunStatus.QUEUED else None,
        "request": run.request,
        "input_attachments": data.get("attachments", []),
        "input_metadata": data.get("metadata"),
        "pending_approval_ids": run.pending_approval_ids,
        "pending_approvals": pending_requests(run.pending_approval_ids, run.pending_question),
        "pending_question_ids": run.pending_question_ids,
        "pending_questions": pending_requests(run.pending_question_ids, run.pending_question),
        "outputs": outputs,
        "outputs_truncated": truncated,
        "deliveries": [],
        "error": run.error,
        "prompt": run.prompt,
    }


OUTPUTS_PAGE_MAX = 50


class RunOutputSerializer(serializers.Serializer[dict[str, Any]]):
    offset = serializers.IntegerField()
    run_id = serializers.CharField()
    session_id = serializers.CharField()
    content = serializers.CharField()
    artifacts = serializers.JSONField()


class RunOutputsPageSerializer(serializers.Serializer[dict[str, Any]]):
    count = serializers.IntegerField(help_text="how many outputs the run has")
    next = serializers.URLField(allow_null=True, help_text="the next page (null on the last page)")
    previous = serializers.URLField(allow_null=True, help_text="the previous page (null on the first page)")
    results = RunOutputSerializer(many=True)
    next_cursor = serializers.IntegerField(
        allow_null=True, help_text="kept for older clients: pass it as cursor for the next page (null on the last page)"
    )


def _metadata(value: object) -> object:
    """A run input's metadata: null (or absent) is none, ``{}``."""
    return {} if value is None else value


class RunInputSerializer(StrictSerializer):
    field_help = {
        "content": "the user's message for this turn (the canonical input, stored as sent)",
        "attachments": "attachments of the input (JSON items, at most 100), stored with it",
        "metadata": "free-form JSON kept with the input",
    }

    content = StrictCharField(max_length=200_000, trim_whitespace=False)
    attachments = serializers.ListField(child=serializers.JSONField(), required=False, default=list, max_length=100)
    metadata = serializers.JSONField(
        required=False,
        default=dict,
        allow_null=True,
        help_text="any JSON (null: none); at most KHEISH_MAX_METADATA_BYTES as JSON",
    )


class ModelHintSerializer(StrictSerializer):
    field_help = {
        "name": "the model the agent will call (recorded in the run's request)",
        "context_window": "the model's context window in tokens: the prompt budget for the memory sections",
        "max_output_tokens": "tokens reserved for the model's answer (taken off the budget)",
    }

    name = StrictCharField(required=False, max_length=200)
    context_window = serializers.IntegerField(required=False, min_value=1, max_value=100_000_000)
    max_output_tokens = serializers.IntegerField(required=False, min_value=0, max_value=100_000_000)


class RunOpenSerializer(StrictSerializer):
    field_help = {
        "input": "the user's turn",
        "kind": "the run kind (spec DaemonRunKind); input for a user turn (default)",
        "idempotency_key": (
            "makes the open safe to retry (same as the Idempotency-Key header): the same key and body answer "
            "the first run"
        ),
        "model": "the model the agent will call, to size the memory sections",
    }

    input = RunInputSerializer()
    kind = serializers.ChoiceField(choices=RunKind.choices, required=False, default=RunKind.INPUT)
    idempotency_key = StrictCharField(required=False, allow_blank=True, trim_whitespace=False, max_length=200)
    model = ModelHintSerializer(required=False)


class OutputSerializer(StrictSerializer):
    field_help = {
        "content": "the assistant text",
        "artifacts": "artifacts produced with this output (JSON items, at most 100)",
    }

    content = StrictCharField(max_length=200_000, trim_whitespace=False)
    artifacts = serializers.ListField(child=serializers.JSONField(), required=False, default=list, max_length=100)


class ToolCallStartedSerializer(StrictSerializer):
    field_help = {
        "call_id": "the agent's id for this tool call; tool-call-finished names it",
        "name": "the tool's name",
        "input": "the tool's arguments (any JSON)",
    }

    call_id = StrictCharField(max_length=200)
    name = StrictCharField(max_length=200)
    input = serializers.JSONField(required=False, default=None, allow_null=True)


class ToolCallFinishedSerializer(StrictSerializer):
    field_help = {
        "call_id": "the id tool-call-started gave (the call must be open)",
        "output": "the tool's result (any JSON)",
        "is_error": "the tool call failed",
    }

    call_id = StrictCharField(max_length=200)
    output = serializers.JSONField(required=False, default=None, allow_null=True)
    is_error = StrictBooleanField(required=False, default=False)


class WaitSerializer(StrictSerializer):
    field_help = {
        "request_ids": "the ids of the approvals or questions the run waits for (1 to 50)",
        "question": (
            "what the approver or the user is asked; kept on the run (pending_approvals / pending_questions) "
            "and in the journal until it resumes"
        ),
    }

    request_ids = serializers.ListField(child=StrictCharField(max_length=200), min_length=1, max_length=50)
    question = StrictCharField(required=False, default="", allow_blank=True, max_length=20_000)


class EmptySerializer(StrictSerializer):
    pass


class ResumeSerializer(StrictSerializer):
    field_help = {
        "resolution": "the answer or decision that unblocks the run (any JSON object; journaled)",
    }

    resolution = serializers.DictField(required=False, default=dict)


class CompleteOutputSerializer(StrictSerializer):
    field_help = {
        "content": "the final assistant text (recorded as one more output)",
    }

    content = StrictCharField(max_length=200_000, trim_whitespace=False)


class CompleteSerializer(StrictSerializer):
    field_help = {
        "output": "a final output to record before completing (optional)",
    }

    output = CompleteOutputSerializer(required=False)


class FailSerializer(StrictSerializer):
    field_help = {
        "error": "what went wrong (kept on the run and in its recovered-memory record, scrubbed)",
    }

    error = StrictCharField(max_length=20_000)


IDEMPOTENCY_KEY_MAX = 200
IDEMPOTENCY_KEY_HEADER = OpenApiParameter(
    "Idempotency-Key",
    str,
    OpenApiParameter.HEADER,
    required=False,
    description="Makes the open safe to retry: the same key with the same body answers the run the first request "
    "opened (202, no second run); with a different body it is 409 runs/idempotency_key_reused. Same "
    "meaning as the body's idempotency_key (send one or the other, or both equal; at most 200 "
    "characters, not blank). Keys are per session.",
)


def resolve_idempotency_key(request: Request, body_key: str | None) -> str | None:
    header = request.headers.get("Idempotency-Key")
    if header is not None and body_key is not None and header != body_key:
        raise ValidationFailed("Idempotency-Key header and idempotency_key body field differ", field="idempotency_key")
    key = body_key if body_key is not None else header
    if key is not None and not key.strip():
        raise ValidationFailed("idempotency key cannot be empty", field="idempotency_key")
    if key is not None and len(key) > IDEMPOTENCY_KEY_MAX:
        raise ValidationFailed(
            f"idempotency key may hold at most {IDEMPOTENCY_KEY_MAX} characters", field="idempotency_key"
        )
    return key


class SessionRunsViewSet(SessionScopedMixin, viewsets.GenericViewSet[Run]):
    """POST /v1/sessions/{session_id}/runs: open a run; the packed memory sections come back with it."""

    serializer_class = RunViewSerializer

    @described(
        "Open a run",
        "Submits an input to the session and opens a run (status queued); the answer carries the packed "
        "memory the model should receive (prompt.sections: learned_context, recovered_memory). Repeating "
        "it with the same Idempotency-Key (header or idempotency_key) answers the same run. 404 when the "
        "session is not the calling agent's; 409 when the session already has an active run.",
        request=RunOpenSerializer,
        responses={202: RunViewSerializer},
        parameters=[IDEMPOTENCY_KEY_HEADER],
    )
    def create(self, request: Request, session_id: str) -> Response:
        session = self.get_visible_session(session_id)
        data = RunOpenSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        body = data.validated_data
        key = resolve_idempotency_key(request, body.get("idempotency_key"))
        run = composition.open_run(
            session=session,
            run_input=run_service.RunInput(
                content=body["input"]["content"],
                attachments=body["input"].get("attachments", []),
                # any JSON value: RunInput.metadata says dict, canonical_input keeps another value whole
                metadata=cast("dict[str, Any]", _metadata(body["input"].get("metadata"))),
            ),
            kind=body["kind"],
            idempotency_key=key,
            model=body.get("model"),
            actor=authenticated_user(request),
        )
        return Response(run_view(run), status=status.HTTP_202_ACCEPTED)


class RunFilter(filters.FilterSet):
    session_id = filters.CharFilter(method="filter_session")
    status = filters.ChoiceFilter(choices=RunStatus.choices)
    kind = filters.ChoiceFilter(choices=RunKind.choices)

    class Meta:
        model = Run
        fields = ["session_id", "status", "kind"]

    def filter_session(self, queryset: QuerySet[Run], name: str, value: str) -> QuerySet[Run]:
        pk = public_ids.parse_id(value, public_ids.SESSION)
        return queryset.none() if pk is None else queryset.filter(session_id=pk)


RunAction = Callable[[Run, dict[str, Any], "User"], Run]
"""A run action: (the locked run, the validated body, the caller) → the updated run."""

ACTIONS: dict[str, tuple[type[StrictSerializer], RunAction]] = {
    "start": (EmptySerializer, lambda run, d, actor: run_service.run_start(run=run, actor=actor)),
    "output": (
        OutputSerializer,
        lambda run, d, actor: run_service.run_record_output(
            run=run, content=d["content"], artifacts=d["artifacts"], actor=actor
        ),
    ),
    "tool-call-started": (
        ToolCallStartedSerializer,
        lambda run, d, actor: run_service.run_tool_call_started(
            run=run, call_id=d["call_id"], name=d["name"], tool_input=d["input"], actor=actor
        ),
    ),
    "tool-call-finished": (
        ToolCallFinishedSerializer,
        lambda run, d, actor: run_service.run_tool_call_finished(
            run=run, call_id=d["call_id"], output=d["output"], is_error=d["is_error"], actor=actor
        ),
    ),
    "wait-for-approval": (
        WaitSerializer,
        lambda run, d, actor: run_service.run_wait_for_approval(
            run=run, request_ids=d["request_ids"], question=d["question"], actor=actor
        ),
    ),
    "wait-for-user-question": (
        WaitSerializer,
        lambda run, d, actor: run_service.run_wait_for_user_question(
            run=run, request_ids=d["request_ids"], question=d["question"], actor=actor
        ),
    ),
    "resume": (
        ResumeSerializer,
        lambda run, d, actor: run_service.run_resume(run=run, resolution=d["resolution"], actor=actor),
    ),
    "complete": (
        CompleteSerializer,
        lambda run, d, actor: run_service.run_complete(
            run=run, output=(d.get("output") or {}).get("content"), actor=actor
        ),
    ),
    "fail": (FailSerializer, lambda run, d, actor: run_service.run_fail(run=run, error=d["error"], actor=actor)),
    "interrupt": (EmptySerializer, lambda run, d, actor: run_service.run_interrupt(run=run, actor=actor)),
    "cancel": (EmptySerializer, lambda run, d, actor: run_service.run_cancel(run=run, actor=actor)),
}


ACTION_DOCS = {
    "start": "Start a queued run (queued → running). Body: {}.",
    "output": "Record an assistant output on a running run. Body: {content, artifacts?}.",
    "tool-call-started": "Record that a tool call started on a running run. Body: {call_id, name, input?}.",
    "tool-call-finished": "Record a tool call's result; the call must be open. Body: {call_id, output?, is_error?}.",
    "wait-for-approval": "Pause a running run for approvals (running → waiting_for_approval). "
    "Body: {request_ids, question?}; the question is kept in pending_approvals.",
    "wait-for-user-question": "Pause a running run for a user's answer (→ waiting_for_user_question). "
    "Body: {request_ids, question?}; the question is kept in pending_questions.",
    "resume": "Resume a waiting run (→ running). Body: {resolution?}.",
    "complete": "Complete the run (terminal), optionally with a final output. Body: {output?: {content}}. "
    "Repeating it on a completed run answers the run unchanged.",
    "fail": "Fail the run (terminal). Body: {error}. Repeating it on a failed run answers the run unchanged.",
    "interrupt": "Interrupt the run (terminal). Body: {}.",
    "cancel": "Cancel the run (terminal). Body: {}.",
}


RunActionView = Callable[["RunViewSet", Request, str], Response]


def _action_view(name: str) -> ViewSetAction[RunActionView]:
    serializer_class, call = ACTIONS[name]

    def view(self: RunViewSet, request: Request, run_id: str) -> Response:
        data = serializer_class(data=request.data)  # JSON null, [] or false is 400, not {} (issue 22.5)
        data.is_valid(raise_exception=True)
        with transaction.atomic():
            # One query checks visibility and takes the row lock the service would otherwise take again.
            run = run_service.get_locked_run(
                run_id, owner=None if caller_is_operator(request) else authenticated_user(request)
            )
            updated = call(run, data.validated_data, authenticated_user(request))
        updated.session = run.session  # same session; keeps the owner loaded for the view
        return Response(run_view(updated))

    view.__name__ = name.replace("-", "_")
    view.__doc__ = ACTION_DOCS[name]
    # extend_schema outside @action: @action replaces the function's kwargs, where the schema override lives
    handler: RunActionView = view
    as_action = action(detail=True, methods=["post"], url_path=name, filterset_class=None)(handler)
    return described(
        ACTION_DOCS[name].split(".")[0],
        f"{ACTION_DOCS[name]} Answers the updated run. 404 when the run is not the calling agent's; "
        "409 when the run's status does not allow the action (the problem names both statuses).",
        request=serializer_class,
        responses=RunViewSerializer,
        operation_id=f"runs_{name.replace('-', '_')}",
    )(as_action)


class RunViewSet(viewsets.GenericViewSet[Run]):
    serializer_class = RunViewSerializer
    filterset_class = RunFilter
    lookup_field = "run_id"
    lookup_value_regex = "[^/]+"

    def get_queryset(self) -> QuerySet[Run]:
        runs = Run.objects.select_related("session__owner")
        if caller_is_operator(self.request):
            return runs
        return runs.filter(session__owner=authenticated_user(self.request))  # an agent sees only its own sessions' runs

    def get_visible_run(self, run_id: str) -> Run:
        return run_service.get_run(run_id, queryset=self.get_queryset())

    @described(
        "List runs",
        "The caller's runs (an operator: every agent's), filtered by session_id, status and "
        "kind (blank: no filter, as on every list). Paged (limit, offset).",
        parameters=[
            OpenApiParameter("status", str, enum=[*RunStatus.values, ""], description="blank: no filter"),
            OpenApiParameter("kind", str, enum=[*RunKind.values, ""], description="blank: no filter"),
        ],
    )
    def list(self, request: Request) -> Response:
        qs = self.filter_queryset(self.get_queryset())
        page = self.paginate_queryset(qs)
        assert page is not None  # DEFAULT_PAGINATION_CLASS pages every list
        return self.get_paginated_response([run_view(run) for run in page])

    @described(
        "Get a run",
        "One run: its status, pending approvals and questions, the newest outputs and the "
        "memory it was given (prompt). 404 when it is not the calling agent's.",
    )
    def retrieve(self, request: Request, run_id: str) -> Response:
        return Response(run_view(self.get_visible_run(run_id)))

    @described(
        "Outputs of a run",
        "Every assistant output of the run, whole, oldest first (the run view carries only the newest). "
        "Paged like every list: {count, next, previous, results} with limit / offset (follow next). "
        "The older cursor form still works: cursor = the previous page's next_cursor (null on the last "
        "page). 400 for an offset, cursor or limit out of range; 404 when the run is not the calling "
        "agent's.",
        responses=RunOutputsPageSerializer,
        parameters=[
            int_parameter(
                "limit",
                minimum=1,
                maximum=OUTPUTS_PAGE_MAX,
                description=f"outputs per page, 1..{OUTPUTS_PAGE_MAX} (default 10)",
            ),
            int_parameter("offset", minimum=0, maximum=10_000_000, description="how many outputs to skip (default 0)"),
            int_parameter(
                "cursor",
                minimum=0,
                maximum=2**62,
                description="instead of offset: the next_cursor of the previous page",
            ),
        ],
    )
    @action(detail=True, methods=["get"], filterset_class=None, pagination_class=None)
    def outputs(self, request: Request, run_id: str) -> Response:
        """Every output of the run, whole, oldest first, from the journal (issues 14.10, 25.4)."""
        run = self.get_visible_run(run_id)
        cursor = parse_int_param(request, "cursor", default=None, maximum=2**62)
        offset = parse_int_param(request, "offset", default=0, maximum=10_000_000)
        limit = parse_int_param(request, "limit", default=10, minimum=1, maximum=OUTPUTS_PAGE_MAX)
        assert offset is not None and limit is not None  # an integer default answers an integer
        if cursor is not None and offset:
            raise ValidationFailed("send cursor or offset, not both", field="cursor")
        outputs = JournalEvent.objects.filter(
            run=run, type=EventType.MESSAGE_APPENDED, event__message__role="assistant"
        ).order_by("offset")
        if cursor is not None:
            rows = list(outputs.filter(offset__gt=cursor)[: limit + 1])
        else:
            rows = list(outputs[offset : offset + limit + 1])
        page = rows[:limit]
        more = len(rows) > limit
        results = [
            {
                "offset": e.offset,
                "run_id": run.public_id,
                "session_id": public_ids.session_id(run.session_id),
                "content": e.event["message"].get("content", ""),
                "artifacts": e.event["message"].get("artifacts", []),
            }
            for e in page
        ]
        url = request.build_absolute_uri(request.path)
        if cursor is not None:
            next_url = f"{url}?cursor={page[-1].offset}&limit={limit}" if more else None
            previous_url = None
        else:
            next_url = f"{url}?offset={offset + limit}&limit={limit}" if more else None
            previous_url = f"{url}?offset={max(offset - limit, 0)}&limit={limit}" if offset else None
        return Response(
            {
                "count": outputs.count(),
                "next": next_url,
                "previous": previous_url,
                "results": results,
                "next_cursor": page[-1].offset if more else None,
            }
        )

    @described(
        "Journal events of a run",
        "The journal events the run wrote (input, outputs, tool calls, status "
        "changes), oldest first. Paged (limit, offset). 404 when the run is not the calling agent's.",
        responses=LogEntrySerializer(many=True),
    )
    @action(detail=True, methods=["get"], filterset_class=None)
    def events(self, request: Request, run_id: str) -> Response:
        run = self.get_visible_run(run_id)
        qs = JournalEvent.objects.filter(run=run).order_by("offset")
        page = self.paginator.paginate_queryset(qs, request, view=self) if self.paginator is not None else None
        assert page is not None  # DEFAULT_PAGINATION_CLASS pages every list
        return self.get_paginated_response([log_entry(e) for e in page])

    start = _action_view("start")
    output = _action_view("output")
    tool_call_started = _action_view("tool-call-started")
    tool_call_finished = _action_view("tool-call-finished")
    wait_for_approval = _action_view("wait-for-approval")
    wait_for_user_question = _action_view("wait-for-user-question")
    resume = _action_view("resume")
    complete = _action_view("complete")
    fail = _action_view("fail")
    interrupt = _action_view("interrupt")
    cancel = _action_view("cancel")
