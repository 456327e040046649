"""Shared fixtures: operator, agent, API clients authenticated with real API keys."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

pytest_plugins = ["tests.support.fixtures"]

# The `slow` marker (pyproject.toml) keeps `make test-fast` under a minute: a test is slow when it starts a
# server, a browser, a worker or another process, or takes seconds by design (it times large inputs, runs a
# property search, waits out a retry or a quiet period). Most are recognised here, by the fixtures they use and
# the markers they carry; any other says so with @pytest.mark.slow and a comment saying why.
SLOW_FIXTURES = frozenset({"live_server", "web_server", "browser", "page"})
SLOW_MARKERS = frozenset({"e2e", "integration", "fuzz"})


def pytest_collection_modifyitems(config, items):
    for item in items:
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())) or any(
            item.get_closest_marker(name) for name in SLOW_MARKERS
        ):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def make_key(db):
    from memory.identity import api_key_create

    def make(name: str, role: str = "agent"):
        return api_key_create(name=name, role=role, actor="tests")

    return make


def client_for(plaintext: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    return client


@pytest.fixture
def agent_key(make_key):
    return make_key("agent-one")


@pytest.fixture
def other_agent_key(make_key):
    return make_key("agent-two")


@pytest.fixture
def operator_key(make_key):
    return make_key("ops", role="operator")


@pytest.fixture
def agent(agent_key):
    return agent_key.api_key.user


@pytest.fixture
def operator(operator_key):
    return operator_key.api_key.user


@pytest.fixture
def api_client(agent_key) -> APIClient:
    return client_for(agent_key.plaintext)


@pytest.fixture
def other_client(other_agent_key) -> APIClient:
    return client_for(other_agent_key.plaintext)


@pytest.fixture
def operator_client(operator_key) -> APIClient:
    return client_for(operator_key.plaintext)


@pytest.fixture
def anon_client() -> APIClient:
    return APIClient()


@pytest.fixture
def session_id(api_client) -> str:
    response = api_client.post("/v1/sessions", {}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["session_id"]


def assert_problem(response, status: int, code: str | None = None, field: str | None = None):
    assert response.status_code == status, (response.status_code, response.content)
    assert response["Content-Type"].startswith("application/problem+json"), response["Content-Type"]
    body = response.json()
    assert body["status"] == status
    assert body["detail"]
    if code is not None:
        assert f"{body['domain']}/{body['code']}" == code or body["code"] == code, body
    if field is not None:
        assert body.get("field") == field, body
    return body


@pytest.fixture
def grant(db):
    """``grant(user, projects=[...], personas=[...])``: an operator grants an agent what its sessions may bind
    to (issue 14.1); replaces the agent's grants whole."""
    from memory.grants import grants_set

    def give(user, *, projects=(), personas=()):
        return grants_set(agent=user, project_ids=list(projects), persona_ids=list(personas), actor="tests")

    return give
