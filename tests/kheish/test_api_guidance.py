"""Issue 25 (the first hour, round two): what an agent developer meets in the API and its schema.

25.2 an unknown or ungranted project says what to do; 25.3 a run's request names the calling agent;
25.4 the schema documents Idempotency-Key and every request field, wait-for-approval keeps its question,
the outputs list pages like every list, an agent key on /metrics is 403, recovered memory holds every
finished run as docs/agents.md says.
"""

from __future__ import annotations

import re

import pytest

from kheish.service_config import REPO_DIR
from tests.conftest import assert_problem
from tests.support.api import finish
from tests.support.schema import served_schema

pytestmark = pytest.mark.django_db


def _schema(client) -> dict:
    return served_schema(client)


def _resolve(doc: dict, node: dict) -> dict:
    while "$ref" in node:
        node = doc["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    return node


# ---------------------------------------------------------------------------------------------- 25.2 projects


def test_an_unknown_or_ungranted_project_says_how_to_create_and_grant_it(api_client, operator_client, agent):
    # To an agent an unknown project and an ungranted one get the same answer (no probing), with the steps.
    body = assert_problem(
        api_client.post("/v1/sessions", {"project_ids": ["my-project"]}, format="json"),
        403,
        "sessions/binding_not_granted",
        field="project_ids",
    )
    steps = (
        "project my-project is not granted to this agent: an operator creates the project if it does not "
        "exist yet (POST /v1/projects) and grants it to this agent (PUT /v1/agents/<agent>/grants"
    )
    assert body["detail"].startswith(steps) and "docs/agents.md" in body["detail"]
    # An operator naming an unknown project is told how to create it.
    body = assert_problem(
        operator_client.post("/v1/sessions", {"project_ids": ["my-project"]}, format="json"), 400, field="project_ids"
    )
    assert body["detail"].startswith("unknown project my-project: an operator creates it first (POST /v1/projects")

    # The documented steps (docs/agents.md, "Projects and grants"), as an operator would follow them:
    created = operator_client.post("/v1/projects", {"project_id": "my-project", "name": "My project"}, format="json")
    assert created.status_code == 201, created.content
    body = assert_problem(
        api_client.post("/v1/sessions", {"project_ids": ["my-project"]}, format="json"), 403, field="project_ids"
    )
    assert body["detail"].startswith(steps)
    granted = operator_client.put(
        f"/v1/agents/{agent.username}/grants", {"project_ids": ["my-project"], "persona_ids": []}, format="json"
    )
    assert granted.status_code == 200, granted.content
    session = api_client.post("/v1/sessions", {"project_ids": ["my-project"]}, format="json")
    assert session.status_code == 201, session.content
    assert session.json()["project_ids"] == ["my-project"]


def test_docs_give_the_project_steps_for_the_mcp_config():
    docs = (REPO_DIR / "docs" / "agents.md").read_text()
    section = docs[docs.index("### Projects and grants") :]
    assert '-X POST "$KHEISH_URL/v1/projects"' in section
    assert '-X PUT "$KHEISH_URL/v1/agents/my-agent/grants"' in section
    assert '"KHEISH_PROJECT_IDS": "my-project"' in docs


# ---------------------------------------------------------------------------------------- 25.3 actor fields


def test_a_runs_request_names_the_calling_agent(api_client, session_id, agent):
    run = api_client.post(f"/v1/sessions/{session_id}/runs", {"input": {"content": "hello"}}, format="json")
    assert run.status_code == 202
    request = run.json()["request"]
    assert request["actor_id"] == agent.username == "agent-one"
    assert request["source_plugin"] == "api" and request["source_kind"] == "api"
    assert "daemon" not in str(request) and "api-user" not in str(request)


# ------------------------------------------------------------------------------------ 25.4 schema, behaviour


def test_the_schema_documents_the_idempotency_key_header(operator_client):
    doc = _schema(operator_client)
    operation = doc["paths"]["/v1/sessions/{session_id}/runs"]["post"]
    headers = [p for p in operation["parameters"] if p["in"] == "header"]
    assert [h["name"] for h in headers] == ["Idempotency-Key"]
    assert not headers[0].get("required") and "retry" in headers[0]["description"]


def test_the_documented_header_is_checked_like_the_body_field(api_client, session_id):
    """Documenting the header invites any value: a too long or blank key is a 400 naming the field, never a 500."""
    url = f"/v1/sessions/{session_id}/runs"
    body = {"input": {"content": "hello"}}
    assert_problem(
        api_client.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="k" * 201), 400, field="idempotency_key"
    )
    assert_problem(api_client.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="   "), 400, field="idempotency_key")
    first = api_client.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="k" * 200)
    again = api_client.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="k" * 200)
    assert first.status_code == again.status_code == 202 and first.json()["run_id"] == again.json()["run_id"]


def test_every_request_field_has_a_description(operator_client):
    doc = _schema(operator_client)
    missing = []

    def walk(node: dict, where: str, depth: int = 0) -> None:
        node = _resolve(doc, node)
        for name, prop in (node.get("properties") or {}).items():
            if prop.get("readOnly"):
                continue
            target = _resolve(doc, prop) if "$ref" in prop else prop
            described = (prop.get("description") or target.get("description") or "").strip()
            if not described:
                missing.append(f"{where}.{name}")
            if depth < 3 and ("$ref" in prop or prop.get("type") == "object"):
                walk(prop, f"{where}.{name}", depth + 1)
            items = prop.get("items")
            if depth < 3 and isinstance(items, dict) and ("$ref" in items or items.get("type") == "object"):
                walk(items, f"{where}.{name}[]", depth + 1)

    for path, item in doc["paths"].items():
        for method, operation in item.items():
            body = (operation.get("requestBody") or {}).get("content", {}).get("application/json")
            if body:
                walk(body["schema"], f"{method.upper()} {path}")
    assert missing == [], "request fields without a description:\n" + "\n".join(sorted(set(missing)))


def _running(api_client, session_id: str) -> str:
    run_id = api_client.post(f"/v1/sessions/{session_id}/runs", {"input": {"content": "deploy"}}, format="json").json()[
        "run_id"
    ]
    assert api_client.post(f"/v1/runs/{run_id}/start", {}, format="json").status_code == 200
    return run_id


def test_wait_for_approval_keeps_the_question_until_resume(api_client, session_id):
    run_id = _running(api_client, session_id)
    waiting = api_client.post(
        f"/v1/runs/{run_id}/wait-for-approval",
        {"request_ids": ["req-1"], "question": "Deploy to production?"},
        format="json",
    )
    assert waiting.status_code == 200, waiting.content
    assert waiting.json()["pending_approvals"] == [{"request_id": "req-1", "question": "Deploy to production?"}]
    assert api_client.get(f"/v1/runs/{run_id}").json()["pending_approvals"][0]["question"] == "Deploy to production?"
    events = api_client.get(f"/v1/runs/{run_id}/events").json()["results"]
    waits = [e["event"] for e in events if e["event"].get("run_event", {}).get("type") == "waiting_for_approval"]
    assert waits and waits[0]["run_event"]["question"] == "Deploy to production?"
    from django.test import Client

    from tests.support.console_data import staff_user

    console = Client()
    console.force_login(staff_user(superuser=True))
    page = console.get(f"/admin/memory/run/{run_id[4:]}/change/").content.decode()
    assert "Waiting for" in page and "approval req-1: “Deploy to production?”" in page
    resumed = api_client.post(f"/v1/runs/{run_id}/resume", {}, format="json").json()
    assert resumed["pending_approvals"] == [] and resumed["status"] == "running"


def test_wait_for_user_question_shows_the_question(api_client, session_id):
    run_id = _running(api_client, session_id)
    waiting = api_client.post(
        f"/v1/runs/{run_id}/wait-for-user-question", {"request_ids": ["q-1"], "question": "Which disk?"}, format="json"
    ).json()
    assert waiting["pending_questions"] == [{"request_id": "q-1", "question": "Which disk?"}]
    done = api_client.post(f"/v1/runs/{run_id}/complete", {}, format="json").json()
    assert done["pending_questions"] == []


def test_outputs_page_like_every_list_and_the_cursor_still_works(api_client, session_id):
    run_id = _running(api_client, session_id)
    for n in range(5):
        api_client.post(f"/v1/runs/{run_id}/output", {"content": f"part {n}"}, format="json")
    first = api_client.get(f"/v1/runs/{run_id}/outputs", {"limit": 2}).json()
    assert first["count"] == 5 and first["previous"] is None
    assert [o["content"] for o in first["results"]] == ["part 0", "part 1"]
    assert first["next"].endswith(f"/v1/runs/{run_id}/outputs?offset=2&limit=2")
    seen, url = [], first["next"]
    while url:
        page = api_client.get(url).json()
        seen += [o["content"] for o in page["results"]]
        url = page["next"]
    assert seen == ["part 2", "part 3", "part 4"]
    runs_list = api_client.get("/v1/runs", {"limit": 1}).json()
    assert set(runs_list) == {"count", "next", "previous", "results"}  # the convention it now shares
    assert set(runs_list) <= set(first)
    by_cursor = api_client.get(f"/v1/runs/{run_id}/outputs", {"limit": 2, "cursor": first["next_cursor"]}).json()
    assert [o["content"] for o in by_cursor["results"]] == ["part 2", "part 3"]
    assert_problem(api_client.get(f"/v1/runs/{run_id}/outputs", {"cursor": 1, "offset": 2}), 400, field="cursor")


def test_an_agent_key_on_metrics_is_forbidden_not_unauthenticated(api_client, anon_client):
    forbidden = api_client.get("/metrics")
    assert forbidden.status_code == 403 and "agent" in forbidden.content.decode()
    assert anon_client.get("/metrics").status_code == 401


def test_recovered_memory_holds_every_finished_run_as_the_docs_say(api_client, session_id):
    """Spec: one record per terminal run; docs/agents.md must not say "completed" runs only."""
    finish(api_client, session_id, "Cancelled turn about the quarterly report", how="cancel")
    finish(api_client, session_id, "Failed turn about the quarterly report", how="fail", error="tool crashed")
    run = api_client.post(
        f"/v1/sessions/{session_id}/runs", {"input": {"content": "the quarterly report again"}}, format="json"
    ).json()
    recovered = next(s for s in run["prompt"]["sections"] if s["name"] == "recovered_memory")
    assert "(cancelled)" in recovered["content"] and "(failed)" in recovered["content"]
    docs = (REPO_DIR / "docs" / "agents.md").read_text()
    assert not re.search(r"recovered_memory` holds recent completed runs", docs)
    assert "completed, failed, interrupted or cancelled" in docs
