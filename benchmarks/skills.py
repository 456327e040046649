"""Skills: /v1/skills and a session's skills with 1,000 catalog skills and 1,000 active promoted skills."""

from __future__ import annotations

import tempfile
from pathlib import Path

from django.conf import settings
from django.db import transaction
from rest_framework.test import APIClient

from benchmarks.harness import Results, time_calls
from learnings.models import Learning
from memory.clock import now_ms
from memory.identity import api_key_create
from skills.models import LearningSkill

RUNTIME = {"allowed_tools": [], "blocked_tools": [], "context": "fork", "agent_profile": "verification"}


def write_catalog(root: Path, count: int) -> None:
    for i in range(count):
        folder = root / f"catalog-skill-{i}"
        folder.mkdir(parents=True)
        (folder / "SKILL.md").write_text(
            f"---\nname: catalog-skill-{i}\ndescription: Catalog skill number {i} for disk and report tasks.\n"
            f'version: "1.{i}"\nwhen_to_use: Use for task family {i % 37}.\n---\n'
            f"Step one for skill {i}.\nStep two.\n"
        )


def seed_promoted(count: int) -> None:
    ts = now_ms()
    learnings = Learning.objects.bulk_create(
        [
            Learning(
                scope_kind="workspace",
                scope_id="default",
                scope_key="workspace:default",
                kind="procedure",
                content=f"Procedure {i}: rotate the certificates of fleet {i}",
                confidence=90,
                created_at_ms=ts,
                published_at_ms=ts,
                updated_at_ms=ts,
                status="active",
                publish_tier="active",
                policy_decision="manual",
                policy_actor="operator",
                verification_status="unverified",
            )
            for i in range(count)
        ],
        batch_size=2000,
    )
    LearningSkill.objects.bulk_create(
        [
            LearningSkill(
                skill_name=f"promoted-skill-{i}",
                source_learning=learning,
                source_scope={"kind": "workspace", "id": "default"},
                status="active",
                description=f"Promoted procedure {i}",
                instructions=f"Rotate fleet {i}.",
                runtime=RUNTIME,
                definition_fingerprint="0" * 64,
                verification_status="verified",
                real_daemon_verified=True,
                successful_run_count=2,
                canary_success_count=1,
                canary_failure_count=0,
                promoted_at_ms=ts,
                updated_at_ms=ts,
            )
            for i, learning in enumerate(learnings)
        ],
        batch_size=2000,
    )


def run(results: Results, *, scale: int = 1) -> None:
    count = 1000 // scale
    size = f"{count} catalog + {count} active promoted skills"
    print(f"skills: seeding {size}…", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        write_catalog(Path(tmp), count)
        old_catalog = settings.KHEISH_CATALOG_DIR
        settings.KHEISH_CATALOG_DIR = Path(tmp)
        try:
            with transaction.atomic():
                seed_promoted(count)
            key = api_key_create(name="bench-skills", role="agent", actor="bench").plaintext
            client = APIClient()
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
            session_id = client.post("/v1/sessions", {}, format="json").json()["session_id"]

            def list_skills(i: int) -> None:
                assert client.get("/v1/skills?limit=50").status_code == 200

            def session_skills(i: int) -> None:
                assert client.get(f"/v1/sessions/{session_id}/skills?limit=50").status_code == 200

            def query_skills(i: int) -> None:
                assert client.get("/v1/skills?query=certificates&limit=50").status_code == 200

            results.latency("skills.list", time_calls(list_skills, 200 // scale + 20), size + ", page of 50")
            results.latency(
                "skills.session_skills", time_calls(session_skills, 200 // scale + 20), size + ", page of 50"
            )
            results.latency("skills.query", time_calls(query_skills, 200 // scale + 20), size + ", query")
        finally:
            settings.KHEISH_CATALOG_DIR = old_catalog
