"""Mounted files of promoted skills, under the service-owned skill root (``settings.KHEISH_SKILLS_DIR``).

Layout (spec §1.8): ``<root>/procedural/<source_learning_id>/SKILL.md`` and ``.../agents/kheish.yaml``. The
directory is named after the source learning (``learning-N``), never after the skill name, and every path is
resolved and checked to lie under the root before anything is written or removed — a symlink planted in the
tree cannot redirect a write or a delete outside it.

The database record is the authority: these functions only render what a record says, write it atomically
(temporary file + rename), read it back through the catalog parser to prove it loads as the same
definition, and remove what no active record owns.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path

import yaml
from django.conf import settings

from skills.catalog import (
    RUNTIME_DIR,
    RUNTIME_FILE,
    SKILL_FILE,
    CatalogFileError,
    CatalogSkill,
    parse_skill_file,
)
from skills.fingerprint import SkillDefinition

PROCEDURAL_DIR = "procedural"
RUNTIME_RELPATH = f"{RUNTIME_DIR}/{RUNTIME_FILE}"
_LEARNING_DIR = re.compile(r"learning-[1-9][0-9]{0,18}")


class MountError(Exception):
    """A mounted skill could not be written, read back or removed."""


def skills_root() -> Path:
    return Path(settings.KHEISH_SKILLS_DIR)


def procedural_root() -> Path:
    return skills_root() / PROCEDURAL_DIR


def ensure_inside_root(path: Path) -> Path:
    """``path`` resolved (symlinks followed); MountError unless it lies under the resolved skill root."""
    root = skills_root().resolve()
    resolved = path.resolve()
    if resolved != root and not resolved.is_relative_to(root):
        raise MountError(f"refusing to touch {path}: it resolves outside the skill root {root}")
    return resolved


def is_learning_dir_name(name: str) -> bool:
    return bool(_LEARNING_DIR.fullmatch(name))


def skill_dir(learning_id: str) -> Path:
    """The mount directory of one source learning (not resolved: callers check before touching it)."""
    if not is_learning_dir_name(learning_id):
        raise MountError(f"not a learning id: {learning_id[:80]!r}")
    ensure_inside_root(procedural_root())
    # The last component is checked by the callers: a planted symlink there is removed, never followed.
    return procedural_root() / learning_id


def skill_path(learning_id: str) -> Path:
    return skill_dir(learning_id) / SKILL_FILE


# ---- rendering -------------------------------------------------------------------------------------------


def _dump(data: dict) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=False, width=1 << 20)


def render_skill_markdown(definition: SkillDefinition) -> str:
    front = {"name": definition.name, "description": definition.description}
    if definition.version is not None:
        front["version"] = definition.version
    if definition.when_to_use is not None:
        front["when_to_use"] = definition.when_to_use
    return f"---\n{_dump(front)}---\n{definition.instructions.strip()}\n"


def render_runtime_yaml(definition: SkillDefinition) -> str:
    return _dump(definition.runtime.to_dict())


def expected_files(definition: SkillDefinition) -> dict[str, str]:
    """Relative path → exact content of every file a mounted skill consists of."""
    return {SKILL_FILE: render_skill_markdown(definition), RUNTIME_RELPATH: render_runtime_yaml(definition)}


# ---- reading, writing, removing --------------------------------------------------------------------------


def _atomic_write(path: Path, content: str) -> None:
    ensure_inside_root(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".part")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)  # replaces a planted symlink itself, never its target
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _listing(directory: Path) -> dict[str, bytes]:
    """Relative path → bytes of every regular file under ``directory`` (symlinks reported as b'')."""
    files: dict[str, bytes] = {}
    for current, dirnames, filenames in os.walk(directory, followlinks=False):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(current, d))]:
            full = Path(current) / name
            relative = full.relative_to(directory).as_posix()
            if full.is_symlink() or not full.is_file():
                files[relative] = b""
                continue
            files[relative] = full.read_bytes()
    return files


def capture(learning_id: str) -> dict[str, bytes] | None:
    """What is mounted for ``learning_id`` now (None when nothing is), for restoring after a failure."""
    directory = skill_dir(learning_id)
    if not directory.exists() and not directory.is_symlink():
        return None
    if directory.is_symlink() or not directory.is_dir():
        return {}
    return _listing(directory)


def _remove_path(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def write_files(learning_id: str, files: dict[str, str | bytes]) -> Path:
    """Make the mount directory of ``learning_id`` hold exactly ``files`` (relative path → content)."""
    directory = skill_dir(learning_id)
    if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
        _remove_path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    ensure_inside_root(directory)
    wanted = set(files)
    for relative in sorted(_listing(directory)):
        if relative not in wanted:
            _remove_path(directory / relative)
    for relative, content in files.items():
        target = directory / relative
        for parent in reversed(target.relative_to(directory).parents):
            sub = directory / parent
            if sub.is_symlink() or (sub.exists() and not sub.is_dir()):
                _remove_path(sub)
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink() or target.is_dir():
            _remove_path(target)
        text = content.decode("utf-8", errors="replace") if isinstance(content, bytes) else content
        _atomic_write(target, text)
    # Remove now-empty directories left by files that no longer belong here.
    for current, dirnames, filenames in sorted(os.walk(directory), key=lambda item: -len(item[0])):
        if Path(current) != directory and not dirnames and not filenames:
            os.rmdir(current)
    return directory


def write_skill(learning_id: str, definition: SkillDefinition) -> Path:
    return write_files(learning_id, expected_files(definition))  # type: ignore[arg-type]


def remove(learning_id: str) -> bool:
    """Remove the mount directory of ``learning_id``; True if something was removed."""
    directory = skill_dir(learning_id)
    if not directory.exists() and not directory.is_symlink():
        return False
    _remove_path(directory)
    return True


def restore(learning_id: str, previous: dict[str, bytes] | None) -> None:
    """Put back what :func:`capture` saw."""
    if previous is None:
        remove(learning_id)
        return
    write_files(learning_id, previous)  # type: ignore[arg-type]


def load_mounted(learning_id: str) -> CatalogSkill:
    """Read a mounted skill back through the catalog parser. Raises CatalogFileError / MountError."""
    path = skill_path(learning_id)
    if path.parent.is_symlink() or path.is_symlink() or not path.is_file():
        raise CatalogFileError(f"{SKILL_FILE} is missing")
    return parse_skill_file(path)


def mount_problem(learning_id: str, definition: SkillDefinition) -> str | None:
    """Why the mounted files of ``learning_id`` do not serve ``definition`` exactly, or None when they do:
    missing or extra files, content that differs from the rendering, or a load that yields another
    definition."""
    try:
        directory = skill_dir(learning_id)
    except MountError as exc:
        return str(exc)
    if directory.is_symlink():
        return "mounted skill directory is a symlink"
    if not directory.is_dir():
        return "mounted skill directory is missing"
    try:
        present = _listing(directory)
    except OSError as exc:
        return f"cannot read mounted files: {exc.strerror or exc}"
    expected = {k: v.encode("utf-8") for k, v in expected_files(definition).items()}
    for relative in sorted(expected):
        if relative not in present:
            return f"{relative} is missing"
        if present[relative] != expected[relative]:
            return f"{relative} does not match the record"
    extra = sorted(set(present) - set(expected))
    if extra:
        return f"unexpected file {extra[0]}"
    try:
        loaded = load_mounted(learning_id)
    except (CatalogFileError, MountError, OSError) as exc:
        return f"mounted skill does not load: {exc}"
    if not loaded.definition.same_definition(definition):
        return "loaded definition does not match the record"
    return None


def mounted_entries() -> list[str]:
    """Names of everything directly under ``<root>/procedural`` (skill directories and strays)."""
    root = procedural_root()
    if not root.is_dir() or root.is_symlink():
        return []
    ensure_inside_root(root)
    return sorted(entry.name for entry in os.scandir(root))


def remove_entry(name: str) -> None:
    """Remove one entry directly under ``<root>/procedural`` (used by repair for strays)."""
    if "/" in name or name in ("", ".", ".."):
        raise MountError(f"not an entry name: {name!r}")
    path = procedural_root() / name
    if not path.is_symlink():
        ensure_inside_root(path)
    _remove_path(path)
