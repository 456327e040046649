"""System checks of the skills plane (``manage.py check`` / ``manage.py doctor``), with stable ids:

* ``skills.E001`` — an active promoted skill is not served as recorded (files missing, edited or not
  loading); ``repair --apply`` rewrites them, and the error stays while that fails;
* ``skills.E002`` — an active promoted skill cannot be restored from its record (stale fingerprint);
* ``skills.W001`` — a catalog file is invalid and was skipped;
* ``skills.W002`` — a catalog skill has the name of an active promoted skill (the promoted one is served);
* ``skills.W003`` — a file or directory under the skill root that no active record owns.

Database-backed checks are skipped when the database is not ready (before ``migrate``).
"""

from __future__ import annotations

import logging

from django.core.checks import CheckMessage, Error, Warning, register

logger = logging.getLogger("kheish.skills")

MAX_REPORTED = 50


@register("skills")
def skills_checks(app_configs=None, **kwargs):
    from skills import catalog

    issues = []
    loaded = catalog.load_catalog()
    for problem in loaded.problems[:MAX_REPORTED]:
        issues.append(
            Warning(
                f"skill catalog file {problem.path}: {problem.message}",
                hint="Fix the SKILL.md front matter (name, description, version, when_to_use) or "
                "agents/kheish.yaml; the skill is skipped until then.",
                id="skills.W001",
            )
        )
    try:
        issues.extend(_database_checks(loaded))
    except Exception as exc:  # noqa: BLE001 - tables missing before migrate, database unavailable
        logger.debug("skills database checks skipped: %s", exc)
    return issues


def _database_checks(loaded) -> list[CheckMessage]:
    from skills.models import LearningSkill, SkillStatus
    from skills.repair import inspect

    issues: list[CheckMessage] = []
    active_names = set(LearningSkill.objects.filter(status=SkillStatus.ACTIVE).values_list("skill_name", flat=True))
    for name in sorted(active_names & set(loaded.skills))[:MAX_REPORTED]:
        issues.append(
            Warning(
                f"catalog skill {name} ({loaded.skills[name].skill_path}) has the name of an active "
                "promoted skill; the promoted skill is served",
                hint="Rename or remove the catalog skill.",
                id="skills.W002",
            )
        )
    report = inspect()
    for item in report["mismatched"][:MAX_REPORTED]:
        issues.append(
            Error(
                f"active promoted skill {item['skill_name']} is not mounted as recorded: {item['problem']}",
                hint="Run `manage.py repair --apply`; if the error stays, revoke the skill and "
                "check the skill root (KHEISH_SKILLS_DIR) is writable.",
                id="skills.E001",
            )
        )
    for item in report["unrestorable"][:MAX_REPORTED]:
        issues.append(
            Error(
                f"active promoted skill {item['skill_name']} cannot be restored: {item['problem']}",
                hint="The record no longer matches its fingerprint; revoke the skill and promote it again.",
                id="skills.E002",
            )
        )
    for name in report["orphans"][:MAX_REPORTED]:
        issues.append(
            Warning(
                f"skill root entry procedural/{name} is not owned by an active promoted skill",
                hint="Run `manage.py repair --apply` to remove it.",
                id="skills.W003",
            )
        )
    return issues
