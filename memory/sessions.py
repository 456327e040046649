"""Sessions, personas and projects: creation, visibility and the scopes a session resolves to (§4.6)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from django.contrib.postgres.expressions import ArraySubquery
from django.db import transaction
from django.db.models import CharField, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Concat

from memory import grants, hooks, limits, public_ids, sql
from memory.audit import record_audit
from memory.clock import now_ms
from memory.errors import Conflict, NotFound, ValidationFailed
from memory.identity import is_operator
from memory.models import ACTIVE_STATUSES, AgentGrant, Persona, Project, Run, Session

if TYPE_CHECKING:
    from django.contrib.auth.models import User

WORKSPACE_SCOPE_KEY = "workspace:default"


def sessions_visible_to(user: User, *, operator: bool | None = None) -> QuerySet[Session]:
    """Operators see every session; an agent sees only the sessions it owns."""
    qs = Session.objects.select_related("persona", "owner")
    if operator if operator is not None else is_operator(user):
        return qs
    return qs.filter(owner=user)


def get_visible_session(session_id: str, user: User, *, operator: bool | None = None) -> Session:
    """The session ``session_id`` as ``sessions_visible_to(user, operator=operator)`` with
    ``with_read_annotations`` would return it (persona, owner, project ids, active run), in one hand-written
    statement (``memory.sql.visible_session``); 404 when it does not exist or is not visible."""
    pk = public_ids.parse_or_404(
        session_id, public_ids.SESSION, domain="sessions", code="session_not_found", noun="session"
    )
    everyone = operator if operator is not None else is_operator(user)
    session = sql.visible_session(pk, owner_pk=None if everyone else user.pk)
    if session is None:
        raise NotFound(f"unknown session {session_id}", domain="sessions", code="session_not_found")
    return session


def get_session(session_id: str, *, queryset: QuerySet[Session] | None = None) -> Session:
    pk = public_ids.parse_or_404(
        session_id, public_ids.SESSION, domain="sessions", code="session_not_found", noun="session"
    )
    qs = queryset if queryset is not None else Session.objects.select_related("persona", "owner")
    session = qs.filter(pk=pk).first()
    if session is None:
        raise NotFound(f"unknown session {session_id}", domain="sessions", code="session_not_found")
    return session


PROJECT_HINT = (
    'an operator creates it first (POST /v1/projects {{"project_id": "{id}", "name": "..."}}) and '
    'grants it to this agent (PUT /v1/agents/<agent>/grants {{"project_ids": ["{id}"], ...}} or the '
    'admin\'s Agent grants page); see docs/agents.md, "Projects and grants"'
)
PERSONA_HINT = (
    'an operator creates it first (POST /v1/personas {{"persona_id": "{id}", "display_name": '
    '"..."}}) and grants it to this agent (PUT /v1/agents/<agent>/grants {{"persona_ids": ["{id}"], '
    "...}} or the admin's Agent grants page)"
)


def _string_list(value: object, field: str, *, allow_none: bool = True) -> list[str] | None:
    if value is None and allow_none:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ValidationFailed(f"{field} must be a list of non-empty strings", field=field)
    if len(value) > 200:
        raise ValidationFailed(f"{field} may hold at most 200 items", field=field)
    return sorted({v.strip() for v in value})


@transaction.atomic
def session_create(
    *,
    owner: User,
    persona_id: str | None = None,
    project_ids: list[str] | None = None,
    capability_scope: list[str] | None = None,
    metadata: dict[str, Any] | None = None,
    operator: bool | None = None,
) -> Session:
    """An agent may bind only the personas and projects an operator granted it (memory.grants); operators any.
    To an agent an unknown persona or project is refused exactly as an existing ungranted one (403
    ``binding_not_granted``, issue 19.6), so that ids cannot be enumerated; an operator gets 400 "unknown …"."""
    as_operator = operator if operator is not None else is_operator(owner)
    if metadata is not None and not isinstance(metadata, dict):
        raise ValidationFailed("metadata must be an object", field="metadata")
    limits.check_metadata(metadata, field="metadata")
    wanted = (_string_list(project_ids, "project_ids") or []) if project_ids else []
    capability = _string_list(capability_scope, "capability_scope")
    persona = Persona.objects.filter(persona_id=persona_id).first() if persona_id is not None else None
    projects = list(Project.objects.filter(project_id__in=wanted)) if wanted else []
    missing = sorted(set(wanted) - {p.project_id for p in projects})
    if not as_operator:  # unknown and ungranted alike: one 403
        grants.check_binding(
            owner,
            persona=persona,
            projects=projects,
            unknown_persona_id=persona_id if persona is None else None,
            unknown_project_ids=missing,
        )
    if persona_id is not None and persona is None:
        raise ValidationFailed(
            f"unknown persona {persona_id}: {PERSONA_HINT.format(id=persona_id)}", field="persona_id"
        )
    if missing:
        raise ValidationFailed(
            f"unknown project {missing[0]}: {PROJECT_HINT.format(id=missing[0])}", field="project_ids"
        )
    session = Session.objects.create(
        owner=owner,
        persona=persona,
        persona_version=persona.version if persona else "",
        capability_scope=capability,
        metadata=metadata or {},
    )
    if projects:
        session.projects.set(projects)
    record_audit(subject_type="session", subject_id=session.public_id, action="create", actor=owner, to_state="open")
    return session


def with_read_annotations(queryset: QuerySet[Session]) -> QuerySet[Session]:
    """``queryset`` with each session's sorted project ids (``project_id_list``) and newest active run's pk
    (``active_run_pk``) computed in the same statement (two correlated subqueries) instead of two prefetches."""
    projects = Project.objects.filter(sessions=OuterRef("pk")).order_by("project_id").values("project_id")
    active = Run.objects.filter(session=OuterRef("pk"), status__in=ACTIVE_STATUSES).order_by("-id").values("id")[:1]
    return queryset.annotate(project_id_list=ArraySubquery(projects), active_run_pk=Subquery(active))


def project_ids(session: Session) -> list[str]:
    annotated = getattr(session, "project_id_list", None)
    if annotated is not None:  # with_read_annotations
        return list(annotated)
    cache = getattr(session, "_prefetched_objects_cache", {})
    if "projects" in cache:
        return sorted(p.project_id for p in cache["projects"])
    return list(session.projects.order_by("project_id").values_list("project_id", flat=True))


def bound_scope_keys(session: Session) -> list[str]:
    """The scope keys a session was *bound* to (stored; never narrowed): session, persona (if bound), projects,
    workspace:default. What run-memory records are indexed under; reads use :func:`learning_scope_keys`."""
    keys = [f"session:{session.public_id}"]
    if session.persona is not None:  # no query when persona_id is None
        keys.append(f"persona:{session.persona.persona_id}")
    keys.extend(f"project:{pid}" for pid in project_ids(session))
    keys.append(WORKSPACE_SCOPE_KEY)
    return keys


# ---- effective scopes (issue 19.2) ------------------------------------------------------------------------
# What an agent may read or write is always its session's bindings *intersected with its current grants*
# (memory.grants): withdrawing a grant narrows every live session at once, and granting it again restores it
# (the bindings themselves are never changed). Operators (staff users) are not limited by grants. The two
# functions below are the only places this rule is computed: per session (every session-scoped read: prompt,
# memory-context, memory-search, skills) and per caller (lists and filters, proposing into a scope).


def learning_scope_keys(session: Session) -> list[str]:
    """The session's *effective* scope keys, ordered: session, persona, projects, workspace:default - the
    persona and projects only while the owner is still granted them (one query when ``persona`` is selected and
    ``projects`` prefetched, as the API's session reads do)."""
    return learning_scope_keys_many([session])[session.pk]


def learning_scope_keys_many(sessions: list[Session]) -> dict[int, list[str]]:
    """:func:`learning_scope_keys` of many sessions (a page of a list) by session pk: their bound keys narrowed
    to their owners' current grants, read in one query whatever their number (only the grants that matter)."""
    bound = {session.pk: bound_scope_keys(session) for session in sessions}
    limited = [s for s in sessions if not s.owner.is_staff]  # operators are not limited by grants
    granted: set[tuple[int, str]] = set()
    for s in limited:  # read with the session itself (memory.sql.visible_session: the same rule, in its SQL)
        read_with_it: frozenset[str] | None = getattr(s, "granted_scope_keys", None)
        if read_with_it is not None:
            granted.update((s.owner_id, key) for key in read_with_it)
    limited = [s for s in limited if getattr(s, "granted_scope_keys", None) is None]
    wanted = {key for s in limited for key in bound[s.pk] if key.startswith(("persona:", "project:"))}
    if wanted:
        owners = {s.owner_id for s in limited}
        personas = [key.split(":", 1)[1] for key in wanted if key.startswith("persona:")]
        projects = [key.split(":", 1)[1] for key in wanted if key.startswith("project:")]
        by_persona = (
            AgentGrant.objects.filter(user_id__in=owners, personas__persona_id__in=personas)
            .annotate(key=Concat(Value("persona:"), "personas__persona_id", output_field=CharField()))
            .values_list("user_id", "key")
        )
        by_project = (
            AgentGrant.objects.filter(user_id__in=owners, projects__project_id__in=projects)
            .annotate(key=Concat(Value("project:"), "projects__project_id", output_field=CharField()))
            .values_list("user_id", "key")
        )
        granted.update(by_persona.union(by_project, all=True))
    staff = {s.pk for s in sessions if s.owner.is_staff}
    return {
        s.pk: bound[s.pk]
        if s.pk in staff
        else [
            key for key in bound[s.pk] if not key.startswith(("persona:", "project:")) or (s.owner_id, key) in granted
        ]
        for s in sessions
    }


class _PkRow(TypedDict):
    pk: int


class _PersonaIdRow(TypedDict):
    persona_id: str


class _ProjectIdRow(TypedDict):
    project_id: str


@dataclass(frozen=True)
class CallerScopes:
    """The scopes an agent can see, as subqueries (an agent with many sessions costs one query, not a key
    list): its own sessions' ids, and the personas and projects its sessions are bound to *and* it is granted
    now. The workspace scope is always visible."""

    session_pks: QuerySet[Session, _PkRow]
    persona_ids: QuerySet[Persona, _PersonaIdRow]
    project_ids: QuerySet[Project, _ProjectIdRow]

    def allows(self, kind: str, scope_id: str) -> bool:
        """Whether one scope (kind, id) is among these (one query; the workspace always is)."""
        if kind == "workspace":
            return True
        if kind == "session":
            pk = public_ids.parse_id(scope_id, public_ids.SESSION)  # canonical ASCII only (issue 19.9)
            return pk is not None and self.session_pks.filter(pk=pk).exists()
        if kind == "persona":
            return Persona.objects.filter(persona_id=scope_id, persona_id__in=self.persona_ids).exists()
        if kind == "project":
            return Project.objects.filter(project_id=scope_id, project_id__in=self.project_ids).exists()
        return False


def caller_scopes(user: User) -> CallerScopes:
    owned = Session.objects.filter(owner=user)
    personas = Persona.objects.filter(sessions__owner=user)
    projects = Project.objects.filter(sessions__owner=user)
    if not getattr(user, "is_staff", False):
        personas = personas.filter(agent_grants__user=user)
        projects = projects.filter(agent_grants__user=user)
    return CallerScopes(
        session_pks=owned.values("pk"),
        persona_ids=personas.values("persona_id"),
        project_ids=projects.values("project_id"),
    )


def scope_keys_from_parts(session_id: int, parts: list[tuple[str, str]]) -> list[str]:
    """``bound_scope_keys`` from the rows of :data:`memory.sql.SCOPE_PARTS_SQL`."""
    keys = [f"session:{public_ids.session_id(session_id)}"]
    keys += [f"persona:{value}" for part, value in parts if part == "persona"]
    keys += [f"project:{value}" for value in sorted(value for part, value in parts if part == "project")]
    keys.append(WORKSPACE_SCOPE_KEY)
    return keys


def session_scope_keys(session_id: int) -> list[str]:
    """``bound_scope_keys`` for a session known only by id, in one query."""
    return scope_keys_from_parts(session_id, sql.session_scope_parts(session_id))


def effective_capability_scope(session: Session) -> list[str] | None:
    """persona ∩ session; None means unrestricted."""
    persona_scope = session.persona.capability_scope if session.persona is not None else None
    session_scope = session.capability_scope
    if persona_scope is None:
        return session_scope
    if session_scope is None:
        return sorted(persona_scope)
    return sorted(set(persona_scope) & set(session_scope))


# ---- personas and projects: create, update, delete (issue 21.3) --------------------------------------------
#
# The one way to write a persona or a project, from the API and the admin alike: validated, and audited in the
# same transaction. The ids are immutable (learning scope keys and grants name them). What a delete does:
#
# * a **project** still bound by sessions is refused (409 ``project_in_use``) unless the operator confirms
#   (``unbind_sessions=True``, the admin's confirmation page): then each session loses that project (its learning
#   scopes narrow - never widen) with a ``session``/``unbind_project`` audit row;
# * a **persona** bound by any session is always refused (409 ``persona_in_use``): unbinding a session's persona
#   would drop the persona's capability scope and so *widen* what the session may use;
# * either way every agent granted it loses that grant, with an ``agent_grant``/``revoke_<kind>`` audit row each;
#   learnings and candidates scoped to it are kept (history; an operator retires them in the console) and counted
#   in the ``delete`` audit row, as on the confirmation page.

_SLUG = re.compile(r"^[-a-zA-Z0-9_]+$")


def _slug(value: object, field: str, noun: str) -> str:
    if not isinstance(value, str) or not _SLUG.match(value) or len(value) > 120:
        raise ValidationFailed(
            f"{field} must be a slug (letters, digits, - and _; at most 120 characters)",
            field=field,
            domain=noun + "s",
            code=f"invalid_{noun}",
        )
    return value


def _text(value: object, field: str, noun: str, *, max_length: int, blank: bool = False) -> str:
    if not isinstance(value, str) or (not blank and not value.strip()) or len(value) > max_length:
        rule = (
            f"a string of at most {max_length} characters"
            if blank
            else f"a non-empty string of at most {max_length} characters"
        )
        raise ValidationFailed(f"{field} must be {rule}", field=field, domain=noun + "s", code=f"invalid_{noun}")
    return value


def _persona_fields(*, display_name: object, version: object, soul: object, capability_scope: object) -> dict[str, Any]:
    return {
        "display_name": _text(display_name, "display_name", "persona", max_length=200),
        "version": _text(version, "version", "persona", max_length=40),
        "soul": _text(soul, "soul", "persona", max_length=20000, blank=True),
        "capability_scope": _string_list(capability_scope, "capability_scope"),
    }


def _changes(obj: object, fields: Mapping[str, object]) -> dict[str, dict[str, Any]]:
    """``{field: {"before": .., "after": ..}}`` of what differs (a soul is long: only that it changed)."""
    changed: dict[str, dict[str, Any]] = {}
    for name, value in fields.items():
        before = getattr(obj, name)
        if before != value:
            changed[name] = {"changed": True} if name == "soul" else {"before": before, "after": value}
    return changed


@transaction.atomic
def persona_create(
    *,
    persona_id: str,
    display_name: str,
    version: str = "1",
    soul: str = "",
    capability_scope: list[str] | None = None,
    actor: object,
) -> Persona:
    persona_id = _slug(persona_id, "persona_id", "persona")
    fields = _persona_fields(display_name=display_name, version=version, soul=soul, capability_scope=capability_scope)
    if Persona.objects.filter(persona_id=persona_id).exists():
        raise Conflict(
            f"persona {persona_id} already exists", field="persona_id", domain="personas", code="persona_exists"
        )
    persona = Persona.objects.create(persona_id=persona_id, **fields)
    record_audit(subject_type="persona", subject_id=persona_id, action="create", actor=actor)
    return persona


_Row = TypeVar("_Row", Persona, Project)


def _audited_update(obj: _Row, fields: dict[str, Any], *, subject_type: str, subject_id: str, actor: object) -> _Row:
    """Lock the row, write the fields that changed and audit them (before and after); the refreshed row."""
    model = type(obj)
    locked = model.objects.select_for_update().get(pk=obj.pk)
    changed = _changes(locked, fields)
    if changed:
        model.objects.filter(pk=locked.pk).update(**fields)
        record_audit(
            subject_type=subject_type, subject_id=subject_id, action="update", actor=actor, data={"changed": changed}
        )
    locked.refresh_from_db()
    return locked


@transaction.atomic
def persona_update(
    *, persona: Persona, display_name: str, version: str, soul: str, capability_scope: list[str] | None, actor: object
) -> Persona:
    """Change a persona's name, version, soul or capability scope (its id never changes); audited with what
    changed, before and after. Sessions bound to it see the new capability scope at once."""
    fields = _persona_fields(display_name=display_name, version=version, soul=soul, capability_scope=capability_scope)
    return _audited_update(persona, fields, subject_type="persona", subject_id=persona.persona_id, actor=actor)


@transaction.atomic
def project_create(*, project_id: str, name: str, actor: object) -> Project:
    project_id = _slug(project_id, "project_id", "project")
    name = _text(name, "name", "project", max_length=200)
    if Project.objects.filter(project_id=project_id).exists():
        raise Conflict(
            f"project {project_id} already exists", field="project_id", domain="projects", code="project_exists"
        )
    project = Project.objects.create(project_id=project_id, name=name)
    record_audit(subject_type="project", subject_id=project_id, action="create", actor=actor)
    return project


@transaction.atomic
def project_update(*, project: Project, name: str, actor: object) -> Project:
    """Rename a project (its id never changes), audited before and after."""
    fields = {"name": _text(name, "name", "project", max_length=200)}
    return _audited_update(project, fields, subject_type="project", subject_id=project.project_id, actor=actor)


@dataclass(frozen=True)
class DeleteImpact:
    """What deleting one persona or project touches: what the confirmation page shows and the audit row keeps."""

    kind: str  # "persona" | "project"
    scope_id: str
    label: str
    session_ids: list[str]
    agent_ids: list[str]
    scoped: dict[str, int]  # records other planes keep in its learning scope (memory.hooks.SCOPE_DEPENDENTS)

    @property
    def blocked(self) -> bool:
        """A persona bound by a session cannot be deleted (see the note above)."""
        return self.kind == "persona" and bool(self.session_ids)

    def as_dict(self) -> dict[str, Any]:
        return {"sessions_bound": len(self.session_ids), "agents_granted": self.agent_ids, "scoped": self.scoped}


def _impact(
    kind: str, obj: Persona | Project, scope_id: str, bound: QuerySet[Session], granted: QuerySet[AgentGrant]
) -> DeleteImpact:
    """``bound``: the sessions bound to ``obj``; ``granted``: the grants that name it."""
    scoped: dict[str, int] = {}
    for answer in hooks.fire(hooks.SCOPE_DEPENDENTS, f"{kind}:{scope_id}"):
        scoped.update(answer or {})
    return DeleteImpact(
        kind=kind,
        scope_id=scope_id,
        label=str(obj),
        session_ids=[public_ids.session_id(pk) for pk in bound.order_by("pk").values_list("pk", flat=True)],
        agent_ids=sorted(granted.values_list("user__username", flat=True)),
        scoped=scoped,
    )


def persona_delete_impact(persona: Persona) -> DeleteImpact:
    bound = Session.objects.filter(persona=persona)
    return _impact("persona", persona, persona.persona_id, bound, AgentGrant.objects.filter(personas=persona))


def project_delete_impact(project: Project) -> DeleteImpact:
    bound = Session.objects.filter(projects=project)
    return _impact("project", project, project.project_id, bound, AgentGrant.objects.filter(projects=project))


def _revoke_grants(kind: str, obj: Persona | Project, actor: object) -> None:
    related = "personas" if kind == "persona" else "projects"
    for grant in AgentGrant.objects.select_for_update().filter(**{related: obj}).select_related("user"):
        before = grants.grants_for(grant.user)
        getattr(grant, related).remove(obj)
        AgentGrant.objects.filter(pk=grant.pk).update(updated_at_ms=now_ms())
        record_audit(
            subject_type="agent_grant",
            subject_id=grant.user.get_username(),
            action=f"revoke_{kind}",
            actor=actor,
            reason=f"{kind} {getattr(obj, kind + '_id')} deleted",
            data={"before": before.as_dict(), "after": grants.grants_for(grant.user).as_dict()},
        )


@transaction.atomic
def persona_delete(*, persona: Persona, actor: object) -> DeleteImpact:
    """Delete a persona no session binds (409 ``persona_in_use`` otherwise), withdrawing it from every agent
    granted it; audited (one row per grant, one for the persona with the impact)."""
    locked = Persona.objects.select_for_update().get(pk=persona.pk)
    impact = persona_delete_impact(locked)
    if impact.blocked:
        raise Conflict(
            f"persona {locked.persona_id} is bound by {len(impact.session_ids)} session(s); a session's "
            "persona cannot be removed (that would widen its capability scope)",
            field="persona_id",
            domain="personas",
            code="persona_in_use",
        )
    _revoke_grants("persona", locked, actor)
    record_audit(
        subject_type="persona", subject_id=locked.persona_id, action="delete", actor=actor, data=impact.as_dict()
    )
    locked.delete()
    return impact


@transaction.atomic
def project_delete(*, project: Project, actor: object, unbind_sessions: bool = False) -> DeleteImpact:
    """Delete a project. Sessions bound to it are refused (409 ``project_in_use``) unless ``unbind_sessions``
    (the operator confirmed): then each loses the project with an audit row. Agents granted it lose the grant
    (an audit row each); the project's own ``delete`` row keeps the impact."""
    locked = Project.objects.select_for_update().get(pk=project.pk)
    impact = project_delete_impact(locked)
    if impact.session_ids and not unbind_sessions:
        raise Conflict(
            f"project {locked.project_id} is bound by {len(impact.session_ids)} session(s); confirm to unbind them",
            field="project_id",
            domain="projects",
            code="project_in_use",
        )
    for session in Session.objects.select_for_update().filter(projects=locked).order_by("pk"):
        session.projects.remove(locked)
        Session.objects.filter(pk=session.pk).update(updated_at_ms=now_ms())
        record_audit(
            subject_type="session",
            subject_id=session.public_id,
            action="unbind_project",
            actor=actor,
            reason=f"project {locked.project_id} deleted",
            data={"project_id": locked.project_id},
        )
    _revoke_grants("project", locked, actor)
    record_audit(
        subject_type="project", subject_id=locked.project_id, action="delete", actor=actor, data=impact.as_dict()
    )
    locked.delete()
    return impact
