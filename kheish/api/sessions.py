"""/v1 personas, projects, sessions (Plane 1 surfaces: context, compaction, events)."""

from __future__ import annotations

from typing import Any, Protocol, cast, overload

from django.db.models import QuerySet
from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from kheish.api.fields import StrictCharField, StrictSerializer, StrictSlugField
from kheish.api.pagination import int_parameter, int_query_value
from kheish.api.permissions import OperatorWritesOnly, authenticated_user, caller_is_operator
from kheish.api.schema import OPERATOR, described
from memory import compaction, grants, public_ids, sessions
from memory.journal import log_entry
from memory.models import ACTIVE_STATUSES, JournalEvent, Persona, Project, Session

# ---- personas & projects ---------------------------------------------------------------------------------


class PersonaSerializer(serializers.ModelSerializer[Persona]):
    class Meta:
        model = Persona
        fields = ["persona_id", "version", "display_name", "soul", "capability_scope", "created_at_ms"]


class PersonaCreateSerializer(StrictSerializer):
    field_help = {
        "persona_id": "the persona's id (letters, digits, - and _), used in scope keys persona:<id>",
        "display_name": "the name people read",
        "version": "the persona's version; a session records the version it was bound to (default 1)",
        "soul": "the persona's standing instructions (free text, optional)",
        "capability_scope": "the capabilities sessions of this persona may use; omitted or null: any capability",
    }

    persona_id = StrictSlugField(max_length=120)
    display_name = StrictCharField(max_length=200)
    version = StrictCharField(max_length=40, required=False, default="1")
    soul = StrictCharField(required=False, allow_blank=True, default="", max_length=20000)
    capability_scope = serializers.ListField(
        child=StrictCharField(max_length=200), required=False, allow_null=True, default=None, max_length=200
    )


@extend_schema_view(
    list=described(
        "List personas",
        "The personas the caller may bind sessions to: an agent sees the personas an "
        "operator granted it (PUT /v1/agents/{agent_id}/grants), an operator sees all. Paged "
        "(limit, offset).",
    ),
    retrieve=described(
        "Get a persona",
        "One persona (its soul, version and capability scope). 404 when it does "
        "not exist or is not granted to the calling agent.",
    ),
)
class PersonaViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[Persona]):
    serializer_class = PersonaSerializer
    permission_classes = [OperatorWritesOnly]
    lookup_field = "persona_id"

    def get_queryset(self) -> QuerySet[Persona]:  # an agent sees the personas it was granted (memory.grants)
        if caller_is_operator(self.request):
            return Persona.objects.all()
        return grants.granted_personas(authenticated_user(self.request)).order_by("persona_id")

    @described(
        "Create a persona",
        "Creates a persona (an identity with a soul and a capability scope) that sessions can bind to; "
        "persona_id is a slug. 409 persona_exists when the id is taken.",
        caller=OPERATOR,
        request=PersonaCreateSerializer,
        responses={201: PersonaSerializer},
    )
    def create(self, request: Request) -> Response:
        data = PersonaCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        persona = sessions.persona_create(actor=request.user, **data.validated_data)
        return Response(PersonaSerializer(persona).data, status=status.HTTP_201_CREATED)


class ProjectSerializer(serializers.ModelSerializer[Project]):
    class Meta:
        model = Project
        fields = ["project_id", "name", "created_at_ms"]


class ProjectCreateSerializer(StrictSerializer):
    field_help = {
        "project_id": "the project's id (letters, digits, - and _), used in scope keys project:<id>",
        "name": "the name people read",
    }

    project_id = StrictSlugField(max_length=120)
    name = StrictCharField(max_length=200)


@extend_schema_view(
    list=described(
        "List projects",
        "The projects the caller may bind sessions to: an agent sees the projects an "
        "operator granted it, an operator sees all. Paged (limit, offset).",
    ),
    retrieve=described(
        "Get a project", "One project. 404 when it does not exist or is not granted to the calling agent."
    ),
)
class ProjectViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[Project]):
    serializer_class = ProjectSerializer
    permission_classes = [OperatorWritesOnly]
    lookup_field = "project_id"

    def get_queryset(self) -> QuerySet[Project]:  # an agent sees the projects it was granted (memory.grants)
        if caller_is_operator(self.request):
            return Project.objects.all()
        return grants.granted_projects(authenticated_user(self.request)).order_by("project_id")

    @described(
        "Create a project",
        "Creates a project (a learning scope sessions can bind to); project_id is a slug. 409 "
        "project_exists when the id is taken.",
        caller=OPERATOR,
        request=ProjectCreateSerializer,
        responses={201: ProjectSerializer},
    )
    def create(self, request: Request) -> Response:
        data = ProjectCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        project = sessions.project_create(actor=request.user, **data.validated_data)
        return Response(ProjectSerializer(project).data, status=status.HTTP_201_CREATED)


# ---- sessions --------------------------------------------------------------------------------------------


def _int_or_none(value: int | None) -> int | None:
    return None if value is None else int(value)


class SessionSerializer(serializers.Serializer[Session]):
    session_id = StrictCharField(source="public_id")
    agent_id = StrictCharField(source="owner.username")
    persona_id = serializers.SerializerMethodField()
    project_ids = serializers.SerializerMethodField()
    capability_scope = serializers.JSONField()
    effective_capability_scope = serializers.SerializerMethodField()
    learning_scopes = serializers.SerializerMethodField()
    metadata = serializers.JSONField()
    created_at_ms = serializers.IntegerField()
    updated_at_ms = serializers.IntegerField()
    active_run_id = serializers.SerializerMethodField()

    def to_representation(self, instance: Session) -> dict[str, Any]:
        """The declared fields' values, computed directly: every session-scoped response renders one, and DRF's
        generic path deep-copies and binds the eleven fields for each serializer made. The declared fields still
        describe the response in the schema; ``tests/kheish/test_session_representation.py`` holds the two
        equal."""
        return {
            "session_id": str(instance.public_id),
            "agent_id": str(instance.owner.username),
            "persona_id": self.get_persona_id(instance),
            "project_ids": self.get_project_ids(instance),
            "capability_scope": instance.capability_scope,
            "effective_capability_scope": self.get_effective_capability_scope(instance),
            "learning_scopes": self.get_learning_scopes(instance),
            "metadata": instance.metadata,
            "created_at_ms": _int_or_none(instance.created_at_ms),
            "updated_at_ms": _int_or_none(instance.updated_at_ms),
            "active_run_id": self.get_active_run_id(instance),
        }

    def get_persona_id(self, obj: Session) -> str | None:
        return obj.persona.persona_id if obj.persona is not None else None

    def get_project_ids(self, obj: Session) -> list[str]:
        return sessions.project_ids(obj)

    def get_effective_capability_scope(self, obj: Session) -> list[str] | None:
        return sessions.effective_capability_scope(obj)

    def get_learning_scopes(self, obj: Session) -> list[str]:
        keys = self.context.get("learning_scopes")  # a list page: read for the whole page at once
        return keys[obj.pk] if keys and obj.pk in keys else sessions.learning_scope_keys(obj)

    def get_active_run_id(self, obj: Session) -> str | None:
        if hasattr(obj, "active_run_pk"):  # annotated (sessions.with_read_annotations)
            return public_ids.run_id(obj.active_run_pk) if obj.active_run_pk is not None else None
        cache = getattr(obj, "_prefetched_objects_cache", {})
        if "runs" in cache:
            active = [r for r in cache["runs"] if r.status in ACTIVE_STATUSES]
            return active[0].public_id if active else None
        pk = obj.runs.filter(status__in=ACTIVE_STATUSES).values_list("pk", flat=True).first()
        return public_ids.run_id(pk) if pk else None


class SessionCreateSerializer(StrictSerializer):
    field_help = {
        "persona_id": "bind the session to this persona (an agent: only a persona an operator granted it)",
        "project_ids": (
            "bind the session to these projects; their learnings become visible to it (an agent: only "
            "projects an operator granted it, else 403; an unknown id is 400)"
        ),
        "capability_scope": (
            "restrict the session to these capabilities (intersected with the persona's); omitted or null: "
            "no restriction"
        ),
        "metadata": "free-form JSON kept with the session (never read by the service)",
    }

    persona_id = StrictCharField(required=False, allow_null=True, default=None, max_length=120)
    project_ids = serializers.ListField(
        child=StrictCharField(max_length=120), required=False, default=list, max_length=200
    )
    capability_scope = serializers.ListField(
        child=StrictCharField(max_length=200), required=False, allow_null=True, default=None, max_length=200
    )
    metadata = serializers.DictField(required=False, default=dict)


class SessionFilter(filters.FilterSet):
    persona_id = filters.CharFilter(field_name="persona__persona_id")

    class Meta:
        model = Session
        fields = ["persona_id"]


class CompactSerializer(StrictSerializer):
    field_help = {
        "strategy": (
            "snip: keep the newest events that fit the budget (default) · autocompact: a model summary of "
            "the older events (needs KHEISH_LLM_*)"
        ),
        "budget_tokens": "the token budget the live context must fit after compaction; null: the session's default",
    }

    strategy = serializers.ChoiceField(choices=["snip", "autocompact"], required=False, default="snip")
    budget_tokens = serializers.IntegerField(
        required=False, allow_null=True, default=None, min_value=0, max_value=10_000_000
    )


class CheckpointSerializer(serializers.Serializer[dict[str, Any]]):
    compacted_until_offset = serializers.IntegerField()
    journal_digest = StrictCharField()
    prompt_summary = serializers.JSONField()
    prompt_window_id = StrictCharField()
    prompt_window_generation = serializers.IntegerField()
    prompt_window_started_after_offset = serializers.IntegerField()
    prompt_window_created_by = StrictCharField()
    compact_metadata = serializers.JSONField()
    restoration = serializers.JSONField(allow_null=True)
    canonical = serializers.JSONField()
    created_at_ms = serializers.IntegerField()


class LogEntrySerializer(serializers.Serializer[dict[str, Any]]):
    offset = serializers.IntegerField()
    timestamp_ms = serializers.IntegerField()
    run_id = StrictCharField(allow_null=True)
    event = serializers.JSONField()


class ContextSerializer(serializers.Serializer[dict[str, Any]]):
    session_id = StrictCharField()
    checkpoint = CheckpointSerializer(allow_null=True)
    events = LogEntrySerializer(many=True)
    estimated_tokens = serializers.IntegerField()
    budget_tokens = serializers.IntegerField()
    truncated = serializers.BooleanField()


@overload
def parse_int_param(request: Request, name: str, *, default: int, minimum: int = ..., maximum: int = ...) -> int: ...
@overload
def parse_int_param(
    request: Request, name: str, *, default: None, minimum: int = ..., maximum: int = ...
) -> int | None: ...
def parse_int_param(
    request: Request, name: str, *, default: int | None, minimum: int = 0, maximum: int = 10_000_000
) -> int | None:
    """An integer query parameter in [minimum, maximum] (``kheish.api.pagination.int_query_value``: ASCII digits,
    given once); the schema states the same range (``int_parameter``)."""
    return int_query_value(request, name, default=default, minimum=minimum, maximum=maximum)


class _View(Protocol):
    """What the mixin needs of the view it is mixed into."""

    request: Request


class SessionScopedMixin:
    """get_queryset() is always the caller's sessions (operators: all)."""

    def session_queryset(self: _View) -> QuerySet[Session]:
        """One statement per session read: its persona and owner joined, its project ids and its active run
        carried as annotations (``sessions.project_ids`` and ``SessionSerializer`` read them) rather than two
        prefetch queries - every session-scoped call (reads, memory-search, opening a run) starts here."""
        return sessions.with_read_annotations(
            sessions.sessions_visible_to(authenticated_user(self.request), operator=caller_is_operator(self.request))
        )

    def get_visible_session(self: _View, session_id: str) -> Session:
        return sessions.get_visible_session(
            session_id, authenticated_user(self.request), operator=caller_is_operator(self.request)
        )


class SessionViewSet(SessionScopedMixin, viewsets.GenericViewSet[Session]):
    serializer_class = SessionSerializer
    filterset_class = SessionFilter
    lookup_field = "session_id"
    lookup_value_regex = "[^/]+"

    def get_queryset(self) -> QuerySet[Session]:
        return self.session_queryset()

    @described(
        "List sessions",
        "The caller's sessions (an operator: every agent's), optionally filtered by persona_id. Paged (limit, offset).",
    )
    def list(self, request: Request) -> Response:
        qs = self.filter_queryset(self.get_queryset())
        page = cast(list[Session], self.paginate_queryset(qs))  # REST_FRAMEWORK pages every list
        context = {"learning_scopes": sessions.learning_scope_keys_many(list(page))}
        # the stubs take one instance, never the list many=True takes
        serializer = SessionSerializer(page, many=True, context=context)  # type: ignore[arg-type]
        return self.get_paginated_response(serializer.data)

    @described(
        "Open a session",
        "Opens a session owned by the caller, optionally bound to a persona and projects (which decide the "
        "learning scopes its runs read and write). 403 binding_not_granted when the calling agent was not "
        "granted them - the same answer whether or not they exist; an operator gets 400 for an unknown "
        "persona or project.",
        request=SessionCreateSerializer,
        responses={201: SessionSerializer},
    )
    def create(self, request: Request) -> Response:
        data = SessionCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        session = sessions.session_create(
            owner=authenticated_user(request), operator=caller_is_operator(request), **data.validated_data
        )
        session = self.get_visible_session(session.public_id)
        return Response(SessionSerializer(session).data, status=status.HTTP_201_CREATED)

    @described(
        "Get a session",
        "One session, with its learning scopes and its active run id (null when no run "
        "is queued, running or waiting). 404 when it is not the calling agent's.",
    )
    def retrieve(self, request: Request, session_id: str) -> Response:
        return Response(SessionSerializer(self.get_visible_session(session_id)).data)

    @described(
        "Live context of a session",
        "The session's journal since its latest compaction checkpoint, as the model would see it, with a "
        "token estimate; budget_tokens cuts it to a budget (truncated: true). 404 when the session is not "
        "the calling agent's.",
        responses=ContextSerializer,
        parameters=[int_parameter("budget_tokens", minimum=0, maximum=10_000_000)],
    )
    @action(detail=True, methods=["get"])
    def context(self, request: Request, session_id: str) -> Response:
        session = self.get_visible_session(session_id)
        budget = parse_int_param(request, "budget_tokens", default=None)
        return Response(compaction.live_context(session, budget_tokens=budget).as_dict(session))

    @described(
        "Compact a session",
        "Writes a compaction checkpoint: the journal up to now is summarised (strategy snip or "
        "autocompact) and the live context starts after it. 404 when the session is not the calling "
        "agent's.",
        request=CompactSerializer,
        responses=CheckpointSerializer,
    )
    @action(detail=True, methods=["post"])
    def compact(self, request: Request, session_id: str) -> Response:
        session = self.get_visible_session(session_id)
        data = CompactSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        cp = compaction.compact(session=session, actor=request.user, **data.validated_data)
        return Response(compaction.checkpoint_view(cp))

    @described(
        "Journal events of a session",
        "The session's journal, oldest first, after after_offset (the offset of the last event you hold). "
        "Paged (limit, offset). 404 when the session is not the calling agent's.",
        responses=LogEntrySerializer(many=True),
        parameters=[int_parameter("after_offset", minimum=0, maximum=2**62)],
    )
    @action(detail=True, methods=["get"], filterset_class=None)
    def events(self, request: Request, session_id: str) -> Response:
        session = self.get_visible_session(session_id)
        after = parse_int_param(request, "after_offset", default=0, maximum=2**62)
        qs = JournalEvent.objects.filter(session=session, offset__gt=after).order_by("offset")
        # a page of another model than the view's: the stubs type paginate_queryset by the view's model
        page = cast(list[JournalEvent], self.paginate_queryset(qs))  # type: ignore[arg-type]
        return self.get_paginated_response([log_entry(e) for e in page])
