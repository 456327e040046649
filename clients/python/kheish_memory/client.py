"""Typed clients for Kheish Memory's /v1 API over httpx2: ``KheishClient`` (sync) and ``AsyncKheishClient``.

Both expose the same methods (the async ones return awaitables of the same models); every method is one /v1
call. Errors raise :class:`~kheish_memory.errors.KheishError` with the problem+json fields.

Retries: only opening a run is retried (it is the one idempotent write: the client always sends an
``idempotency_key``, generated when the caller gives none, so a retried open returns the first run). Every
other call is sent once."""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote

import anyio
import httpx2

from kheish_memory.errors import KheishError
from kheish_memory.models import (
    AgentGrants,
    Checkpoint,
    LearningAutomationPolicyConfig,
    LearningCandidateView,
    LearningSkillView,
    LearningView,
    LiveContext,
    LogEntry,
    Page,
    Persona,
    Project,
    RedactionPreview,
    RunMemoryPolicyConfig,
    RuntimeSettingsView,
    RunView,
    Session,
    SessionMemoryContextView,
    SessionMemorySearchView,
    SkillDetail,
    SkillSummary,
    StatusView,
)

M = TypeVar("M")
RETRY_STATUSES = frozenset({502, 503, 504})
USER_AGENT = "kheish-memory-client/0.1"

# The body fields this client sends, by the OpenAPI request component that documents them (checked by the
# drift test against the served schema).
REQUEST_FIELDS: dict[str, frozenset[str]] = {
    "SessionCreateRequest": frozenset({"persona_id", "project_ids", "capability_scope", "metadata"}),
    "RunOpenRequest": frozenset({"input", "kind", "idempotency_key", "model"}),
    "RunInputRequest": frozenset({"content", "attachments", "metadata"}),
    "CompactRequest": frozenset({"strategy", "budget_tokens"}),
    "CreateLearningCandidateRequest": frozenset(
        {
            "scope",
            "kind",
            "sensitivity",
            "content",
            "confidence",
            "source",
            "evidence_refs",
            "expires_at_ms",
            "stated_at_ms",
        }
    ),
    "PublishLearningCandidateRequest": frozenset(
        {
            "scope",
            "kind",
            "sensitivity",
            "content",
            "confidence",
            "expires_at_ms",
            "publish_tier",
            "evidence_refs",
            "supersedes",
        }
    ),
    "RevokeLearningRequest": frozenset({"reason"}),
    "RevokeMatchingLearningsRequest": frozenset(
        {
            "query",
            "scope_kind",
            "scope_id",
            "kind",
            "status",
            "policy_decision",
            "policy_actor",
            "matched_rule_name",
            "reason",
            "all",
        }
    ),
    "SupersedeLearningRequest": frozenset({"scope", "kind", "sensitivity", "content", "confidence", "expires_at_ms"}),
    "SetLearningPolicyRequest": frozenset({"policy", "expected_revision"}),
    "SetRunMemoryPolicyRequest": frozenset({"policy", "expected_revision"}),
    "RedactionPreviewRequest": frozenset({"text", "redact_pii"}),
    "CreateLearningSkillRequest": frozenset(
        {
            "skill_name",
            "description",
            "when_to_use",
            "version",
            "instructions",
            "allowed_tools",
            "blocked_tools",
            "context",
            "agent_profile",
            "provider",
            "model",
            "fallback_model",
            "status",
        }
    ),
    "RolloutResultRequest": frozenset({"kind", "run_id", "expected_output_contains", "definition_fingerprint"}),
    "SkillReasonRequest": frozenset({"reason"}),
    "PersonaCreateRequest": frozenset({"persona_id", "display_name", "version", "soul", "capability_scope"}),
    "ProjectCreateRequest": frozenset({"project_id", "name"}),
    "AgentGrantsRequest": frozenset({"project_ids", "persona_ids"}),
}


def _seg(value: str) -> str:
    return quote(str(value), safe="")


def _clean(data: dict[str, Any]) -> dict[str, Any]:
    """Drop arguments the caller left out (None), so server defaults apply."""
    return {k: v for k, v in data.items() if v is not None}


def _scope(kind: str, scope_id: str | None) -> dict[str, Any]:
    return _clean({"kind": kind, "id": scope_id})


@dataclass
class _Call:
    method: str
    path: str
    model: Any = None  # a pydantic model class, Page[...] or None (raw JSON)
    json: Any = None
    params: dict[str, Any] | None = None
    retry: bool = False
    many: bool = False  # the body is a bare JSON array of ``model``
    headers: dict[str, str] = field(default_factory=dict)


def _parse(call: _Call, response: httpx2.Response) -> Any:
    if response.status_code >= 400:
        try:
            body = response.json()
        except ValueError:
            body = None
        raise KheishError.from_response(response.status_code, body, response.text)
    if response.status_code == 204 or not response.content:
        return None
    data = response.json()
    if call.model is None:
        return data
    if call.many:
        items = data["results"] if isinstance(data, dict) and "results" in data else data
        return [call.model.model_validate(item) for item in items]
    return call.model.model_validate(data)


def _settings(base_url: str | None, api_key: str | None) -> tuple[str, str]:
    base_url = base_url or os.environ.get("KHEISH_BASE_URL") or ""
    api_key = api_key or os.environ.get("KHEISH_API_KEY") or ""
    if not base_url:
        raise ValueError("base_url is required (or set KHEISH_BASE_URL)")
    if not api_key:
        raise ValueError("api_key is required (or set KHEISH_API_KEY)")
    return base_url.rstrip("/"), api_key


class _Surface:
    """The /v1 calls, transport-free: each method describes one call and hands it to ``_send``."""

    def _send(self, call: _Call) -> Any:  # pragma: no cover - implemented by the transports
        raise NotImplementedError

    def _page(self, path: str, model: type[M], **params: Any) -> Page[M]:
        """One page of a /v1 list (``limit``/``offset`` and the filters; ``None`` ones left out). Both transports
        share it: the sync client returns the page, the async one an awaitable of it."""
        return self._send(_Call("GET", path, Page[model], params=_clean(params)))  # type: ignore[valid-type]

    # ---- sessions (agents) ----------------------------------------------------------------------------------

    def create_session(
        self,
        *,
        persona_id: str | None = None,
        project_ids: list[str] | None = None,
        capability_scope: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Session:
        body = _clean(
            {
                "persona_id": persona_id,
                "project_ids": project_ids,
                "capability_scope": capability_scope,
                "metadata": metadata,
            }
        )
        return self._send(_Call("POST", "/v1/sessions", Session, json=body))

    def list_sessions(
        self, *, persona_id: str | None = None, limit: int | None = None, offset: int | None = None
    ) -> Page[Session]:
        return self._page("/v1/sessions", Session, persona_id=persona_id, limit=limit, offset=offset)

    def get_session(self, session_id: str) -> Session:
        return self._send(_Call("GET", f"/v1/sessions/{_seg(session_id)}", Session))

    def session_context(self, session_id: str, *, budget_tokens: int | None = None) -> LiveContext:
        return self._send(
            _Call(
                "GET",
                f"/v1/sessions/{_seg(session_id)}/context",
                LiveContext,
                params=_clean({"budget_tokens": budget_tokens}),
            )
        )

    def compact_session(
        self, session_id: str, *, strategy: str | None = None, budget_tokens: int | None = None
    ) -> Checkpoint:
        return self._send(
            _Call(
                "POST",
                f"/v1/sessions/{_seg(session_id)}/compact",
                Checkpoint,
                json=_clean({"strategy": strategy, "budget_tokens": budget_tokens}),
            )
        )

    def session_events(
        self, session_id: str, *, after_offset: int | None = None, limit: int | None = None, offset: int | None = None
    ) -> Page[LogEntry]:
        path = f"/v1/sessions/{_seg(session_id)}/events"
        return self._page(path, LogEntry, after_offset=after_offset, limit=limit, offset=offset)

    # ---- memory surfaces (agents) ---------------------------------------------------------------------------

    def memory_context(self, session_id: str, *, query: str | None = None) -> SessionMemoryContextView:
        """What the next run of this session would receive (no side effect)."""
        return self._send(
            _Call(
                "GET",
                f"/v1/sessions/{_seg(session_id)}/memory-context",
                SessionMemoryContextView,
                params=_clean({"query": query}),
            )
        )

    def memory_search(
        self, session_id: str, *, query: str | None = None, limit: int | None = None
    ) -> SessionMemorySearchView:
        return self._send(
            _Call(
                "GET",
                f"/v1/sessions/{_seg(session_id)}/memory-search",
                SessionMemorySearchView,
                params=_clean({"query": query, "limit": limit}),
            )
        )

    def session_skills(self, session_id: str, *, query: str | None = None) -> Page[SkillSummary]:
        return self._page(f"/v1/sessions/{_seg(session_id)}/skills", SkillSummary, query=query)

    def status(self) -> StatusView:
        return self._send(_Call("GET", "/v1/status", StatusView))

    # ---- runs (agents) --------------------------------------------------------------------------------------

    def open_run(
        self,
        session_id: str,
        content: str,
        *,
        attachments: list[Any] | None = None,
        metadata: dict[str, Any] | None = None,
        kind: str | None = None,
        idempotency_key: str | None = None,
        model: dict[str, Any] | None = None,
    ) -> RunView:
        """Open a run for an input. The answer carries ``prompt.sections``: the memory to put in front of the
        model. Retried on network errors and 502/503/504 with the same idempotency key (generated if absent)."""
        body = _clean(
            {
                "input": _clean({"content": content, "attachments": attachments, "metadata": metadata}),
                "kind": kind,
                "idempotency_key": idempotency_key or f"kheish-client-{uuid.uuid4()}",
                "model": model,
            }
        )
        return self._send(_Call("POST", f"/v1/sessions/{_seg(session_id)}/runs", RunView, json=body, retry=True))

    def get_run(self, run_id: str) -> RunView:
        return self._send(_Call("GET", f"/v1/runs/{_seg(run_id)}", RunView))

    def list_runs(
        self,
        *,
        session_id: str | None = None,
        status: str | None = None,
        kind: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
    ) -> Page[RunView]:
        return self._page(
            "/v1/runs", RunView, session_id=session_id, status=status, kind=kind, limit=limit, offset=offset
        )

    def run_events(self, run_id: str, *, limit: int | None = None, offset: int | None = None) -> Page[LogEntry]:
        return self._page(f"/v1/runs/{_seg(run_id)}/events", LogEntry, limit=limit, offset=offset)

    def _run_action(self, run_id: str, action: str, body: dict[str, Any] | None = None) -> RunView:
        return self._send(_Call("POST", f"/v1/runs/{_seg(run_id)}/{action}", RunView, json=body or {}))

    def start_run(self, run_id: str) -> RunView:
        return self._run_action(run_id, "start")

    def record_output(self, run_id: str, content: str, *, artifacts: list[Any] | None = None) -> RunView:
        return self._run_action(run_id, "output", _clean({"content": content, "artifacts": artifacts}))

    def tool_call_started(self, run_id: str, call_id: str, name: str, *, input: Any = None) -> RunView:
        return self._run_action(run_id, "tool-call-started", _clean({"call_id": call_id, "name": name, "input": input}))

    def tool_call_finished(
        self, run_id: str, call_id: str, *, output: Any = None, is_error: bool | None = None
    ) -> RunView:
        return self._run_action(
            run_id, "tool-call-finished", _clean({"call_id": call_id, "output": output, "is_error": is_error})
        )

    def wait_for_approval(self, run_id: str, request_ids: list[str], *, question: str | None = None) -> RunView:
        return self._run_action(run_id, "wait-for-approval", _clean({"request_ids": request_ids, "question": question}))

    def wait_for_user_question(self, run_id: str, request_ids: list[str], *, question: str | None = None) -> RunView:
        return self._run_action(
            run_id, "wait-for-user-question", _clean({"request_ids": request_ids, "question": question})
        )

    def resume_run(self, run_id: str, *, resolution: dict[str, Any] | None = None) -> RunView:
        return self._run_action(run_id, "resume", _clean({"resolution": resolution}))

    def complete_run(self, run_id: str, *, output: str | None = None) -> RunView:
        return self._run_action(run_id, "complete", {"output": {"content": output}} if output is not None else {})

    def fail_run(self, run_id: str, error: str) -> RunView:
        return self._run_action(run_id, "fail", {"error": error})

    def interrupt_run(self, run_id: str) -> RunView:
        return self._run_action(run_id, "interrupt")

    def cancel_run(self, run_id: str) -> RunView:
        return self._run_action(run_id, "cancel")

    # ---- learning candidates and learnings (agents read their scopes and propose; operators review) --------

    def propose_candidate(
        self,
        *,
        scope_kind: str,
        content: str,
        kind: str,
        scope_id: str | None = None,
        sensitivity: str | None = None,
        confidence: int | None = None,
        source: dict[str, Any] | None = None,
        evidence_refs: list[dict[str, Any]] | None = None,
        expires_at_ms: int | None = None,
        stated_at_ms: int | None = None,
    ) -> LearningCandidateView:
        """Propose a learning. It is only a candidate: the learning policy and operators decide (never
        published by this call). ``stated_at_ms``: when the statement was made (e.g. an imported turn's date)."""
        body = _clean(
            {
                "scope": _scope(scope_kind, scope_id),
                "kind": kind,
                "sensitivity": sensitivity,
                "content": content,
                "confidence": confidence,
                "source": source,
                "evidence_refs": evidence_refs,
                "expires_at_ms": expires_at_ms,
                "stated_at_ms": stated_at_ms,
            }
        )
        return self._send(_Call("POST", "/v1/learning-candidates", LearningCandidateView, json=body))

    def list_candidates(
        self,
        *,
        state: str | None = None,
        kind: str | None = None,
        scope_kind: str | None = None,
        scope_id: str | None = None,
        query: str | None = None,
        origin: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
    ) -> Page[LearningCandidateView]:
        return self._page(
            "/v1/learning-candidates",
            LearningCandidateView,
            state=state,
            kind=kind,
            scope_kind=scope_kind,
            scope_id=scope_id,
            query=query,
            origin=origin,
            limit=limit,
            offset=offset,
        )

    def get_candidate(self, candidate_id: str) -> LearningCandidateView:
        return self._send(_Call("GET", f"/v1/learning-candidates/{_seg(candidate_id)}", LearningCandidateView))

    def list_learnings(
        self,
        *,
        status: str | None = None,
        kind: str | None = None,
        scope_kind: str | None = None,
        scope_id: str | None = None,
        query: str | None = None,
        policy_decision: str | None = None,
        policy_actor: str | None = None,
        matched_rule_name: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
    ) -> Page[LearningView]:
        return self._page(
            "/v1/learnings",
            LearningView,
            status=status,
            kind=kind,
            scope_kind=scope_kind,
            scope_id=scope_id,
            query=query,
            policy_decision=policy_decision,
            policy_actor=policy_actor,
            matched_rule_name=matched_rule_name,
            limit=limit,
            offset=offset,
        )

    def get_learning(self, learning_id: str) -> LearningView:
        return self._send(_Call("GET", f"/v1/learnings/{_seg(learning_id)}", LearningView))

    # ---- operators: review ----------------------------------------------------------------------------------

    def review_queue(self, *, state: str = "pending", **filters: Any) -> Page[LearningCandidateView]:
        """Candidates awaiting review (``pending``; pass ``state="escalated"`` for escalated ones)."""
        return self.list_candidates(state=state, **filters)

    def publish_candidate(
        self,
        candidate_id: str,
        *,
        publish_tier: str | None = None,
        supersedes: str | None = None,
        scope_kind: str | None = None,
        scope_id: str | None = None,
        kind: str | None = None,
        sensitivity: str | None = None,
        content: str | None = None,
        confidence: int | None = None,
        expires_at_ms: int | None = None,
        evidence_refs: list[dict[str, Any]] | None = None,
    ) -> LearningView:
        body = _clean(
            {
                "publish_tier": publish_tier,
                "supersedes": supersedes,
                "kind": kind,
                "sensitivity": sensitivity,
                "content": content,
                "confidence": confidence,
                "expires_at_ms": expires_at_ms,
                "evidence_refs": evidence_refs,
                "scope": _scope(scope_kind, scope_id) if scope_kind else None,
            }
        )
        return self._send(
            _Call("POST", f"/v1/learning-candidates/{_seg(candidate_id)}/publish", LearningView, json=body)
        )

    def reject_candidate(self, candidate_id: str) -> LearningCandidateView:
        return self._send(
            _Call("POST", f"/v1/learning-candidates/{_seg(candidate_id)}/reject", LearningCandidateView, json={})
        )

    def revoke_learning(self, learning_id: str, *, reason: str | None = None) -> LearningView:
        return self._send(
            _Call("POST", f"/v1/learnings/{_seg(learning_id)}/revoke", LearningView, json=_clean({"reason": reason}))
        )

    def revoke_matching(
        self, *, reason: str | None = None, all_learnings: bool = False, **filters: str
    ) -> list[LearningView]:
        """Revoke every learning matching the filters (query, scope_kind, scope_id, kind, status,
        policy_decision, policy_actor, matched_rule_name); answers the revoked learnings. With no filter the
        server refuses unless ``all_learnings=True`` (revoke everything)."""
        body = _clean({**filters, "reason": reason, "all": True if all_learnings else None})
        return self._send(_Call("POST", "/v1/learnings/revoke-matching", LearningView, json=body, many=True))

    def supersede_learning(
        self,
        learning_id: str,
        content: str,
        *,
        scope_kind: str | None = None,
        scope_id: str | None = None,
        kind: str | None = None,
        sensitivity: str | None = None,
        confidence: int | None = None,
        expires_at_ms: int | None = None,
    ) -> LearningView:
        body = _clean(
            {
                "content": content,
                "kind": kind,
                "sensitivity": sensitivity,
                "confidence": confidence,
                "expires_at_ms": expires_at_ms,
                "scope": _scope(scope_kind, scope_id) if scope_kind else None,
            }
        )
        return self._send(_Call("POST", f"/v1/learnings/{_seg(learning_id)}/supersede", LearningView, json=body))

    # ---- operators: policies --------------------------------------------------------------------------------

    def get_learning_policy(self) -> LearningAutomationPolicyConfig:
        return self._send(_Call("GET", "/v1/runtime/learning-policy", LearningAutomationPolicyConfig))

    def set_learning_policy(
        self, policy: dict[str, Any] | LearningAutomationPolicyConfig, *, expected_revision: int | None = None
    ) -> RuntimeSettingsView:
        """Replace the whole learning policy (send ``mode`` explicitly: an omitted mode means manual_only)."""
        if isinstance(policy, LearningAutomationPolicyConfig):
            policy = policy.model_dump()
        body = _clean({"policy": policy, "expected_revision": expected_revision})
        return self._send(_Call("POST", "/v1/runtime/learning-policy", RuntimeSettingsView, json=body))

    def get_run_memory_policy(self) -> RunMemoryPolicyConfig:
        return self._send(_Call("GET", "/v1/runtime/run-memory-policy", RunMemoryPolicyConfig))

    def set_run_memory_policy(
        self, policy: dict[str, Any] | RunMemoryPolicyConfig, *, expected_revision: int | None = None
    ) -> RuntimeSettingsView:
        if isinstance(policy, RunMemoryPolicyConfig):
            policy = policy.model_dump()
        body = _clean({"policy": policy, "expected_revision": expected_revision})
        return self._send(_Call("POST", "/v1/runtime/run-memory-policy", RuntimeSettingsView, json=body))

    def redaction_preview(self, text: str, *, redact_pii: bool | None = None) -> RedactionPreview:
        return self._send(
            _Call(
                "POST",
                "/v1/runtime/redaction-preview",
                RedactionPreview,
                json=_clean({"text": text, "redact_pii": redact_pii}),
            )
        )

    # ---- operators: personas and projects -------------------------------------------------------------------

    def create_persona(
        self,
        persona_id: str,
        display_name: str,
        *,
        version: str | None = None,
        soul: str | None = None,
        capability_scope: list[str] | None = None,
    ) -> Persona:
        body = _clean(
            {
                "persona_id": persona_id,
                "display_name": display_name,
                "version": version,
                "soul": soul,
                "capability_scope": capability_scope,
            }
        )
        return self._send(_Call("POST", "/v1/personas", Persona, json=body))

    def list_personas(self) -> Page[Persona]:
        return self._page("/v1/personas", Persona)

    def create_project(self, project_id: str, name: str) -> Project:
        return self._send(_Call("POST", "/v1/projects", Project, json={"project_id": project_id, "name": name}))

    def list_projects(self) -> Page[Project]:
        return self._page("/v1/projects", Project)

    def get_agent_grants(self, agent_id: str) -> AgentGrants:
        return self._send(_Call("GET", f"/v1/agents/{_seg(agent_id)}/grants", AgentGrants))

    def set_agent_grants(self, agent_id: str, *, project_ids: list[str], persona_ids: list[str]) -> AgentGrants:
        """Replaces the agent's grants whole: every project and persona its sessions may bind to."""
        return self._send(
            _Call(
                "PUT",
                f"/v1/agents/{_seg(agent_id)}/grants",
                AgentGrants,
                json={"project_ids": project_ids, "persona_ids": persona_ids},
            )
        )

    # ---- skills: catalog (everyone) and rollout (operators) -------------------------------------------------

    def list_skills(self, *, query: str | None = None) -> Page[SkillSummary]:
        return self._page("/v1/skills", SkillSummary, query=query)

    def get_skill(self, name: str) -> SkillDetail:
        return self._send(_Call("GET", f"/v1/skills/{_seg(name)}", SkillDetail))

    def promote_skill(
        self,
        learning_id: str,
        *,
        skill_name: str,
        instructions: str,
        status: str | None = None,
        description: str | None = None,
        when_to_use: str | None = None,
        version: str | None = None,
        allowed_tools: list[str] | None = None,
        blocked_tools: list[str] | None = None,
        context: str | None = None,
        agent_profile: str | None = None,
        provider: str | None = None,
        model: str | None = None,
        fallback_model: str | None = None,
    ) -> LearningSkillView:
        """Promote a procedure learning to a skill, or move it along the ladder (same learning and name, new
        ``status``: draft → verified → canary → active)."""
        body = _clean(
            {
                "skill_name": skill_name,
                "instructions": instructions,
                "status": status,
                "description": description,
                "when_to_use": when_to_use,
                "version": version,
                "allowed_tools": allowed_tools,
                "blocked_tools": blocked_tools,
                "context": context,
                "agent_profile": agent_profile,
                "provider": provider,
                "model": model,
                "fallback_model": fallback_model,
            }
        )
        return self._send(
            _Call("POST", f"/v1/learnings/{_seg(learning_id)}/promote-skill", LearningSkillView, json=body)
        )

    def list_learning_skills(
        self, *, source_learning_id: str | None = None, status: str | None = None
    ) -> Page[LearningSkillView]:
        return self._page(
            "/v1/learning-skills", LearningSkillView, source_learning_id=source_learning_id, status=status
        )

    def get_learning_skill(self, name: str) -> LearningSkillView:
        return self._send(_Call("GET", f"/v1/learning-skills/{_seg(name)}", LearningSkillView))

    def record_rollout_result(
        self,
        name: str,
        *,
        kind: str,
        run_id: str,
        expected_output_contains: str,
        definition_fingerprint: str | None = None,
    ) -> LearningSkillView:
        body = _clean(
            {
                "kind": kind,
                "run_id": run_id,
                "expected_output_contains": expected_output_contains,
                "definition_fingerprint": definition_fingerprint,
            }
        )
        return self._send(
            _Call("POST", f"/v1/learning-skills/{_seg(name)}/rollout-result", LearningSkillView, json=body)
        )

    def revoke_skill(self, name: str, *, reason: str | None = None) -> LearningSkillView:
        return self._send(
            _Call(
                "POST", f"/v1/learning-skills/{_seg(name)}/revoke", LearningSkillView, json=_clean({"reason": reason})
            )
        )

    def rollback_skill(self, name: str, *, reason: str | None = None) -> LearningSkillView:
        return self._send(
            _Call(
                "POST", f"/v1/learning-skills/{_seg(name)}/rollback", LearningSkillView, json=_clean({"reason": reason})
            )
        )

    # ---- the schema -----------------------------------------------------------------------------------------

    def openapi_schema(self) -> dict[str, Any]:
        return self._send(_Call("GET", "/v1/schema/", None, params={"format": "json"}))


class KheishClient(_Surface):
    """Synchronous client. ``KheishClient()`` reads ``KHEISH_BASE_URL`` and ``KHEISH_API_KEY``.

    ``retries`` bounds the attempts of the idempotent run open (default 3 in total, backoff 0.2 s, 0.4 s …)."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 2,
        backoff: float = 0.2,
        transport: httpx2.BaseTransport | None = None,
    ):
        self.base_url, api_key = _settings(base_url, api_key)
        self.retries, self.backoff = retries, backoff
        self._http = httpx2.Client(
            base_url=self.base_url,
            timeout=timeout,
            transport=transport,
            headers={"Authorization": f"Bearer {api_key}", "Accept": "application/json", "User-Agent": USER_AGENT},
        )

    def _send(self, call: _Call) -> Any:
        attempts = 1 + (self.retries if call.retry else 0)
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                response = self._http.request(
                    call.method, call.path, json=call.json, params=call.params, headers=call.headers or None
                )
            except httpx2.TransportError as exc:
                if last:
                    raise KheishError.unreachable(exc) from exc
            else:
                if not (call.retry and response.status_code in RETRY_STATUSES and not last):
                    return _parse(call, response)
            time.sleep(self.backoff * (2**attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> KheishClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncKheishClient(_Surface):
    """The same methods as :class:`KheishClient`, each returning an awaitable."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 2,
        backoff: float = 0.2,
        transport: httpx2.AsyncBaseTransport | None = None,
    ):
        self.base_url, api_key = _settings(base_url, api_key)
        self.retries, self.backoff = retries, backoff
        self._http = httpx2.AsyncClient(
            base_url=self.base_url,
            timeout=timeout,
            transport=transport,
            headers={"Authorization": f"Bearer {api_key}", "Accept": "application/json", "User-Agent": USER_AGENT},
        )

    async def _send(self, call: _Call) -> Any:  # type: ignore[override]
        attempts = 1 + (self.retries if call.retry else 0)
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                response = await self._http.request(
                    call.method, call.path, json=call.json, params=call.params, headers=call.headers or None
                )
            except httpx2.TransportError as exc:
                if last:
                    raise KheishError.unreachable(exc) from exc
            else:
                if not (call.retry and response.status_code in RETRY_STATUSES and not last):
                    return _parse(call, response)
            await anyio.sleep(self.backoff * (2**attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncKheishClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
