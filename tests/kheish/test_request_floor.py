"""Issue 23.1: the request floor. ``GET /v1/sessions/{id}`` costs one statement once the key is verified (the
session with its owner, persona, project ids and active run; a session bound to projects adds the read of its
owner's current grants, which decide its effective scopes), and the per-principal throttle one cache
operation per request in a window it has already counted."""

from __future__ import annotations

import pytest
from django.core.cache import caches

from memory.models import Project, Run, RunStatus
from memory.sessions import session_create
from tests.conftest import client_for

pytestmark = pytest.mark.django_db


def test_a_bare_session_read_is_one_statement(agent_key, django_assert_num_queries):
    session = session_create(owner=agent_key.api_key.user)
    client = client_for(agent_key.plaintext)
    assert client.get(f"/v1/sessions/{session.public_id}").status_code == 200  # verifies the key
    with django_assert_num_queries(1):
        body = client.get(f"/v1/sessions/{session.public_id}").json()
    assert body["project_ids"] == [] and body["active_run_id"] is None


def test_a_bound_session_read_is_two_statements(agent_key, django_assert_num_queries):
    Project.objects.create(project_id="beta", name="Beta")
    Project.objects.create(project_id="alpha", name="Alpha")
    from memory.grants import grants_set

    grants_set(agent=agent_key.api_key.user, project_ids=["alpha", "beta"], persona_ids=[], actor="tests")
    session = session_create(owner=agent_key.api_key.user, project_ids=["beta", "alpha"])
    run = Run.objects.create(session=session, status=RunStatus.RUNNING)
    client = client_for(agent_key.plaintext)
    assert client.get(f"/v1/sessions/{session.public_id}").status_code == 200  # verifies the key
    # The session read, and the owner's current grants of its projects (its effective learning scopes).
    with django_assert_num_queries(2):
        body = client.get(f"/v1/sessions/{session.public_id}").json()
    assert body["project_ids"] == ["alpha", "beta"] and body["active_run_id"] == run.public_id
    assert body["learning_scopes"] == [f"session:{session.public_id}", "project:alpha", "project:beta",
                                       "workspace:default"]


def test_the_throttle_costs_one_cache_operation_per_request(api_client, agent, monkeypatch):
    session = session_create(owner=agent)
    cache = caches["default"]
    calls: list[str] = []
    for name in ("add", "incr", "get", "set", "get_many", "set_many"):
        original = getattr(cache, name)

        def counted(*args, _original=original, _name=name, **kwargs):
            calls.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(cache, name, counted)
    api_client.get(f"/v1/sessions/{session.public_id}")
    calls.clear()
    for _ in range(3):
        assert api_client.get(f"/v1/sessions/{session.public_id}").status_code == 200
    assert calls == ["incr"] * 3
