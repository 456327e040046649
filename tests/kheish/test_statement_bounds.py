"""Issue 23.2: opening a run and a memory-search are bounded in statements (a regression guard). Opening a run:
the session read, then (no session lock first when it has no run in flight) the run insert with its two journal
events and its audit row in one statement (no savepoint) that also reads the live context, the standing rows, the
pool (its vectors with it), the run-memory records, and the prompt with its counters in one statement; both
policies come with the session's own statement, on both paths, and a memory-search reads its session's run-memory
records once. ``POST /v1/learnings``: the scope lock with the candidate's and the learning's keys; then the
equivalence and conflict reads with - where they find nothing - the candidate, the learning and their three audit
rows."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory.grants import grants_set
from memory.models import Project
from memory.sessions import session_create
from tests.conftest import client_for
from tests.kheish.test_request_floor import LOCAL_THROTTLE
from tests.support.learnings import learning

pytestmark = pytest.mark.django_db

OPEN_RUN_STATEMENTS = 8  # BEGIN and COMMIT included
SEARCH_STATEMENTS = 5
CREATE_LEARNING_STATEMENTS = 4  # the savepoint, the lock with the keys, one write, its release (issue 23.3)
REUSED_LEARNING_STATEMENTS = 9  # an equivalent found: it is read, the candidate stored, then moved to it


@pytest.fixture
def session(agent_key, settings):
    settings.CACHES = LOCAL_THROTTLE  # the throttle counts in local memory: the statements are the request's
    Project.objects.create(project_id="atlas", name="Atlas")
    grants_set(agent=agent_key.api_key.user, project_ids=["atlas"], persona_ids=[], actor="tests")
    for text in [
        "My old sneakers are stored under the bed.",
        "We decided the deploy window is Tuesday.",
        "I adopted a grey cat called Miso.",
    ]:
        learning(text, scope=("project", "atlas"))
    return session_create(owner=agent_key.api_key.user, project_ids=["atlas"])


def _statements(context: CaptureQueriesContext) -> list[str]:
    return [query["sql"] or "<prepared>" for query in context.captured_queries]


def _policy_reads(statements: list[str]) -> list[str]:
    """Statements that read the policies on their own (the session's statement reads them within itself)."""
    return [s for s in statements if "memory_policyrevision" in s and 'FROM "memory_session" s' not in s]


def test_opening_a_run_is_bounded(agent_key, session):
    client = client_for(agent_key.plaintext)
    for _ in range(3):  # the key verified, the prepared statements prepared
        run = client.post(
            f"/v1/sessions/{session.public_id}/runs", {"input": {"content": "where are my sneakers"}}, format="json"
        ).json()
        client.post(f"/v1/runs/{run['run_id']}/cancel", {}, format="json")
    with CaptureQueriesContext(connection) as context:
        response = client.post(
            f"/v1/sessions/{session.public_id}/runs", {"input": {"content": "where are my sneakers"}}, format="json"
        )
    assert response.status_code == 202
    assert "sneakers" in response.json()["prompt"]["sections"][0]["content"]
    statements = _statements(context)
    assert len(statements) <= OPEN_RUN_STATEMENTS, "\n".join(statements)
    assert sum(statement.startswith("SAVEPOINT") for statement in statements) <= 1, "\n".join(statements)
    # both policies come with the session's own (prepared) statement: none of their own
    assert not _policy_reads(statements), "\n".join(statements)


def test_a_memory_search_is_bounded(agent_key, session):
    client = client_for(agent_key.plaintext)
    path = f"/v1/sessions/{session.public_id}/memory-search?query=sneakers&limit=10"
    for _ in range(3):
        assert client.get(path).status_code == 200
    with CaptureQueriesContext(connection) as context:
        body = client.get(path).json()
    assert body["results"] and "sneakers" in body["results"][0]["excerpt"]
    statements = _statements(context)
    assert len(statements) <= SEARCH_STATEMENTS, "\n".join(statements)
    assert not _policy_reads(statements), "\n".join(statements)


def test_a_busy_session_is_still_a_409(agent_key, session):
    client = client_for(agent_key.plaintext)
    first = client.post(f"/v1/sessions/{session.public_id}/runs", {"input": {"content": "one"}}, format="json")
    assert first.status_code == 202
    second = client.post(f"/v1/sessions/{session.public_id}/runs", {"input": {"content": "two"}}, format="json")
    assert second.status_code == 409 and second.json()["code"] == "session_busy"


def test_creating_a_learning_is_bounded(operator_key, settings):
    settings.CACHES = LOCAL_THROTTLE
    Project.objects.create(project_id="atlas", name="Atlas")
    client = client_for(operator_key.plaintext)
    scope = {"kind": "project", "id": "atlas"}
    for text in ["We decided the deploy window is Tuesday.", "My old sneakers are stored under the bed."]:
        assert (
            client.post("/v1/learnings", {"scope": scope, "kind": "fact", "content": text}, format="json").status_code
            == 201
        )
    for text, status in [("I adopted a grey cat called Miso.", 201), ("We decided the deploy window is Tuesday.", 200)]:
        with CaptureQueriesContext(connection) as context:
            response = client.post("/v1/learnings", {"scope": scope, "kind": "fact", "content": text}, format="json")
        assert response.status_code == status, response.content
        statements = _statements(context)
        if status == 201:  # a new learning
            assert len(statements) <= CREATE_LEARNING_STATEMENTS, "\n".join(statements)
        else:
            assert len(statements) <= REUSED_LEARNING_STATEMENTS, "\n".join(statements)
        assert sum(statement.startswith("SAVEPOINT") for statement in statements) == 1, "\n".join(statements)
