"""Plane 1 through the API: sessions, runs and their status machine, journal, context, compaction."""

from __future__ import annotations

import pytest

from memory.models import AuditEvent, JournalEvent, Run
from memory.runs import ALLOWED_TRANSITIONS, transition_allowed
from tests.conftest import assert_problem

pytestmark = pytest.mark.django_db


def open_run(client, session_id, content="hello there", **extra):
    body = {"input": {"content": content}, **extra}
    return client.post(f"/v1/sessions/{session_id}/runs", body, format="json")


def test_every_v1_endpoint_requires_authentication(anon_client, session_id):
    for method, path in [
        ("get", "/v1/sessions"),
        ("post", "/v1/sessions"),
        ("get", f"/v1/sessions/{session_id}"),
        ("get", "/v1/runs"),
        ("get", "/v1/status"),
        ("get", "/v1/schema/"),
        ("get", "/v1/docs/"),
        ("get", "/v1/runtime/run-memory-policy"),
        ("get", "/v1/personas"),
        ("post", f"/v1/sessions/{session_id}/runs"),
    ]:
        response = getattr(anon_client, method)(path)
        assert_problem(response, 401, "auth/unauthenticated")


def test_bad_api_key_is_rejected(session_id):
    from tests.conftest import client_for

    assert_problem(client_for("khm_deadbeef0000_nope").get("/v1/sessions"), 401)


def test_revoked_key_stops_working(api_client, agent_key):
    from memory.identity import api_key_revoke

    assert api_client.get("/v1/sessions").status_code == 200
    api_key_revoke(api_key=agent_key.api_key, actor="tests")
    assert_problem(api_client.get("/v1/sessions"), 401)


def test_unknown_route_is_problem_404(api_client):
    body = assert_problem(api_client.get("/v1/nope/never"), 404, "api/route_not_found")
    assert body["detail"] == "unknown API route /v1/nope/never"


def test_session_create_and_view(api_client, operator_client, agent, grant):
    operator_client.post(
        "/v1/personas",
        {"persona_id": "ops-bot", "display_name": "Ops", "capability_scope": ["shell", "web"]},
        format="json",
    )
    operator_client.post("/v1/projects", {"project_id": "atlas", "name": "Atlas"}, format="json")
    grant(agent, projects=["atlas"], personas=["ops-bot"])
    response = api_client.post(
        "/v1/sessions",
        {"persona_id": "ops-bot", "project_ids": ["atlas"], "capability_scope": ["web", "mail"], "metadata": {"a": 1}},
        format="json",
    )
    assert response.status_code == 201, response.content
    view = response.json()
    assert view["session_id"].startswith("session-")
    assert view["agent_id"] == "agent-one"
    assert view["effective_capability_scope"] == ["web"]
    assert view["learning_scopes"] == [
        f"session:{view['session_id']}",
        "persona:ops-bot",
        "project:atlas",
        "workspace:default",
    ]
    assert view["active_run_id"] is None
    listed = api_client.get("/v1/sessions?persona_id=ops-bot").json()
    assert listed["count"] == 1 and listed["results"][0]["session_id"] == view["session_id"]
    assert api_client.get("/v1/sessions?persona_id=other").json()["count"] == 0


def test_agents_cannot_create_personas(api_client):
    assert_problem(api_client.post("/v1/personas", {"persona_id": "x", "display_name": "X"}, format="json"), 403)


@pytest.mark.parametrize(
    "body,field",
    [
        ({"project_ids": "atlas"}, "project_ids"),
        ({"capability_scope": [1, 2]}, "capability_scope[0]"),
        ({"metadata": [1]}, "metadata"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_session_create_bad_input(api_client, body, field):
    before = JournalEvent.objects.count()
    body_json = assert_problem(api_client.post("/v1/sessions", body, format="json"), 400)
    assert body_json.get("field", "").startswith(field.split("[")[0])
    assert JournalEvent.objects.count() == before


def test_session_create_unknown_persona(api_client, operator_client):
    """To an agent an unknown persona is an ungranted one (403, issue 19.6); an operator is told it is unknown."""
    before = JournalEvent.objects.count()
    assert_problem(
        api_client.post("/v1/sessions", {"persona_id": "missing"}, format="json"),
        403,
        "sessions/binding_not_granted",
        field="persona_id",
    )
    assert_problem(
        operator_client.post("/v1/sessions", {"persona_id": "missing"}, format="json"), 400, field="persona_id"
    )
    assert JournalEvent.objects.count() == before


def test_malformed_json_and_oversized_body(api_client, session_id, settings):
    response = api_client.generic(
        "POST", f"/v1/sessions/{session_id}/runs", "{not json", content_type="application/json"
    )
    assert_problem(response, 400, "api/malformed_json")
    settings.KHEISH_MAX_BODY_BYTES = 1000
    response = open_run(api_client, session_id, content="x" * 2000)
    assert_problem(response, 413, "api/body_too_large")
    assert Run.objects.count() == 0


@pytest.mark.parametrize(
    "body,field",
    [
        ({}, "input"),
        ({"input": {}}, "input.content"),
        ({"input": {"content": 5}}, "input.content"),
        ({"input": {"content": "hi"}, "kind": "nope"}, "kind"),
        ({"input": {"content": "hi"}, "model": {"context_window": "big"}}, "model.context_window"),
        ({"input": {"content": "hi"}, "idempotency_key": ""}, "idempotency_key"),
    ],
)
def test_open_run_bad_input(api_client, session_id, body, field):
    response = api_client.post(f"/v1/sessions/{session_id}/runs", body, format="json")
    problem = assert_problem(response, 400)
    assert problem["field"] == field
    assert Run.objects.count() == 0
    assert JournalEvent.objects.count() == 0


def test_agents_never_see_other_agents_sessions(api_client, other_client, operator_client, session_id):
    assert_problem(other_client.get(f"/v1/sessions/{session_id}"), 404, "sessions/session_not_found")
    assert_problem(open_run(other_client, session_id), 404)
    assert other_client.get("/v1/sessions").json()["count"] == 0
    run_id = open_run(api_client, session_id).json()["run_id"]
    assert_problem(other_client.get(f"/v1/runs/{run_id}"), 404, "runs/run_not_found")
    assert_problem(other_client.post(f"/v1/runs/{run_id}/start", {}, format="json"), 404)
    assert other_client.get("/v1/runs").json()["count"] == 0
    assert operator_client.get(f"/v1/sessions/{session_id}").status_code == 200
    assert operator_client.get(f"/v1/runs/{run_id}").status_code == 200


def test_unknown_ids_are_404(api_client):
    assert_problem(api_client.get("/v1/sessions/session-999999"), 404, "sessions/session_not_found")
    assert_problem(api_client.get("/v1/sessions/garbage"), 404)
    assert_problem(api_client.get("/v1/runs/run-999999"), 404, "runs/run_not_found")


def test_run_lifecycle_journal_and_events(api_client, session_id):
    response = open_run(api_client, session_id, content="What is the disk usage?")
    assert response.status_code == 202, response.content
    run = response.json()
    assert run["status"] == "queued" and run["run_id"].startswith("run-")
    assert run["request"]["text_preview"] == "What is the disk usage?"
    rid = run["run_id"]
    assert api_client.get(f"/v1/sessions/{session_id}").json()["active_run_id"] == rid
    steps = [
        ("start", {}),
        ("tool-call-started", {"call_id": "c1", "name": "du", "input": {"path": "/"}}),
        ("tool-call-finished", {"call_id": "c1", "output": "12G"}),
        ("output", {"content": "Disk usage is 12 GB."}),
        ("wait-for-user-question", {"request_ids": ["q1"], "question": "More detail?"}),
        ("resume", {}),
        ("complete", {"output": {"content": "Done."}}),
    ]
    for name, body in steps:
        r = api_client.post(f"/v1/runs/{rid}/{name}", body, format="json")
        assert r.status_code == 200, (name, r.content)
    final = api_client.get(f"/v1/runs/{rid}").json()
    assert final["status"] == "completed"
    assert final["finished_at_ms"] >= final["started_at_ms"] >= final["submitted_at_ms"]
    assert [o["content"] for o in final["outputs"]] == ["Disk usage is 12 GB.", "Done."]
    events = api_client.get(f"/v1/runs/{rid}/events").json()["results"]
    types = [e["event"]["type"] for e in events]
    assert types[0] == "input_received"
    for t in (
        "tool_call_started",
        "tool_call_finished",
        "message_appended",
        "user_question_requested",
        "user_question_resolved",
        "run_lifecycle",
    ):
        assert t in types
    offsets = [e["offset"] for e in api_client.get(f"/v1/sessions/{session_id}/events?limit=500").json()["results"]]
    assert offsets == list(range(1, len(offsets) + 1))
    transitions = AuditEvent.objects.filter(subject_type="run", subject_id=rid, action="transition")
    assert transitions.filter(from_state="queued", to_state="running").exists()
    assert transitions.filter(to_state="completed").exists()
    assert api_client.get(f"/v1/runs?session_id={session_id}&status=completed").json()["count"] == 1


def test_status_machine_matches_spec_exactly():
    statuses = list(ALLOWED_TRANSITIONS)
    expected = {
        "queued": {"running", "failed", "cancelled"},
        "running": {
            "waiting_for_approval",
            "waiting_for_user_question",
            "completed",
            "failed",
            "interrupted",
            "cancelled",
        },
        "waiting_for_approval": {"running", "failed", "interrupted", "cancelled"},
        "waiting_for_user_question": {"running", "completed", "failed", "interrupted", "cancelled"},
        "completed": set(),
        "failed": set(),
        "interrupted": set(),
        "cancelled": set(),
    }
    for a in statuses:
        for b in statuses:
            assert transition_allowed(a, b) == (a == b or b in expected[a]), (a, b)


def test_invalid_transition_is_409_naming_both_statuses(api_client, session_id):
    rid = open_run(api_client, session_id).json()["run_id"]
    body = assert_problem(
        api_client.post(f"/v1/runs/{rid}/complete", {}, format="json"), 409, "runs/invalid_transition"
    )
    assert "queued" in body["detail"] and "completed" in body["detail"]
    api_client.post(f"/v1/runs/{rid}/cancel", {}, format="json")
    body = assert_problem(api_client.post(f"/v1/runs/{rid}/start", {}, format="json"), 409)
    assert "cancelled" in body["detail"] and "running" in body["detail"]
    assert_problem(api_client.post(f"/v1/runs/{rid}/output", {"content": "late"}, format="json"), 409)


def test_session_busy_and_idempotency(api_client, session_id):
    first = open_run(api_client, session_id, idempotency_key="k-1")
    assert first.status_code == 202
    again = open_run(api_client, session_id, idempotency_key="k-1")
    assert again.status_code == 202 and again.json()["run_id"] == first.json()["run_id"]
    header = api_client.post(
        f"/v1/sessions/{session_id}/runs",
        {"input": {"content": "hello there"}},
        format="json",
        HTTP_IDEMPOTENCY_KEY="k-1",
    )
    assert header.json()["run_id"] == first.json()["run_id"]
    assert_problem(
        api_client.post(
            f"/v1/sessions/{session_id}/runs",
            {"input": {"content": "x"}, "idempotency_key": "a"},
            format="json",
            HTTP_IDEMPOTENCY_KEY="b",
        ),
        400,
        field="idempotency_key",
    )
    assert_problem(open_run(api_client, session_id, content="another"), 409, "sessions/session_busy")
    assert Run.objects.count() == 1


def test_canonical_input_event_never_holds_memory_sections(api_client, session_id):
    rid = open_run(
        api_client,
        session_id,
        content="hi",
    ).json()["run_id"]
    api_client.post(f"/v1/runs/{rid}/cancel", {}, format="json")
    response = api_client.post(
        f"/v1/sessions/{session_id}/runs",
        {
            "input": {
                "content": "again",
                "metadata": {"recovered_memory": {"entries": []}, "learned_context": {}, "k": 1},
            }
        },
        format="json",
    )
    assert response.status_code == 202
    event = JournalEvent.objects.filter(type="input_received").order_by("-offset").first()
    assert event.event["input"]["metadata"] == {"k": 1}


def test_context_and_compaction(api_client, session_id):
    for i in range(8):
        rid = open_run(api_client, session_id, content=f"question number {i} " + "x" * 200).json()["run_id"]
        api_client.post(f"/v1/runs/{rid}/start", {}, format="json")
        api_client.post(f"/v1/runs/{rid}/complete", {"output": {"content": f"answer {i}"}}, format="json")
    before = api_client.get(f"/v1/sessions/{session_id}/context").json()
    assert before["checkpoint"] is None
    assert before["events"][0]["offset"] == 1
    total_events = JournalEvent.objects.count()
    small = api_client.get(f"/v1/sessions/{session_id}/context?budget_tokens=200").json()
    assert small["truncated"] and small["estimated_tokens"] <= 200
    assert small["events"][-1]["offset"] == before["events"][-1]["offset"]
    assert_problem(api_client.get(f"/v1/sessions/{session_id}/context?budget_tokens=abc"), 400, field="budget_tokens")
    cp = api_client.post(
        f"/v1/sessions/{session_id}/compact", {"strategy": "snip", "budget_tokens": 300}, format="json"
    )
    assert cp.status_code == 200, cp.content
    cp = cp.json()
    assert cp["compacted_until_offset"] > 0
    assert "question number 0" in cp["prompt_summary"]["content"]
    assert JournalEvent.objects.count() == total_events + 1  # only the boundary was added
    boundary = JournalEvent.objects.order_by("-offset").first()
    assert boundary.type == "compaction_boundary" and boundary.event["boundary"]["type"] == "snip"
    after = api_client.get(f"/v1/sessions/{session_id}/context").json()
    assert after["checkpoint"]["compacted_until_offset"] == cp["compacted_until_offset"]
    assert after["events"][0]["offset"] == cp["compacted_until_offset"] + 1
    auto = api_client.post(f"/v1/sessions/{session_id}/compact", {"strategy": "autocompact"}, format="json")
    assert auto.status_code == 200
    assert auto.json()["prompt_window_created_by"] == "session_memory"  # no model configured: extractive
    assert_problem(
        api_client.post(f"/v1/sessions/{session_id}/compact", {"strategy": "nope"}, format="json"),
        400,
        field="strategy",
    )


def test_autocompact_uses_the_model_when_configured(api_client, session_id, fake_model):
    fake_model.reply_text("Summary: the user asked eight questions about disks.")
    for i in range(8):
        rid = open_run(api_client, session_id, content=f"question {i}").json()["run_id"]
        api_client.post(f"/v1/runs/{rid}/cancel", {}, format="json")
    cp = api_client.post(f"/v1/sessions/{session_id}/compact", {"strategy": "autocompact"}, format="json").json()
    assert cp["prompt_window_created_by"] == "model_driven"
    assert cp["prompt_summary"]["content"].startswith("Summary: the user asked")
    assert len(fake_model.requests) == 1


def test_schema_renders_without_warnings(operator_client, capsys):
    from drf_spectacular.drainage import GENERATOR_STATS
    from drf_spectacular.generators import SchemaGenerator

    GENERATOR_STATS.reset()
    SchemaGenerator().get_schema(request=None, public=True)
    assert not GENERATOR_STATS, GENERATOR_STATS
    response = operator_client.get("/v1/schema/?format=json")
    assert response.status_code == 200
    assert "/v1/sessions/{session_id}/runs" in response.json()["paths"]
    docs = operator_client.get("/v1/docs/")
    assert docs.status_code == 200 and b"cdn" not in docs.content.lower()


def test_run_view_function_matches_the_documented_serializer(api_client, session_id):
    from kheish.api.runs import RunViewSerializer, run_view

    rid = open_run(api_client, session_id).json()["run_id"]
    run = Run.objects.select_related("session__owner").get(pk=int(rid.split("-")[1]))
    assert run_view(run) == RunViewSerializer(run).data
