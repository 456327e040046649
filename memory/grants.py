"""Agent grants: the personas and projects an operator lets an agent bind its sessions to (issue 14.1).

A session's persona and projects decide which learnings, candidates and (with ``search_visibility=
learning_scopes``) which other agents' run records it sees, so binding is something an operator grants and an
agent can never claim - and what it reads is always its bindings intersected with its current grants
(``memory.sessions.learning_scope_keys`` / ``caller_scopes``), so withdrawing a grant narrows live sessions at
once (issue 19.2). Operators are not limited by grants."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import QuerySet

from memory.audit import record_audit
from memory.clock import now_ms
from memory.errors import Forbidden, NotFound, ValidationFailed
from memory.models import AgentGrant, Persona, Project

if TYPE_CHECKING:
    from django.contrib.auth.models import User


@dataclass(frozen=True)
class Grants:
    project_ids: list[str]
    persona_ids: list[str]

    def as_dict(self) -> dict[str, list[str]]:
        return {"project_ids": self.project_ids, "persona_ids": self.persona_ids}


def get_agent(agent_id: str) -> User:
    user = get_user_model().objects.filter(username=agent_id).first()
    if user is None:
        raise NotFound(f"unknown agent {agent_id}", domain="agents", code="agent_not_found")
    return user


def grants_for(user: User) -> Grants:
    grant = AgentGrant.objects.filter(user=user).first()
    if grant is None:
        return Grants(project_ids=[], persona_ids=[])
    return Grants(
        project_ids=sorted(grant.projects.values_list("project_id", flat=True)),
        persona_ids=sorted(grant.personas.values_list("persona_id", flat=True)),
    )


def granted_projects(user: User) -> QuerySet[Project]:
    return Project.objects.filter(agent_grants__user=user)


def granted_personas(user: User) -> QuerySet[Persona]:
    return Persona.objects.filter(agent_grants__user=user)


def _ids(value: object, field: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ValidationFailed(
            f"{field} must be a list of non-empty strings", field=field, domain="agents", code="invalid_grants"
        )
    if len(value) > 1000:
        raise ValidationFailed(
            f"{field} may hold at most 1000 items", field=field, domain="agents", code="invalid_grants"
        )
    return sorted({v.strip() for v in value})


@transaction.atomic
def grants_set(*, agent: User, project_ids: list[str], persona_ids: list[str], actor: object) -> Grants:
    """Replace an agent's grants whole (unknown ids are 400), audited with the before and after sets."""
    wanted_projects = _ids(project_ids, "project_ids")
    wanted_personas = _ids(persona_ids, "persona_ids")
    projects = list(Project.objects.filter(project_id__in=wanted_projects))
    missing = sorted(set(wanted_projects) - {p.project_id for p in projects})
    if missing:
        raise ValidationFailed(
            f"unknown project {missing[0]}", field="project_ids", domain="agents", code="invalid_grants"
        )
    personas = list(Persona.objects.filter(persona_id__in=wanted_personas))
    missing = sorted(set(wanted_personas) - {p.persona_id for p in personas})
    if missing:
        raise ValidationFailed(
            f"unknown persona {missing[0]}", field="persona_ids", domain="agents", code="invalid_grants"
        )
    before = grants_for(agent)
    grant, _ = AgentGrant.objects.select_for_update().get_or_create(user=agent)
    grant.projects.set(projects)
    grant.personas.set(personas)
    AgentGrant.objects.filter(pk=grant.pk).update(updated_at_ms=now_ms())
    after = Grants(project_ids=wanted_projects, persona_ids=wanted_personas)
    record_audit(
        subject_type="agent_grant",
        subject_id=agent.get_username(),
        action="set",
        actor=actor,
        data={"before": before.as_dict(), "after": after.as_dict()},
    )
    return after


BINDING_HINT = (
    "an operator creates the {kind} if it does not exist yet (POST /v1/{kind}s) and grants it to this "
    "agent (PUT /v1/agents/<agent>/grants or the admin's Agent grants page); see docs/agents.md, "
    '"Projects and grants"'
)
"""The same words whether the id exists or not: an agent cannot tell an unknown id from an ungranted one."""


def refuse_binding(kind: str, scope_id: str) -> NoReturn:
    """The one answer to an agent binding a persona or project it may not use, whether it exists or not."""
    field = "persona_id" if kind == "persona" else "project_ids"
    raise Forbidden(
        f"{kind} {scope_id} is not granted to this agent: {BINDING_HINT.format(kind=kind)}",
        field=field,
        domain="sessions",
        code="binding_not_granted",
    )


def check_binding(
    user: User,
    *,
    persona: Persona | None,
    projects: Sequence[Project],
    unknown_persona_id: str | None = None,
    unknown_project_ids: Sequence[str] = (),
) -> None:
    """403 naming the field when an agent binds a session to a persona or project it was not granted; ids that
    name nothing (``unknown_*``) are refused in the same words, so that an agent cannot tell them apart."""
    if unknown_persona_id is not None:
        refuse_binding("persona", unknown_persona_id)
    if persona is not None and not granted_personas(user).filter(pk=persona.pk).exists():
        refuse_binding("persona", persona.persona_id)
    if projects or unknown_project_ids:
        allowed = set(granted_projects(user).filter(pk__in=[p.pk for p in projects]).values_list("pk", flat=True))
        denied = sorted([p.project_id for p in projects if p.pk not in allowed] + list(unknown_project_ids))
        if denied:
            refuse_binding("project", denied[0])
