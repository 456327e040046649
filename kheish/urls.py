from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.views import APIView

from kheish import ops
from kheish.api import runtime
from kheish.api.agents import AgentGrantsViewSet
from kheish.api.errors import JsonErrorsMixin
from kheish.api.learnings import LearningCandidateViewSet, LearningPolicyViewSet, LearningViewSet
from kheish.api.routers import V1Router, nested
from kheish.api.runs import RunViewSet, SessionRunsViewSet
from kheish.api.sessions import PersonaViewSet, ProjectViewSet, SessionViewSet
from kheish.api.skills import LearningSkillViewSet, PromoteSkillViewSet, SessionSkillViewSet, SkillViewSet
from kheish.console import console_urls
from memory.errors import NotFound

handler500 = "kheish.api.errors.server_error"  # database unavailable: 503 problem+json (issue 22.2)


class SchemaView(JsonErrorsMixin, SpectacularAPIView):
    pass


class DocsView(JsonErrorsMixin, SpectacularSwaggerView):
    pass


# Every /v1 endpoint: one router, one ViewSet per resource (kheish/api/routers.py says how singletons and nested
# collections are routed).
router = V1Router()
router.register("personas", PersonaViewSet, basename="persona")
router.register("projects", ProjectViewSet, basename="project")
router.register("sessions", SessionViewSet, basename="session")
router.register(nested("sessions", "session_id", "runs"), SessionRunsViewSet, basename="session-runs")
router.register(
    nested("sessions", "session_id", "memory-context"), runtime.MemoryContextViewSet, basename="memory-context"
)
router.register(
    nested("sessions", "session_id", "memory-search"), runtime.MemorySearchViewSet, basename="memory-search"
)
router.register(nested("sessions", "session_id", "skills"), SessionSkillViewSet, basename="session-skills")
router.register("runs", RunViewSet, basename="run")
router.register("runtime/run-memory-policy", runtime.RunMemoryPolicyViewSet, basename="run-memory-policy")
router.register("runtime/learning-policy", LearningPolicyViewSet, basename="learning-policy")
router.register("runtime/redaction-preview", runtime.RedactionPreviewViewSet, basename="redaction-preview")
router.register("status", runtime.StatusViewSet, basename="status")
router.register(nested("agents", "agent_id", "grants"), AgentGrantsViewSet, basename="agent-grants")
router.register("learning-candidates", LearningCandidateViewSet, basename="learning-candidate")
router.register("learnings", LearningViewSet, basename="learning")
router.register(
    nested("learnings", "learning_id", "promote-skill"), PromoteSkillViewSet, basename="learning-promote-skill"
)
router.register("skills", SkillViewSet, basename="skill")
router.register("learning-skills", LearningSkillViewSet, basename="learning-skill")


class UnknownRoute(APIView):
    schema = None

    def dispatch_unknown(self, request, *args, **kwargs):
        raise NotFound(f"unknown API route {request.path}", domain="api", code="route_not_found")

    get = post = put = patch = delete = dispatch_unknown


v1 = [
    path("schema/", SchemaView.as_view(), name="schema"),
    path("schema", SchemaView.as_view()),  # with or without the slash (issue 13.7)
    path("docs/", DocsView.as_view(url_name="schema"), name="docs"),
    path("docs", DocsView.as_view(url_name="schema")),
    *router.urls,
]

urlpatterns = [
    path("", ops.landing, name="landing"),
    path("favicon.svg", ops.favicon, name="favicon"),
    path("favicon.ico", ops.favicon),
    path("healthz", ops.healthz, name="healthz"),
    path("readyz", ops.readyz, name="readyz"),
    path("metrics", ops.metrics, name="metrics"),
    path("admin/memory/", include(console_urls())),  # the Memory console (before the admin: /admin/memory/)
    path("admin/", admin.site.urls),
    path("v1/", include(v1)),
    re_path(r"^v1/[\s\S]*\Z", UnknownRoute.as_view()),  # [\s\S]: a %0A in the path is an unknown route too
]
