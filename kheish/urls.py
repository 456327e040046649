from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import SimpleRouter
from rest_framework.views import APIView

from kheish import ops
from kheish.api import agents as agents_api
from kheish.api import learnings as learnings_api
from kheish.api import runtime
from kheish.api import skills as skills_api
from kheish.api.errors import JsonErrorsMixin
from kheish.api.runs import RunViewSet, SessionRunsViewSet
from kheish.api.sessions import PersonaViewSet, ProjectViewSet, SessionViewSet
from kheish.console import console_urls
from memory.errors import NotFound

handler500 = "kheish.api.errors.server_error"  # database unavailable: 503 problem+json (issue 22.2)


class SchemaView(JsonErrorsMixin, SpectacularAPIView):
    pass


class DocsView(JsonErrorsMixin, SpectacularSwaggerView):
    pass

router = SimpleRouter(trailing_slash=False)
router.register("personas", PersonaViewSet, basename="persona")
router.register("projects", ProjectViewSet, basename="project")
router.register("sessions", SessionViewSet, basename="session")
router.register("runs", RunViewSet, basename="run")


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
    path("sessions/<str:session_id>/runs", SessionRunsViewSet.as_view({"post": "create"}), name="session-runs"),
    path("sessions/<str:session_id>/memory-context", runtime.MemoryContextView.as_view(), name="memory-context"),
    path("sessions/<str:session_id>/memory-search", runtime.MemorySearchView.as_view(), name="memory-search"),
    path("runtime/run-memory-policy", runtime.RunMemoryPolicyView.as_view(), name="run-memory-policy"),
    path("runtime/redaction-preview", runtime.RedactionPreviewView.as_view(), name="redaction-preview"),
    path("status", runtime.StatusView.as_view(), name="status"),
    *router.urls,
    *agents_api.urlpatterns,
    *learnings_api.urlpatterns,
    *skills_api.urlpatterns,
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
