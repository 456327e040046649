"""Revoke (idempotent, unmounts after commit), rollback (newest active snapshot, remount, refused when the
source learning is no longer an active procedure) and the cascade from revoking or superseding the source
learning — including the failure path, where nothing may change on disk or in the database."""

from __future__ import annotations

import pytest
from django.db import transaction

from memory import hooks
from skills import services
from skills.models import LearningSkill, LearningSkillEvent
from tests.conftest import assert_problem

NAME = "release:checklist"


def mounted(skill_root, learning) -> bool:
    return (skill_root / "procedural" / learning.public_id / "SKILL.md").is_file()


def revoke(client, name=NAME, **body):
    return client.post(f"/v1/learning-skills/{name}/revoke", body, format="json")


def rollback(client, name=NAME, **body):
    return client.post(f"/v1/learning-skills/{name}/rollback", body, format="json")


# ---- revoke -----------------------------------------------------------------------------------------------


def test_revoke_unmounts_after_commit(
    ladder, procedure, operator_client, skill_root, api_client, django_capture_on_commit_callbacks
):
    ladder(procedure)
    assert mounted(skill_root, procedure)
    with django_capture_on_commit_callbacks(execute=True):
        response = revoke(operator_client, reason="replaced by the new checklist")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "revoked" and body["revoked_reason"] == "replaced by the new checklist"
    assert body["revoked_at_ms"] > 0
    event = body["lifecycle_events"][-1]
    assert (event["event"], event["from_status"], event["to_status"]) == ("revoke", "active", "revoked")
    assert not (skill_root / "procedural" / procedure.public_id).exists()
    assert [s["name"] for s in api_client.get("/v1/skills").json()["results"]] == []
    # The record stays for audit, with its history.
    assert api_client.get(f"/v1/learning-skills/{NAME}").json()["status"] == "revoked"
    assert LearningSkill.objects.get().history.filter(status="active").exists()


def test_revoke_is_idempotent(ladder, procedure, operator_client, django_capture_on_commit_callbacks):
    ladder(procedure)
    with django_capture_on_commit_callbacks(execute=True):
        first = revoke(operator_client).json()
        second = revoke(operator_client, reason="again").json()
    assert second["revoked_at_ms"] == first["revoked_at_ms"]
    assert second["revoked_reason"] is None
    assert len(second["lifecycle_events"]) == len(first["lifecycle_events"])


def test_revoking_a_draft_touches_no_files(promote, procedure, operator_client, skill_root):
    promote(procedure)
    assert revoke(operator_client).json()["status"] == "revoked"
    assert list(skill_root.iterdir()) == []


def test_revoke_reason_with_secret_material_is_refused(ladder, procedure, operator_client):
    ladder(procedure)
    body = assert_problem(
        revoke(operator_client, reason="the password is hunter2-horse-battery"),
        400,
        "skills/secret_material",
        field="reason",
    )
    assert body["detail"] == "promoted skill revocation reason appears to contain secret material"
    assert LearningSkill.objects.get().status == "active"


def test_revoke_and_rollback_are_operator_only(ladder, procedure, api_client):
    ladder(procedure)
    assert_problem(revoke(api_client), 403)
    assert_problem(rollback(api_client), 403)
    assert_problem(revoke(api_client, name="ghost"), 403)


def test_revoke_unknown_skill(operator_client):
    assert_problem(revoke(operator_client, name="ghost"), 404, "skills/learning_skill_not_found")
    assert_problem(rollback(operator_client, name="ghost"), 404, "skills/learning_skill_not_found")


def test_a_failed_unmount_leaves_orphans_for_repair(
    ladder, procedure, operator_client, skill_root, monkeypatch, django_capture_on_commit_callbacks
):
    from skills import mounted_files, repair

    ladder(procedure)

    def broken(learning_id):
        raise OSError("read-only file system")

    monkeypatch.setattr(mounted_files, "remove", broken)
    with django_capture_on_commit_callbacks(execute=True):
        assert revoke(operator_client).status_code == 200
    assert mounted(skill_root, procedure)  # still there ...
    monkeypatch.undo()
    summary = repair.repair_skills(apply=True)
    assert summary["orphans_removed"] == [procedure.public_id]  # ... until repair removes it
    assert not (skill_root / "procedural" / procedure.public_id).exists()


# ---- rollback ---------------------------------------------------------------------------------------------


def test_rollback_restores_the_newest_active_snapshot(
    ladder, procedure, operator_client, skill_root, api_client, django_capture_on_commit_callbacks
):
    active = ladder(procedure)
    with django_capture_on_commit_callbacks(execute=True):
        revoke(operator_client, reason="noisy")
    assert not mounted(skill_root, procedure)
    response = rollback(operator_client, reason="false alarm")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "active"
    assert body["revoked_at_ms"] is None and body["revoked_reason"] is None
    assert body["definition_fingerprint"] == active["definition_fingerprint"]
    assert body["canary_success_count"] == 1 and body["verifier_run_ids"] == active["verifier_run_ids"]
    assert body["evidence_refs"][-1] == {"note": "rollback restored active snapshot: false alarm"}
    event = body["lifecycle_events"][-1]
    assert (event["event"], event["from_status"], event["to_status"], event["reason"]) == (
        "rollback",
        "revoked",
        "active",
        "false alarm",
    )
    assert mounted(skill_root, procedure)
    assert [s["name"] for s in api_client.get("/v1/skills").json()["results"]] == [NAME]


def test_rollback_without_an_active_snapshot(promote, procedure, operator_client):
    promote(procedure)
    revoke(operator_client)
    body = assert_problem(rollback(operator_client), 409, "skills/no_rollback_snapshot")
    assert body["detail"] == f"no active rollback snapshot exists for learning skill {NAME}"


@pytest.mark.parametrize(
    "change", [{"status": "revoked", "revoked_at_ms": 5}, {"publish_tier": "provisional", "status": "provisional"}]
)
def test_rollback_refused_when_the_source_learning_is_not_an_active_procedure(
    ladder, procedure, operator_client, change, skill_root, django_capture_on_commit_callbacks
):
    from learnings.models import Learning

    ladder(procedure)
    with django_capture_on_commit_callbacks(execute=True):
        revoke(operator_client)
    Learning.objects.filter(pk=procedure.pk).update(**change)
    body = assert_problem(rollback(operator_client), 409, "skills/rollback_refused")
    assert body["detail"] == (
        f"cannot rollback promoted skill {NAME}; source learning {procedure.public_id} is not "
        "an active procedure learning"
    )
    assert LearningSkill.objects.get().status == "revoked"
    assert not mounted(skill_root, procedure)


def test_rollback_reason_with_secret_material(ladder, procedure, operator_client):
    ladder(procedure)
    revoke(operator_client)
    body = assert_problem(
        rollback(operator_client, reason="token=ghp_0123456789abcdefghijklmnopqrstuvwxyz"),
        400,
        "skills/secret_material",
    )
    assert body["detail"] == "promoted skill rollback reason appears to contain secret material"


def test_a_failed_remount_restores_the_previous_files_and_state(
    ladder, procedure, operator_client, skill_root, monkeypatch, django_capture_on_commit_callbacks
):
    from skills import mounted_files

    ladder(procedure)
    with django_capture_on_commit_callbacks(execute=True):
        revoke(operator_client)
    (skill_root / "procedural" / procedure.public_id).mkdir(parents=True)
    (skill_root / "procedural" / procedure.public_id / "NOTE.txt").write_text("left by an operator")
    monkeypatch.setattr(mounted_files, "mount_problem", lambda learning_id, definition: "simulated mismatch")
    body = assert_problem(rollback(operator_client), 409, "skills/mount_failed")
    assert "simulated mismatch" in body["detail"]
    assert LearningSkill.objects.get().status == "revoked"
    assert (skill_root / "procedural" / procedure.public_id / "NOTE.txt").read_text() == "left by an operator"
    assert not mounted(skill_root, procedure)


# ---- the cascade from the learning plane ------------------------------------------------------------------


def test_revoking_the_source_learning_revokes_the_skill(
    ladder, procedure, operator, operator_client, skill_root, django_capture_on_commit_callbacks
):
    from learnings import services as learning_services

    ladder(procedure)
    with django_capture_on_commit_callbacks(execute=True):
        learning_services.learning_revoke(learning=procedure, actor=operator, reason="obsolete")
    skill = LearningSkill.objects.get()
    assert skill.status == "revoked"
    assert skill.revoked_reason == f"source learning {procedure.public_id} was revoked"
    assert not (skill_root / "procedural" / procedure.public_id).exists()
    body = assert_problem(rollback(operator_client), 409, "skills/rollback_refused")
    assert "is not an active procedure learning" in body["detail"]


def test_superseding_the_source_learning_revokes_the_skill(
    ladder, procedure, operator, skill_root, django_capture_on_commit_callbacks
):
    from learnings import services as learning_services

    ladder(procedure)
    with django_capture_on_commit_callbacks(execute=True):
        learning_services.learning_supersede(
            learning=procedure, actor=operator, content="To ship a release, run the new checklist."
        )
    skill = LearningSkill.objects.get()
    assert skill.status == "revoked"
    assert skill.revoked_reason == f"source learning {procedure.public_id} is being superseded"
    assert not (skill_root / "procedural" / procedure.public_id).exists()


def test_revoking_a_learning_without_a_skill_is_unaffected(make_learning, operator):
    from learnings import services as learning_services

    learning = make_learning(kind="fact", content="The project codename is Atlas.")
    assert learning_services.learning_revoke(learning=learning, actor=operator).status == "revoked"


def test_listener_accepts_keyword_learning_and_superseding_flag(ladder, procedure):
    ladder(procedure)
    with transaction.atomic():
        skill = services.on_learning_revoking(learning=procedure, actor="tests", superseding=True)
    assert skill.revoked_reason == f"source learning {procedure.public_id} is being superseded"
    assert services.on_learning_revoking(learning=procedure, actor="tests") is None  # nothing live any more


def test_cascade_failure_inside_the_listener_changes_nothing(
    ladder, procedure, operator, skill_root, monkeypatch, django_capture_on_commit_callbacks
):
    """The skill update runs, then the listener fails (here: writing its lifecycle event): the learning
    transaction aborts, the skill is still active and its files were never touched."""
    from learnings import services as learning_services
    from learnings.models import Learning
    from skills.services import transitions

    ladder(procedure)
    before = (skill_root / "procedural" / procedure.public_id / "SKILL.md").read_text()

    def failing_event(*args, **kwargs):
        raise RuntimeError("disk full while recording the revoke event")

    monkeypatch.setattr(transitions, "_event", failing_event)
    with django_capture_on_commit_callbacks(execute=True) as callbacks, pytest.raises(RuntimeError):
        learning_services.learning_revoke(learning=procedure, actor=operator, reason="obsolete")
    assert callbacks == []
    assert Learning.objects.get(pk=procedure.pk).status == "active"
    skill = LearningSkill.objects.get()
    assert skill.status == "active" and skill.revoked_at_ms is None
    assert not skill.history.filter(status="active").exists()  # the snapshot rolled back too
    assert (skill_root / "procedural" / procedure.public_id / "SKILL.md").read_text() == before


def test_cascade_failure_after_the_listener_changes_nothing(
    ladder, procedure, operator, skill_root, django_capture_on_commit_callbacks
):
    """The listener revokes the skill, then the learning plane fails: the on-commit unmount never runs."""
    ladder(procedure)
    with (
        django_capture_on_commit_callbacks(execute=True) as callbacks,
        pytest.raises(RuntimeError),
        transaction.atomic(),
    ):
        hooks.fire(
            "learning_revoking",
            procedure,
            actor=operator,
            reason=f"source learning {procedure.public_id} was revoked",
        )
        assert LearningSkill.objects.get().status == "revoked"
        raise RuntimeError("learning update failed")
    assert callbacks == []
    assert LearningSkill.objects.get().status == "active"
    assert mounted(skill_root, procedure)
    assert not LearningSkillEvent.objects.filter(event="revoke").exists()


def test_cascade_with_a_failing_learning_update_keeps_the_skill(
    ladder, procedure, operator, skill_root, monkeypatch, django_capture_on_commit_callbacks
):
    from learnings import services as learning_services
    from learnings.services import governance

    ladder(procedure)

    def failing_move(*args, **kwargs):
        raise RuntimeError("learning row is locked")

    monkeypatch.setattr(governance, "move_learning", failing_move)
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RuntimeError):
        learning_services.learning_revoke(learning=procedure, actor=operator)
    assert LearningSkill.objects.get().status == "active"
    assert mounted(skill_root, procedure)


def test_revoke_and_rollback_accept_an_empty_body(promote, procedure, operator_client):
    promote(procedure)
    assert operator_client.post(f"/v1/learning-skills/{NAME}/revoke").status_code == 200
    assert_problem(operator_client.post(f"/v1/learning-skills/{NAME}/rollback"), 409, "skills/no_rollback_snapshot")


def test_revoke_matching_failure_restores_every_skill(
    ladder, make_learning, operator, skill_root, monkeypatch, django_capture_on_commit_callbacks
):
    from learnings import services as learning_services
    from learnings.models import Learning
    from skills.services import transitions

    first, second = make_learning(), make_learning()
    ladder(first, "alpha")
    ladder(second, "beta")
    real_event = transitions._event
    calls = {"n": 0}

    def second_fails(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("boom on the second skill")
        return real_event(*args, **kwargs)

    monkeypatch.setattr(transitions, "_event", second_fails)
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(Exception) as info:
        learning_services.learnings_revoke_matching(
            queryset=Learning.objects.filter(pk__in=[first.pk, second.pk]), actor=operator
        )
    assert "after 1 successful updates" in str(info.value)
    assert set(LearningSkill.objects.values_list("status", flat=True)) == {"active"}
    assert mounted(skill_root, first) and mounted(skill_root, second)
    assert set(Learning.objects.filter(pk__in=[first.pk, second.pk]).values_list("status", flat=True)) == {"active"}
