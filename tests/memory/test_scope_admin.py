"""Personas and projects are created, changed and deleted only through the audited services of
``memory.sessions`` (issue 21.3) - from the admin's add and change forms, its delete page and its bulk delete
action alike. What a delete does to live sessions and grants is shown on a confirmation page first, and audited:
a project's sessions are unbound (with the operator's confirmation), a persona bound by a session is refused
(removing it would widen the session's capability scope), grants are withdrawn, scoped learnings stay."""

from __future__ import annotations

import pytest
from django.urls import reverse

from learnings.models import Learning
from memory import grants, sessions
from memory.errors import Conflict, ValidationFailed
from memory.models import AgentGrant, AuditEvent, Persona, Project, Session
from tests.factories import LearningFactory, PersonaFactory, ProjectFactory, SessionFactory, UserFactory

pytestmark = pytest.mark.django_db


def audit(subject_type: str, action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(subject_type=subject_type, action=action).order_by("id"))


def url(model: str, name: str, *args) -> str:
    return reverse(f"admin:memory_{model}_{name}", args=args)


# ---- the services ---------------------------------------------------------------------------------------


def test_update_is_validated_and_audited_with_what_changed():
    persona = sessions.persona_create(persona_id="reviewer", display_name="Reviewer", actor="ops")
    updated = sessions.persona_update(
        persona=persona,
        display_name="Code reviewer",
        version="2",
        soul="Be terse.",
        capability_scope=["read", "read", "review"],
        actor="ops",
    )
    assert (updated.display_name, updated.version, updated.capability_scope) == (
        "Code reviewer",
        "2",
        ["read", "review"],
    )
    row = audit("persona", "update")[-1]
    assert row.subject_id == "reviewer" and row.actor == "ops"
    assert row.data["changed"]["display_name"] == {"before": "Reviewer", "after": "Code reviewer"}
    assert row.data["changed"]["capability_scope"] == {"before": None, "after": ["read", "review"]}
    assert row.data["changed"]["soul"] == {"changed": True}
    with pytest.raises(ValidationFailed) as caught:
        sessions.persona_update(
            persona=persona, display_name="  ", version="2", soul="", capability_scope=None, actor="ops"
        )
    assert caught.value.field == "display_name" and "non-empty" in caught.value.detail
    with pytest.raises(ValidationFailed) as caught:
        sessions.persona_update(
            persona=persona, display_name="R", version="2", soul="", capability_scope=[""], actor="ops"
        )
    assert caught.value.field == "capability_scope"
    assert Persona.objects.get(pk=persona.pk).display_name == "Code reviewer"  # refused: nothing written
    project = sessions.project_create(project_id="atlas", name="Atlas", actor="ops")
    sessions.project_update(project=project, name="Atlas 2", actor="ops")
    assert audit("project", "update")[-1].data == {"changed": {"name": {"before": "Atlas", "after": "Atlas 2"}}}
    with pytest.raises(ValidationFailed) as caught:
        sessions.project_create(project_id="not a slug", name="X", actor="ops")
    assert caught.value.field == "project_id" and "slug" in caught.value.detail


def test_deleting_a_bound_project_needs_confirmation_then_unbinds_and_revokes_with_audit_rows():
    project, kept = ProjectFactory(project_id="atlas"), ProjectFactory(project_id="kept")
    agent = UserFactory()
    session = SessionFactory(owner=agent, projects=[project, kept])
    LearningFactory(scope_kind="project", scope_id="atlas", scope_key="project:atlas")
    impact = sessions.project_delete_impact(project)
    assert impact.session_ids == [session.public_id] and impact.agent_ids == [agent.username]
    assert impact.scoped["learnings"] == 1

    with pytest.raises(Conflict) as caught:
        sessions.project_delete(project=project, actor="ops")
    assert caught.value.code == "project_in_use" and caught.value.status == 409
    assert Project.objects.filter(project_id="atlas").exists() and not audit("project", "delete")

    sessions.project_delete(project=project, actor="ops", unbind_sessions=True)
    assert not Project.objects.filter(project_id="atlas").exists()
    assert [p.project_id for p in Session.objects.get(pk=session.pk).projects.all()] == ["kept"]
    assert grants.grants_for(agent).project_ids == ["kept"]
    unbound = audit("session", "unbind_project")
    assert [(r.subject_id, r.data["project_id"]) for r in unbound] == [(session.public_id, "atlas")]
    revoked = audit("agent_grant", "revoke_project")
    assert [r.subject_id for r in revoked] == [agent.username]
    assert revoked[0].data["before"]["project_ids"] == ["atlas", "kept"]
    assert revoked[0].data["after"]["project_ids"] == ["kept"]
    deleted = audit("project", "delete")[-1]
    assert deleted.data["sessions_bound"] == 1 and deleted.data["agents_granted"] == [agent.username]
    assert Learning.objects.filter(scope_key="project:atlas").count() == 1  # scoped learnings stay


def test_a_persona_bound_by_a_session_cannot_be_deleted_an_unbound_one_loses_its_grants():
    bound, free = PersonaFactory(persona_id="bound", capability_scope=["read"]), PersonaFactory(persona_id="free")
    agent = UserFactory()
    SessionFactory(owner=agent, persona=bound)
    grants.grants_set(agent=agent, project_ids=[], persona_ids=["bound", "free"], actor="ops")
    assert sessions.persona_delete_impact(bound).blocked
    with pytest.raises(Conflict) as caught:
        sessions.persona_delete(persona=bound, actor="ops")
    assert caught.value.code == "persona_in_use" and "widen" in caught.value.detail
    sessions.persona_delete(persona=free, actor="ops")
    assert list(Persona.objects.values_list("persona_id", flat=True)) == ["bound"]
    assert grants.grants_for(agent).persona_ids == ["bound"]
    assert [r.subject_id for r in audit("agent_grant", "revoke_persona")] == [agent.username]
    assert [r.subject_id for r in audit("persona", "delete")] == ["free"]


# ---- the admin ------------------------------------------------------------------------------------------


def test_admin_add_and_change_go_through_the_services(admin_client):
    response = admin_client.post(
        url("persona", "add"),
        {"persona_id": "writer", "display_name": "Writer", "version": "1", "soul": "", "capability_scope": "null"},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    persona = Persona.objects.get(persona_id="writer")
    assert [r.actor for r in audit("persona", "create")] == ["admin"]
    response = admin_client.post(
        url("persona", "change", persona.pk),
        {"display_name": "Tech writer", "version": "2", "soul": "", "capability_scope": '["write"]'},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Persona.objects.get(pk=persona.pk).capability_scope == ["write"]
    assert audit("persona", "update")[-1].data["changed"]["display_name"]["after"] == "Tech writer"
    refused = admin_client.post(
        url("persona", "change", persona.pk),
        {"display_name": "Tech writer", "version": "2", "soul": "", "capability_scope": '["write", 3]'},
    )
    assert (
        refused.status_code == 200
        and "capability_scope must be a list of non-empty strings" in refused.content.decode()
    )
    # The id is read-only once created: posting another one changes nothing.
    admin_client.post(
        url("persona", "change", persona.pk),
        {"persona_id": "renamed", "display_name": "W", "version": "2", "soul": "", "capability_scope": "null"},
    )
    assert Persona.objects.get(pk=persona.pk).persona_id == "writer"

    assert admin_client.post(url("project", "add"), {"project_id": "atlas", "name": "Atlas"}).status_code == 302
    project = Project.objects.get(project_id="atlas")
    assert admin_client.post(url("project", "change", project.pk), {"name": "Atlas II"}).status_code == 302
    assert [r.subject_id for r in audit("project", "create")] == ["atlas"]
    assert audit("project", "update")[-1].data["changed"]["name"] == {"before": "Atlas", "after": "Atlas II"}


def test_admin_delete_page_shows_the_impact_then_deletes_through_the_service(admin_client):
    project = ProjectFactory(project_id="atlas")
    agent = UserFactory(username="agent-a")
    session = SessionFactory(owner=agent, projects=[project])
    LearningFactory(scope_kind="project", scope_id="atlas", scope_key="project:atlas")
    page = admin_client.get(url("project", "delete", project.pk))
    assert page.status_code == 200
    text = page.content.decode()
    assert 'id="delete-impact"' in text and session.public_id in text and "agent-a" in text
    assert "1 learnings" in text and 'id="confirm-delete"' in text
    assert Project.objects.filter(pk=project.pk).exists()  # a GET changes nothing

    response = admin_client.post(url("project", "delete", project.pk), {"post": "yes"})
    assert response.status_code == 302
    assert not Project.objects.filter(pk=project.pk).exists()
    assert [r.subject_id for r in audit("session", "unbind_project")] == [session.public_id]
    assert [r.subject_id for r in audit("agent_grant", "revoke_project")] == ["agent-a"]
    assert [r.actor for r in audit("project", "delete")] == ["admin"]


def test_bulk_delete_selected_goes_through_the_service_and_refuses_a_bound_persona(admin_client):
    bound, free = PersonaFactory(persona_id="bound"), PersonaFactory(persona_id="free")
    SessionFactory(persona=bound)
    changelist = admin_client.get(url("persona", "changelist")).content.decode()
    assert 'value="delete_with_impact"' in changelist and 'value="delete_selected"' not in changelist
    selected = {"action": "delete_with_impact", "_selected_action": [bound.pk, free.pk]}
    page = admin_client.post(url("persona", "changelist"), selected)
    text = page.content.decode()
    assert page.status_code == 200 and 'id="delete-refused"' in text and 'id="confirm-delete"' not in text
    admin_client.post(url("persona", "changelist"), {**selected, "post": "yes"})
    assert Persona.objects.count() == 2 and not audit("persona", "delete")  # refused whole

    project_a, project_b = ProjectFactory(project_id="a"), ProjectFactory(project_id="b")
    SessionFactory(projects=[project_a])
    bulk = {"action": "delete_with_impact", "_selected_action": [project_a.pk, project_b.pk]}
    page = admin_client.post(url("project", "changelist"), bulk)
    assert page.status_code == 200 and 'id="confirm-delete"' in page.content.decode()
    assert admin_client.post(url("project", "changelist"), {**bulk, "post": "yes"}).status_code == 302
    assert not Project.objects.exists()
    assert sorted(r.subject_id for r in audit("project", "delete")) == ["a", "b"]
    assert len(audit("session", "unbind_project")) == 1
    assert not AgentGrant.objects.filter(projects__isnull=False).exists()
