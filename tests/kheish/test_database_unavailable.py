"""A dead database is 503 problem+json with Retry-After, on /v1 and the console, never a 500 (issue 22.2); a
write that committed answers success even when its after-commit hook cannot queue its background work, and the
replay does that work later.

The database is made unreachable for real: the connection is closed and pointed at a socket directory where no
server listens, so every connect fails as it does when the embedded PostgreSQL is killed."""

from __future__ import annotations

import contextlib
import tempfile

import pytest
from django.db import connection
from django.test import Client
from kombu.exceptions import OperationalError as BrokerDown

from tests.conftest import client_for

pytestmark = pytest.mark.django_db(transaction=True)


@contextlib.contextmanager
def database_down():
    settings_dict = connection.settings_dict
    saved = (settings_dict.get("HOST"), settings_dict.get("PORT"), dict(settings_dict.get("OPTIONS") or {}))
    with tempfile.TemporaryDirectory(prefix="kheish-nodb-") as nowhere:
        connection.close()
        settings_dict["HOST"] = nowhere  # a socket directory without a server
        settings_dict["PORT"] = "5"
        settings_dict["OPTIONS"] = {k: v for k, v in saved[2].items() if k not in ("host", "port")}
        settings_dict["OPTIONS"]["connect_timeout"] = 2
        try:
            yield
        finally:
            connection.close()
            settings_dict["HOST"], settings_dict["PORT"], settings_dict["OPTIONS"] = saved


def assert_unavailable(response):
    assert response.status_code == 503, (response.status_code, response.content[:300])
    assert response["Content-Type"] == "application/problem+json"
    assert int(response["Retry-After"]) >= 1
    body = response.json()
    assert body["status"] == 503 and body["code"] == "database_unavailable"
    assert body["retry_after"] == int(response["Retry-After"])


def test_v1_routes_answer_503_with_retry_after_when_the_database_is_down(make_key):
    agent = client_for(make_key("db-down-agent").plaintext)
    operator = client_for(make_key("db-down-ops", role="operator").plaintext)
    sid = agent.post("/v1/sessions", {}, format="json").json()["session_id"]
    with database_down():
        for response in (
            agent.get("/v1/sessions"),
            agent.post("/v1/sessions", {}, format="json"),
            agent.get(f"/v1/sessions/{sid}/context"),
            agent.post(f"/v1/sessions/{sid}/runs", {"input": {"content": "x"}}, format="json"),
            agent.get("/v1/status"),
            operator.get("/v1/learnings"),
        ):
            assert_unavailable(response)
    assert agent.get("/v1/sessions").status_code == 200  # and back once it answers again


def test_the_console_answers_503_with_retry_after_when_the_database_is_down(django_user_model):
    staff = django_user_model.objects.create_superuser("db-down-operator", password="pw-not-used-here")
    console = Client(raise_request_exception=False)
    console.force_login(staff)
    assert console.get("/admin/").status_code == 200
    with database_down():
        for path in ("/admin/", "/admin/memory/run/", "/admin/login/"):
            assert_unavailable(console.get(path))
        assert_unavailable(
            Client(raise_request_exception=False).post("/admin/login/", {"username": "x", "password": "y"})
        )


def test_a_committed_complete_answers_success_when_its_capture_cannot_be_queued(make_key, monkeypatch):
    from learnings import tasks
    from learnings.models import LearningCandidate, LearningKind
    from memory.models import RunMemoryRecord

    agent = client_for(make_key("hook-agent").plaintext)
    sid = agent.post("/v1/sessions", {}, format="json").json()["session_id"]
    rid = agent.post(f"/v1/sessions/{sid}/runs", {"input": {"content": "sort the inbox"}}, format="json").json()[
        "run_id"
    ]
    agent.post(f"/v1/runs/{rid}/start", {}, format="json")

    def broker_down(*args, **kwargs):
        raise BrokerDown("[Errno 111] Connection refused")  # what Celery raises when it cannot publish

    monkeypatch.setattr(tasks.capture_run, "delay", broker_down)
    response = agent.post(f"/v1/runs/{rid}/complete", {"output": {"content": "sorted"}}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "completed"
    assert agent.get(f"/v1/runs/{rid}").json()["status"] == "completed"
    run_pk = int(rid.rpartition("-")[2])
    assert not LearningCandidate.objects.filter(source_run_id=run_pk, kind=LearningKind.RUN_SUMMARY).exists()
    # The claim was given back, so the next replay takes the run at once (not after the lease).
    assert RunMemoryRecord.objects.get(run_id=run_pk).capture_queued_at_ms is None
    monkeypatch.undo()
    assert tasks.replay_pending_captures() == {"queued": 1}
    assert LearningCandidate.objects.filter(source_run_id=run_pk, kind=LearningKind.RUN_SUMMARY).exists()
