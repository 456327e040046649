"""Fixtures of the skills tests: a private skill root and catalog per test, procedure learnings, runs that
complete with a marker, and helpers that drive a promoted skill up the rollout ladder through the API."""

from __future__ import annotations

from pathlib import Path

import pytest

from skills import catalog
from tests.support.skills import MARKER, promote_body


@pytest.fixture(autouse=True)
def skill_dirs(settings, tmp_path):
    """Every test gets its own skill root and catalog directory (never the shared var/test-skills)."""
    root = tmp_path / "skill-root"
    catalog_dir = tmp_path / "catalog"
    root.mkdir()
    catalog_dir.mkdir()
    settings.KHEISH_SKILLS_DIR = root
    settings.KHEISH_CATALOG_DIR = catalog_dir
    catalog.clear_cache()
    yield {"root": root, "catalog": catalog_dir}
    catalog.clear_cache()


@pytest.fixture
def skill_root(skill_dirs) -> Path:
    return skill_dirs["root"]


@pytest.fixture
def catalog_dir(skill_dirs) -> Path:
    return skill_dirs["catalog"]


@pytest.fixture
def make_learning(db, operator):
    """``make_learning(kind=, scope=(kind, id), status=, tier=, content=)``. The ordinary case (an active
    workspace procedure) goes through the learning services; the odd states are set with the ORM."""
    from learnings import services
    from learnings.models import Learning
    from learnings.validation import LearningScope

    counter = {"n": 0}

    def make(
        kind: str = "procedure",
        scope: tuple[str, str] = ("workspace", "default"),
        status: str = "active",
        tier: str = "active",
        content: str | None = None,
    ) -> Learning:
        counter["n"] += 1
        body = content or f"To ship release {counter['n']}, run the checklist and confirm the marker."
        candidate = services.candidate_create(
            actor=operator, scope=LearningScope(kind=scope[0], id=scope[1]), kind=kind, content=body, confidence=90
        )
        learning = services.candidate_publish(
            candidate=candidate,
            actor=operator,
            options=services.PublishOptions.manual(publish_tier="active" if tier == "active" else "provisional"),
        )
        changes = {}
        if tier != learning.publish_tier:
            changes["publish_tier"] = tier
        if status != learning.status:
            changes["status"] = status
            if status == "revoked":
                changes["revoked_at_ms"] = 1
        if changes:
            Learning.objects.filter(pk=learning.pk).update(**changes)
            learning.refresh_from_db()
        return learning

    return make


@pytest.fixture
def procedure(make_learning):
    return make_learning()


@pytest.fixture
def promote(operator_client):
    def call(learning, name: str = "release:checklist", **overrides):
        return operator_client.post(
            f"/v1/learnings/{learning.public_id}/promote-skill", promote_body(name, **overrides), format="json"
        )

    return call


@pytest.fixture
def completed_run(api_client, session_id):
    """``completed_run(output, session=None, status="completed")`` → run id. Runs go through the API: open,
    start, then complete (or fail / leave running)."""

    def make(
        output: str = f"All checks passed. {MARKER}", *, session: str | None = None, status: str = "completed"
    ) -> str:
        sid = session or session_id
        opened = api_client.post(
            f"/v1/sessions/{sid}/runs", {"input": {"content": "Use the release skill."}}, format="json"
        )
        assert opened.status_code == 202, opened.content
        run_id = opened.json()["run_id"]
        if status == "queued":
            return run_id
        assert api_client.post(f"/v1/runs/{run_id}/start", {}, format="json").status_code == 200
        if status == "running":
            api_client.post(f"/v1/runs/{run_id}/output", {"content": output}, format="json")
            return run_id
        if status == "failed":
            response = api_client.post(f"/v1/runs/{run_id}/fail", {"error": "boom"}, format="json")
        else:
            response = api_client.post(f"/v1/runs/{run_id}/complete", {"output": {"content": output}}, format="json")
        assert response.status_code == 200, response.content
        return run_id

    return make


@pytest.fixture
def rollout(operator_client):
    def call(name: str, kind: str, run_id: str, marker: str = MARKER, **extra):
        return operator_client.post(
            f"/v1/learning-skills/{name}/rollout-result",
            {"kind": kind, "run_id": run_id, "expected_output_contains": marker, **extra},
            format="json",
        )

    return call


@pytest.fixture
def ladder(promote, rollout, completed_run):
    """Drive a procedure up the ladder through the API; ``ladder(learning, name, until="active")``."""

    def climb(learning, name: str = "release:checklist", until: str = "active", **overrides):
        response = promote(learning, name, **overrides)
        assert response.status_code == 200, response.content
        if until == "draft":
            return response.json()
        response = rollout(name, "verification", completed_run())
        assert response.status_code == 200, response.content
        response = promote(learning, name, status="verified", **overrides)
        assert response.status_code == 200, response.content
        if until == "verified":
            return response.json()
        response = promote(learning, name, status="canary", **overrides)
        assert response.status_code == 200, response.content
        if until == "canary":
            return response.json()
        response = rollout(name, "canary", completed_run())
        assert response.status_code == 200, response.content
        response = promote(learning, name, status="active", **overrides)
        assert response.status_code == 200, response.content
        return response.json()

    return climb
