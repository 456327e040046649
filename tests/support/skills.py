"""Builders shared by the skills tests: the rollout marker and procedure text, a catalog skill file on disk,
and a promotion request body."""

from __future__ import annotations

from pathlib import Path

MARKER = "PROCEDURE_OK"
INSTRUCTIONS = f"Run the release checklist, then reply with exactly `{MARKER}`."


def write_catalog_skill(catalog_dir: Path, relative: str, text: str, runtime: str | None = None) -> Path:
    directory = catalog_dir / relative
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "SKILL.md"
    path.write_text(text, encoding="utf-8")
    if runtime is not None:
        (directory / "agents").mkdir(exist_ok=True)
        (directory / "agents" / "kheish.yaml").write_text(runtime, encoding="utf-8")
    return path


def promote_body(name: str = "release:checklist", **overrides) -> dict:
    body = {
        "skill_name": name,
        "description": "Run the release checklist in a child agent.",
        "when_to_use": "Use when a release is about to ship.",
        "version": "1",
        "instructions": INSTRUCTIONS,
    }
    body.update(overrides)
    return body
