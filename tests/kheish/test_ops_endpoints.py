"""Issue 13.7: /healthz, /readyz, /metrics, the landing page, and /v1/schema and /v1/docs with or without the
slash."""

from __future__ import annotations

import uuid

import pytest
from django.test import Client
from kombu import Connection, Exchange, Producer, Queue
from prometheus_client.parser import text_string_to_metric_families

from kheish import ops
from memory import metrics as counters
from tests.conftest import client_for

pytestmark = pytest.mark.django_db

MIDDLEWARE_PATH = "kheish.ops.RequestMetricsMiddleware"


def families(text: str) -> dict:
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_healthz_needs_no_key_and_says_nothing_else():
    response = Client().get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_checks_database_and_broker():
    response = Client().get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json() == {"status": "ok", "checks": {"database": "ok", "broker": "ok"}}


@pytest.mark.slow  # waits out the broker check's retry (2 s)
def test_readyz_is_503_when_the_broker_is_unreachable(settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    response = Client().get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["database"] == "ok" and body["checks"]["broker"].startswith("failed")
    assert "127.0.0.1" not in response.content.decode()  # no addresses leak


def test_readyz_is_503_when_the_database_fails(monkeypatch):
    monkeypatch.setattr(ops, "check_database", lambda: "OperationalError")
    response = Client().get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["database"] == "failed: OperationalError"


def test_metrics_refuse_anonymous_and_agent_callers(api_client):
    assert Client().get("/metrics").status_code == 401
    assert api_client.get("/metrics").status_code == 403  # a valid agent key: 403 (issue 25.4)
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer nope").status_code == 401


def test_metrics_with_the_configured_token(monkeypatch):
    monkeypatch.setenv(ops.METRICS_TOKEN_ENV, "scrape-me")
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    response = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")


def _enqueue(queue_name: str, count: int) -> None:
    """``count`` known messages on a queue of its own in the database broker (its own autocommit connection)."""
    queue = Queue(queue_name, Exchange(queue_name, type="direct"), routing_key=queue_name)
    with Connection("database://") as conn:
        producer = Producer(conn.channel(), exchange=queue.exchange, routing_key=queue.routing_key)
        for n in range(count):
            producer.publish({"n": n}, serializer="json", declare=[queue])


def _purge(queue_name: str) -> None:
    with Connection("database://") as conn:
        conn.default_channel.queue_purge(queue_name)


def test_metrics_export_counters_gauges_and_latency(operator_key, agent_key, session_id, settings):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, MIDDLEWARE_PATH]  # the lead adds it to settings.MIDDLEWARE
    # the queue-depth gauge reads the database broker: a queue of this test's own holding three known messages
    settings.CELERY_BROKER_URL = "database://"
    settings.CELERY_TASK_DEFAULT_QUEUE = queue_name = f"t-{uuid.uuid4().hex[:8]}"
    _enqueue(queue_name, 3)
    try:
        found = _scrape_after_a_run(operator_key, agent_key, session_id)
    finally:
        _purge(queue_name)
    depth = found["kheish_celery_queue_depth"].samples
    assert [(s.labels["queue"], s.value) for s in depth] == [(queue_name, 3)]
    latency = found["kheish_http_request_duration_seconds"]
    routes = {s.labels.get("route") for s in latency.samples if s.name.endswith("_count")}
    assert "v1/sessions/(?P<session_id>[^/]+)/runs$" in routes  # the router's pattern, not the raw path


def _scrape_after_a_run(operator_key, agent_key, session_id) -> dict:
    counters.increment_many({"run_memory.injected_total": 3, "learning.capture.semantic_candidates_total": 2})
    operator_client, api_client = client_for(operator_key.plaintext), client_for(agent_key.plaintext)
    opened = api_client.post(f"/v1/sessions/{session_id}/runs", {"input": {"content": "hi"}}, format="json")
    assert opened.status_code == 202

    response = operator_client.get("/metrics")

    assert response.status_code == 200
    found = families(response.content.decode())
    injected = found["kheish_run_memory_injected"]
    assert injected.type == "counter" and injected.samples[0].value >= 3
    assert found["kheish_learning_capture_semantic_candidates"].samples[0].value >= 2
    runs = {s.labels["status"]: s.value for s in found["kheish_runs"].samples}
    assert runs.get("queued") == 1
    assert "kheish_learning_candidates" in found and "kheish_learnings" in found
    return found


@pytest.mark.parametrize("path", ["/v1/schema", "/v1/schema/", "/v1/docs", "/v1/docs/"])
def test_schema_and_docs_with_or_without_the_slash(operator_key, path):
    response = client_for(operator_key.plaintext).get(path)
    assert response.status_code == 200, (path, response.status_code)


def test_landing_page_links_somewhere_useful(admin_client):
    response = Client().get("/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "Kheish Memory" in page and "/admin/memory/" in page and "/healthz" in page
