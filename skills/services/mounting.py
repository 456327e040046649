"""Files on disk for promoted skills, which are not transactional:

* mounting (a skill becoming active, a rollback) happens inside the transaction, after the database writes,
  and is read back through the catalog loader; any failure restores the files that were there before and
  re-raises, so the transaction aborts and nothing changed;
* unmounting (revoke, the cascade from a revoked or superseded learning) is deferred to
  ``transaction.on_commit``: if anything later aborts the surrounding transaction, the files were never
  touched. The deferred removal re-checks that no active record owns the directory; if it fails, the files
  stay behind as orphans that ``repair`` removes.

Also the one write ``repair`` makes to a record: where an active skill is mounted.
"""

from __future__ import annotations

import logging

from django.db import transaction

from memory import public_ids
from memory.errors import Conflict
from skills import catalog, mounted_files
from skills.models import LearningSkill, SkillStatus
from skills.services.messages import DOMAIN

logger = logging.getLogger("kheish.skills")


def mount_active(skill: LearningSkill) -> None:
    """Write the files of an active record and prove they load as the same definition. On failure the
    previous files come back and the error propagates (aborting the transaction)."""
    learning_id = skill.source_learning_public_id
    definition = skill.definition
    previous = mounted_files.capture(learning_id)
    try:
        mounted_files.write_skill(learning_id, definition)
        problem = mounted_files.mount_problem(learning_id, definition)
        if problem:
            raise mounted_files.MountError(
                f"promoted skill {skill.skill_name} loaded definition does not match the service's record: {problem}"
            )
        loaded = mounted_files.load_mounted(learning_id)
    except Exception as exc:
        try:
            mounted_files.restore(learning_id, previous)
        except Exception:  # report the original error; repair will finish the job
            logger.exception("could not restore mounted files of %s after a failed mount", learning_id)
        if isinstance(exc, mounted_files.MountError | catalog.CatalogFileError | OSError):
            raise Conflict(
                f"promoted skill {skill.skill_name} could not be mounted: {exc}",
                domain=DOMAIN,
                code="mount_failed",
            ) from exc
        raise
    LearningSkill.objects.filter(pk=skill.pk).update(
        skill_path=loaded.skill_path, skill_root=loaded.skill_root, digest=loaded.digest
    )
    skill.skill_path, skill.skill_root, skill.digest = loaded.skill_path, loaded.skill_root, loaded.digest


def unmount_if_orphaned(learning_pk: int) -> bool:
    """Remove the mount directory of a learning unless an active record still owns it. Never raises."""
    if LearningSkill.objects.filter(source_learning_id=learning_pk, status=SkillStatus.ACTIVE).exists():
        return False
    try:
        return mounted_files.remove(public_ids.learning_id(learning_pk))
    except Exception:  # the files stay as orphans for repair
        logger.exception("could not remove mounted files of learning-%s; repair will remove them", learning_pk)
        return False


def unmount_on_commit(learning_pk: int) -> None:
    transaction.on_commit(lambda: unmount_if_orphaned(learning_pk), robust=True)  # the repair re-checks mounts


def refresh_mount_metadata(skill: LearningSkill, *, skill_path: str, skill_root: str, digest: str) -> None:
    """Repair: record where an active skill is mounted and its loaded digest (no status change)."""
    LearningSkill.objects.filter(pk=skill.pk, status=SkillStatus.ACTIVE).update(
        skill_path=skill_path, skill_root=skill_root, digest=digest
    )
    skill.skill_path, skill.skill_root, skill.digest = skill_path, skill_root, digest
