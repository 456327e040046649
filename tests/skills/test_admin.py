"""The promoted-skill changelist and record: stepper, counters, fingerprint, lifecycle events; the bulk revoke
behind a confirmation page; and the buttons to the console's workflow pages (rollout evidence with the
fingerprint pre-filled, revoke and rollback behind confirmation pages, promote to skill), which come back to
the record. Forms are posted for real."""

from __future__ import annotations

from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.urls import reverse

from skills.models import LearningSkill
from tests.support.skills import MARKER

NAME = "release:checklist"


def url(name: str, *args) -> str:
    return reverse(f"admin:skills_learningskill_{name}", args=args)


def console(name: str, *args) -> str:
    return reverse(f"console:{name}", args=args)


PROCEDURES = console("learnings") + "?status=active&kind=procedure"


def test_changelist_shows_stepper_counters_and_fingerprint(admin_client, ladder, promote, procedure, make_learning):
    ladder(procedure)
    promote(make_learning(), "beta")
    page = admin_client.get(url("changelist")).content.decode()
    assert 'data-status="active"' in page and 'data-status="draft"' in page
    assert "2 runs · 1 session · canary 1/0" in page
    skill = LearningSkill.objects.get(skill_name=NAME)
    assert skill.definition_fingerprint[:12] in page
    assert 'href="/admin/memory/learnings/?status=active&amp;kind=procedure"' in page  # promote starts there
    filtered = admin_client.get(url("changelist"), {"mounted": "yes"}).content.decode()
    assert NAME in filtered and "beta" not in filtered


def test_change_page_shows_lifecycle_events_and_actions(admin_client, ladder, procedure):
    ladder(procedure)
    skill = LearningSkill.objects.get()
    page = admin_client.get(url("change", skill.pk)).content.decode()
    assert 'id="lifecycle-events"' in page and "rollout_result" in page and "canary → active" in page
    back = f"?next={url('change', skill.pk)}"
    assert console("skill-rollout", skill.pk) + back in page and console("skill-revoke", skill.pk) + back in page
    assert console("skill-status", skill.pk) in page
    assert 'id="history-snapshots"' in page


def test_rollout_form_prefills_the_fingerprint_and_records_evidence(admin_client, promote, procedure, completed_run):
    promote(procedure)
    skill = LearningSkill.objects.get()
    back = url("change", skill.pk)
    form_page = admin_client.get(console("skill-rollout", skill.pk), {"next": back}).content.decode()
    assert f'value="{skill.definition_fingerprint}"' in form_page and f'name="next" value="{back}"' in form_page
    run_id = completed_run()
    response = admin_client.post(
        console("skill-rollout", skill.pk),
        {
            "kind": "verification",
            "run_id": run_id,
            "expected_output_contains": MARKER,
            "definition_fingerprint": skill.definition_fingerprint,
            "next": back,
        },
    )
    assert response.status_code == 302 and response["Location"] == back
    skill.refresh_from_db()
    assert skill.verifier_run_ids == [run_id] and skill.verification_status == "verified"


def test_rollout_form_shows_service_errors(admin_client, promote, procedure, completed_run):
    promote(procedure)
    skill = LearningSkill.objects.get()
    response = admin_client.post(
        console("skill-rollout", skill.pk),
        {
            "kind": "verification",
            "run_id": completed_run("no marker here"),
            "expected_output_contains": MARKER,
            "definition_fingerprint": skill.definition_fingerprint,
        },
    )
    assert response.status_code == 400
    assert "verification rollout evidence requires a completed run with matching output" in response.content.decode()
    stale = admin_client.post(
        console("skill-rollout", skill.pk),
        {
            "kind": "verification",
            "run_id": completed_run(),
            "expected_output_contains": MARKER,
            "definition_fingerprint": "f" * 64,
        },
    )
    assert "does not match current promoted skill definition" in stale.content.decode()
    assert LearningSkill.objects.get().verifier_run_ids == []


def test_revoke_needs_confirmation(admin_client, ladder, procedure, skill_root, django_capture_on_commit_callbacks):
    ladder(procedure)
    skill = LearningSkill.objects.get()
    back = url("change", skill.pk)
    page = admin_client.get(console("skill-revoke", skill.pk), {"next": back}).content.decode()
    assert "Yes, revoke" in page and "mounted files are removed" in page and f'href="{back}"' in page
    admin_client.post(console("skill-revoke", skill.pk), {"reason": "no confirm"})  # no confirm=yes: nothing happens
    assert LearningSkill.objects.get().status == "active"
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(
            console("skill-revoke", skill.pk), {"confirm": "yes", "reason": "retired", "next": back}
        )
    assert response.status_code == 302 and response["Location"] == back
    skill.refresh_from_db()
    assert skill.status == "revoked" and skill.revoked_reason == "retired"
    assert not (skill_root / "procedural" / procedure.public_id).exists()


def test_rollback_needs_confirmation(admin_client, ladder, procedure, operator_client, skill_root):
    ladder(procedure)
    operator_client.post(f"/v1/learning-skills/{NAME}/revoke", {}, format="json")
    skill = LearningSkill.objects.get()
    page = admin_client.get(url("change", skill.pk)).content.decode()
    assert console("skill-rollback", skill.pk) in page
    assert "Yes, roll back" in admin_client.get(console("skill-rollback", skill.pk)).content.decode()
    response = admin_client.post(console("skill-rollback", skill.pk), {"confirm": "yes", "reason": "restored"})
    assert response.status_code == 302
    assert LearningSkill.objects.get().status == "active"
    assert (skill_root / "procedural" / procedure.public_id / "SKILL.md").is_file()


def test_rollback_refusal_is_shown(admin_client, promote, procedure, operator_client):
    promote(procedure)
    operator_client.post(f"/v1/learning-skills/{NAME}/revoke", {}, format="json")
    skill = LearningSkill.objects.get()
    response = admin_client.post(console("skill-rollback", skill.pk), {"confirm": "yes"})
    assert response.status_code == 400
    assert f"no active rollback snapshot exists for learning skill {NAME}" in response.content.decode()


def test_bulk_revoke_uses_a_confirmation_page(admin_client, promote, make_learning):
    promote(make_learning(), "alpha")
    promote(make_learning(), "beta")
    pks = [str(pk) for pk in LearningSkill.objects.values_list("pk", flat=True)]
    page = admin_client.post(url("changelist"), {"action": "revoke_selected", ACTION_CHECKBOX_NAME: pks})
    assert page.status_code == 200 and "Yes, revoke" in page.content.decode()
    assert 'name="post" value="yes"' in page.content.decode() and 'name="confirm"' in page.content.decode()
    assert not LearningSkill.objects.filter(status="revoked").exists()
    done = admin_client.post(
        url("changelist"),
        {"action": "revoke_selected", ACTION_CHECKBOX_NAME: pks, "post": "yes", "confirm": "yes", "reason": "cleanup"},
        follow=True,
    )
    assert "Revoked 2 skills" in done.content.decode()
    assert set(LearningSkill.objects.values_list("status", flat=True)) == {"revoked"}


def test_bulk_revoke_reports_failures(admin_client, promote, make_learning):
    promote(make_learning(), "alpha")
    pks = [str(pk) for pk in LearningSkill.objects.values_list("pk", flat=True)]
    done = admin_client.post(
        url("changelist"),
        {
            "action": "revoke_selected",
            ACTION_CHECKBOX_NAME: pks,
            "post": "yes",
            "confirm": "yes",
            "reason": "password is hunter2-battery",
        },
        follow=True,
    )
    assert "1 failed — alpha: " in done.content.decode()
    assert LearningSkill.objects.get().status == "draft"


def test_promote_to_skill_from_the_changelist_link(admin_client, procedure, make_learning):
    fact = make_learning(kind="fact", content="The project codename is Atlas.")
    listing = admin_client.get(PROCEDURES).content.decode()
    assert console("learning-promote", procedure.pk) in listing and console("learning-promote", fact.pk) not in listing
    form = admin_client.get(console("learning-promote", procedure.pk)).content.decode()
    assert procedure.content in form  # instructions pre-filled from the learning
    response = admin_client.post(
        console("learning-promote", procedure.pk),
        {
            "skill_name": NAME,
            "description": "Run the checklist.",
            "instructions": procedure.content,
            "allowed_tools": "read_file, grep",
            "blocked_tools": "",
        },
    )
    assert response.status_code == 302
    skill = LearningSkill.objects.get()
    assert skill.status == "draft" and skill.runtime["allowed_tools"] == ["read_file", "grep"]
    assert console("learning-promote", procedure.pk) not in admin_client.get(PROCEDURES).content.decode()


def test_promote_errors_are_shown(admin_client, make_learning):
    fact = make_learning(kind="fact", content="The project codename is Atlas.")
    page = admin_client.get(console("learning-promote", fact.pk)).content.decode()
    assert "cannot be promoted" in page and "it is a fact learning" in page
    response = admin_client.post(console("learning-promote", fact.pk), {"skill_name": "../../etc", "instructions": "x"})
    assert "skill_name may contain only ASCII letters" in response.content.decode()
    response = admin_client.post(console("learning-promote", fact.pk), {"skill_name": "ok", "instructions": "x"})
    assert f"learning {fact.public_id} is not a procedure learning" in response.content.decode()
    assert not LearningSkill.objects.exists()


def test_the_console_is_staff_only(client, ladder, procedure):
    ladder(procedure)
    skill = LearningSkill.objects.get()
    for target in (
        url("changelist"),
        url("change", skill.pk),
        console("skill-rollout", skill.pk),
        console("skill-revoke", skill.pk),
        PROCEDURES,
    ):
        response = client.get(target)
        assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert client.post(console("skill-revoke", skill.pk), {"confirm": "yes"}).status_code == 302
    assert LearningSkill.objects.get().status == "active"
