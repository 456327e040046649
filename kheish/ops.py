"""Operations endpoints (issue 13.7): ``/healthz`` (process up; no auth, no data), ``/readyz`` (database and
broker reachable, else 503) and ``/metrics`` (Prometheus text, for an operator key or the bearer token in
``KHEISH_METRICS_TOKEN``).

``/metrics`` exports, with ``prometheus-client``:
- every counter in the database (``memory.metrics``: run-memory, learning capture, ...) as a Prometheus counter,
  ``run_memory.injected_total`` → ``kheish_run_memory_injected_total``; shared by web, worker and beat;
- gauges read at scrape time: runs by status, candidates by state, learnings by status, and the Celery queue
  depth (messages waiting in the broker);
- ``kheish_http_request_duration_seconds``, a request latency histogram by method, route and status class,
  filled by ``RequestMetricsMiddleware``. Under gunicorn (``PROMETHEUS_MULTIPROC_DIR``, set by
  ``kheish/gunicorn_conf.py``) every worker writes it to a file of its own and a scrape sums all of them, so
  whichever worker answers, ``/metrics`` shows the whole server; a process without that variable (tests,
  ``runserver``) keeps it in memory.
"""

from __future__ import annotations

import hmac
import json
import math
import os
import re
import time

from django.conf import settings
from django.db import connection
from django.db.models import Count
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest, multiprocess
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from rest_framework.exceptions import Throttled

from kheish.api.authentication import ApiKeyAuthentication
from kheish.api.errors import PROBLEM_CONTENT_TYPE, problem
from kheish.api.permissions import caller_is_operator

METRICS_TOKEN_ENV = "KHEISH_METRICS_TOKEN"
BROKER_TIMEOUT_S = 2.0

# prometheus-client chose its value class (memory or per-process files) when it was imported, from this variable.
MULTIPROCESS = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
REGISTRY = CollectorRegistry(auto_describe=True)
if MULTIPROCESS:
    multiprocess.MultiProcessCollector(REGISTRY)  # the sum of every worker's files, read at scrape time
REQUEST_LATENCY = Histogram(
    "kheish_http_request_duration_seconds",
    "HTTP request latency by method, route and status class",
    ["method", "route", "status"],
    registry=None if MULTIPROCESS else REGISTRY,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)


# --------------------------------------------------------------------------------------------------------
# The landing page, health and readiness


FAVICON_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">'
    '<rect width="32" height="32" rx="7" fill="#264b5d"/>'
    '<path d="M9 7v18M9 16l10-9M12.5 13l7.5 12" stroke="#f5dd5d" stroke-width="3.2" fill="none" '
    'stroke-linecap="round" stroke-linejoin="round"/></svg>'
)
"""The service's icon (a "K" on the admin's blue), served at /favicon.svg and /favicon.ico so that no page's
browser request for an icon is a 404 (issue 25.5)."""


@require_GET
def favicon(request):
    response = HttpResponse(FAVICON_SVG, content_type="image/svg+xml")
    response["Cache-Control"] = "public, max-age=86400"
    return response


@require_GET
def landing(request):
    """``/``: where the admin's "View site" goes. Says what runs here and where to go next."""
    return render(request, "admin/landing.html", {"site_header": "Kheish Memory"})


@never_cache
@require_GET
def healthz(request):
    """The process is up and answering. Touches nothing else, needs no key, returns no data."""
    return JsonResponse({"status": "ok"})


def check_database() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # noqa: BLE001 - any failure means "not ready"
        return f"{type(exc).__name__}"
    return None


def _broker_connection():
    from kombu import Connection

    return Connection(
        settings.CELERY_BROKER_URL,
        connect_timeout=BROKER_TIMEOUT_S,
        transport_options=getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", None) or {},
    )


def check_broker() -> str | None:
    try:
        with _broker_connection() as conn:
            conn.ensure_connection(max_retries=1, timeout=BROKER_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}"
    return None


@never_cache
@require_GET
def readyz(request):
    """200 when the database answers and the Celery broker accepts a connection; 503 naming what failed
    (only the check's name and the error class: no addresses, no data)."""
    checks = {"database": check_database(), "broker": check_broker()}
    body = {
        "status": "ok" if not any(checks.values()) else "unavailable",
        "checks": {name: ("ok" if error is None else f"failed: {error}") for name, error in checks.items()},
    }
    return JsonResponse(body, status=200 if body["status"] == "ok" else 503)


# --------------------------------------------------------------------------------------------------------
# Metrics


def prometheus_name(counter: str) -> str:
    name = re.sub(r"[^a-zA-Z0-9_]", "_", counter)
    return "kheish_" + name.removesuffix("_total")


def queue_depth() -> int | None:
    """Messages waiting in the default Celery queue (None when the broker cannot say)."""
    queue = getattr(settings, "CELERY_TASK_DEFAULT_QUEUE", "celery")
    try:
        with _broker_connection() as conn:
            conn.ensure_connection(max_retries=1, timeout=BROKER_TIMEOUT_S)
            try:
                return int(conn.default_channel.queue_declare(queue=queue, passive=True).message_count)
            except conn.channel_errors:  # no such queue yet: nothing was ever queued, or all of it was taken
                return 0
    except Exception:  # noqa: BLE001 - the broker is down: no gauge rather than a wrong one
        return None


class DatabaseCollector:
    """Reads the shared counters and the state gauges at scrape time."""

    def describe(self):  # nothing to read at registration (no database then)
        return []

    def collect(self):
        from learnings.models import Learning, LearningCandidate
        from memory.metrics import read_prefix
        from memory.models import Run

        for name, value in sorted(read_prefix("").items()):
            family = CounterMetricFamily(prometheus_name(name), f"counter {name}")
            family.add_metric([], int(value))
            yield family
        for metric, help_text, label, rows in (
            (
                "kheish_runs",
                "runs by status (queued = runs waiting)",
                "status",
                Run.objects.values_list("status").annotate(n=Count("pk")),
            ),
            (
                "kheish_learning_candidates",
                "learning candidates by state",
                "state",
                LearningCandidate.objects.values_list("state").annotate(n=Count("pk")),
            ),
            (
                "kheish_learnings",
                "learnings by status",
                "status",
                Learning.objects.values_list("status").annotate(n=Count("pk")),
            ),
        ):
            family = GaugeMetricFamily(metric, help_text, labels=[label])
            for value, n in rows.order_by():
                family.add_metric([value], n)
            yield family
        depth = queue_depth()
        if depth is not None:
            family = GaugeMetricFamily(
                "kheish_celery_queue_depth", "messages waiting in the Celery queue", labels=["queue"]
            )
            family.add_metric([getattr(settings, "CELERY_TASK_DEFAULT_QUEUE", "celery")], depth)
            yield family


REGISTRY.register(DatabaseCollector())


def metrics_token() -> str:
    return getattr(settings, "KHEISH_METRICS_TOKEN", None) or os.environ.get(METRICS_TOKEN_ENV, "")


def metrics_access(request) -> str:
    """``"allowed"`` (the metrics token or an operator key), ``"forbidden"`` (a valid key that is not an
    operator's: 403) or ``"unauthenticated"`` (no or an invalid credential: 401)."""
    header = request.headers.get("Authorization", "")
    scheme, _, credential = header.partition(" ")
    if scheme.lower() != "bearer" or not credential.strip():
        return "unauthenticated"
    credential = credential.strip()
    token = metrics_token()
    if token and hmac.compare_digest(credential.encode(), token.encode()):
        return "allowed"
    try:
        result = ApiKeyAuthentication().authenticate(request)
    except Throttled:  # past the auth-failure limits, as on /v1: the caller answers 429
        raise
    except Exception:  # noqa: BLE001 - an invalid key is simply not allowed
        return "unauthenticated"
    if result is None:
        return "unauthenticated"
    request.user, request.auth = result
    return "allowed" if caller_is_operator(request) else "forbidden"


def metrics_allowed(request) -> bool:
    return metrics_access(request) == "allowed"


@never_cache
@require_GET
def metrics(request):
    try:
        access = metrics_access(request)
    except Throttled as exc:  # bad keys are counted and limited as on /v1 (kheish.api.throttling)
        wait = max(1, math.ceil(exc.wait or 1))
        body = problem(
            429,
            domain=getattr(exc, "problem_domain", "api"),
            code=getattr(exc, "problem_code", "throttled"),
            detail=str(exc.detail),
            extra={"retry_after": wait},
        )
        response = HttpResponse(json.dumps(body), status=429, content_type=PROBLEM_CONTENT_TYPE)
        response["Retry-After"] = str(wait)
        return response
    if access == "forbidden":
        return HttpResponse(
            "metrics need an operator API key or the KHEISH_METRICS_TOKEN bearer token; this key is an agent's\n",
            status=403,
            content_type="text/plain",
        )
    if access != "allowed":
        response = HttpResponse(
            "metrics need an operator API key or the KHEISH_METRICS_TOKEN bearer token\n",
            status=401,
            content_type="text/plain",
        )
        response["WWW-Authenticate"] = 'Bearer realm="kheish"'
        return response
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)


class RequestMetricsMiddleware:
    """Times every request into ``kheish_http_request_duration_seconds``. The route is the URL pattern
    (``v1/runs/<run_id>/complete``), never the raw path, so ids do not explode the label set."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = getattr(match, "route", None) or "unmatched"
        REQUEST_LATENCY.labels(request.method, route, f"{response.status_code // 100}xx").observe(
            time.perf_counter() - started
        )
        return response
