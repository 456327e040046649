"""Promotion (spec §4.18): preconditions and their literal messages, name and field rules, secret checks on
every field, draft start, one live skill per learning, no clash with the catalog."""

from __future__ import annotations

import pytest

from skills.models import LearningSkill, LearningSkillEvent
from tests.conftest import assert_problem
from tests.support.skills import INSTRUCTIONS, promote_body, write_catalog_skill

SECRET = "the api key is sk-live-4f9c2a7e1b3d5f8a9c0e2b4d6f8a1c3e"


def test_promotion_creates_a_draft_with_fork_context_and_verification_profile(promote, procedure, skill_root):
    response = promote(procedure)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["skill_name"] == "release:checklist"
    assert body["status"] == "draft"
    assert body["source_learning_id"] == procedure.public_id
    assert body["source_scope"] == {"kind": "workspace", "id": "default"}
    assert body["runtime"]["context"] == "fork"
    assert body["runtime"]["agent_profile"] == "verification"
    assert body["verification_status"] == "unverified"
    assert body["successful_run_count"] == 0 and body["verifier_run_ids"] == []
    assert len(body["definition_fingerprint"]) == 64
    assert body["skill_path"].endswith(f"procedural/{procedure.public_id}/SKILL.md")
    assert [e["event"] for e in body["lifecycle_events"]] == ["promote"]
    assert body["lifecycle_events"][0]["to_status"] == "draft"
    assert "from_status" not in body["lifecycle_events"][0]
    # A draft is stored, never mounted.
    assert not list(skill_root.rglob("SKILL.md"))


def test_promotion_writes_an_audit_event(promote, procedure):
    from memory.models import AuditEvent

    promote(procedure)
    audit = AuditEvent.objects.get(subject_type="learning_skill", action="promote")
    assert audit.subject_id == "release:checklist" and audit.to_state == "draft"
    assert audit.data["source_learning_id"] == procedure.public_id


def test_empty_description_gets_the_default(promote, procedure):
    response = promote(procedure, description="   ")
    assert response.json()["description"] == "Execute this promoted procedure in a dedicated child agent."


def test_one_line_fields_are_normalised(promote, procedure):
    response = promote(procedure, description="  Run   the\nchecklist ", when_to_use="When\tshipping", version=" 2 ")
    body = response.json()
    assert (body["description"], body["when_to_use"], body["version"]) == ("Run the checklist", "When shipping", "2")


def test_new_skills_must_start_in_draft(promote, procedure):
    for status in ("verified", "canary", "active"):
        assert_problem(promote(procedure, status=status), 400, "skills/invalid_skill_status", field="status")
        assert promote(procedure, status=status).json()["detail"] == "new promoted skills must start in draft status"
    assert not LearningSkill.objects.exists()


@pytest.mark.parametrize(
    ("variant", "message"),
    [
        ({"kind": "fact"}, "learning {id} is not a procedure learning"),
        ({"status": "provisional", "tier": "provisional"}, "learning {id} must be active before promotion"),
        ({"status": "revoked"}, "learning {id} must be active before promotion"),
        (
            {"status": "active", "tier": "provisional"},
            "learning {id} must use the active publish tier before promotion",
        ),
        ({"scope": ("project", "atlas")}, "learning {id} must use workspace scope before promotion"),
    ],
)
def test_learning_preconditions(make_learning, promote, variant, message):
    from memory.models import Project

    Project.objects.get_or_create(project_id="atlas", defaults={"name": "Atlas"})
    if variant.get("tier") == "provisional" and variant.get("status") == "active":
        # An active learning on the provisional tier breaks a constraint of the learning plane; promote
        # through the service with an unsaved copy to check the message.
        from skills import services

        learning = make_learning()
        learning.publish_tier = "provisional"
        with pytest.raises(Exception) as info:
            services.ensure_promotable(learning)
        assert info.value.detail == message.format(id=learning.public_id)
        return
    learning = make_learning(**variant)
    body = assert_problem(promote(learning), 409, "skills/learning_not_promotable")
    assert body["detail"] == message.format(id=learning.public_id)


def test_runtime_must_be_fork_with_the_verification_profile(promote, procedure):
    body = assert_problem(promote(procedure, context="inline"), 400, "skills/invalid_skill_runtime", field="context")
    assert body["detail"] == "promoted procedure skills must use fork context"
    body = assert_problem(promote(procedure, agent_profile="builder"), 400, field="agent_profile")
    assert body["detail"] == "promoted procedure skills must use the verification agent profile"
    # A blank profile is dropped and becomes `verification`.
    assert promote(procedure, agent_profile="  ").json()["runtime"]["agent_profile"] == "verification"


def test_child_overrides_and_tools_are_kept(promote, procedure):
    body = promote(
        procedure,
        allowed_tools=["read_file", " grep "],
        blocked_tools=["shell"],
        provider="local",
        model="small",
        fallback_model="",
    ).json()
    assert body["runtime"] == {
        "allowed_tools": ["read_file", "grep"],
        "blocked_tools": ["shell"],
        "context": "fork",
        "agent_profile": "verification",
        "provider": "local",
        "model": "small",
        "fallback_model": None,
    }


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "skill_name is required"),
        ("   ", "skill_name is required"),
        (" release", "skill_name must not contain leading, trailing, or repeated whitespace"),
        ("release  notes", "skill_name must not contain leading, trailing, or repeated whitespace"),
        ("release notes", "skill_name may contain only ASCII letters, digits, ':', '_' and '-'"),
        ("../../etc", "skill_name may contain only ASCII letters, digits, ':', '_' and '-'"),
        ("..", "skill_name may contain only ASCII letters, digits, ':', '_' and '-'"),
        ("a/b", "skill_name may contain only ASCII letters, digits, ':', '_' and '-'"),
        ("\u0455kill", "skill_name may contain only ASCII letters, digits, ':', '_' and '-'"),  # Cyrillic s
        ("re\u200blease", "skill_name may contain only ASCII letters, digits, ':', '_' and '-'"),  # zero width
        ("ｒelease", "skill_name may contain only ASCII letters, digits, ':', '_' and '-'"),  # full width
        ("x" * 300, "skill_name must be at most 64 characters"),
    ],
)
def test_name_rules(promote, procedure, skill_root, name, message):
    body = assert_problem(promote(procedure, name), 400, "skills/invalid_skill_name", field="skill_name")
    assert body["detail"] == message
    assert not LearningSkill.objects.exists()
    assert list(skill_root.iterdir()) == []


def test_missing_name_and_instructions(operator_client, procedure):
    url = f"/v1/learnings/{procedure.public_id}/promote-skill"
    body = assert_problem(operator_client.post(url, {"instructions": "x"}, format="json"), 400)
    assert body["detail"] == "skill_name is required"
    body = assert_problem(operator_client.post(url, {"skill_name": "ok", "instructions": " \n "}, format="json"), 400)
    assert body["detail"] == "instructions are required"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("skill_name", "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv", "promoted skill name appears to contain secret material"),
        ("instructions", SECRET, "promoted skill instructions appear to contain secret material"),
        ("description", SECRET, "promoted skill description appears to contain secret material"),
        (
            "when_to_use",
            "password is hunter2-correct-horse",
            "promoted skill when_to_use appears to contain secret material",
        ),
        (
            "version",
            "token=ghp_0123456789abcdefghijklmnopqrstuvwxyz",
            "promoted skill version appears to contain secret material",
        ),
        (
            "allowed_tools",
            ["read_file", "api_key=AKIAZ7Q4M2K9X1B8C3D5"],
            "promoted skill runtime allowed_tools appears to contain secret material",
        ),
        (
            "blocked_tools",
            ["password=hunter2"],
            "promoted skill runtime blocked_tools appears to contain secret material",
        ),
        (
            "agent_profile",
            "token: abcdef0123456789",
            "promoted skill runtime agent_profile appears to contain secret material",
        ),
        (
            "provider",
            "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlLXZhbHVl",
            "promoted skill runtime provider appears to contain secret material",
        ),
        ("model", "secret_token=abc123def456", "promoted skill runtime model appears to contain secret material"),
        (
            "fallback_model",
            "client_secret=abc123def456",
            "promoted skill runtime fallback_model appears to contain secret material",
        ),
    ],
)
def test_secret_checks_on_every_field(promote, procedure, field, value, message):
    name = value if field == "skill_name" else "release:checklist"
    overrides = {} if field == "skill_name" else {field: value}
    response = promote(procedure, name, **overrides)
    if field == "skill_name" and response.json().get("code") == "invalid_skill_name":
        pytest.fail("the secret-looking name must be judged by the secret classifier first")
    body = assert_problem(response, 400, "skills/secret_material")
    assert body["detail"] == message
    assert not LearningSkill.objects.exists()


def test_benign_text_passes_the_secret_checks(promote, procedure):
    response = promote(procedure, description="Token budget is 1000.", when_to_use="Pat prefers concise reports.")
    assert response.status_code == 200, response.content


def test_one_live_skill_per_learning(promote, procedure):
    assert promote(procedure, "first").status_code == 200
    body = assert_problem(promote(procedure, "second"), 409, "skills/learning_already_promoted")
    assert body["detail"] == f"learning {procedure.public_id} is already promoted as skill first"


def test_name_used_by_another_learning(promote, make_learning):
    first, second = make_learning(), make_learning()
    assert promote(first, "shared").status_code == 200
    body = assert_problem(promote(second, "shared"), 409, "skills/skill_exists")
    assert body["detail"] == "promoted skill shared already exists"


def test_name_clash_with_the_catalog(promote, procedure, catalog_dir):
    write_catalog_skill(catalog_dir, "release-notes", "---\nname: release-notes\ndescription: Notes.\n---\nWrite.")
    body = assert_problem(promote(procedure, "release-notes"), 409, "skills/catalog_name_clash")
    assert body["detail"] == "skill release-notes already exists in the skill catalog"


def test_a_revoked_name_can_be_promoted_again_as_a_fresh_draft(promote, operator_client, make_learning):
    first, second = make_learning(), make_learning()
    promote(first, "reusable")
    operator_client.post("/v1/learning-skills/reusable/revoke", {}, format="json")
    response = promote(second, "reusable")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "draft" and body["source_learning_id"] == second.public_id
    assert body["revoked_at_ms"] is None
    skill = LearningSkill.objects.get(skill_name="reusable")
    assert skill.history.filter(status="revoked").exists()  # the revoked state was kept for audit
    last = LearningSkillEvent.objects.filter(skill=skill).order_by("-id").first()
    assert (last.event, last.from_status, last.to_status) == ("promote", "revoked", "draft")


def test_promotion_is_operator_only(api_client, anon_client, procedure):
    url = f"/v1/learnings/{procedure.public_id}/promote-skill"
    assert_problem(api_client.post(url, promote_body(), format="json"), 403)
    assert_problem(anon_client.post(url, promote_body(), format="json"), 401)
    assert not LearningSkill.objects.exists()


def test_unknown_learning_is_404(operator_client):
    for learning_id in ("learning-999", "learning-candidate-1", "nope"):
        response = operator_client.post(f"/v1/learnings/{learning_id}/promote-skill", promote_body(), format="json")
        assert_problem(response, 404)


def test_unknown_fields_and_wrong_types_are_400(operator_client, procedure):
    url = f"/v1/learnings/{procedure.public_id}/promote-skill"
    assert_problem(operator_client.post(url, {**promote_body(), "colour": "red"}, format="json"), 400, field="colour")
    assert_problem(
        operator_client.post(url, {**promote_body(), "instructions": 5}, format="json"), 400, field="instructions"
    )
    assert_problem(operator_client.post(url, [INSTRUCTIONS], format="json"), 400)
