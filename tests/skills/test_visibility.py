"""Mounting and visibility: only active promoted skills have files under the skill root and appear in
/v1/skills, session skills (capability scope and learning scope keys), memory-context ``visible_skills`` and
memory-search skill hits; hostile names never reach the file system."""

from __future__ import annotations

import pytest

from skills import mounted_files
from skills.models import LearningSkill
from tests.conftest import assert_problem
from tests.support.skills import write_catalog_skill

NAME = "release:checklist"
CATALOG_SKILL = (
    "---\nname: code-review\ndescription: Review a patch.\nwhen_to_use: When asked for a review.\n---\nRead it."
)


def names(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [item["name"] for item in response.json()["results"]]


@pytest.mark.parametrize("until", ["draft", "verified", "canary"])
def test_only_active_skills_are_mounted_and_listed(
    ladder, procedure, until, skill_root, api_client, session_id, catalog_dir
):
    write_catalog_skill(catalog_dir, "code-review", CATALOG_SKILL)
    ladder(procedure, until=until)
    assert not (skill_root / "procedural" / procedure.public_id).exists()
    assert names(api_client.get("/v1/skills")) == ["code-review"]
    assert_problem(api_client.get(f"/v1/skills/{NAME}"), 404, "skills/skill_not_found")
    assert names(api_client.get(f"/v1/sessions/{session_id}/skills")) == ["code-review"]
    context = api_client.get(f"/v1/sessions/{session_id}/memory-context").json()
    assert [s["name"] for s in context["visible_skills"]] == ["code-review"]
    search = api_client.get(f"/v1/sessions/{session_id}/memory-search", {"query": "release checklist"}).json()
    assert not [hit for hit in search["results"] if hit["kind"] == "skill"]


def test_an_active_skill_is_mounted_and_visible_everywhere(
    ladder, procedure, skill_root, api_client, session_id, catalog_dir
):
    write_catalog_skill(catalog_dir, "code-review", CATALOG_SKILL)
    ladder(procedure)
    directory = skill_root / "procedural" / procedure.public_id
    skill_md = (directory / "SKILL.md").read_text()
    assert skill_md.startswith("---\nname: release:checklist\n")
    assert "when_to_use: Use when a release is about to ship." in skill_md
    runtime = (directory / "agents" / "kheish.yaml").read_text()
    assert "context: fork" in runtime and "agent_profile: verification" in runtime

    assert names(api_client.get("/v1/skills")) == ["code-review", NAME]
    detail = api_client.get(f"/v1/skills/{NAME}").json()
    assert detail["source"] == "promoted" and detail["source_learning_id"] == procedure.public_id
    assert detail["instructions"].startswith("Run the release checklist")
    assert detail["skill_path"] == f"{procedure.public_id}/SKILL.md"  # agents: relative to the root (14.5)
    assert names(api_client.get("/v1/skills", {"query": "RELEASE"})) == [NAME]
    assert names(api_client.get("/v1/skills", {"query": "review"})) == ["code-review"]
    assert names(api_client.get(f"/v1/sessions/{session_id}/skills")) == ["code-review", NAME]
    context = api_client.get(f"/v1/sessions/{session_id}/memory-context").json()
    assert [s["name"] for s in context["visible_skills"]] == ["code-review", NAME]

    search = api_client.get(f"/v1/sessions/{session_id}/memory-search", {"query": "Release checklist"}).json()
    hits = [hit for hit in search["results"] if hit["kind"] == "skill"]
    assert [hit["source_id"] for hit in hits] == [NAME]
    hit = hits[0]
    assert hit["title"] == f"Skill {NAME}" and hit["timestamp_ms"] == 0 and hit["prompt_eligible"] is False
    assert hit["score"] > 0 and "name" in hit["matched_fields"] and "description" in hit["matched_fields"]
    assert hit["scope"] == "workspace:default"
    # Without a query there are no skill hits.
    browse = api_client.get(f"/v1/sessions/{session_id}/memory-search").json()
    assert not [h for h in browse["results"] if h["kind"] == "skill"]


def test_search_hit_excerpt_is_cut(ladder, procedure, api_client, session_id):
    ladder(procedure, description="release " + "x" * 300)
    search = api_client.get(f"/v1/sessions/{session_id}/memory-search", {"query": "release"}).json()
    hit = next(h for h in search["results"] if h["kind"] == "skill")
    assert len(hit["excerpt"]) == 181 and hit["excerpt"].endswith("…")


def test_session_skills_follow_the_effective_capability_scope(ladder, procedure, api_client, catalog_dir):
    write_catalog_skill(catalog_dir, "code-review", CATALOG_SKILL)
    ladder(procedure)
    only_review = api_client.post("/v1/sessions", {"capability_scope": ["code-review"]}, format="json").json()
    assert names(api_client.get(f"/v1/sessions/{only_review['session_id']}/skills")) == ["code-review"]
    only_release = api_client.post("/v1/sessions", {"capability_scope": [NAME]}, format="json").json()
    assert names(api_client.get(f"/v1/sessions/{only_release['session_id']}/skills")) == [NAME]
    nothing = api_client.post("/v1/sessions", {"capability_scope": []}, format="json").json()
    assert names(api_client.get(f"/v1/sessions/{nothing['session_id']}/skills")) == []
    context = api_client.get(f"/v1/sessions/{only_review['session_id']}/memory-context").json()
    assert [s["name"] for s in context["visible_skills"]] == ["code-review"]


def test_persona_scope_intersects_the_session_scope(ladder, procedure, api_client, catalog_dir, agent, grant):
    from memory.models import Persona

    write_catalog_skill(catalog_dir, "code-review", CATALOG_SKILL)
    ladder(procedure)
    Persona.objects.create(persona_id="reviewer", display_name="Reviewer", capability_scope=["code-review"])
    grant(agent, personas=["reviewer"])
    session = api_client.post(
        "/v1/sessions", {"persona_id": "reviewer", "capability_scope": ["code-review", NAME]}, format="json"
    ).json()
    assert names(api_client.get(f"/v1/sessions/{session['session_id']}/skills")) == ["code-review"]


def test_promoted_skills_need_their_source_scope_among_the_session_scope_keys(
    ladder, procedure, api_client, session_id
):
    ladder(procedure)
    LearningSkill.objects.update(source_scope={"kind": "project", "id": "atlas"})
    assert names(api_client.get(f"/v1/sessions/{session_id}/skills")) == []
    assert names(api_client.get("/v1/skills")) == [NAME]  # the general catalog does not filter by session


def test_session_skills_of_another_agent_are_404(api_client, other_client, session_id):
    assert_problem(other_client.get(f"/v1/sessions/{session_id}/skills"), 404)
    assert_problem(api_client.get("/v1/sessions/session-999/skills"), 404)


def test_skill_lists_need_authentication(anon_client, session_id):
    assert_problem(anon_client.get("/v1/skills"), 401)
    assert_problem(anon_client.get("/v1/learning-skills"), 401)
    assert_problem(anon_client.get(f"/v1/sessions/{session_id}/skills"), 401)


def test_skills_list_is_paginated(api_client, catalog_dir):
    for index in range(5):
        write_catalog_skill(catalog_dir, f"s{index}", f"---\ndescription: Skill {index}.\n---\nDo {index}.")
    page = api_client.get("/v1/skills", {"limit": 2, "offset": 2}).json()
    assert page["count"] == 5 and [s["name"] for s in page["results"]] == ["s2", "s3"]


def test_learning_skills_governance_list_shows_every_state(ladder, promote, make_learning, api_client):
    active_learning, draft_learning = make_learning(), make_learning()
    ladder(active_learning, "alpha")
    promote(draft_learning, "beta")
    listing = api_client.get("/v1/learning-skills").json()
    assert [(s["skill_name"], s["status"]) for s in listing["results"]] == [("alpha", "active"), ("beta", "draft")]
    assert [s["skill_name"] for s in api_client.get("/v1/learning-skills", {"status": "draft"}).json()["results"]] == [
        "beta"
    ]
    by_learning = api_client.get("/v1/learning-skills", {"source_learning_id": active_learning.public_id}).json()
    assert [s["skill_name"] for s in by_learning["results"]] == ["alpha"]
    assert_problem(api_client.get("/v1/learning-skills", {"status": "bogus"}), 400, field="status")
    assert_problem(api_client.get("/v1/learning-skills", {"source_learning_id": "x"}), 400, field="source_learning_id")
    assert_problem(api_client.get("/v1/learning-skills/ghost"), 404, "skills/learning_skill_not_found")


@pytest.mark.parametrize("hostile", ["..%2F..%2Fetc", "%D1%95kill", "x" * 300, "a%20b", "..", "%2e%2e"])
def test_hostile_names_in_paths_are_400(api_client, operator_client, hostile):
    for url in (f"/v1/skills/{hostile}", f"/v1/learning-skills/{hostile}"):
        assert_problem(api_client.get(url), 400)
    for action in ("revoke", "rollback"):
        assert_problem(operator_client.post(f"/v1/learning-skills/{hostile}/{action}", {}, format="json"), 400)


def test_mount_paths_never_escape_the_root(skill_root, tmp_path):
    for hostile in ("../../etc", "learning-1/../../x", "/etc", "learning-\u0661", "learning-0", ""):
        with pytest.raises(mounted_files.MountError):
            mounted_files.skill_dir(hostile)
    # A symlink planted where a skill directory goes is replaced, never followed.
    outside = tmp_path / "outside"
    outside.mkdir()
    (skill_root / "procedural").mkdir()
    (skill_root / "procedural" / "learning-7").symlink_to(outside, target_is_directory=True)
    from skills.fingerprint import SkillDefinition

    mounted_files.write_skill("learning-7", SkillDefinition(name="x", description="d", instructions="i"))
    assert list(outside.iterdir()) == []
    assert (skill_root / "procedural" / "learning-7").is_dir()
    assert not (skill_root / "procedural" / "learning-7").is_symlink()
    # A skill root whose procedural directory points outside is refused outright.
    mounted_files.remove("learning-7")
    (skill_root / "procedural").rmdir()
    (skill_root / "procedural").symlink_to(outside, target_is_directory=True)
    with pytest.raises(mounted_files.MountError):
        mounted_files.write_skill("learning-7", SkillDefinition(name="x", description="d", instructions="i"))
    assert list(outside.iterdir()) == []


def test_an_agent_never_sees_another_agents_run_or_session_ids_in_skill_records(
    ladder, procedure, api_client, other_client, operator_client, session_id
):
    """Issue 21 follow-up: a workspace skill verified on agent A's runs is visible to agent B, but the record's
    evidence refs, verifier run ids and lifecycle events must not hand B A's run or session ids (operators
    keep them; A keeps its own)."""
    ladder(procedure)
    full = operator_client.get(f"/v1/learning-skills/{NAME}").json()
    foreign = set(full["verifier_run_ids"]) | {session_id}
    assert full["verifier_run_ids"] and any(session_id in str(ref) for ref in full["evidence_refs"])
    assert any(e.get("session_id") == session_id for e in full["lifecycle_events"])

    def leaked(body) -> set[str]:
        text = str(body)
        return {value for value in foreign if value in text}

    other_session = other_client.post("/v1/sessions", {}, format="json").json()["session_id"]
    listed = other_client.get("/v1/learning-skills")
    detail = other_client.get(f"/v1/learning-skills/{NAME}")
    assert listed.status_code == 200 and detail.status_code == 200
    assert [item["skill_name"] for item in listed.json()["results"]] == [NAME]
    assert leaked(listed.json()) == set()
    assert leaked(detail.json()) == set()
    body = detail.json()
    assert body["verifier_run_ids"] == [] and body["evidence_refs"] == []
    assert [e["event"] for e in body["lifecycle_events"]] == [e["event"] for e in full["lifecycle_events"]]
    assert body["successful_run_count"] == full["successful_run_count"]  # counts name nobody
    # The runtime surfaces carry no evidence at all.
    assert leaked(other_client.get("/v1/skills").json()) == set()
    assert leaked(other_client.get(f"/v1/skills/{NAME}").json()) == set()
    assert leaked(other_client.get(f"/v1/sessions/{other_session}/memory-context").json()) == set()
    assert (
        leaked(other_client.get(f"/v1/sessions/{other_session}/memory-search", {"query": "release checklist"}).json())
        == set()
    )
    # The agent whose runs verified the skill still sees its own ids.
    own = api_client.get(f"/v1/learning-skills/{NAME}").json()
    assert own["verifier_run_ids"] == full["verifier_run_ids"]
    assert own["evidence_refs"] == full["evidence_refs"]
    assert own["lifecycle_events"] == full["lifecycle_events"]


@pytest.mark.django_db
def test_active_promoted_rows_are_the_orm_values():
    """skills.selectors.active_promoted_rows (hand-written SELECT) equals the ORM read it replaces, JSON decoded."""
    from skills.models import LearningSkill, SkillStatus
    from skills.selectors import _PROMOTED_FIELDS, active_promoted_rows
    from tests.factories import LearningSkillFactory

    LearningSkillFactory(active=True, skill_name="zeta:one", when_to_use="when z", version="1.2")
    LearningSkillFactory(active=True, skill_name="alpha:two")
    LearningSkillFactory(skill_name="beta:draft")  # not active: left out by both
    expected = list(LearningSkill.objects.filter(status=SkillStatus.ACTIVE).values(*_PROMOTED_FIELDS))
    found = active_promoted_rows()
    assert [row["skill_name"] for row in found] == ["alpha:two", "zeta:one"]
    assert found == expected
    assert isinstance(found[0]["source_scope"], dict) and isinstance(found[0]["runtime"], dict)
