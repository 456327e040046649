"""The skill catalog on disk: SKILL.md front matter, the runtime file, bad files reported (never a crash),
the definition fingerprint recipe of §1.8 and the shipped example skills."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from skills import catalog
from skills.fingerprint import SkillDefinition, SkillRuntime, definition_fingerprint, skill_name_problem
from tests.support.skills import write_catalog_skill

GOOD = """---
name: release-notes
description: Draft release notes.
version: "1.0"
when_to_use: Use when asked for release notes.
---
# Release notes

List the changes.
"""


def problems(root) -> dict[str, str]:
    return {Path(p.path).parent.name: p.message for p in catalog.load_catalog(root).problems}


def test_a_valid_skill_loads(catalog_dir):
    write_catalog_skill(
        catalog_dir,
        "release-notes",
        GOOD,
        runtime="allowed_tools: [read_file]\ncontext: fork\nagent_profile: verification\n",
    )
    loaded = catalog.load_catalog()
    skill = loaded.get("release-notes")
    assert loaded.problems == ()
    d = skill.definition
    assert (d.name, d.description, d.version, d.when_to_use) == (
        "release-notes",
        "Draft release notes.",
        "1.0",
        "Use when asked for release notes.",
    )
    assert d.instructions == "# Release notes\n\nList the changes."
    assert d.runtime == SkillRuntime(allowed_tools=("read_file",), context="fork", agent_profile="verification")
    assert skill.skill_path.endswith("release-notes/SKILL.md") and len(skill.digest) == 64


def test_defaults_name_from_the_path_and_description_from_the_body(catalog_dir):
    write_catalog_skill(catalog_dir, "review/pr", "Review the pull request carefully.\n\nThen report.")
    skill = catalog.load_catalog().get("review:pr")
    assert skill.definition.description == "Review the pull request carefully."
    assert skill.definition.runtime.context == "inline"


@pytest.mark.parametrize(
    ("text", "runtime", "fragment"),
    [
        ("---\nname: [unclosed\n---\nbody", None, "invalid YAML front matter"),
        ("---\n- a\n- b\n---\nbody", None, "front matter must be a YAML mapping"),
        ("---\nname: ../../etc\ndescription: d\n---\nbody", None, "invalid skill name"),
        ("---\nname: \u0455kill\ndescription: d\n---\nbody", None, "invalid skill name"),
        ("---\nname: " + "x" * 300 + "\ndescription: d\n---\nbody", None, "at most 64 characters"),
        ("---\nname: 5\ndescription: d\n---\nbody", None, "`name` must be a string"),
        ("---\nname: ok\nversion: 1.10\ndescription: d\n---\nbody", None, "`version` must be a string"),
        ("---\nname: ok\n---\n", None, "skill description is required"),
        ("---\nname: ok\ndescription: d\n---\n   \n", None, "instructions are required"),
        ("---\nname: ok\ndescription: d\n---\nbody", "context: sideways\n", "context must be `inline` or `fork`"),
        ("---\nname: ok\ndescription: d\n---\nbody", "allowed_tools: read\n", "allowed_tools must be a list"),
        ("---\nname: ok\ndescription: d\n---\nbody", "model: big\n", "child-only runtime overrides"),
        ("---\nname: ok\ndescription: d\n---\nbody", "surprise: 1\n", "unknown runtime field surprise"),
        ("---\nname: ok\ndescription: d\n---\nbody", ": : :\n", "invalid YAML in agents/kheish.yaml"),
    ],
)
def test_bad_files_are_reported_and_skipped(catalog_dir, text, runtime, fragment):
    write_catalog_skill(catalog_dir, "good", GOOD)
    write_catalog_skill(catalog_dir, "bad", text, runtime=runtime)
    loaded = catalog.load_catalog()
    assert list(loaded.skills) == ["release-notes"]
    assert fragment in problems(catalog_dir)["bad"]


def test_binary_oversized_and_duplicate_files(catalog_dir):
    write_catalog_skill(catalog_dir, "a", GOOD)
    write_catalog_skill(catalog_dir, "b", GOOD)  # same name again
    (catalog_dir / "bin").mkdir()
    (catalog_dir / "bin" / "SKILL.md").write_bytes(b"\xff\xfe\x00garbage")
    (catalog_dir / "big").mkdir()
    (catalog_dir / "big" / "SKILL.md").write_text("x" * (catalog.MAX_SKILL_FILE_BYTES + 1))
    found = problems(catalog_dir)
    assert "duplicate skill name `release-notes`" in found["b"]
    assert "not valid UTF-8" in found["bin"]
    assert "larger than" in found["big"]


def test_symlinks_leaving_the_catalog_are_refused(catalog_dir, tmp_path):
    outside = tmp_path / "outside-skill"
    outside.mkdir()
    (outside / "SKILL.md").write_text(GOOD)
    (catalog_dir / "linked").symlink_to(outside, target_is_directory=True)
    loaded = catalog.load_catalog()
    assert loaded.skills == {}
    [problem] = loaded.problems
    assert problem.path.endswith("linked") and problem.message == "symlink points outside the catalog directory"


def test_a_missing_catalog_directory_is_empty(tmp_path):
    assert catalog.load_catalog(tmp_path / "nope").skills == {}


def test_changes_on_disk_are_picked_up(catalog_dir):
    path = write_catalog_skill(catalog_dir, "release-notes", GOOD)
    assert catalog.load_catalog().get("release-notes").definition.description == "Draft release notes."
    path.write_text(GOOD.replace("Draft release notes.", "Write the changelog entry for this release."))
    assert catalog.load_catalog().get("release-notes").definition.description.startswith("Write the changelog")
    path.unlink()
    assert catalog.load_catalog().skills == {}


def test_unexpected_parser_errors_never_crash(catalog_dir, monkeypatch):
    write_catalog_skill(catalog_dir, "release-notes", GOOD)

    def explode(*args, **kwargs):
        raise ZeroDivisionError

    monkeypatch.setattr(catalog, "parse_skill_file", explode)
    catalog.clear_cache()
    loaded = catalog.load_catalog()
    assert loaded.skills == {} and "unexpected error" in loaded.problems[0].message


def test_catalog_skills_are_served(api_client, catalog_dir):
    write_catalog_skill(catalog_dir, "release-notes", GOOD)
    write_catalog_skill(catalog_dir, "broken", "---\nname: [\n---\nx")
    listing = api_client.get("/v1/skills").json()
    assert [s["name"] for s in listing["results"]] == ["release-notes"]
    item = listing["results"][0]
    assert item["source"] == "catalog" and item["source_learning_id"] is None and "instructions" not in item
    detail = api_client.get("/v1/skills/release-notes").json()
    assert detail["instructions"] == "# Release notes\n\nList the changes."
    assert api_client.get("/v1/skills/ghost").status_code == 404


def test_the_shipped_example_catalog_is_valid(settings):
    root = Path(settings.BASE_DIR) / "catalog"
    loaded = catalog.load_catalog(root)
    assert loaded.problems == ()
    assert {"release-notes", "code-review"} <= set(loaded.skills)
    assert loaded.get("code-review").definition.runtime.context == "fork"


# ---- fingerprint and names --------------------------------------------------------------------------------


def test_definition_fingerprint_recipe():
    runtime = SkillRuntime(allowed_tools=("read_file",), context="fork", agent_profile="verification")
    definition = SkillDefinition(
        name="learning:check",
        description="Check.",
        when_to_use="When asked.",
        version="1",
        instructions="  Reply OK.\n",
        runtime=runtime,
    )
    runtime_json = json.dumps(
        {"allowed_tools": ["read_file"], "context": "fork", "agent_profile": "verification"}, separators=(",", ":")
    )
    expected = hashlib.sha256(
        b"learning:check\0description\0Check.\0when_to_use\0When asked.\0version\x001\0instructions\0Reply OK."
        b"\0runtime\0" + runtime_json.encode()
    ).hexdigest()
    assert definition_fingerprint(definition) == expected
    # Absent optional fields hash as nothing; empty tool lists and absent overrides are left out of the JSON.
    bare = SkillDefinition(name="x", description="d", instructions="i")
    assert (
        definition_fingerprint(bare)
        == hashlib.sha256(
            b'x\0description\0d\0when_to_use\0\0version\0\0instructions\0i\0runtime\0{"context":"inline"}'
        ).hexdigest()
    )
    # Any change to the definition changes the fingerprint; trimming instructions does not.
    assert definition_fingerprint(
        SkillDefinition(name="x", description="d", instructions=" i \n")
    ) == definition_fingerprint(bare)
    assert definition_fingerprint(
        SkillDefinition(name="x", description="d", instructions="j")
    ) != definition_fingerprint(bare)


# each valid name beside its near miss, so a checker that accepted everything (or nothing) fails
@pytest.mark.parametrize(
    ("name", "near_miss"),
    [
        ("release-notes", "release notes"),
        ("learning:check", "learning/check"),
        ("a_b-C:9", "a_b-C.9"),
        ("x" * 64, "x" * 65),
    ],
)
def test_valid_names_and_their_near_misses(name, near_miss):
    assert skill_name_problem(name) is None
    assert skill_name_problem(near_miss) is not None


@pytest.mark.parametrize("name", ["", " a", "a b", "../etc", "a/b", "a.b", "\u0455kill", "x" * 65, "é", "a\nb", None])
def test_invalid_names(name):
    assert skill_name_problem(name) is not None
