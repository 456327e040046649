"""Issue 14.1: an agent binds sessions only to the personas and projects an operator granted it."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from memory.models import AuditEvent, Session
from tests.conftest import assert_problem, client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(operator_client):
    for pid in ("atlas", "borealis"):
        operator_client.post("/v1/projects", {"project_id": pid, "name": pid.title()}, format="json")
    for pid in ("ops-bot", "admin-bot"):
        operator_client.post("/v1/personas", {"persona_id": pid, "display_name": pid}, format="json")


def test_ungranted_agent_cannot_bind_projects_or_personas(api_client, world):
    before = Session.objects.count()
    assert_problem(
        api_client.post("/v1/sessions", {"project_ids": ["atlas"]}, format="json"),
        403,
        "sessions/binding_not_granted",
        field="project_ids",
    )
    assert_problem(
        api_client.post("/v1/sessions", {"persona_id": "ops-bot"}, format="json"),
        403,
        "sessions/binding_not_granted",
        field="persona_id",
    )
    assert Session.objects.count() == before
    # no grants: its own session and the workspace scope only
    response = api_client.post("/v1/sessions", {}, format="json")
    assert response.status_code == 201
    assert response.json()["learning_scopes"] == [f"session:{response.json()['session_id']}", "workspace:default"]


def test_grants_contract_and_enforcement(api_client, operator_client, agent, world):
    url = f"/v1/agents/{agent.username}/grants"
    assert operator_client.get(url).json() == {"project_ids": [], "persona_ids": []}
    response = operator_client.put(url, {"project_ids": ["atlas"], "persona_ids": ["ops-bot"]}, format="json")
    assert response.status_code == 200, response.content
    assert response.json() == {"project_ids": ["atlas"], "persona_ids": ["ops-bot"]}
    assert operator_client.get(url).json() == {"project_ids": ["atlas"], "persona_ids": ["ops-bot"]}
    audit = AuditEvent.objects.filter(subject_type="agent_grant", subject_id=agent.username).get()
    assert audit.actor == "ops" and audit.data["after"]["project_ids"] == ["atlas"]

    ok = api_client.post("/v1/sessions", {"project_ids": ["atlas"], "persona_id": "ops-bot"}, format="json")
    assert ok.status_code == 201, ok.content
    assert_problem(
        api_client.post("/v1/sessions", {"project_ids": ["atlas", "borealis"]}, format="json"), 403, field="project_ids"
    )
    assert_problem(api_client.post("/v1/sessions", {"persona_id": "admin-bot"}, format="json"), 403, field="persona_id")
    # lists are filtered for agents, whole for operators
    assert [p["project_id"] for p in api_client.get("/v1/projects").json()["results"]] == ["atlas"]
    assert [p["persona_id"] for p in api_client.get("/v1/personas").json()["results"]] == ["ops-bot"]
    assert api_client.get("/v1/projects/borealis").status_code == 404
    assert operator_client.get("/v1/projects").json()["count"] == 2
    # operator-only, validated
    assert_problem(api_client.get(url), 403)
    assert_problem(api_client.put(url, {"project_ids": ["borealis"], "persona_ids": []}, format="json"), 403)
    assert_problem(
        operator_client.put(url, {"project_ids": ["nope"], "persona_ids": []}, format="json"), 400, field="project_ids"
    )
    assert_problem(operator_client.get("/v1/agents/nobody/grants"), 404)
    # revoking the grant stops new bindings
    operator_client.put(url, {"project_ids": [], "persona_ids": []}, format="json")
    assert_problem(api_client.post("/v1/sessions", {"project_ids": ["atlas"]}, format="json"), 403)


def test_operators_bind_anything(operator_client, world):
    response = operator_client.post(
        "/v1/sessions", {"project_ids": ["borealis"], "persona_id": "admin-bot"}, format="json"
    )
    assert response.status_code == 201, response.content


def test_agent_cannot_reach_another_agents_runs_through_an_ungranted_project(
    api_client, other_client, other_agent_key, grant, world, operator_client
):
    from tests.support.api import finish

    grant(other_agent_key.api_key.user, projects=["atlas"])
    theirs = other_client.post("/v1/sessions", {"project_ids": ["atlas"]}, format="json").json()["session_id"]
    finish(other_client, theirs, "Deploy the atlas billing service", output="atlas billing deployed")
    operator_client.post(
        "/v1/runtime/run-memory-policy", {"policy": {"search_visibility": "learning_scopes"}}, format="json"
    )
    assert api_client.post("/v1/sessions", {"project_ids": ["atlas"]}, format="json").status_code == 403


def test_create_api_key_with_grants(db, world):
    out = io.StringIO()
    call_command("create_api_key", "bot-7", "--project", "atlas", "--persona", "ops-bot", stdout=out)
    client = client_for(out.getvalue().strip())
    assert (
        client.post("/v1/sessions", {"project_ids": ["atlas"], "persona_id": "ops-bot"}, format="json").status_code
        == 201
    )
    assert client.post("/v1/sessions", {"project_ids": ["borealis"]}, format="json").status_code == 403
    from django.core.management.base import CommandError

    with pytest.raises(CommandError):
        call_command("create_api_key", "bot-8", "--project", "missing", stdout=io.StringIO())
    from memory.models import ApiKey

    assert not ApiKey.objects.filter(name="bot-8").exists()  # atomic: no key without its grants


def test_admin_saves_grants_through_the_service(client, world, agent):
    from django.contrib.auth import get_user_model

    from memory.models import AgentGrant, Persona, Project

    admin = get_user_model().objects.create_superuser("root", "r@example.com", "pw")
    client.force_login(admin)
    response = client.post(
        "/admin/memory/agentgrant/add/",
        {
            "user": agent.pk,
            "projects": [Project.objects.get(project_id="atlas").pk],
            "personas": [Persona.objects.get(persona_id="ops-bot").pk],
        },
    )
    assert response.status_code == 302, response.content[:2000]
    grant = AgentGrant.objects.get(user=agent)
    assert [p.project_id for p in grant.projects.all()] == ["atlas"]
    assert AuditEvent.objects.filter(subject_type="agent_grant", actor="root").exists()


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"project_ids": "atlas", "persona_ids": []},
        {"project_ids": [1], "persona_ids": []},
        {"project_ids": ["atlas"], "persona_ids": [], "extra": True},
        {"project_ids": ["x" * 10_000], "persona_ids": []},
    ],
)
def test_bad_grant_bodies_are_refused_and_change_nothing(operator_client, agent, world, body):
    url = f"/v1/agents/{agent.username}/grants"
    operator_client.put(url, {"project_ids": ["atlas"], "persona_ids": []}, format="json")
    before = AuditEvent.objects.count()
    response = operator_client.put(url, body, format="json")
    assert 400 <= response.status_code < 500 and response["Content-Type"].startswith("application/problem+json")
    assert operator_client.get(url).json() == {"project_ids": ["atlas"], "persona_ids": []}
    assert AuditEvent.objects.count() == before
