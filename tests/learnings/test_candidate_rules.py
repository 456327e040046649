"""Who may use which scope and whose runs a candidate may cite (issue 21.3): the rules live in the learning
plane's ``candidate_create``, so every write path (API, console, MCP, import, capture) gets them. These tests
call the service directly - no API layer in between."""

from __future__ import annotations

import pytest

from learnings import services
from learnings.models import LearningCandidate
from learnings.validation import LearningScope
from memory.errors import Forbidden
from tests.factories import OperatorFactory, ProjectFactory, RunFactory, SessionFactory, UserFactory

pytestmark = pytest.mark.django_db

CONTENT = "Release notes are written before the tag."


def propose(actor, scope=("workspace", "default"), **extra):
    return services.candidate_create(
        actor=actor, scope=LearningScope(kind=scope[0], id=scope[1]), kind="fact", content=CONTENT, **extra
    )


def refused(call, code: str, field: str) -> Forbidden:
    with pytest.raises(Forbidden) as caught:
        call()
    assert (caught.value.code, caught.value.field, caught.value.status) == (code, field, 403)
    return caught.value


def test_an_agent_may_propose_only_in_scopes_it_can_see():
    me, other = UserFactory(), UserFactory()
    mine = SessionFactory(owner=me, projects=[ProjectFactory(project_id="atlas")])
    theirs = SessionFactory(owner=other, projects=[ProjectFactory(project_id="borealis")])
    assert propose(me).scope_key == "workspace:default"
    assert propose(me, ("session", mine.public_id)).scope_key == f"session:{mine.public_id}"
    assert propose(me, ("project", "atlas")).scope_key == "project:atlas"
    error = refused(lambda: propose(me, ("session", theirs.public_id)), "scope_forbidden", "scope")
    assert theirs.public_id in error.detail
    refused(lambda: propose(me, ("project", "borealis")), "scope_forbidden", "scope")
    refused(lambda: propose(me, ("project", "no-such-project")), "scope_forbidden", "scope")
    assert LearningCandidate.objects.filter(proposed_by=me).count() == 3  # nothing refused was stored


def test_a_withdrawn_grant_closes_the_scope_at_the_service():
    me = UserFactory()
    SessionFactory(owner=me, projects=[ProjectFactory(project_id="atlas")], granted=False)
    refused(lambda: propose(me, ("project", "atlas")), "scope_forbidden", "scope")


def test_an_agent_may_cite_only_its_own_runs_and_sessions():
    me, other = UserFactory(), UserFactory()
    my_run = RunFactory(session=SessionFactory(owner=me), terminal=True)
    their_run = RunFactory(session=SessionFactory(owner=other), terminal=True)
    own = {"agent_id": me.username, "session_id": my_run.session.public_id, "run_id": my_run.public_id}
    created = propose(me, source=own, evidence_refs=[{"run_id": my_run.public_id}])
    assert created.source["run_id"] == my_run.public_id

    refused(lambda: propose(me, source={**own, "agent_id": other.username}), "provenance_forbidden", "source.agent_id")
    refused(
        lambda: propose(me, source={**own, "session_id": their_run.session.public_id}),
        "provenance_forbidden",
        "source.session_id",
    )
    refused(lambda: propose(me, source={**own, "run_id": their_run.public_id}), "provenance_forbidden", "source.run_id")
    refused(
        lambda: propose(me, evidence_refs=[{"run_id": my_run.public_id}, {"run_id": their_run.public_id}]),
        "provenance_forbidden",
        "evidence_refs[1].run_id",
    )
    refused(
        lambda: propose(me, evidence_refs=[{"run_id": "run-999999"}]), "provenance_forbidden", "evidence_refs[0].run_id"
    )  # unknown and foreign alike
    assert LearningCandidate.objects.filter(proposed_by=me).count() == 1


def test_operators_and_the_system_may_use_any_scope_and_cite_any_run():
    other = UserFactory()
    their_run = RunFactory(session=SessionFactory(owner=other), terminal=True)
    cited = {"run_id": their_run.public_id, "session_id": their_run.session.public_id}
    scope = ("session", their_run.session.public_id)
    assert propose(OperatorFactory(), scope, source=cited).source["run_id"] == their_run.public_id
    assert propose("import", scope, evidence_refs=[{"run_id": their_run.public_id}]).scope_id == scope[1]


def test_the_callers_role_decides_when_it_is_known():
    """A staff principal calling through an agent key is an agent there (``operator=False``)."""
    staff = OperatorFactory()
    run = RunFactory(session=SessionFactory(owner=UserFactory()), terminal=True)
    refused(lambda: propose(staff, ("session", run.session.public_id), operator=False), "scope_forbidden", "scope")
    refused(
        lambda: propose(staff, evidence_refs=[{"run_id": run.public_id}], operator=False),
        "provenance_forbidden",
        "evidence_refs[0].run_id",
    )
