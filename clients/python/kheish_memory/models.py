"""Typed views of the /v1 API. Each model names the OpenAPI component it mirrors (``schema_component``); a test
compares every model's fields with that component of the served schema (``/v1/schema/``), so a server change
that adds, removes or makes a field nullable fails the client's tests instead of surprising agents.

Unknown fields from a newer server are kept (``extra="allow"``), never an error at run time."""

from __future__ import annotations

from typing import Any, ClassVar, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field


class ApiModel(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    schema_component: ClassVar[str | None] = None


T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    """A list envelope ``{count, next, previous, results}`` (limit/offset pagination)."""

    model_config = ConfigDict(extra="allow")
    count: int
    next: str | None = None
    previous: str | None = None
    results: list[T]


# ---- personas, projects, sessions ---------------------------------------------------------------------------


class Persona(ApiModel):
    schema_component: ClassVar[str | None] = "Persona"
    persona_id: str
    version: str
    display_name: str
    soul: str
    capability_scope: Any = None
    created_at_ms: int


class Project(ApiModel):
    schema_component: ClassVar[str | None] = "Project"
    project_id: str
    name: str
    created_at_ms: int


class AgentGrants(ApiModel):
    schema_component: ClassVar[str | None] = "AgentGrants"
    project_ids: list[str]
    persona_ids: list[str]


class Session(ApiModel):
    schema_component: ClassVar[str | None] = "Session"
    session_id: str
    agent_id: str
    persona_id: str | None = None
    project_ids: list[str]
    capability_scope: Any = None
    effective_capability_scope: list[str] | None = None
    learning_scopes: list[str]
    metadata: Any = None
    created_at_ms: int
    updated_at_ms: int
    active_run_id: str | None = None


class LogEntry(ApiModel):
    schema_component: ClassVar[str | None] = "LogEntry"
    offset: int
    timestamp_ms: int
    run_id: str | None = None
    event: dict[str, Any]


class Checkpoint(ApiModel):
    schema_component: ClassVar[str | None] = "Checkpoint"
    compacted_until_offset: int
    journal_digest: str
    prompt_summary: Any = None
    prompt_window_id: str
    prompt_window_generation: int
    prompt_window_started_after_offset: int
    prompt_window_created_by: str
    compact_metadata: Any = None
    restoration: Any = None
    canonical: Any = None
    created_at_ms: int


class LiveContext(ApiModel):
    schema_component: ClassVar[str | None] = "Context"
    session_id: str
    checkpoint: Checkpoint | None = None
    events: list[LogEntry]
    estimated_tokens: int
    budget_tokens: int
    truncated: bool


# ---- runs ---------------------------------------------------------------------------------------------------


class PromptSection(ApiModel):
    """One packed memory section a new run receives (``learned_context`` or ``recovered_memory``)."""

    name: str
    content: str
    entries: list[str] = Field(default_factory=list)
    truncated: bool = False


class RunPrompt(ApiModel):
    """The injection ledger of a run: what was put in front of the model, and its token estimate."""

    sections: list[PromptSection] = Field(default_factory=list)
    estimated_tokens: int | None = None
    budget_tokens: int | None = None

    def section(self, name: str) -> PromptSection | None:
        return next((s for s in self.sections if s.name == name), None)


RunStatus = Literal[
    "queued",
    "running",
    "waiting_for_approval",
    "waiting_for_user_question",
    "completed",
    "failed",
    "interrupted",
    "cancelled",
]
TERMINAL_STATUSES = frozenset({"completed", "failed", "interrupted", "cancelled"})


class RunView(ApiModel):
    schema_component: ClassVar[str | None] = "RunView"
    run_id: str
    session_id: str
    agent_id: str
    kind: str
    status: str
    submitted_at_ms: int
    updated_at_ms: int
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    queued_position: int | None = None
    request: Any = None
    input_attachments: list[Any] = Field(default_factory=list)
    input_metadata: dict[str, Any] | None = None
    pending_approval_ids: Any = None
    pending_approvals: list[Any] = Field(default_factory=list)
    pending_question_ids: Any = None
    pending_questions: list[Any] = Field(default_factory=list)
    outputs: Any = None
    outputs_truncated: bool = False  # the view carries the newest outputs only; page the run's events for all
    deliveries: list[Any] = Field(default_factory=list)
    error: str | None = None
    prompt: RunPrompt | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


# ---- memory surfaces ----------------------------------------------------------------------------------------


class SessionMemoryContextView(ApiModel):
    schema_component: ClassVar[str | None] = "SessionMemoryContextView"
    session_id: str
    effective_capability_scope: Any = None
    learning_scopes: list[str]
    retrieval: dict[str, Any] | None = None
    learned_context: dict[str, Any] | None = None
    recovered_memory: dict[str, Any] | None = None
    visible_skills: Any = None

    def rendered(self) -> str:
        """The sections as the next run would receive them (learned context first), blank-line separated."""
        parts = [bundle.get("rendered") for bundle in (self.learned_context, self.recovered_memory) if bundle]
        return "\n\n".join(p for p in parts if p)


class SearchResult(ApiModel):
    kind: str
    source_id: str
    title: str
    excerpt: str
    score: float
    timestamp_ms: int
    scope: str | None = None
    prompt_eligible: bool = False
    learning_status: str | None = None
    publish_tier: str | None = None
    verification_status: str | None = None
    matched_fields: list[str] = Field(default_factory=list)


class SessionMemorySearchView(ApiModel):
    schema_component: ClassVar[str | None] = "SessionMemorySearchView"
    session_id: str
    effective_capability_scope: Any = None
    learning_scopes: list[str]
    query: str | None = None
    truncated: bool
    results: list[SearchResult]


class StatusView(ApiModel):
    schema_component: ClassVar[str | None] = "StatusView"
    health: Any = None
    run_memory: Any = None
    session_memory: Any = None
    learnings: Any = None  # operators only: learnings.screening counts (issue 19.5)


# ---- learning plane -----------------------------------------------------------------------------------------


ScopeKind = Literal["session", "persona", "project", "workspace"]
LearningKind = Literal["run_summary", "fact", "preference", "decision", "procedure"]


class LearningScope(ApiModel):
    schema_component: ClassVar[str | None] = "LearningScope"
    kind: str
    id: str | None = None


class LearningSourceRef(ApiModel):
    schema_component: ClassVar[str | None] = "LearningSourceRef"
    run_id: str | None = None
    session_id: str | None = None
    agent_id: str | None = None
    input_event_offset: int | None = None
    observation_id: str | None = None
    derivation_id: str | None = None


class LearningEvidenceRef(ApiModel):
    schema_component: ClassVar[str | None] = "LearningEvidenceRef"
    run_id: str | None = None
    artifact_id: str | None = None
    note: str | None = None


class LearningCandidateView(ApiModel):
    schema_component: ClassVar[str | None] = "LearningCandidateView"
    candidate_id: str
    origin: str
    scope: LearningScope
    kind: str
    sensitivity: str
    content: str
    confidence: int
    source: LearningSourceRef
    evidence_refs: list[LearningEvidenceRef]
    created_at_ms: int
    expires_at_ms: int | None = None
    stated_at_ms: int | None = None
    state: str
    automation_review: dict[str, Any] | None = None
    published_learning_id: str | None = None
    screening: dict[str, Any] | None = None  # operators only: the memory-poisoning screen's findings


class LearningView(ApiModel):
    schema_component: ClassVar[str | None] = "LearningView"
    learning_id: str
    scope: LearningScope
    kind: str
    sensitivity: str
    content: str
    confidence: int
    source: LearningSourceRef
    evidence_refs: list[LearningEvidenceRef]
    source_candidate_id: str | None = None
    created_at_ms: int
    published_at_ms: int
    expires_at_ms: int | None = None
    stated_at_ms: int | None = None
    status: str
    publish_tier: str
    policy_decision: str | None = None
    policy_actor: str | None = None
    verification_status: str
    supersedes: str | None = None
    superseded_by: str | None = None
    revoked_at_ms: int | None = None
    revoked_reason: str | None = None


# ---- policies -----------------------------------------------------------------------------------------------


class RunMemoryPolicyConfig(ApiModel):
    schema_component: ClassVar[str | None] = "RunMemoryPolicyConfig"
    enabled: bool
    retention_ms: int
    max_tracked_per_session: int
    max_prompt_entries: int
    redact_pii: bool
    search_visibility: str


class LearningAutomationPolicyConfig(ApiModel):
    """The learning policy (spec §3.2). ``capture``, ``publication`` and ``judge`` are kept as dicts: the
    whole policy is replaced on write, so read it, change what you need, send it back."""

    schema_component: ClassVar[str | None] = "LearningAutomationPolicyConfig"
    mode: str
    capture: dict[str, Any]
    publication: dict[str, Any]
    judge: dict[str, Any]


class RuntimeSettingsView(ApiModel):
    schema_component: ClassVar[str | None] = "RuntimeSettingsView"
    run_memory_policy: Any = None
    learning_policy: Any = None
    revision: int


class RedactionPreview(ApiModel):
    schema_component: ClassVar[str | None] = "RedactionPreview"
    text: str
    redaction_count: int
    redactions: dict[str, int]


# ---- skills -------------------------------------------------------------------------------------------------


class SkillRuntimeConfig(ApiModel):
    schema_component: ClassVar[str | None] = "SkillRuntimeConfig"
    allowed_tools: list[str]
    blocked_tools: list[str]
    context: str
    agent_profile: str | None = None
    provider: str | None = None
    model: str | None = None
    fallback_model: str | None = None


class SkillSummary(ApiModel):
    schema_component: ClassVar[str | None] = "SkillSummary"
    name: str
    description: str
    when_to_use: str | None = None
    version: str | None = None
    source: str
    source_learning_id: str | None = None
    scope: str | None = None
    skill_path: str
    skill_root: str
    digest: str
    runtime: SkillRuntimeConfig


class SkillDetail(SkillSummary):
    schema_component: ClassVar[str | None] = "SkillDetail"
    instructions: str


class LearningSkillLifecycleEvent(ApiModel):
    schema_component: ClassVar[str | None] = "LearningSkillLifecycleEvent"
    event: str
    recorded_at_ms: int
    from_status: str | None = None
    to_status: str
    rollout_kind: str | None = None
    run_id: str | None = None
    session_id: str | None = None
    success: bool | None = None
    definition_fingerprint: str | None = None
    reason: str | None = None


class LearningSkillSourceScope(ApiModel):
    schema_component: ClassVar[str | None] = "LearningSkillSourceScope"
    kind: str
    id: str


class LearningSkillView(ApiModel):
    schema_component: ClassVar[str | None] = "LearningSkillView"
    skill_name: str
    source_learning_id: str
    source_scope: LearningSkillSourceScope
    status: str
    description: str
    when_to_use: str | None = None
    version: str | None = None
    instructions: str
    skill_path: str
    skill_root: str
    digest: str
    definition_fingerprint: str
    runtime: SkillRuntimeConfig
    evidence_refs: list[dict[str, Any]]
    lifecycle_events: list[LearningSkillLifecycleEvent]
    verification_status: str
    successful_run_count: int
    distinct_session_count: int
    verifier_run_ids: list[str]
    real_daemon_verified: bool
    last_verified_workspace_digest: str | None = None
    canary_success_count: int
    canary_failure_count: int
    promoted_at_ms: int
    revoked_at_ms: int | None = None
    revoked_reason: str | None = None


RESPONSE_MODELS: tuple[type[ApiModel], ...] = (
    Persona,
    Project,
    Session,
    LogEntry,
    Checkpoint,
    LiveContext,
    RunView,
    SessionMemoryContextView,
    SessionMemorySearchView,
    StatusView,
    LearningScope,
    LearningSourceRef,
    LearningEvidenceRef,
    LearningCandidateView,
    LearningView,
    RunMemoryPolicyConfig,
    LearningAutomationPolicyConfig,
    RuntimeSettingsView,
    RedactionPreview,
    SkillRuntimeConfig,
    SkillSummary,
    SkillDetail,
    LearningSkillLifecycleEvent,
    LearningSkillSourceScope,
    LearningSkillView,
)
