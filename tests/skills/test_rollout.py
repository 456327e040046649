"""The rollout ladder (spec §4.18): evidence from runs of this service, the definition fingerprint guard, the
transition table of promote-again, the gates, and a definition change restarting the rollout."""

from __future__ import annotations

import itertools

import pytest

from skills import services
from skills.models import LearningSkill, SkillStatus
from tests.conftest import assert_problem
from tests.support.skills import MARKER

NAME = "release:checklist"


def view(operator_client, name: str = NAME) -> dict:
    response = operator_client.get(f"/v1/learning-skills/{name}")
    assert response.status_code == 200, response.content
    return response.json()


# ---- evidence ---------------------------------------------------------------------------------------------


def test_verification_evidence_from_a_completed_run(promote, rollout, completed_run, procedure, operator_client):
    draft = promote(procedure).json()
    run_id = completed_run()
    response = rollout(NAME, "verification", run_id, definition_fingerprint=draft["definition_fingerprint"])
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "draft"  # evidence never moves the status by itself
    assert body["verification_status"] == "verified"
    assert body["real_daemon_verified"] is True
    assert body["successful_run_count"] == 1
    assert body["distinct_session_count"] == 1
    assert body["verifier_run_ids"] == [run_id]
    note = body["evidence_refs"][-1]
    assert note["run_id"] == run_id
    assert note["note"].startswith("verification rollout succeeded; session=session-")
    assert f"definition_fingerprint={draft['definition_fingerprint']}" in note["note"]
    event = body["lifecycle_events"][-1]
    assert event["event"] == "rollout_result" and event["rollout_kind"] == "verification"
    assert event["run_id"] == run_id and event["success"] is True and event["to_status"] == "draft"
    assert event["session_id"].startswith("session-")


def test_the_marker_must_be_in_the_latest_non_empty_output(promote, rollout, completed_run, procedure, api_client):
    promote(procedure)
    run_id = completed_run("nothing to see")
    body = assert_problem(rollout(NAME, "verification", run_id), 409, "skills/rollout_rejected")
    assert body["detail"] == "verification rollout evidence requires a completed run with matching output"
    # An earlier output holding the marker does not count when a later non-empty output lacks it ...
    opened = api_client.post(
        "/v1/sessions/" + api_client.get("/v1/sessions").json()["results"][0]["session_id"] + "/runs",
        {"input": {"content": "go"}},
        format="json",
    ).json()["run_id"]
    api_client.post(f"/v1/runs/{opened}/start", {}, format="json")
    api_client.post(f"/v1/runs/{opened}/output", {"content": f"draft {MARKER}"}, format="json")
    api_client.post(f"/v1/runs/{opened}/output", {"content": "final answer"}, format="json")
    api_client.post(f"/v1/runs/{opened}/output", {"content": "   "}, format="json")
    api_client.post(f"/v1/runs/{opened}/complete", {}, format="json")
    assert_problem(rollout(NAME, "verification", opened), 409, "skills/rollout_rejected")
    # ... while trailing empty outputs are skipped.
    second = completed_run(f"ok {MARKER}")
    assert rollout(NAME, "verification", second).status_code == 200


@pytest.mark.parametrize("status", ["queued", "running", "failed"])
def test_verification_evidence_from_a_run_that_did_not_complete(promote, rollout, completed_run, procedure, status):
    promote(procedure)
    run_id = completed_run(f"output {MARKER}", status=status)
    body = assert_problem(rollout(NAME, "verification", run_id), 409, "skills/rollout_rejected")
    assert body["detail"] == "verification rollout evidence requires a completed run with matching output"
    assert LearningSkill.objects.get().verifier_run_ids == []


def test_expected_output_contains_is_required(promote, rollout, completed_run, procedure, operator_client):
    promote(procedure)
    run_id = completed_run()
    for marker in ("", "   ", None):
        body = assert_problem(
            rollout(NAME, "verification", run_id, marker=marker), 400, field="expected_output_contains"
        )
        assert body["detail"] == "expected_output_contains is required"
    response = operator_client.post(
        f"/v1/learning-skills/{NAME}/rollout-result", {"kind": "verification", "run_id": run_id}, format="json"
    )
    assert assert_problem(response, 400)["detail"] == "expected_output_contains is required"


def test_evidence_guarded_by_another_fingerprint(promote, rollout, completed_run, procedure):
    promote(procedure)
    body = assert_problem(
        rollout(NAME, "verification", completed_run(), definition_fingerprint="0" * 64),
        409,
        "skills/fingerprint_mismatch",
    )
    assert body["detail"] == (
        "rollout evidence definition_fingerprint does not match current promoted skill definition"
    )
    assert LearningSkill.objects.get().verifier_run_ids == []


def test_recording_the_same_run_twice_is_a_no_op(promote, rollout, completed_run, procedure):
    promote(procedure)
    run_id = completed_run()
    first = rollout(NAME, "verification", run_id).json()
    second = rollout(NAME, "verification", run_id).json()
    assert second["successful_run_count"] == first["successful_run_count"] == 1
    assert second["verifier_run_ids"] == [run_id]
    assert len(second["lifecycle_events"]) == len(first["lifecycle_events"])
    assert len(second["evidence_refs"]) == len(first["evidence_refs"])


def test_distinct_sessions_are_counted(promote, rollout, completed_run, procedure, api_client):
    promote(procedure)
    other_session = api_client.post("/v1/sessions", {}, format="json").json()["session_id"]
    rollout(NAME, "verification", completed_run())
    rollout(NAME, "verification", completed_run())
    body = rollout(NAME, "verification", completed_run(session=other_session)).json()
    assert body["successful_run_count"] == 3
    assert body["distinct_session_count"] == 2


def test_unknown_skill_and_run(promote, rollout, procedure, operator_client):
    assert_problem(rollout("ghost", "verification", "run-1"), 404, "skills/learning_skill_not_found")
    promote(procedure)
    assert_problem(rollout(NAME, "verification", "run-999"), 404, "runs/run_not_found")
    assert_problem(rollout(NAME, "rehearsal", "run-1"), 400, field="kind")


def test_revoked_skills_accept_no_evidence(promote, rollout, completed_run, procedure, operator_client):
    promote(procedure)
    operator_client.post(f"/v1/learning-skills/{NAME}/revoke", {}, format="json")
    body = assert_problem(rollout(NAME, "verification", completed_run()), 409, "skills/rollout_rejected")
    assert body["detail"] == "revoked promoted skills cannot accept rollout evidence"


@pytest.mark.parametrize("until", ["draft", "verified"])
def test_canary_evidence_requires_canary_status(ladder, rollout, completed_run, procedure, until):
    ladder(procedure, until=until)
    body = assert_problem(rollout(NAME, "canary", completed_run()), 409, "skills/rollout_rejected")
    assert body["detail"] == "canary rollout evidence requires promoted skill status canary"


def test_canary_failure_is_recorded_and_blocks_activation(ladder, rollout, completed_run, promote, procedure):
    ladder(procedure, until="canary")
    failed = rollout(NAME, "canary", completed_run("wrong answer")).json()
    assert failed["canary_failure_count"] == 1 and failed["canary_success_count"] == 0
    assert failed["evidence_refs"][-1]["note"].startswith("canary rollout failed;")
    assert failed["lifecycle_events"][-1]["success"] is False
    # A failed (terminal) run is a canary failure too.
    assert rollout(NAME, "canary", completed_run(status="failed")).json()["canary_failure_count"] == 2
    ok = rollout(NAME, "canary", completed_run()).json()
    assert ok["canary_success_count"] == 1
    body = assert_problem(promote(procedure, status="active"), 409, "skills/rollout_gate")
    assert body["detail"] == "active promoted skills require zero canary failures"


def test_canary_evidence_from_an_unfinished_run_is_refused(ladder, rollout, completed_run, procedure):
    ladder(procedure, until="canary")
    body = assert_problem(rollout(NAME, "canary", completed_run(status="running")), 409, "skills/rollout_rejected")
    assert "requires a finished run" in body["detail"]
    assert LearningSkill.objects.get().canary_failure_count == 0


def test_active_needs_a_successful_canary(ladder, promote, procedure):
    ladder(procedure, until="canary")
    body = assert_problem(promote(procedure, status="active"), 409, "skills/rollout_gate")
    assert body["detail"] == "active promoted skills require at least one successful canary rollout"


def test_full_ladder_to_active(ladder, procedure, skill_root):
    body = ladder(procedure)
    assert body["status"] == "active"
    assert body["canary_success_count"] == 1 and body["canary_failure_count"] == 0
    assert body["successful_run_count"] == 2
    steps = [(e.get("from_status"), e["to_status"]) for e in body["lifecycle_events"] if e["event"] == "promote"]
    assert steps == [(None, "draft"), ("draft", "verified"), ("verified", "canary"), ("canary", "active")]
    assert (skill_root / "procedural" / procedure.public_id / "SKILL.md").is_file()


def test_verified_needs_verification_evidence(promote, procedure):
    promote(procedure)
    body = assert_problem(promote(procedure, status="verified"), 409, "skills/rollout_gate")
    assert body["detail"] == "promoted skills require verification evidence recorded by the service"


def test_rollout_is_operator_only(promote, procedure, api_client, completed_run):
    promote(procedure)
    response = api_client.post(
        f"/v1/learning-skills/{NAME}/rollout-result",
        {"kind": "verification", "run_id": completed_run(), "expected_output_contains": MARKER},
        format="json",
    )
    assert_problem(response, 403)


# ---- the transition table ---------------------------------------------------------------------------------

ALLOWED = {
    ("draft", "draft"),
    ("draft", "verified"),
    ("verified", "draft"),
    ("verified", "verified"),
    ("verified", "canary"),
    ("verified", "active"),
    ("canary", "draft"),
    ("canary", "canary"),
    ("canary", "active"),
    ("active", "active"),
}
STATES = ["draft", "verified", "canary", "active"]


def _force_state(skill: LearningSkill, status: str) -> None:
    """Put a record in ``status`` with full evidence (a canary success), so only the table decides."""
    LearningSkill.objects.filter(pk=skill.pk).update(
        status=status,
        verification_status="verified",
        real_daemon_verified=True,
        successful_run_count=2,
        distinct_session_count=1,
        evidence_session_ids=["session-1"],
        verifier_run_ids=["run-1", "run-2"],
        canary_success_count=1,
        canary_failure_count=0,
    )


@pytest.mark.parametrize(("current", "target"), list(itertools.product(STATES, STATES)))
def test_transition_table(promote, procedure, current, target, operator):
    promote(procedure)
    skill = LearningSkill.objects.get()
    _force_state(skill, current)
    if (current, target) in ALLOWED:
        updated = services.skill_promote(
            learning=procedure,
            request=services.PromotionRequest(
                skill_name=NAME,
                instructions=skill.instructions,
                description=skill.description,
                when_to_use=skill.when_to_use,
                version=skill.version,
                status=target,
            ),
            actor=operator,
        )
        assert updated.status == target
    else:
        response = promote(procedure, status=target)
        body = assert_problem(response, 409, "skills/invalid_transition", field="status")
        assert (
            body["detail"] == f"cannot transition promoted skill from {current.capitalize()} to {target.capitalize()}"
        )
        assert LearningSkill.objects.get().status == current


def test_revoked_status_cannot_be_requested(promote, procedure):
    promote(procedure)
    assert_problem(promote(procedure, status="revoked"), 400, field="status")


def test_restarting_the_rollout_resets_evidence(ladder, promote, procedure):
    ladder(procedure, until="canary")
    body = promote(procedure, status="draft").json()
    assert body["status"] == "draft"
    assert body["verification_status"] == "unverified"
    assert body["successful_run_count"] == 0 and body["distinct_session_count"] == 0
    assert body["verifier_run_ids"] == [] and body["real_daemon_verified"] is False
    assert body["canary_success_count"] == 0 and body["canary_failure_count"] == 0
    assert body["lifecycle_events"][-1]["reason"] == "rollout restarted"


def test_a_definition_change_restarts_the_rollout(ladder, promote, rollout, completed_run, procedure):
    before = ladder(procedure, until="verified")
    changed = promote(procedure, status="verified", instructions=f"New steps; reply `{MARKER}`.")
    assert assert_problem(changed, 409, "skills/rollout_gate")["detail"] == (
        "promoted skills require verification evidence recorded by the service"
    )
    body = promote(procedure, instructions=f"New steps; reply `{MARKER}`.").json()  # back to draft, new definition
    assert body["status"] == "draft"
    assert body["definition_fingerprint"] != before["definition_fingerprint"]
    assert body["verification_status"] == "unverified" and body["verifier_run_ids"] == []
    assert body["lifecycle_events"][-1]["reason"] == "definition changed"
    # Evidence pinned to the old definition is refused.
    stale = rollout(NAME, "verification", completed_run(), definition_fingerprint=before["definition_fingerprint"])
    assert_problem(stale, 409, "skills/fingerprint_mismatch")


def test_an_active_definition_is_immutable(ladder, promote, procedure):
    active = ladder(procedure)
    for change in ({"instructions": "Different."}, {"description": "Other."}, {"allowed_tools": ["shell"]}):
        body = assert_problem(promote(procedure, status="active", **change), 409, "skills/definition_immutable")
        assert body["detail"] == "active promoted skill definition changes must start a new draft rollout"
    body = assert_problem(promote(procedure, status="draft"), 409, "skills/invalid_transition")
    assert body["detail"] == "cannot transition promoted skill from Active to Draft"
    same = promote(procedure, status="active").json()
    assert same["definition_fingerprint"] == active["definition_fingerprint"]
    assert len(same["lifecycle_events"]) == len(active["lifecycle_events"])  # a no-op


def test_a_tampered_record_is_stale(promote, procedure, rollout, completed_run):
    promote(procedure)
    LearningSkill.objects.update(instructions="edited behind the service's back")
    body = assert_problem(rollout(NAME, "verification", completed_run()), 409, "skills/stale_fingerprint")
    assert body["detail"] == "promoted skill definition fingerprint is stale"


def test_history_snapshot_before_every_update(ladder, procedure):
    ladder(procedure)
    skill = LearningSkill.objects.get()
    statuses = list(skill.history.order_by("recorded_at_ms", "id").values_list("status", flat=True))
    # verification evidence, →verified, →canary, canary evidence, →active
    assert statuses == ["draft", "draft", "verified", "canary", "canary"]
    assert all(len(d) == 16 for d in skill.history.values_list("record_digest", flat=True))
    assert skill.status == SkillStatus.ACTIVE
