"""Issue 23.1: the request floor. ``GET /v1/sessions/{id}`` costs one statement once the key is verified (the
session with its owner, persona, project ids and active run; a session bound to projects adds the read of its
owner's current grants, which decide its effective scopes) besides the throttle's count, and that count is one
cache operation per request: one upsert with the database counter (the default), one ``incr`` with a plain
cache once the window's counter exists."""

from __future__ import annotations

import pytest
from django.core.cache import caches
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory.models import Project, Run, RunStatus
from memory.sessions import session_create
from tests.conftest import client_for

pytestmark = pytest.mark.django_db

LOCAL_THROTTLE = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "throttle": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "floor"},
    "auth_failures": {"BACKEND": "django.core.cache.backends.db.DatabaseCache", "LOCATION": "kheish_auth_failures"},
}


@pytest.fixture
def local_throttle(settings):
    """Counts in local memory, so that the statements counted are the request's own."""
    settings.CACHES = LOCAL_THROTTLE


def test_a_bare_session_read_is_one_statement(agent_key, local_throttle, django_assert_num_queries):
    session = session_create(owner=agent_key.api_key.user)
    client = client_for(agent_key.plaintext)
    assert client.get(f"/v1/sessions/{session.public_id}").status_code == 200  # verifies the key
    with django_assert_num_queries(1):
        body = client.get(f"/v1/sessions/{session.public_id}").json()
    assert body["project_ids"] == [] and body["active_run_id"] is None


def test_a_bound_session_read_is_one_statement(agent_key, local_throttle, django_assert_num_queries):
    Project.objects.create(project_id="beta", name="Beta")
    Project.objects.create(project_id="alpha", name="Alpha")
    from memory.grants import grants_set

    grants_set(agent=agent_key.api_key.user, project_ids=["alpha", "beta"], persona_ids=[], actor="tests")
    session = session_create(owner=agent_key.api_key.user, project_ids=["beta", "alpha"])
    run = Run.objects.create(session=session, status=RunStatus.RUNNING)
    client = client_for(agent_key.plaintext)
    assert client.get(f"/v1/sessions/{session.public_id}").status_code == 200  # verifies the key
    # The session read carries the owner's current grants of its bindings (its effective learning scopes).
    with django_assert_num_queries(1):
        body = client.get(f"/v1/sessions/{session.public_id}").json()
    assert body["project_ids"] == ["alpha", "beta"] and body["active_run_id"] == run.public_id
    assert body["learning_scopes"] == [
        f"session:{session.public_id}",
        "project:alpha",
        "project:beta",
        "workspace:default",
    ]


def test_the_throttle_costs_one_cache_operation_per_request(api_client, agent, local_throttle, monkeypatch):
    session = session_create(owner=agent)
    cache = caches["throttle"]
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


def test_with_the_database_counter_a_read_is_one_more_statement(agent_key):
    session = session_create(owner=agent_key.api_key.user)
    client = client_for(agent_key.plaintext)
    assert client.get(f"/v1/sessions/{session.public_id}").status_code == 200
    with CaptureQueriesContext(connection) as captured:
        assert client.get(f"/v1/sessions/{session.public_id}").status_code == 200
    statements = [q["sql"] for q in captured.captured_queries]
    assert len(statements) == 2, statements  # the throttle's one upsert and the session read
