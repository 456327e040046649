"""Plane 1 (sessions, runs, journal, checkpoints), Plane 2 (run-memory records, policy) and shared ground
(API keys, audit events, counters, policy revisions)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q

from memory import public_ids
from memory.clock import now_ms
from memory.embedding import DIMENSIONS as EMBEDDING_DIMENSIONS
from memory.vocabulary import (
    ACTIVE_STATUSES,
    TERMINAL_STATUSES,
    ApiKeyRole,
    EventType,
    PolicyKind,
    RunKind,
    RunStatus,
    SemanticCapture,
)


class ApiKey(models.Model):
    """A hashed, prefixed API key. The plaintext is shown once at creation and never stored."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=120)
    role = models.CharField(max_length=16, choices=ApiKeyRole.choices, default=ApiKeyRole.AGENT)
    prefix = models.CharField(max_length=24, unique=True, editable=False)
    key_hash = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API key"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.role}, {self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class Persona(models.Model):
    persona_id = models.SlugField(max_length=120, unique=True)
    version = models.CharField(max_length=40, default="1")
    display_name = models.CharField(max_length=200)
    soul = models.TextField(blank=True, default="")
    capability_scope = models.JSONField(null=True, blank=True, help_text="List of capability names, or null for any.")
    created_at_ms = models.BigIntegerField(default=now_ms, editable=False)

    class Meta:
        ordering = ["persona_id"]

    def __str__(self) -> str:
        return f"{self.display_name} ({self.persona_id})"


class Project(models.Model):
    project_id = models.SlugField(max_length=120, unique=True)
    name = models.CharField(max_length=200)
    created_at_ms = models.BigIntegerField(default=now_ms, editable=False)

    class Meta:
        ordering = ["project_id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.project_id})"


class Session(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="agent_sessions")
    persona = models.ForeignKey(Persona, on_delete=models.PROTECT, null=True, blank=True, related_name="sessions")
    persona_version = models.CharField(max_length=40, blank=True, default="")
    projects = models.ManyToManyField(Project, blank=True, related_name="sessions")
    capability_scope = models.JSONField(null=True, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    last_offset = models.BigIntegerField(default=0, editable=False)
    created_at_ms = models.BigIntegerField(default=now_ms, editable=False)
    updated_at_ms = models.BigIntegerField(default=now_ms, editable=False)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["owner", "-id"], name="session_owner_idx")]

    def __str__(self) -> str:
        return self.public_id

    @property
    def public_id(self) -> str:
        return public_ids.session_id(self.pk)


class Run(models.Model):
    session = models.ForeignKey(Session, on_delete=models.PROTECT, related_name="runs")
    kind = models.CharField(max_length=48, choices=RunKind.choices, default=RunKind.INPUT)
    status = models.CharField(max_length=32, choices=RunStatus.choices, default=RunStatus.QUEUED)
    submitted_at_ms = models.BigIntegerField(default=now_ms)
    updated_at_ms = models.BigIntegerField(default=now_ms)
    started_at_ms = models.BigIntegerField(null=True, blank=True)
    finished_at_ms = models.BigIntegerField(null=True, blank=True)
    request = models.JSONField(default=dict, blank=True)
    input = models.JSONField(default=dict, blank=True)
    outputs = models.JSONField(default=list, blank=True)
    error = models.TextField(null=True, blank=True)
    pending_approval_ids = models.JSONField(default=list, blank=True)
    pending_question_ids = models.JSONField(default=list, blank=True)
    pending_question = models.TextField(
        blank=True,
        default="",
        help_text="What the agent asked with wait-for-approval / wait-for-user-question (cleared on resume).",
    )
    open_tool_calls = models.JSONField(default=dict, blank=True)
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)
    request_fingerprint = models.CharField(max_length=64, blank=True, default="")
    prompt = models.JSONField(null=True, blank=True, help_text="Injection ledger: what this run was given.")
    model = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["session"],
                condition=Q(status__in=sorted(ACTIVE_STATUSES)),
                name="run_one_in_flight_per_session",
            ),
            models.UniqueConstraint(
                fields=["session", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="run_idempotency_key_per_session",
            ),
            models.CheckConstraint(condition=Q(status__in=RunStatus.values), name="run_status_valid"),
        ]
        indexes = [
            models.Index(fields=["session", "-id"], name="run_session_idx"),
            models.Index(fields=["status"], name="run_status_idx"),
        ]

    def __str__(self) -> str:
        return self.public_id

    @property
    def public_id(self) -> str:
        return public_ids.run_id(self.pk)

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


class JournalEvent(models.Model):
    """One canonical, append-only journal entry. Never updated or deleted (a PostgreSQL trigger enforces it)."""

    session = models.ForeignKey(Session, on_delete=models.PROTECT, related_name="events")
    offset = models.BigIntegerField()
    timestamp_ms = models.BigIntegerField(default=now_ms)
    run = models.ForeignKey(Run, on_delete=models.PROTECT, null=True, blank=True, related_name="events")
    type = models.CharField(max_length=40, choices=EventType.choices)
    event = models.JSONField()

    class Meta:
        ordering = ["session_id", "offset"]
        constraints = [
            models.UniqueConstraint(fields=["session", "offset"], name="journal_offset_unique"),
            models.CheckConstraint(condition=Q(offset__gte=1), name="journal_offset_positive"),
        ]
        indexes = [models.Index(fields=["run", "offset"], name="journal_run_idx")]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.offset} {self.type}"


class Checkpoint(models.Model):
    session = models.ForeignKey(Session, on_delete=models.PROTECT, related_name="checkpoints")
    compacted_until_offset = models.BigIntegerField()
    journal_digest = models.CharField(max_length=64)
    prompt_summary = models.JSONField(default=dict)
    prompt_window_id = models.CharField(max_length=64)
    prompt_window_generation = models.IntegerField(default=1)
    prompt_window_started_after_offset = models.BigIntegerField(default=0)
    prompt_window_created_by = models.CharField(max_length=40)
    compact_metadata = models.JSONField(default=dict)
    restoration = models.JSONField(null=True, blank=True)
    canonical = models.JSONField(default=dict)
    created_at_ms = models.BigIntegerField(default=now_ms)

    class Meta:
        ordering = ["session_id", "-compacted_until_offset", "-id"]
        get_latest_by = "id"

    def __str__(self) -> str:
        return f"checkpoint {self.session_id}@{self.compacted_until_offset}"


class AuditEvent(models.Model):
    """Who moved what from which state to which, and why. Written in the same transaction as the change."""

    subject_type = models.CharField(max_length=40)
    subject_id = models.CharField(max_length=120)
    action = models.CharField(max_length=60)
    from_state = models.CharField(max_length=40, blank=True, default="")
    to_state = models.CharField(max_length=40, blank=True, default="")
    actor = models.CharField(max_length=150)
    reason = models.TextField(blank=True, default="")
    data = models.JSONField(default=dict, blank=True)
    at_ms = models.BigIntegerField(default=now_ms)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["subject_type", "subject_id"], name="audit_subject_idx")]

    def __str__(self) -> str:
        return f"{self.subject_type} {self.subject_id}: {self.from_state}→{self.to_state} by {self.actor}"


class Counter(models.Model):
    """A monotonic metric counter (Prometheus-style), keyed by dotted name."""

    name = models.CharField(max_length=80, unique=True)
    value = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name}={self.value}"


class PolicyRevision(models.Model):
    """Every revision of a runtime policy, kept for audit; the current one is the highest revision."""

    kind = models.CharField(max_length=20, choices=PolicyKind.choices)
    revision = models.PositiveIntegerField()
    policy = models.JSONField()
    actor = models.CharField(max_length=150)
    created_at_ms = models.BigIntegerField(default=now_ms)

    class Meta:
        ordering = ["kind", "-revision"]
        constraints = [models.UniqueConstraint(fields=["kind", "revision"], name="policy_revision_unique")]

    def __str__(self) -> str:
        return f"{self.kind} policy r{self.revision}"


class RunMemoryRecord(models.Model):
    """Plane 2: one scrubbed, compact record per terminal run (derived read model)."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="memory_record")
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="memory_records")
    scope_keys = models.JSONField(default=list)
    semantic_capture = models.CharField(max_length=16, choices=SemanticCapture.choices, default=SemanticCapture.PENDING)
    semantic_capture_attempts = models.PositiveIntegerField(
        default=0, help_text="Failed extraction attempts; the replay job retries the least-tried receipts first."
    )
    capture_queued_at_ms = models.BigIntegerField(
        null=True,
        blank=True,
        editable=False,
        help_text="When a capture task was last queued for this run (the replay's claim; it lapses after "
        "KHEISH_QUEUE_LEASE_S, and the task clears it when it ends).",
    )
    recorded_at_ms = models.BigIntegerField()
    status = models.CharField(max_length=32, choices=RunStatus.choices)
    request_preview = models.TextField(null=True, blank=True)
    outcome_preview = models.TextField(null=True, blank=True)
    artifact_ids = models.JSONField(default=list)
    failure_markers = models.JSONField(default=list)
    summary = models.CharField(max_length=481)
    redaction_count = models.IntegerField(default=0)
    embedding = ArrayField(models.FloatField(), size=EMBEDDING_DIMENSIONS, null=True, blank=True, editable=False)
    """The sentence embedding of the record's ranked text (``memory.embedding``), computed when it is written;
    the hybrid ranker reads it for recovered_memory and memory-search."""

    class Meta:
        ordering = ["-recorded_at_ms", "-run_id"]
        indexes = [models.Index(fields=["session", "-recorded_at_ms", "-run"], name="runmem_session_idx")]

    def __str__(self) -> str:
        return f"run-memory {public_ids.run_id(self.run_id)}"


class RunMemoryScope(models.Model):
    """The by_scope index: which scope keys a retained record is searchable under."""

    record = models.ForeignKey(RunMemoryRecord, on_delete=models.CASCADE, related_name="scopes")
    scope_key = models.CharField(max_length=200)
    recorded_at_ms = models.BigIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["record", "scope_key"], name="runmem_scope_unique")]
        indexes = [models.Index(fields=["scope_key", "-recorded_at_ms"], name="runmem_scope_idx")]

    def __str__(self) -> str:
        return f"{self.scope_key} → record {self.record_id}"


class MaintenanceReport(models.Model):
    """The last bounded run-memory maintenance report (≤32 diagnostics)."""

    source = models.CharField(max_length=40)
    report = models.JSONField()
    checked_at_ms = models.BigIntegerField(default=now_ms)

    class Meta:
        ordering = ["-id"]
        get_latest_by = "id"

    def __str__(self) -> str:
        return f"maintenance report ({self.source})"


class AgentGrant(models.Model):
    """What an operator allows an agent principal to bind its sessions to. No row (or empty sets): the agent's
    sessions are bound to no persona or project (its session and the workspace scope only)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_grant")
    projects = models.ManyToManyField(Project, blank=True, related_name="agent_grants")
    personas = models.ManyToManyField(Persona, blank=True, related_name="agent_grants")
    updated_at_ms = models.BigIntegerField(default=now_ms, editable=False)

    class Meta:
        verbose_name = "agent grant"

    def __str__(self) -> str:
        return f"grants of {self.user}"
