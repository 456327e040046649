"""Every console action posts the real form and goes through the same service as the API: each test asserts the
audit event that service writes, and service errors reach the operator with their literal message."""

from __future__ import annotations

import pytest
from django.urls import reverse

from learnings import services as learning_services
from learnings.models import Learning, LearningCandidate
from memory.models import AuditEvent
from skills import services as skill_services
from skills.models import LearningSkill
from tests.support.console_data import (
    MARKER,
    api_candidate,
    completed_run,
    new_session,
    procedure_learning,
    published,
    staff_user,
    use_tmp_skill_dirs,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _skill_dirs(settings, tmp_path):
    use_tmp_skill_dirs(settings, tmp_path)


@pytest.fixture
def operator():
    return staff_user()


@pytest.fixture
def ops(client, operator):
    client.force_login(operator)
    return client


def url(name, *args) -> str:
    return reverse(f"console:{name}", args=args)


def audit(subject_type: str, subject_id: str, action: str) -> AuditEvent:
    return AuditEvent.objects.filter(subject_type=subject_type, subject_id=subject_id, action=action).latest("id")


def messages_of(response) -> list[str]:
    return [str(m) for m in response.wsgi_request._messages]


# ---- review queue -----------------------------------------------------------------------------------------


def test_publish_inline_with_the_chosen_tier(ops, operator):
    candidate = api_candidate("The staging cluster is called Borealis.")
    back = url("review") + "?kind=fact"
    response = ops.post(url("candidate-publish", candidate.pk), {"publish_tier": "provisional", "next": back})
    assert response.status_code == 302 and response["Location"] == back
    candidate.refresh_from_db()
    learning = candidate.published_learning
    assert (candidate.state, learning.status, learning.publish_tier) == ("published", "provisional", "provisional")
    event = audit("learning_candidate", candidate.public_id, "publish")
    assert (event.actor, event.from_state, event.to_state) == (operator.username, "pending", "published")
    assert audit("learning", learning.public_id, "publish").actor == operator.username
    assert f"Published {candidate.public_id} as {learning.public_id} (provisional)." in messages_of(response)


def test_publish_conflict_shows_the_literal_message_and_offers_supersede(ops, operator):
    existing = published("The project codename is Atlas.")
    candidate = api_candidate("The project codename is Borealis.")
    response = ops.post(url("candidate-publish", candidate.pk), {"publish_tier": "active"})
    assert response.status_code == 400
    html = response.content.decode()
    assert (
        f"learning conflicts with active learning {existing.public_id}; publish with supersedes to replace it" in html
    )
    assert f'name="supersedes" value="{existing.public_id}"' in html
    assert LearningCandidate.objects.get(pk=candidate.pk).state == "pending"
    response = ops.post(
        url("candidate-publish", candidate.pk), {"publish_tier": "active", "supersedes": existing.public_id}
    )
    assert response.status_code == 302
    existing.refresh_from_db()
    assert existing.status == "superseded"
    assert audit("learning", existing.public_id, "supersede").actor == operator.username


def test_publish_external_next_is_ignored(ops):
    candidate = api_candidate("The staging cluster is called Borealis.")
    response = ops.post(
        url("candidate-publish", candidate.pk), {"publish_tier": "active", "next": "https://evil.example/"}
    )
    assert response["Location"] == url("review")


def test_reject_is_two_step(ops, operator):
    candidate = api_candidate("The staging cluster is called Borealis.")
    confirm = ops.get(url("candidate-reject", candidate.pk))
    assert confirm.status_code == 200 and 'name="confirm"' in confirm.content.decode()
    assert ops.post(url("candidate-reject", candidate.pk), {"reason": "no"}).status_code == 400  # no confirmation
    assert LearningCandidate.objects.get(pk=candidate.pk).state == "pending"
    response = ops.post(url("candidate-reject", candidate.pk), {"confirm": "yes", "reason": "not a fact"})
    assert response.status_code == 302
    assert LearningCandidate.objects.get(pk=candidate.pk).state == "rejected"
    event = audit("learning_candidate", candidate.public_id, "reject")
    assert (event.actor, event.from_state, event.to_state, event.reason) == (
        operator.username,
        "pending",
        "rejected",
        "not a fact",
    )


def test_reject_published_candidate_shows_the_literal_message(ops):
    candidate = api_candidate("The staging cluster is called Borealis.")
    learning_services.candidate_publish(candidate=candidate, actor="tests")
    response = ops.post(url("candidate-reject", candidate.pk), {"confirm": "yes"})
    assert response.status_code == 400
    assert f"learning candidate {candidate.public_id} was already published" in response.content.decode()


# ---- learnings governance ---------------------------------------------------------------------------------


def test_revoke_is_two_step(ops, operator):
    learning = published("Deploys happen on Tuesdays.", kind="decision")
    confirm = ops.get(url("learning-revoke", learning.pk))
    assert "Are you sure?" in confirm.content.decode()
    assert Learning.objects.get(pk=learning.pk).status == "active"
    response = ops.post(url("learning-revoke", learning.pk), {"confirm": "yes", "reason": "outdated"})
    assert response.status_code == 302
    learning.refresh_from_db()
    assert (learning.status, learning.revoked_reason) == ("revoked", "outdated")
    event = audit("learning", learning.public_id, "revoke")
    assert (event.actor, event.from_state, event.to_state) == (operator.username, "active", "revoked")


def test_revoke_reason_with_a_secret_shows_the_literal_message(ops):
    learning = published("Deploys happen on Tuesdays.", kind="decision")
    response = ops.post(url("learning-revoke", learning.pk), {"confirm": "yes", "reason": "password is hunter2"})
    assert response.status_code == 400
    assert "learning revocation reason contains secret-like material" in response.content.decode()
    assert Learning.objects.get(pk=learning.pk).status == "active"


def test_revoking_a_promoted_procedure_revokes_its_skill(ops, operator):
    procedure = procedure_learning()
    skill_services.skill_promote(
        learning=procedure,
        actor="tests",
        request=skill_services.PromotionRequest(skill_name="release:checklist", instructions=procedure.content),
    )
    confirm = ops.get(url("learning-revoke", procedure.pk)).content.decode()
    assert "release:checklist" in confirm  # the cascade is announced
    ops.post(url("learning-revoke", procedure.pk), {"confirm": "yes"})
    assert LearningSkill.objects.get(skill_name="release:checklist").status == "revoked"
    assert audit("learning_skill", "release:checklist", "revoke").actor == operator.username


def test_supersede(ops, operator):
    learning = published("The project codename is Atlas.")
    form = ops.get(url("learning-supersede", learning.pk)).content.decode()
    assert "The project codename is Atlas." in form
    response = ops.post(url("learning-supersede", learning.pk), {"content": "The project codename is Nova."})
    assert response.status_code == 302
    learning.refresh_from_db()
    replacement = learning.superseded_by
    assert (learning.status, replacement.content, replacement.status) == (
        "superseded",
        "The project codename is Nova.",
        "active",
    )
    event = audit("learning", learning.public_id, "supersede")
    assert (event.actor, event.to_state) == (operator.username, "superseded")


def test_supersede_errors_show_the_literal_messages(ops):
    revoked = learning_services.learning_revoke(learning=published("The project codename is Atlas."), actor="t")
    response = ops.post(url("learning-supersede", revoked.pk), {"content": "The project codename is Nova."})
    assert response.status_code == 400
    assert f"cannot supersede revoked learning {revoked.public_id}" in response.content.decode()
    live = published("The build server is Hera.")
    response = ops.post(url("learning-supersede", live.pk), {"content": "x" * 1601})
    assert "learning content exceeds the 1600 character limit" in response.content.decode()


def test_promote_to_skill(ops, operator):
    procedure = procedure_learning()
    response = ops.post(
        url("learning-promote", procedure.pk),
        {
            "skill_name": "release:checklist",
            "description": "Run the release checklist.",
            "version": "1",
            "instructions": procedure.content,
            "allowed_tools": "shell, git",
        },
    )
    assert response.status_code == 302
    skill = LearningSkill.objects.get(skill_name="release:checklist")
    assert skill.status == "draft" and skill.source_learning_id == procedure.pk
    assert response["Location"] == f"{url('skills')}#skill-{skill.pk}"
    event = audit("learning_skill", "release:checklist", "promote")
    assert (event.actor, event.to_state) == (operator.username, "draft")


def test_promote_errors_show_the_literal_messages(ops):
    procedure = procedure_learning()
    response = ops.post(
        url("learning-promote", procedure.pk), {"skill_name": "bad!name", "instructions": procedure.content}
    )
    assert response.status_code == 400
    assert (
        "skill_name may contain only ASCII letters, digits, &#x27;:&#x27;, &#x27;_&#x27; and &#x27;-&#x27;"
        in response.content.decode()
    )  # the literal message, HTML-escaped
    fact = published("The build server is Hera.")
    response = ops.post(url("learning-promote", fact.pk), {"skill_name": "hera", "instructions": "x"})
    assert f"learning {fact.public_id} is not a procedure learning" in response.content.decode()
    assert not LearningSkill.objects.exists()


# ---- skills rollout ---------------------------------------------------------------------------------------


@pytest.fixture
def draft():
    procedure = procedure_learning()
    return skill_services.skill_promote(
        learning=procedure,
        actor="tests",
        request=skill_services.PromotionRequest(
            skill_name="release:checklist", instructions=procedure.content, description="Run the release checklist."
        ),
    )


@pytest.fixture
def session():
    return new_session()


def check(ops, skill, kind, run, marker=MARKER):
    return ops.post(
        url("skill-rollout", skill.pk),
        {
            "kind": kind,
            "run_id": run.public_id,
            "expected_output_contains": marker,
            "definition_fingerprint": skill.definition_fingerprint,
        },
    )


def move(ops, skill, status):
    return ops.post(url("skill-status", skill.pk), {"status": status})


def test_record_verification_check(ops, operator, draft, session):
    run = completed_run(session, "Use the release skill.", output=f"All checks passed. {MARKER}")
    response = check(ops, draft, "verification", run)
    assert response.status_code == 302
    draft.refresh_from_db()
    assert (draft.verification_status, draft.successful_run_count, draft.verifier_run_ids) == (
        "verified",
        1,
        [run.public_id],
    )
    event = audit("learning_skill", "release:checklist", "rollout_result")
    assert event.actor == operator.username
    assert event.data["kind"] == "verification" and event.data["run_id"] == run.public_id
    assert event.data["success"] is True


def test_rollout_errors_show_the_literal_messages(ops, draft, session):
    run = completed_run(session, "Use the release skill.", output="Something else entirely.")
    response = check(ops, draft, "verification", run)
    assert response.status_code == 400
    assert "verification rollout evidence requires a completed run with matching output" in response.content.decode()
    good = completed_run(session, "Use the release skill.", output=MARKER)
    response = ops.post(
        url("skill-rollout", draft.pk),
        {
            "kind": "verification",
            "run_id": good.public_id,
            "expected_output_contains": MARKER,
            "definition_fingerprint": "0" * 64,
        },
    )
    assert (
        "rollout evidence definition_fingerprint does not match current promoted skill definition"
        in response.content.decode()
    )
    response = check(ops, draft, "canary", good)
    assert "canary rollout evidence requires promoted skill status canary" in response.content.decode()
    assert not AuditEvent.objects.filter(subject_type="learning_skill", action="rollout_result").exists()


def test_status_change_gate_shows_the_literal_message(ops, draft):
    response = move(ops, draft, "verified")
    assert response.status_code == 400
    assert "promoted skills require verification evidence recorded by the service" in response.content.decode()
    assert LearningSkill.objects.get(pk=draft.pk).status == "draft"


def test_the_whole_ladder_through_the_console(ops, operator, draft, session):
    verification = completed_run(session, "Use the release skill.", output=f"Done. {MARKER}")
    canary = completed_run(new_session(), "Use the release skill.", output=f"Canary done. {MARKER}")
    assert check(ops, draft, "verification", verification).status_code == 302
    assert move(ops, draft, "verified").status_code == 302
    event = audit("learning_skill", "release:checklist", "promote")
    assert (event.actor, event.from_state, event.to_state) == (operator.username, "draft", "verified")
    assert move(ops, draft, "canary").status_code == 302
    draft.refresh_from_db()
    assert check(ops, draft, "canary", canary).status_code == 302
    assert audit("learning_skill", "release:checklist", "rollout_result").data["kind"] == "canary"
    assert move(ops, draft, "active").status_code == 302
    draft.refresh_from_db()
    assert (draft.status, draft.canary_success_count, draft.distinct_session_count) == ("active", 1, 2)
    assert audit("learning_skill", "release:checklist", "promote").to_state == "active"
    html = ops.get(url("skills")).content.decode()
    assert 'aria-current="step">active' in html and "Move to" not in html


def test_failed_canary_is_recorded_and_reported(ops, draft, session):
    check(ops, draft, "verification", completed_run(session, "go", output=MARKER))
    move(ops, draft, "verified")
    move(ops, draft, "canary")
    draft.refresh_from_db()
    response = check(ops, draft, "canary", completed_run(session, "go", output="it broke"))
    assert response.status_code == 302
    assert any("failed canary check" in m for m in messages_of(response))
    draft.refresh_from_db()
    assert draft.canary_failure_count == 1
    response = move(ops, draft, "active")
    assert "active promoted skills require zero canary failures" in response.content.decode()


def test_skill_revoke_and_rollback(ops, operator, draft, session):
    check(ops, draft, "verification", completed_run(session, "go", output=MARKER))
    for status in ("verified", "canary"):
        move(ops, draft, status)
    draft.refresh_from_db()
    check(ops, draft, "canary", completed_run(session, "go", output=MARKER))
    move(ops, draft, "active")
    assert "Are you sure?" in ops.get(url("skill-revoke", draft.pk)).content.decode()
    response = ops.post(url("skill-revoke", draft.pk), {"confirm": "yes", "reason": "bad rollout"})
    assert response.status_code == 302
    assert LearningSkill.objects.get(pk=draft.pk).status == "revoked"
    event = audit("learning_skill", "release:checklist", "revoke")
    assert (event.actor, event.from_state, event.reason) == (operator.username, "active", "bad rollout")
    assert url("skill-rollback", draft.pk) in ops.get(url("skills")).content.decode()
    response = ops.post(url("skill-rollback", draft.pk), {"confirm": "yes"})
    assert response.status_code == 302
    assert LearningSkill.objects.get(pk=draft.pk).status == "active"
    event = audit("learning_skill", "release:checklist", "rollback")
    assert (event.actor, event.from_state, event.to_state) == (operator.username, "revoked", "active")


def test_rollback_without_an_active_snapshot_shows_the_literal_message(ops, draft):
    skill_services.skill_revoke(skill_name=draft.skill_name, actor="tests")
    response = ops.post(url("skill-rollback", draft.pk), {"confirm": "yes"})
    assert response.status_code == 400
    assert "no active rollback snapshot exists for learning skill release:checklist" in response.content.decode()
