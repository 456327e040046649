"""Sessions, personas and projects: creation, visibility and the scopes a session resolves to (§4.6)."""

from __future__ import annotations

from django.db import transaction
from django.db.models import QuerySet

from memory import grants, limits, sql
from memory.audit import record_audit
from memory.errors import Conflict, NotFound, ValidationFailed
from memory.identity import is_operator
from memory.models import Persona, Project, Session
from memory.runs import parse_public_id

WORKSPACE_SCOPE_KEY = "workspace:default"


def sessions_visible_to(user: object, *, operator: bool | None = None) -> QuerySet[Session]:
    """Operators see every session; an agent sees only the sessions it owns."""
    qs = Session.objects.select_related("persona", "owner")
    if operator if operator is not None else is_operator(user):
        return qs
    return qs.filter(owner=user)


def get_session(session_id: str, *, queryset: QuerySet[Session] | None = None) -> Session:
    pk = parse_public_id(session_id, "session", domain="sessions", code="session_not_found", noun="session")
    qs = queryset if queryset is not None else Session.objects.select_related("persona", "owner")
    session = qs.filter(pk=pk).first()
    if session is None:
        raise NotFound(f"unknown session {session_id}", domain="sessions", code="session_not_found")
    return session


def _string_list(value: object, field: str, *, allow_none: bool = True) -> list[str] | None:
    if value is None and allow_none:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ValidationFailed(f"{field} must be a list of non-empty strings", field=field)
    if len(value) > 200:
        raise ValidationFailed(f"{field} may hold at most 200 items", field=field)
    return sorted({v.strip() for v in value})


@transaction.atomic
def session_create(*, owner: object, persona_id: str | None = None, project_ids: list[str] | None = None,
                   capability_scope: list[str] | None = None, metadata: dict | None = None,
                   operator: bool | None = None) -> Session:
    """An agent may bind only the personas and projects an operator granted it (memory.grants); operators any."""
    persona = None
    if persona_id is not None:
        persona = Persona.objects.filter(persona_id=persona_id).first()
        if persona is None:
            raise ValidationFailed(f"unknown persona {persona_id}", field="persona_id")
    projects: list[Project] = []
    if project_ids:
        wanted = _string_list(project_ids, "project_ids") or []
        projects = list(Project.objects.filter(project_id__in=wanted))
        missing = sorted(set(wanted) - {p.project_id for p in projects})
        if missing:
            raise ValidationFailed(f"unknown project {missing[0]}", field="project_ids")
    if metadata is not None and not isinstance(metadata, dict):
        raise ValidationFailed("metadata must be an object", field="metadata")
    limits.check_metadata(metadata, field="metadata")
    if not (operator if operator is not None else is_operator(owner)):
        grants.check_binding(owner, persona=persona, projects=projects)
    session = Session.objects.create(
        owner=owner,
        persona=persona,
        persona_version=persona.version if persona else "",
        capability_scope=_string_list(capability_scope, "capability_scope"),
        metadata=metadata or {},
    )
    if projects:
        session.projects.set(projects)
    record_audit(subject_type="session", subject_id=session.public_id, action="create", actor=owner,
                 to_state="open")
    return session


def project_ids(session: Session) -> list[str]:
    cache = getattr(session, "_prefetched_objects_cache", {})
    if "projects" in cache:
        return sorted(p.project_id for p in cache["projects"])
    return list(session.projects.order_by("project_id").values_list("project_id", flat=True))


def learning_scope_keys(session: Session) -> list[str]:
    """Ordered: session, persona (if bound), projects, workspace:default."""
    keys = [f"session:{session.public_id}"]
    if session.persona_id:
        keys.append(f"persona:{session.persona.persona_id}")
    keys.extend(f"project:{pid}" for pid in project_ids(session))
    keys.append(WORKSPACE_SCOPE_KEY)
    return keys


def scope_keys_from_parts(session_id: int, parts: list[tuple[str, str]]) -> list[str]:
    """``learning_scope_keys`` from the rows of :data:`memory.sql.SCOPE_PARTS_SQL`."""
    keys = [f"session:session-{session_id}"]
    keys += [f"persona:{value}" for part, value in parts if part == "persona"]
    keys += [f"project:{value}" for value in sorted(value for part, value in parts if part == "project")]
    keys.append(WORKSPACE_SCOPE_KEY)
    return keys


def session_scope_keys(session_id: int) -> list[str]:
    """``learning_scope_keys`` for a session known only by id, in one query."""
    return scope_keys_from_parts(session_id, sql.session_scope_parts(session_id))


def effective_capability_scope(session: Session) -> list[str] | None:
    """persona ∩ session; None means unrestricted."""
    persona_scope = session.persona.capability_scope if session.persona_id else None
    session_scope = session.capability_scope
    if persona_scope is None:
        return session_scope
    if session_scope is None:
        return sorted(persona_scope)
    return sorted(set(persona_scope) & set(session_scope))


@transaction.atomic
def persona_create(*, persona_id: str, display_name: str, version: str = "1", soul: str = "",
                   capability_scope: list[str] | None = None, actor: object) -> Persona:
    if Persona.objects.filter(persona_id=persona_id).exists():
        raise Conflict(f"persona {persona_id} already exists", field="persona_id", domain="personas",
                       code="persona_exists")
    persona = Persona.objects.create(persona_id=persona_id, display_name=display_name, version=version,
                                     soul=soul, capability_scope=_string_list(capability_scope,
                                                                              "capability_scope"))
    record_audit(subject_type="persona", subject_id=persona_id, action="create", actor=actor)
    return persona


@transaction.atomic
def project_create(*, project_id: str, name: str, actor: object) -> Project:
    if Project.objects.filter(project_id=project_id).exists():
        raise Conflict(f"project {project_id} already exists", field="project_id", domain="projects",
                       code="project_exists")
    project = Project.objects.create(project_id=project_id, name=name)
    record_audit(subject_type="project", subject_id=project_id, action="create", actor=actor)
    return project
