"""The skill catalog on disk: ``SKILL.md`` files under ``settings.KHEISH_CATALOG_DIR``.

A skill is a directory holding ``SKILL.md``: YAML front matter (``name``, ``description``, ``version``,
``when_to_use``) between ``---`` lines, then the instructions; and optionally ``agents/kheish.yaml``, the
runtime config (allowed/blocked tools, inline or fork context, child-agent overrides). The name defaults to
the directory path relative to the catalog root joined with ``:`` (``review/pr`` → ``review:pr``); the
description defaults to the first paragraph of the instructions.

Loading never raises: a bad file is reported as a :class:`CatalogProblem` (``doctor`` prints them) and
skipped. Parsed files are cached by (mtime, size), so listing a large catalog costs one directory walk.

The same parser reads back the files mounted for promoted skills (``skills.mounted_files``), so what the service
writes is checked with exactly the loader that serves it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import yaml
from django.conf import settings

from memory.errors import AppError
from skills.fingerprint import (
    VERSION_MAX_CHARS,
    SkillDefinition,
    SkillRuntime,
    normalize_single_line,
    runtime_json,
    skill_name_problem,
    validate_instructions,
    validate_single_line,
)

logger = logging.getLogger("kheish.skills")

SKILL_FILE = "SKILL.md"
RUNTIME_DIR = "agents"
RUNTIME_FILE = "kheish.yaml"
MAX_SKILL_FILE_BYTES = 256 * 1024
MAX_RUNTIME_FILE_BYTES = 64 * 1024
MAX_SCAN_DEPTH = 6
MAX_SCAN_DIRS = 20_000

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class CatalogFileError(Exception):
    """A skill file that cannot be loaded; the message says why."""


@dataclass(frozen=True)
class CatalogSkill:
    definition: SkillDefinition
    skill_path: str
    skill_root: str
    digest: str

    @property
    def name(self) -> str:
        return self.definition.name


@dataclass(frozen=True)
class CatalogProblem:
    path: str
    message: str


@dataclass(frozen=True)
class Catalog:
    root: str
    skills: dict[str, CatalogSkill]
    problems: tuple[CatalogProblem, ...]

    def get(self, name: str) -> CatalogSkill | None:
        return self.skills.get(name)


# ---- parsing one skill -----------------------------------------------------------------------------------


def split_front_matter(text: str) -> tuple[str | None, str]:
    """(front matter, body). Front matter is present only when the first line is ``---`` and a later line is
    ``---``; otherwise the whole text is the body."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return None, text
    for index in range(1, len(lines)):
        if lines[index].strip() == "---":
            return "\n".join(lines[1:index]), "\n".join(lines[index + 1 :])
    return None, text


def _first_paragraph(body: str) -> str | None:
    words: list[str] = []
    in_fence = False
    for raw in body.splitlines():
        line = raw.strip()
        if line.startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence or not line:
            if words:
                break
            continue
        line = line.lstrip("#").strip()
        if line:
            words.append(line)
    return normalize_single_line(" ".join(words)) if words else None


def _string_field(front: dict, key: str, *aliases: str) -> str | None:
    for name in (key, *aliases):
        if name in front and front[name] is not None:
            value = front[name]
            if not isinstance(value, str):
                raise CatalogFileError(f"front matter field `{name}` must be a string (quote it)")
            return normalize_single_line(value) or None
    return None


def _read_limited(path: Path, limit: int) -> str:
    size = path.stat().st_size
    if size > limit:
        raise CatalogFileError(f"{path.name} is larger than {limit} bytes")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise CatalogFileError(f"{path.name} is not valid UTF-8") from exc


def load_runtime_file(skill_root: Path) -> SkillRuntime:
    path = skill_root / RUNTIME_DIR / RUNTIME_FILE
    if not path.exists() and not path.is_symlink():
        return SkillRuntime()
    if not path.is_file():
        raise CatalogFileError(f"{RUNTIME_DIR}/{RUNTIME_FILE} is not a regular file")
    try:
        data = yaml.load(_read_limited(path, MAX_RUNTIME_FILE_BYTES), Loader=_Loader)  # noqa: S506 - safe loader
    except yaml.YAMLError as exc:
        raise CatalogFileError(f"invalid YAML in {RUNTIME_DIR}/{RUNTIME_FILE}: {_yaml_message(exc)}") from exc
    try:
        return SkillRuntime.from_dict(data)
    except AppError as exc:
        raise CatalogFileError(f"invalid runtime config in {RUNTIME_DIR}/{RUNTIME_FILE}: {exc.detail}") from exc


def _yaml_message(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{problem} (line {mark.line + 1})" if mark is not None else str(problem)


def skill_digest(skill_path: str, instructions: str, runtime: SkillRuntime) -> str:
    """Content digest of a loaded skill: its path, trimmed instructions and runtime."""
    digest = hashlib.sha256()
    digest.update(skill_path.encode())
    digest.update(b"\n")
    digest.update(instructions.strip().encode())
    digest.update(b"\n")
    digest.update(runtime_json(runtime).encode())
    return digest.hexdigest()


def parse_skill_file(path: Path, *, default_name: str | None = None) -> CatalogSkill:
    """Load and validate one ``SKILL.md`` (and its runtime file). Raises :class:`CatalogFileError`."""
    try:
        text = _read_limited(path, MAX_SKILL_FILE_BYTES)
    except OSError as exc:
        raise CatalogFileError(f"cannot read {path.name}: {exc.strerror or exc}") from exc
    raw_front, body = split_front_matter(text)
    front: dict = {}
    if raw_front is not None:
        try:
            loaded = yaml.load(raw_front, Loader=_Loader)  # noqa: S506 - safe loader
        except yaml.YAMLError as exc:
            raise CatalogFileError(f"invalid YAML front matter: {_yaml_message(exc)}") from exc
        if loaded is not None and not isinstance(loaded, dict):
            raise CatalogFileError("front matter must be a YAML mapping")
        front = loaded or {}
    name = front.get("name", default_name)
    if name is None:
        raise CatalogFileError("skill name is required")
    if not isinstance(name, str):
        raise CatalogFileError("front matter field `name` must be a string (quote it)")
    problem = skill_name_problem(name)
    if problem:
        raise CatalogFileError(f"invalid skill name {name[:80]!r}: {problem}")
    description = _string_field(front, "description") or _first_paragraph(body)
    if not description:
        raise CatalogFileError("skill description is required")
    when_to_use = _string_field(front, "when_to_use", "when-to-use")
    version = _string_field(front, "version")
    try:
        validate_single_line("description", description)
        if when_to_use is not None:
            validate_single_line("when_to_use", when_to_use)
        if version is not None:
            validate_single_line("version", version, max_chars=VERSION_MAX_CHARS)
        instructions = validate_instructions(body)
    except AppError as exc:
        raise CatalogFileError(exc.detail) from exc
    skill_root = path.parent
    try:
        runtime = load_runtime_file(skill_root)
    except OSError as exc:
        raise CatalogFileError(f"cannot read the runtime file: {exc.strerror or exc}") from exc
    definition = SkillDefinition(
        name=name,
        description=description,
        when_to_use=when_to_use,
        version=version,
        instructions=instructions,
        runtime=runtime,
    )
    skill_path = str(path)
    return CatalogSkill(
        definition=definition,
        skill_path=skill_path,
        skill_root=str(skill_root),
        digest=skill_digest(skill_path, instructions, runtime),
    )


# ---- the catalog -----------------------------------------------------------------------------------------


def catalog_root() -> Path:
    return Path(settings.KHEISH_CATALOG_DIR)


def _stat(path: str) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _file_stamp(path: str) -> tuple:
    """What invalidates a parsed skill: its SKILL.md and its runtime file (mtime, size, inode)."""
    directory = os.path.dirname(path)
    return (_stat(path), _stat(os.path.join(directory, RUNTIME_DIR, RUNTIME_FILE)))


_cache_lock = threading.Lock()
_walked: dict[str, tuple[float, Catalog]] = {}
_parsed: dict[str, tuple[tuple, CatalogSkill | CatalogFileError]] = {}
_built: dict[str, tuple[tuple, Catalog]] = {}


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _scan(root: Path) -> tuple[list[tuple[str, str]], list[CatalogProblem]]:
    """Every ``SKILL.md`` under ``root`` (breadth first, hidden entries skipped, symlinks that leave the
    root refused), with its default name. Plain ``os`` calls: this runs on every catalog read."""
    found: list[tuple[str, str]] = []
    problems: list[CatalogProblem] = []
    real_root = os.path.realpath(root)
    queue: deque[tuple[str, int, tuple[str, ...]]] = deque([(real_root, 0, ())])
    seen = {real_root}
    while queue:
        directory, depth, parts = queue.popleft()
        try:
            with os.scandir(directory) as iterator:
                entries = sorted(iterator, key=lambda e: e.name)
        except OSError as exc:
            problems.append(CatalogProblem(directory, f"cannot read skill directory: {exc.strerror or exc}"))
            continue
        for entry in entries:
            name = entry.name
            if name.startswith("."):
                continue
            try:
                if entry.is_symlink():
                    target = os.path.realpath(entry.path)
                    if not _inside(target, real_root):
                        problems.append(CatalogProblem(entry.path, "symlink points outside the catalog directory"))
                        continue
                    is_dir, is_file = os.path.isdir(target), os.path.isfile(target)
                else:
                    target = entry.path
                    is_dir, is_file = entry.is_dir(follow_symlinks=False), entry.is_file(follow_symlinks=False)
            except OSError:
                continue
            if is_dir:
                if depth + 1 > MAX_SCAN_DEPTH or target in seen:
                    continue
                if len(seen) >= MAX_SCAN_DIRS:
                    problems.append(
                        CatalogProblem(str(root), f"catalog scan stopped after {MAX_SCAN_DIRS} directories")
                    )
                    return found, problems
                seen.add(target)
                queue.append((entry.path, depth + 1, (*parts, name)))
            elif is_file and name == SKILL_FILE:
                found.append((entry.path, ":".join(parts)))
    return found, problems


def _parse_cached(path: str, default_name: str, stamp: tuple) -> CatalogSkill | CatalogFileError:
    with _cache_lock:
        cached = _parsed.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    try:
        result: CatalogSkill | CatalogFileError = parse_skill_file(Path(path), default_name=default_name or None)
    except CatalogFileError as exc:
        result = exc
    except Exception as exc:  # a bad file must never take the service down
        logger.exception("unexpected error loading skill file %s", path)
        result = CatalogFileError(f"unexpected error: {exc.__class__.__name__}")
    with _cache_lock:
        _parsed[path] = (stamp, result)
    return result


def load_catalog(root: Path | None = None) -> Catalog:
    """The catalog under ``root`` (default: ``settings.KHEISH_CATALOG_DIR``). A missing directory is an empty
    catalog, not a problem. Each call walks the tree and stats the files; files are parsed only when they
    changed, and the whole catalog is rebuilt only when some file did."""
    root = Path(root) if root is not None else catalog_root()
    rescan_after = float(getattr(settings, "KHEISH_CATALOG_RESCAN_SECONDS", 0) or 0)
    if rescan_after > 0:  # serve the last walk for a moment: a large catalog costs one walk per interval
        with _cache_lock:
            recent = _walked.get(str(root))
        if recent is not None and time.monotonic() - recent[0] < rescan_after:
            return recent[1]
    catalog = _load_catalog(root)
    with _cache_lock:
        _walked[str(root)] = (time.monotonic(), catalog)
    return catalog


def _load_catalog(root: Path) -> Catalog:
    if not root.is_dir():
        return Catalog(root=str(root), skills={}, problems=())
    files, scan_problems = _scan(root)
    stamps = tuple((path, default_name, _file_stamp(path)) for path, default_name in files)
    signature = (stamps, tuple(scan_problems))
    key = str(root)
    with _cache_lock:
        built = _built.get(key)
    if built is not None and built[0] == signature:
        return built[1]
    problems = list(scan_problems)
    skills: dict[str, CatalogSkill] = {}
    for path, default_name, stamp in stamps:
        result = _parse_cached(path, default_name, stamp)
        if isinstance(result, CatalogFileError):
            problems.append(CatalogProblem(path, str(result)))
            continue
        if result.name in skills:
            problems.append(
                CatalogProblem(
                    path,
                    f"duplicate skill name `{result.name}` ignored (already loaded "
                    f"from {skills[result.name].skill_path})",
                )
            )
            continue
        skills[result.name] = result
    live = {path for path, _, _ in stamps}
    catalog = Catalog(root=key, skills=skills, problems=tuple(problems))
    with _cache_lock:
        real_root = os.path.realpath(root)
        for path in [p for p in _parsed if _inside(p, real_root) and p not in live]:
            _parsed.pop(path, None)
        _built[key] = (signature, catalog)
    return catalog


def clear_cache() -> None:
    with _cache_lock:
        _parsed.clear()
        _built.clear()
        _walked.clear()
