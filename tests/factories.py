"""Typed factory-boy factories, one per model (``tests/test_factories.py`` saves each on PostgreSQL, so every
default passes the model's constraints).

A factory writes the row directly, as a fixture: no service runs, so no audit row, no journal offset
bookkeeping and no review queue. Tests of a workflow build their rows through the services
(``tests/support``); these are for tests that need a row in a given state (constraints, reads, admin).
Derived columns (scope keys, semantic key digests, a skill's definition fingerprint) are computed the way the
services compute them, so a factory row reads like a real one.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from factory.django import DjangoModelFactory

from learnings.learning_policy import LearningPolicy
from learnings.models import Learning, LearningCandidate
from learnings.services.cleaning import semantic_key_digests
from learnings.validation import scope_key
from memory.identity import KEY_PREFIX, hash_key
from memory.models import (
    AgentGrant,
    ApiKey,
    AuditEvent,
    Checkpoint,
    Counter,
    JournalEvent,
    MaintenanceReport,
    Persona,
    PolicyKind,
    PolicyRevision,
    Project,
    Run,
    RunMemoryRecord,
    RunMemoryScope,
    RunStatus,
    Session,
)
from memory.run_memory_policy import RunMemoryPolicy
from skills.fingerprint import SkillDefinition, SkillRuntime, definition_fingerprint
from skills.models import LearningSkill, LearningSkillEvent, LearningSkillSnapshot
from skills.services.transitions import record_json

API_KEY_SECRET = "0" * 48
"""The secret half of every factory-made API key: ``f"{key.prefix}_{API_KEY_SECRET}"`` authenticates."""


# ---------------------------------------------------------------------------------------------- principals


class UserFactory(DjangoModelFactory[AbstractUser]):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"agent-{n}")
    password = "!"  # an unusable password, as api_key_create leaves an agent principal


class OperatorFactory(UserFactory):
    username = factory.Sequence(lambda n: f"operator-{n}")
    is_staff = True


class ApiKeyFactory(DjangoModelFactory[ApiKey]):
    class Meta:
        model = ApiKey

    user = factory.SubFactory(UserFactory)
    name = factory.LazyAttribute(lambda key: key.user.username)
    role = "agent"
    prefix = factory.Sequence(lambda n: f"{KEY_PREFIX}_{n:012x}")
    key_hash = factory.LazyAttribute(lambda key: hash_key(f"{key.prefix}_{API_KEY_SECRET}"))


class AgentGrantFactory(DjangoModelFactory[AgentGrant]):
    class Meta:
        model = AgentGrant
        skip_postgeneration_save = True

    user = factory.SubFactory(UserFactory)

    @factory.post_generation
    def projects(self, create: bool, extracted: list[Project] | None, **kwargs: Any) -> None:
        if create and extracted:
            self.projects.add(*extracted)

    @factory.post_generation
    def personas(self, create: bool, extracted: list[Persona] | None, **kwargs: Any) -> None:
        if create and extracted:
            self.personas.add(*extracted)


# --------------------------------------------------------------------------------- plane 1: sessions, runs


class PersonaFactory(DjangoModelFactory[Persona]):
    class Meta:
        model = Persona

    persona_id = factory.Sequence(lambda n: f"persona-{n}")
    display_name = factory.Sequence(lambda n: f"Persona {n}")
    capability_scope = None


class ProjectFactory(DjangoModelFactory[Project]):
    class Meta:
        model = Project

    project_id = factory.Sequence(lambda n: f"project-{n}")
    name = factory.Sequence(lambda n: f"Project {n}")


class SessionFactory(DjangoModelFactory[Session]):
    class Meta:
        model = Session
        skip_postgeneration_save = True  # the projects hook saves through the m2m manager

    owner = factory.SubFactory(UserFactory)

    @factory.post_generation
    def projects(self, create: bool, extracted: list[Project] | None, **kwargs: Any) -> None:
        """``SessionFactory(projects=[project, ...])`` attaches the session to those projects."""
        if create and extracted:
            self.projects.add(*extracted)

    @factory.post_generation
    def granted(self, create: bool, extracted: bool | None, **kwargs: Any) -> None:
        """Binding needs a grant (issue 14.1) and a session reads only its bindings its owner is granted now
        (19.2), so the owner is granted the session's persona and projects, as through the API;
        ``SessionFactory(granted=False)`` leaves the grants alone (a withdrawn grant)."""
        if not create or extracted is False:
            return
        projects = list(self.projects.all())
        if self.persona_id is None and not projects:
            return
        grant, _ = AgentGrant.objects.get_or_create(user=self.owner)
        if self.persona_id is not None:
            grant.personas.add(self.persona)
        if projects:
            grant.projects.add(*projects)


class RunFactory(DjangoModelFactory[Run]):
    """A queued run; ``RunFactory(terminal=True)`` (or ``TerminalRunFactory``) a completed one with an output.
    A session holds one in-flight run at most (``run_one_in_flight_per_session``)."""

    class Meta:
        model = Run

    class Params:
        terminal = factory.Trait(
            status=RunStatus.COMPLETED,
            started_at_ms=factory.SelfAttribute("submitted_at_ms"),
            finished_at_ms=factory.LazyAttribute(lambda run: run.submitted_at_ms + 1_000),
            updated_at_ms=factory.SelfAttribute("finished_at_ms"),
            outputs=factory.LazyAttribute(lambda run: [{"content": f"answer to {run.input['content']}"}]),
        )

    session = factory.SubFactory(SessionFactory)
    submitted_at_ms = factory.Sequence(lambda n: 1_700_000_000_000 + n * 1_000)
    updated_at_ms = factory.SelfAttribute("submitted_at_ms")
    input = factory.Sequence(lambda n: {"content": f"question {n}"})
    request = factory.LazyAttribute(lambda run: {"text_preview": run.input["content"]})


class TerminalRunFactory(RunFactory):
    terminal = True


class JournalEventFactory(DjangoModelFactory[JournalEvent]):
    """An ``input_received`` event of a run. ``offset`` is unique per session and at least 1; a sequence
    keeps it so (the journal service assigns gapless offsets, a factory does not)."""

    class Meta:
        model = JournalEvent

    run = factory.SubFactory(RunFactory)
    session = factory.SelfAttribute("run.session")
    offset = factory.Sequence(lambda n: n + 1)
    type = "input_received"
    event = factory.LazyAttribute(lambda event: {"type": event.type, "content": event.run.input.get("content", "")})


class CheckpointFactory(DjangoModelFactory[Checkpoint]):
    class Meta:
        model = Checkpoint

    session = factory.SubFactory(SessionFactory)
    compacted_until_offset = 0
    journal_digest = factory.LazyAttribute(
        lambda cp: hashlib.sha256(f"{cp.session.pk}:{cp.compacted_until_offset}".encode()).hexdigest()
    )
    prompt_window_id = factory.Sequence(lambda n: f"window-{n}")
    prompt_window_created_by = "compaction"


# ------------------------------------------------------------------------------------ plane 2: run memory


class RunMemoryRecordFactory(DjangoModelFactory[RunMemoryRecord]):
    """The record of a completed run, retained under its session's scope key (add ``RunMemoryScopeFactory``
    rows for more)."""

    class Meta:
        model = RunMemoryRecord

    run = factory.SubFactory(TerminalRunFactory)
    session = factory.SelfAttribute("run.session")
    scope_keys = factory.LazyAttribute(lambda record: [f"session:{record.session.public_id}"])
    semantic_capture = "skipped"
    recorded_at_ms = factory.LazyAttribute(lambda record: record.run.finished_at_ms or record.run.updated_at_ms)
    status = factory.LazyAttribute(lambda record: record.run.status)
    request_preview = factory.LazyAttribute(lambda record: record.run.input.get("content"))
    outcome_preview = "Done."
    summary = factory.LazyAttribute(
        lambda record: f"Request: {record.request_preview}\nResult: {record.outcome_preview}"
    )


class RunMemoryScopeFactory(DjangoModelFactory[RunMemoryScope]):
    class Meta:
        model = RunMemoryScope

    record = factory.SubFactory(RunMemoryRecordFactory)
    scope_key = factory.LazyAttribute(lambda scope: scope.record.scope_keys[0])
    recorded_at_ms = factory.SelfAttribute("record.recorded_at_ms")


class MaintenanceReportFactory(DjangoModelFactory[MaintenanceReport]):
    class Meta:
        model = MaintenanceReport

    source = "repair"
    report = factory.LazyFunction(lambda: {"diagnostics": [], "truncated": False})


# ------------------------------------------------------------------------------------------ shared ground


class AuditEventFactory(DjangoModelFactory[AuditEvent]):
    class Meta:
        model = AuditEvent

    subject_type = "learning"
    subject_id = factory.Sequence(lambda n: f"learning-{n}")
    action = "revoke"
    from_state = "active"
    to_state = "revoked"
    actor = "tests"


class CounterFactory(DjangoModelFactory[Counter]):
    class Meta:
        model = Counter

    name = factory.Sequence(lambda n: f"tests.counter_{n}_total")


class PolicyRevisionFactory(DjangoModelFactory[PolicyRevision]):
    """A stored learning-policy revision (the defaults); ``PolicyRevisionFactory(run_memory=True)`` a
    run-memory one. Revisions are unique per kind: pass ``revision`` when a test needs a given number."""

    class Meta:
        model = PolicyRevision

    class Params:
        run_memory = factory.Trait(
            kind=PolicyKind.RUN_MEMORY, policy=factory.LazyFunction(lambda: RunMemoryPolicy().to_dict())
        )

    kind = PolicyKind.LEARNING
    revision = factory.Sequence(lambda n: n + 1)
    policy = factory.LazyFunction(lambda: LearningPolicy().to_dict())
    actor = "tests"


# -------------------------------------------------------------------------------- plane 3: learnings


class _ScopedRecordFactory(DjangoModelFactory[Any]):
    """Scope and content fields of candidates and learnings: a workspace fact by default; the scope key and
    the semantic key digests follow ``scope_kind``/``scope_id`` and ``content``."""

    scope_kind = "workspace"
    scope_id = "default"
    scope_key = factory.LazyAttribute(lambda row: scope_key(row.scope_kind, row.scope_id))
    kind = "fact"
    content = factory.Sequence(lambda n: f"The project codename number {n} is Atlas-{n}.")
    content_key = factory.LazyAttribute(lambda row: semantic_key_digests(row.content)[0])
    subject_key = factory.LazyAttribute(lambda row: semantic_key_digests(row.content)[1])


class LearningCandidateFactory(_ScopedRecordFactory):
    """A pending api-origin candidate; ``LearningCandidateFactory(daemon=True)`` a daemon one from a run."""

    class Meta:
        model = LearningCandidate

    class Params:
        daemon = factory.Trait(
            origin="daemon",
            source_run=factory.SubFactory(TerminalRunFactory),
            source=factory.LazyAttribute(
                lambda row: {"run_id": row.source_run.public_id, "session_id": row.source_run.session.public_id}
            ),
        )

    origin = "api"
    state = "pending"


class LearningFactory(_ScopedRecordFactory):
    """An active, manually published learning; traits ``provisional``, ``revoked``, ``automatic``
    (daemon-published, verified) and ``procedure`` (a procedure, the kind skills are promoted from)."""

    class Meta:
        model = Learning

    class Params:
        provisional = factory.Trait(status="provisional", publish_tier="provisional")
        revoked = factory.Trait(
            status="revoked", revoked_at_ms=factory.SelfAttribute("published_at_ms"), revoked_reason="tests"
        )
        automatic = factory.Trait(policy_decision="automatic", policy_actor="daemon", verification_status="verified")
        procedure = factory.Trait(
            kind="procedure",
            content=factory.Sequence(
                lambda n: f"To release build {n}: run the checklist, tag the build, then publish the notes."
            ),
        )

    status = "active"
    publish_tier = "active"
    policy_decision = "manual"
    policy_actor = "operator"
    verification_status = "unverified"
    published_at_ms = factory.Sequence(lambda n: 1_700_000_000_000 + n * 1_000)
    created_at_ms = factory.SelfAttribute("published_at_ms")


# ------------------------------------------------------------------------------------------------- skills


def _definition(skill: Any) -> SkillDefinition:
    return SkillDefinition(
        name=skill.skill_name,
        description=skill.description,
        when_to_use=skill.when_to_use,
        version=skill.version,
        instructions=skill.instructions,
        runtime=SkillRuntime.from_dict(skill.runtime),
    )


class LearningSkillFactory(DjangoModelFactory[LearningSkill]):
    """A draft skill promoted from a procedure learning, with its definition fingerprint.
    ``LearningSkillFactory(active=True)`` has passed every gate of the ladder (``learningskill_active_gates``)."""

    class Meta:
        model = LearningSkill

    class Params:
        active = factory.Trait(
            status="active",
            verification_status="verified",
            real_daemon_verified=True,
            successful_run_count=1,
            distinct_session_count=1,
            canary_success_count=1,
        )

    skill_name = factory.Sequence(lambda n: f"release:checklist-{n}")
    source_learning = factory.SubFactory(LearningFactory, procedure=True)
    source_scope = factory.LazyAttribute(lambda skill: skill.source_learning.scope)
    description = "Release checklist"
    when_to_use = None
    version = None
    instructions = factory.LazyAttribute(lambda skill: skill.source_learning.content)
    runtime = factory.LazyFunction(lambda: SkillRuntime.from_dict(None).to_dict())
    definition_fingerprint = factory.LazyAttribute(lambda skill: definition_fingerprint(_definition(skill)))


class LearningSkillEventFactory(DjangoModelFactory[LearningSkillEvent]):
    """The ``promote`` event of a skill (its first lifecycle event)."""

    class Meta:
        model = LearningSkillEvent

    skill = factory.SubFactory(LearningSkillFactory)
    event = "promote"
    to_status = factory.SelfAttribute("skill.status")
    definition_fingerprint = factory.SelfAttribute("skill.definition_fingerprint")
    actor = "operator"


class LearningSkillSnapshotFactory(DjangoModelFactory[LearningSkillSnapshot]):
    """A history snapshot of a skill as it is now (what a rollback would restore)."""

    class Meta:
        model = LearningSkillSnapshot

    skill = factory.SubFactory(LearningSkillFactory)
    status = factory.SelfAttribute("skill.status")
    record = factory.LazyAttribute(lambda snap: record_json(snap.skill))
    record_digest = factory.LazyAttribute(  # as skills.services.transitions computes it
        lambda snap: hashlib.sha256(
            json.dumps(snap.record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        ).hexdigest()[:16]
    )
