"""The worked scenario of the design document (memory-planes.md, "a preference from statement to recall"),
end to end through the API with a real Celery worker consuming from Redis.

Redis: ``KHEISH_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/15``); skipped when unreachable. Every
broker key carries a per-test prefix, so concurrent runs on the same Redis database do not steal each other's
tasks. The database is used transactionally (committed), so the worker thread sees what the API wrote; this
needs a database other threads can open (PostgreSQL, as ``make test`` and CI provide).
"""

from __future__ import annotations

import os
import time
import uuid

import pytest
from kombu import pools as kombu_pools

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

REDIS_URL = os.environ.get("KHEISH_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
STATEMENT = "Preference: always report sizes in gigabytes, not gibibytes."
QUESTION = "Report the disk usage sizes for /var."
WAIT_SECONDS = 20


@pytest.fixture
def redis_worker(transactional_db, llm_unconfigured):
    """A Celery worker thread on Redis; tasks are really sent through the broker (not eager)."""
    try:
        import redis

        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1, socket_timeout=2)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means "no Redis here"
        pytest.skip(f"Redis is unreachable at {REDIS_URL}: {exc}")
    from celery.contrib.testing.worker import start_worker

    from kheish.celery import app

    prefix = f"kheish-test-{uuid.uuid4().hex[:12]}:"
    keys = (
        "broker_url",
        "task_always_eager",
        "task_eager_propagates",
        "broker_transport_options",
        "broker_connection_retry_on_startup",
    )
    saved = {key: app.conf.get(key) for key in keys}
    app.conf.update(
        broker_url=REDIS_URL,
        task_always_eager=False,
        task_eager_propagates=False,
        broker_transport_options={"global_keyprefix": prefix},
        broker_connection_retry_on_startup=False,
    )
    _reset_producer_pool(app)
    try:
        with start_worker(app, perform_ping_check=False, pool="solo", loglevel="WARNING", shutdown_timeout=20):
            yield app
    finally:
        app.conf.update(saved)
        _reset_producer_pool(app)
        for key in client.scan_iter(match=f"{prefix}*"):
            client.delete(key)


def _reset_producer_pool(app) -> None:
    """Forget broker connections made under the previous configuration (what Celery does after a fork)."""
    pool = getattr(app, "_pool", None)
    if pool is not None:
        pool.force_close_all()
        app._pool = None
    amqp = app.__dict__.get("amqp")
    if amqp is not None:
        amqp._producer_pool = None
    kombu_pools.reset()  # kombu's global producer registry still points at the closed pool otherwise


def wait_for(probe, what: str, timeout: float = WAIT_SECONDS):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


def run_to_completion(client, session_id: str, content: str, reply: str = "Noted.") -> dict:
    opened = client.post(f"/v1/sessions/{session_id}/runs", {"input": {"content": content}}, format="json")
    assert opened.status_code == 202, opened.content
    run = opened.json()
    assert client.post(f"/v1/runs/{run['run_id']}/start", {}, format="json").status_code == 200
    done = client.post(f"/v1/runs/{run['run_id']}/complete", {"output": {"content": reply}}, format="json")
    assert done.status_code == 200, done.content
    assert done.json()["status"] == "completed"
    return run


def learned_section(run: dict) -> dict | None:
    sections = {section["name"]: section for section in run["prompt"]["sections"]}
    return sections.get("learned_context")


def test_preference_from_statement_to_recall(redis_worker, api_client, operator_client, session_id):
    # 1. The operator lets automation act, with a rule allowing active publication of preferences.
    policy = {
        "mode": "enabled",
        "capture": {"run_summary_candidates": True, "semantic_candidates": {"enabled": True}},
        "publication": {"rules": [{"name": "prefs", "kind": "preference", "action": "publish_active"}]},
    }
    response = operator_client.post("/v1/runtime/learning-policy", {"policy": policy}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["learning_policy"]["mode"] == "enabled"

    # 2. The agent runs a session in which the user states a preference; the run completes.
    first = run_to_completion(api_client, session_id, STATEMENT)
    assert learned_section(first) is None

    # 3-5. The worker captures a daemon preference at 98, reviews it, verifies it against the run-memory
    # record and publishes it active + verified + automatic.
    def published():
        body = operator_client.get("/v1/learnings?policy_decision=automatic&status=active&kind=preference").json()
        return body["results"][0] if body["count"] else None

    learning = wait_for(published, "the automatic publication of the preference")
    assert learning["content"] == "always report sizes in gigabytes, not gibibytes"
    assert (learning["verification_status"], learning["policy_actor"], learning["publish_tier"]) == (
        "verified",
        "daemon",
        "active",
    )
    assert learning["scope"] == {"kind": "session", "id": session_id}
    assert learning["source"]["run_id"] == first["run_id"]
    candidate = api_client.get(f"/v1/learning-candidates/{learning['source_candidate_id']}").json()
    assert (candidate["origin"], candidate["confidence"], candidate["state"]) == ("daemon", 98, "published")
    assert candidate["evidence_refs"] == [{"run_id": first["run_id"], "note": "source run"}]
    assert candidate["automation_review"]["matched_rule_name"] == "prefs"
    summaries = operator_client.get("/v1/learning-candidates?kind=run_summary").json()["results"]
    assert any(c["source"]["run_id"] == first["run_id"] and c["sensitivity"] == "sensitive" for c in summaries)

    # 6. A later input in a session sharing the scope (the preference is session-scoped: this session)
    # asking about disk usage receives it in learned_context.
    second = run_to_completion(api_client, session_id, QUESTION)
    section = learned_section(second)
    assert section is not None and section["entries"] == [learning["learning_id"]]
    assert "always report sizes in gigabytes, not gibibytes" in section["content"]
    other_session = api_client.post("/v1/sessions", {}, format="json").json()["session_id"]
    assert (
        api_client.get(f"/v1/sessions/{other_session}/memory-context?query={QUESTION}").json()["learned_context"]
        is None
    )

    # 7. The operator supersedes it; the next run gets the new value only, the old one is kept, superseded.
    replaced = operator_client.post(
        f"/v1/learnings/{learning['learning_id']}/supersede",
        {"content": "always report sizes in gibibytes, not gigabytes"},
        format="json",
    )
    assert replaced.status_code == 200, replaced.content
    new = replaced.json()
    third = run_to_completion(api_client, session_id, QUESTION)
    section = learned_section(third)
    assert section is not None and section["entries"] == [new["learning_id"]]
    assert "always report sizes in gibibytes, not gigabytes" in section["content"]
    assert "in gigabytes, not gibibytes" not in section["content"]
    old = operator_client.get(f"/v1/learnings/{learning['learning_id']}").json()
    assert old["status"] == "superseded" and old["superseded_by"] == new["learning_id"]
    assert old["content"] == "always report sizes in gigabytes, not gibibytes"

    # The worker has drained every capture (the later runs had nothing labelled to learn).
    def captures_done():
        from memory.models import RunMemoryRecord

        return not RunMemoryRecord.objects.filter(semantic_capture="pending").exists()

    wait_for(captures_done, "every capture to finish")
