"""Repair of the mounted skill files (spec §4.18 "catalog repair at boot"). The database record is the
authority:

* anything under ``<skill root>/procedural`` that no active record owns is removed;
* an active record whose files are missing, edited, extended or no longer load as its definition gets them
  rewritten, then read back through the catalog loader;
* an active record that cannot be restored (a stale fingerprint — the row itself was edited — or files that
  still do not load after the rewrite) is reported; ``doctor`` reports it too (``skills.E001``/``E002``);
* path, root and digest of active records are refreshed from what loads.

``repair_skills(apply=False)`` only reports what it would do. Called by ``manage.py repair`` (through
``kheish.maintenance``) and when a worker starts.
"""

from __future__ import annotations

import logging

from skills import mounted_files
from skills.catalog import CatalogFileError
from skills.fingerprint import definition_fingerprint
from skills.models import LearningSkill
from skills.services import MSG_STALE_FINGERPRINT, active_skills_by_learning_dir, refresh_mount_metadata

logger = logging.getLogger("kheish.skills")


def _definition_problem(skill: LearningSkill) -> str | None:
    try:
        computed = definition_fingerprint(skill.definition)
    except Exception as exc:  # noqa: BLE001 - a damaged row is reported, not fatal
        return f"record does not hold a valid definition: {exc}"
    if skill.definition_fingerprint and skill.definition_fingerprint != computed:
        return MSG_STALE_FINGERPRINT
    return None


def inspect() -> dict:
    """What is wrong now, without changing anything: orphan entries, active skills whose files disagree
    with their record, and active records that cannot be served at all."""
    report: dict = {"orphans": [], "mismatched": [], "unrestorable": []}
    active = active_skills_by_learning_dir()
    try:
        entries = mounted_files.mounted_entries()
    except mounted_files.MountError as exc:
        report["unrestorable"] = [{"skill_name": s.skill_name, "problem": str(exc)} for s in active.values()]
        return report
    report["orphans"] = [name for name in entries if name not in active]
    for learning_dir, skill in active.items():
        problem = _definition_problem(skill)
        if problem:
            report["unrestorable"].append({"skill_name": skill.skill_name, "problem": problem})
            continue
        problem = mounted_files.mount_problem(learning_dir, skill.definition)
        if problem:
            report["mismatched"].append({"skill_name": skill.skill_name, "problem": problem})
    return report


def repair_skills(apply: bool = False) -> dict:
    """Bring the skill root in line with the active records. Returns a summary:
    ``{applied, active, orphans_removed, rewritten, metadata_refreshed, unrestorable}`` (names; in a dry run
    the lists say what would be done)."""
    summary: dict = {
        "applied": apply,
        "active": 0,
        "orphans_removed": [],
        "rewritten": [],
        "metadata_refreshed": [],
        "unrestorable": [],
    }
    active = active_skills_by_learning_dir()
    summary["active"] = len(active)
    try:
        entries = mounted_files.mounted_entries()
    except mounted_files.MountError as exc:
        summary["unrestorable"] = [{"skill_name": s.skill_name, "problem": str(exc)} for s in active.values()]
        return summary
    for name in entries:
        if name in active:
            continue
        if apply:
            try:
                mounted_files.remove_entry(name)
            except (OSError, mounted_files.MountError) as exc:
                logger.error("could not remove orphan skill entry %s: %s", name, exc)
                continue
        summary["orphans_removed"].append(name)
    for learning_dir, skill in active.items():
        problem = _definition_problem(skill)
        if problem:
            summary["unrestorable"].append({"skill_name": skill.skill_name, "problem": problem})
            continue
        definition = skill.definition
        problem = mounted_files.mount_problem(learning_dir, definition)
        if problem:
            if not apply:
                summary["rewritten"].append(skill.skill_name)
                continue
            try:
                mounted_files.write_skill(learning_dir, definition)
                problem = mounted_files.mount_problem(learning_dir, definition)
            except (OSError, mounted_files.MountError, CatalogFileError) as exc:
                problem = f"rewrite failed: {exc}"
            if problem:
                summary["unrestorable"].append(
                    {
                        "skill_name": skill.skill_name,
                        "problem": f"active promoted skill {skill.skill_name} loaded "
                        f"definition does not match the service's record: "
                        f"{problem}",
                    }
                )
                continue
            summary["rewritten"].append(skill.skill_name)
        if not apply:
            continue
        try:
            loaded = mounted_files.load_mounted(learning_dir)
        except (OSError, mounted_files.MountError, CatalogFileError) as exc:
            summary["unrestorable"].append(
                {
                    "skill_name": skill.skill_name,
                    "problem": f"active promoted skill {skill.skill_name} is missing after repair: {exc}",
                }
            )
            continue
        if (skill.skill_path, skill.skill_root, skill.digest) != (
            loaded.skill_path,
            loaded.skill_root,
            loaded.digest,
        ):
            refresh_mount_metadata(
                skill, skill_path=loaded.skill_path, skill_root=loaded.skill_root, digest=loaded.digest
            )
            summary["metadata_refreshed"].append(skill.skill_name)
    for item in summary["unrestorable"]:
        logger.error("promoted skill %s cannot be restored: %s", item["skill_name"], item["problem"])
    return summary
