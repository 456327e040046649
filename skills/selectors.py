"""Reads of the skills plane, shared by the API, the admin, the composition layer and commands.

Two surfaces, kept apart (memory-planes.md, "Skills"):

* the **governance** surface — every promoted skill record in any state (``/v1/learning-skills``);
* the **runtime catalog** — catalog skills on disk plus **active** promoted skills only (``/v1/skills``,
  session skills, memory-context ``visible_skills``, memory-search skill hits). Draft, verified, canary and
  revoked skills never appear there.
"""

from __future__ import annotations

import json
import re
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from django.db.models import Prefetch, Q, QuerySet

from learnings.models import Learning
from memory import public_ids
from memory import sql as memory_sql
from memory.errors import NotFound, ValidationFailed
from memory.models import Run, Session
from memory.sessions import effective_capability_scope
from skills import catalog
from skills.fingerprint import validate_skill_name
from skills.models import LearningSkill, LearningSkillEvent, SkillStatus

if TYPE_CHECKING:
    from django.contrib.auth.models import User

EXCERPT_CHARS = 180
SOURCE_CATALOG = "catalog"
SOURCE_PROMOTED = "promoted"


def skill_not_found(name: object) -> NotFound:
    return NotFound(f"unknown learning skill {name}", domain="skills", code="learning_skill_not_found")


def active_skills_by_learning_dir() -> dict[str, LearningSkill]:
    """Active records keyed by the mount directory they own (``learning-<id>``); what ``repair`` checks."""
    return {
        skill.source_learning_public_id: skill
        for skill in LearningSkill.objects.filter(status=SkillStatus.ACTIVE).order_by("skill_name")
    }


def live_skill_for_learning(learning: Learning) -> LearningSkill | None:
    """The skill a learning grew that is not revoked, if any."""
    return LearningSkill.objects.filter(Q(source_learning=learning) & ~Q(status=SkillStatus.REVOKED)).first()


# ---- the governance surface ------------------------------------------------------------------------------


def runtime_view(runtime: dict[str, Any] | None) -> dict[str, Any]:
    """The API form of a stored runtime config (validated when it was written): every field present."""
    data = runtime if isinstance(runtime, dict) else {}
    return {
        "allowed_tools": list(data.get("allowed_tools") or []),
        "blocked_tools": list(data.get("blocked_tools") or []),
        "context": data.get("context") or "inline",
        "agent_profile": data.get("agent_profile"),
        "provider": data.get("provider"),
        "model": data.get("model"),
        "fallback_model": data.get("fallback_model"),
    }


def learning_skill_view(skill: LearningSkill) -> dict[str, Any]:
    """LearningSkillView (spec §1.8)."""
    events = getattr(skill, "_prefetched_objects_cache", {}).get("lifecycle_events")
    if events is None:
        events = skill.lifecycle_events.order_by("recorded_at_ms", "id")
    return {
        "skill_name": skill.skill_name,
        "source_learning_id": skill.source_learning_public_id,
        "source_scope": skill.source_scope,
        "status": skill.status,
        "description": skill.description,
        "when_to_use": skill.when_to_use,
        "version": skill.version,
        "instructions": skill.instructions,
        "skill_path": skill.skill_path,
        "skill_root": skill.skill_root,
        "digest": skill.digest,
        "definition_fingerprint": skill.definition_fingerprint,
        "runtime": runtime_view(skill.runtime),
        "evidence_refs": skill.evidence_refs,
        "lifecycle_events": [event.to_view() for event in events],
        "verification_status": skill.verification_status,
        "successful_run_count": skill.successful_run_count,
        "distinct_session_count": skill.distinct_session_count,
        "verifier_run_ids": skill.verifier_run_ids,
        "real_daemon_verified": skill.real_daemon_verified,
        "last_verified_workspace_digest": skill.last_verified_workspace_digest,
        "canary_success_count": skill.canary_success_count,
        "canary_failure_count": skill.canary_failure_count,
        "promoted_at_ms": skill.promoted_at_ms,
        "revoked_at_ms": skill.revoked_at_ms,
        "revoked_reason": skill.revoked_reason,
    }


_RUN_OR_SESSION_ID = re.compile(r"\b(run|session)-(\d{1,18})\b")


def _mentioned_ids(value: object) -> set[tuple[str, int]]:
    """Every ``run-N`` / ``session-N`` named anywhere in ``value`` (keys, values, notes)."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return {(kind, int(digits)) for kind, digits in _RUN_OR_SESSION_ID.findall(text)}


def without_foreign_ids(views: list[dict[str, Any]], user: User) -> list[dict[str, Any]]:
    """Learning-skill views as an agent sees them: no other agent's run or session id, ever. Evidence refs
    that name a run or session the agent does not own are dropped whole (a note may carry the id in its text),
    ``verifier_run_ids`` keep only the agent's own runs, and a lifecycle event keeps its ``run_id``,
    ``session_id`` and ``reason`` only when they name the agent's own. Counts (successful runs, distinct
    sessions) stay: they name nobody. Two queries for the whole page. Operators get the views unchanged (the
    caller decides)."""
    mentioned: set[tuple[str, int]] = set()
    for view in views:
        mentioned |= _mentioned_ids(view.get("evidence_refs") or [])
        mentioned |= _mentioned_ids(view.get("verifier_run_ids") or [])
        for event in view.get("lifecycle_events") or []:
            mentioned |= _mentioned_ids({k: event.get(k) for k in ("run_id", "session_id", "reason")})
    run_pks = [pk for kind, pk in mentioned if kind == "run"]
    session_pks = [pk for kind, pk in mentioned if kind == "session"]
    owned = (
        {("run", pk) for pk in Run.objects.filter(pk__in=run_pks, session__owner=user).values_list("pk", flat=True)}
        if run_pks
        else set()
    )
    owned |= (
        {("session", pk) for pk in Session.objects.filter(pk__in=session_pks, owner=user).values_list("pk", flat=True)}
        if session_pks
        else set()
    )

    def own(value: object) -> bool:
        return _mentioned_ids(value) <= owned

    shown = []
    for view in views:
        events = []
        for event in view.get("lifecycle_events") or []:
            events.append({k: v for k, v in event.items() if k not in ("run_id", "session_id", "reason") or own(v)})
        shown.append(
            {
                **view,
                "evidence_refs": [ref for ref in view.get("evidence_refs") or [] if own(ref)],
                "verifier_run_ids": [run_id for run_id in view.get("verifier_run_ids") or [] if own(run_id)],
                "lifecycle_events": events,
            }
        )
    return shown


def learning_skills(
    *,
    source_learning_id: str | None = None,
    status: str | None = None,
    visible_learnings: QuerySet[Learning] | None = None,
) -> QuerySet[LearningSkill]:
    """``GET /v1/learning-skills?source_learning_id&status``; with ``visible_learnings`` (an agent's) only the
    records promoted from those learnings."""
    qs = LearningSkill.objects.prefetch_related(
        Prefetch("lifecycle_events", queryset=LearningSkillEvent.objects.order_by("recorded_at_ms", "id"))
    )
    if visible_learnings is not None:
        qs = qs.filter(source_learning__in=visible_learnings.values("pk"))
    if source_learning_id not in (None, ""):
        learning_pk = public_ids.parse_id(source_learning_id, public_ids.LEARNING)
        if learning_pk is None:
            raise ValidationFailed(
                "source_learning_id must be a learning id (learning-N)",
                field="source_learning_id",
                domain="skills",
                code="invalid_filter",
            )
        qs = qs.filter(source_learning_id=learning_pk)
    if status not in (None, ""):
        if status not in SkillStatus.values:
            raise ValidationFailed(
                f"status must be one of {', '.join(SkillStatus.values)}",
                field="status",
                domain="skills",
                code="invalid_filter",
            )
        qs = qs.filter(status=status)
    return qs.order_by("skill_name")


def get_learning_skill(name: str, *, visible_learnings: QuerySet[Learning] | None = None) -> LearningSkill:
    validate_skill_name(name)
    skill = learning_skills(visible_learnings=visible_learnings).filter(skill_name=name).first()
    if skill is None:
        raise skill_not_found(name)
    return skill


# ---- the runtime catalog ---------------------------------------------------------------------------------


def _catalog_entry(skill: catalog.CatalogSkill, *, with_instructions: bool = False) -> dict[str, Any]:
    definition = skill.definition
    entry = {
        "name": definition.name,
        "description": definition.description,
        "when_to_use": definition.when_to_use,
        "version": definition.version,
        "source": SOURCE_CATALOG,
        "source_learning_id": None,
        "scope": None,
        "skill_path": skill.skill_path,
        "skill_root": skill.skill_root,
        "digest": skill.digest,
        "runtime": definition.runtime.to_view(),
    }
    if with_instructions:
        entry["instructions"] = definition.instructions
    return entry


_PROMOTED_FIELDS = (
    "skill_name",
    "description",
    "when_to_use",
    "version",
    "skill_path",
    "skill_root",
    "digest",
    "runtime",
    "source_learning_id",
    "source_scope",
    "instructions",
)


def active_promoted_rows() -> list[dict[str, Any]]:
    """``LearningSkill.objects.filter(status=ACTIVE).values(*_PROMOTED_FIELDS)`` (in the model's order), without
    the query compiler: every memory-search and skill list reads it (memory.sql.select, the ORM's converters)."""
    rows = memory_sql.select(
        LearningSkill, 'WHERE "status" = %s ORDER BY "skill_name"', [SkillStatus.ACTIVE], fields=_PROMOTED_FIELDS
    )
    return [dict(zip(_PROMOTED_FIELDS, row, strict=True)) for row in rows]


def _promoted_entry(row: dict[str, Any], *, with_instructions: bool = False) -> dict[str, Any]:
    scope = row["source_scope"] or {}
    entry = {
        "name": row["skill_name"],
        "description": row["description"],
        "when_to_use": row["when_to_use"],
        "version": row["version"],
        "source": SOURCE_PROMOTED,
        "source_learning_id": public_ids.learning_id(row["source_learning_id"]),
        "scope": f"{scope.get('kind', '')}:{str(scope.get('id', '')).strip()}",
        "skill_path": row["skill_path"],
        "skill_root": row["skill_root"],
        "digest": row["digest"],
        "runtime": runtime_view(row["runtime"]),
    }
    if with_instructions:
        entry["instructions"] = row["instructions"]
    return entry


def without_server_paths(item: dict[str, Any]) -> dict[str, Any]:
    """A skill view as agents see it (issues 14.5, 19.7): ``skill_root`` is the skills directory's name and
    ``skill_path`` relative to its parent (``code-review/SKILL.md``), never the server's absolute paths."""
    if not isinstance(item, dict) or "skill_root" not in item:
        return item
    root = PurePath(item["skill_root"] or "")
    skill_path = PurePath(item.get("skill_path") or "")
    try:
        relative = skill_path.relative_to(root.parent) if root.name else PurePath(skill_path.name)
    except ValueError:
        relative = PurePath(skill_path.name)
    return {**item, "skill_root": root.name, "skill_path": str(relative)}


def _matches(entry: dict[str, Any], needle: str | None) -> bool:
    if not needle:
        return True
    return any(needle in (entry.get(name) or "").lower() for name in ("name", "description", "when_to_use"))


_entries_cache: tuple[object, list[dict[str, Any]]] | None = None


def _catalog_entries() -> list[dict[str, Any]]:
    """Entries of the on-disk catalog, rebuilt only when the catalog changed (``load_catalog`` returns the
    same object while no file changed). Treat them as read-only."""
    global _entries_cache
    loaded = catalog.load_catalog()
    cached = _entries_cache
    if cached is not None and cached[0] is loaded:
        return cached[1]
    entries = [_catalog_entry(skill) for skill in loaded.skills.values()]
    _entries_cache = (loaded, entries)
    return entries


def _hidden_learning_ids(rows: list[dict[str, Any]], visible_learnings: QuerySet[Learning] | None) -> set[int]:
    """The source learnings of ``rows`` that ``visible_learnings`` leaves out (none when it is ``None``)."""
    if visible_learnings is None or not rows:
        return set()
    ids = {row["source_learning_id"] for row in rows}
    return ids - set(visible_learnings.filter(pk__in=ids).values_list("pk", flat=True))


def catalog_skills(
    query: str | None = None, *, visible_learnings: QuerySet[Learning] | None = None
) -> list[dict[str, Any]]:
    """``GET /v1/skills?query``: catalog skills plus active promoted skills, by name. ``query`` is a
    case-insensitive substring of the name, description or when_to_use. An active promoted skill wins a
    name clash with a file (the database record is the authority; doctor reports the clash).
    ``visible_learnings`` (an agent's): a promoted skill whose source learning is not among them is left out,
    as the session views leave out one outside the session's scopes (its name too)."""
    needle = (query or "").strip().lower() or None
    entries: dict[str, dict[str, Any]] = {}
    for entry in _catalog_entries():
        if _matches(entry, needle):
            entries[entry["name"]] = entry
    rows = active_promoted_rows()
    hidden = _hidden_learning_ids(rows, visible_learnings)
    for row in rows:
        entry = _promoted_entry(row)
        if row["source_learning_id"] not in hidden and _matches(entry, needle):
            entries[entry["name"]] = entry
        else:
            entries.pop(entry["name"], None)
    return [entries[name] for name in sorted(entries)]


def catalog_skill(name: str, *, visible_learnings: QuerySet[Learning] | None = None) -> dict[str, Any]:
    """``GET /v1/skills/{name}`` (with instructions). Non-active promoted skills are not found here, nor (with
    ``visible_learnings``) one whose source learning the caller cannot see."""
    validate_skill_name(name, field_name="name")
    row = LearningSkill.objects.filter(status=SkillStatus.ACTIVE, skill_name=name).values(*_PROMOTED_FIELDS).first()
    if row is not None and _hidden_learning_ids([row], visible_learnings):
        raise NotFound(f"unknown skill {name}", domain="skills", code="skill_not_found")
    if row is not None:
        return _promoted_entry(row, with_instructions=True)
    skill = catalog.load_catalog().get(name)
    if skill is None:
        raise NotFound(f"unknown skill {name}", domain="skills", code="skill_not_found")
    return _catalog_entry(skill, with_instructions=True)


def session_visible_skills(
    *, session: Session, scope_keys: list[str], query: str | None = None
) -> list[dict[str, Any]]:
    """Skills a session may see (§4.18): allowed by its effective capability scope (None = unrestricted),
    and — for a promoted skill — whose source scope key is one of the session's learning scope keys."""
    allowed = effective_capability_scope(session)
    allowed_set = None if allowed is None else set(allowed)
    keys = set(scope_keys)
    visible = []
    for entry in catalog_skills(query):
        if allowed_set is not None and entry["name"] not in allowed_set:
            continue
        if entry["source"] == SOURCE_PROMOTED and entry["scope"] not in keys:
            continue
        visible.append(entry)
    return visible


def _excerpt(text: str) -> str:
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "…"


def search_hits(*, session: Session, scope_keys: list[str], query: str | None) -> list[dict[str, Any]]:
    """memory-search skill hits (§4.21), only with a query: +100 per field (name, description, when_to_use)
    that contains the whole query, +10 per whitespace term it contains; zero scores are dropped."""
    normalized = (query or "").strip().lower()
    if not normalized:
        return []
    terms = normalized.split()
    hits = []
    for entry in session_visible_skills(session=session, scope_keys=scope_keys):
        score = 0
        matched = []
        for name in ("name", "description", "when_to_use"):
            value = (entry.get(name) or "").lower()
            if not value:
                continue
            field_score = (100 if normalized in value else 0) + sum(10 for term in terms if term in value)
            if field_score:
                score += field_score
                matched.append(name)
        if score == 0:
            continue
        hits.append(
            {
                "kind": "skill",
                "source_id": entry["name"],
                "title": f"Skill {entry['name']}",
                "excerpt": _excerpt(entry["description"]),
                "score": score,
                "timestamp_ms": 0,
                "scope": entry["scope"],
                "prompt_eligible": False,
                "learning_status": None,
                "publish_tier": None,
                "verification_status": None,
                "matched_fields": matched,
            }
        )
    return hits


def named_in_query(hits: list[dict[str, Any]], normalized_query: str) -> list[dict[str, Any]]:
    """The skill hits whose name the (lower-cased, trimmed) query is, or names as a whole word: the exact
    match first, then longer names before shorter ones, then by name."""

    def named(name: str) -> bool:
        return (
            name == normalized_query
            or re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", normalized_query) is not None
        )

    chosen = [hit for hit in hits if named(hit["source_id"].lower())]
    return sorted(
        chosen, key=lambda h: (h["source_id"].lower() != normalized_query, -len(h["source_id"]), h["source_id"])
    )
