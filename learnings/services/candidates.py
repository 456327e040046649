"""Candidate workflows (spec §2.4, §4.8, §4.9, §4.13): creation by the API and by capture (deduplicated),
the run_summary candidate, and the state moves reject / escalate / record a review / mark published - each a
compare-and-swap update with its audit row. A new candidate's review is queued after commit."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypedDict, Unpack, cast

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction

from learnings import screening, validation
from learnings.models import (
    CandidateOrigin,
    CandidateState,
    Learning,
    LearningCandidate,
    LearningKind,
    Sensitivity,
)
from learnings.selectors import DOMAIN, candidate_not_found
from learnings.services.cleaning import (
    clean_evidence_refs,
    clean_expiry,
    clean_source,
    clean_stated_at,
    invalid,
    normalise_scope,
    scope_to_store,
    semantic_key_digests,
)
from learnings.services.queue import enqueue_review_on_commit
from learnings.services.rows import guarded_move
from learnings.validation import LearningScope, LearningValidationError
from memory import metrics, public_ids
from memory import sql as memory_sql
from memory.audit import actor_label, record_audit
from memory.clock import now_ms
from memory.errors import Conflict, Forbidden, ValidationFailed
from memory.identity import is_operator
from memory.models import AuditEvent, Run, RunMemoryRecord, Session
from memory.sessions import caller_scopes

if TYPE_CHECKING:
    from django.contrib.auth.models import User

RUN_SUMMARY_TTL_MS = 30 * 24 * 60 * 60 * 1000
_SENSITIVITIES = frozenset(Sensitivity.values)


def _enqueue_review(candidate_pk: int) -> None:
    enqueue_review_on_commit(candidate_pk)


def _new_candidate(
    *,
    origin: str,
    scope: LearningScope,
    kind: str,
    content: str,
    sensitivity: str,
    confidence: object,
    source: dict[str, Any],
    evidence_refs: list[dict[str, Any]],
    created_at_ms: int,
    expires_at_ms: int | None,
    source_run: Run | None,
    stated_at_ms: int | None = None,
    proposed_by: object = None,
    make: Callable[..., LearningCandidate] = LearningCandidate,
) -> LearningCandidate:
    """A new candidate, validated and screened, unsaved. ``make`` builds it from its fields (the bulk import's
    ``instance_maker``: a copier of one candidate built once a batch); a run and a proposer, when there are
    any, are given to it too."""
    content_key, subject_key = semantic_key_digests(content)
    related: dict[str, Any] = {}
    if source_run is not None:
        related["source_run"] = source_run
    if isinstance(proposed_by, get_user_model()):
        related["proposed_by"] = proposed_by
    candidate = make(
        origin=origin,
        scope_kind=scope.kind,
        scope_id=scope.id,
        scope_key=scope.scope_key,
        kind=kind,
        sensitivity=sensitivity,
        content=content,
        confidence=cast(int, confidence),  # the caller's value: validate_candidate checks it below
        source=source,
        evidence_refs=evidence_refs,
        created_at_ms=created_at_ms,
        expires_at_ms=expires_at_ms,
        stated_at_ms=stated_at_ms,
        state=CandidateState.PENDING,
        content_key=content_key,
        subject_key=subject_key,
        updated_at_ms=now_ms(),
        **related,
    )
    try:
        validation.validate_candidate(candidate)
    except LearningValidationError as exc:
        raise invalid(exc, code="invalid_learning_candidate") from exc
    if not isinstance(sensitivity, str) or sensitivity not in _SENSITIVITIES:
        raise ValidationFailed(
            f"unknown learning sensitivity `{sensitivity}`",
            field="sensitivity",
            domain=DOMAIN,
            code="invalid_learning_candidate",
        )
    screened = screening.screen(content)  # the poisoning screen (issue 19.5), on content already validated
    candidate.screening = screened.to_dict()
    candidate.screen_flagged = screened.flagged
    return candidate


def _screen_audit(candidate: LearningCandidate) -> dict[str, Any]:
    """What the audit row of a new candidate says about the screen (only when it flagged something)."""
    if not candidate.screen_flagged:
        return {}
    metrics.increment("learning.screening.flagged_total")
    return {"screening": {"flagged": True, "categories": (candidate.screening or {}).get("categories", [])}}


# ---- who may propose what (issue 21.3: here, not in the API layer, so that every write path is checked) -----


def acts_as_agent(actor: object, operator: bool | None = None) -> bool:
    """Whether the scope and provenance rules apply: ``operator`` when the caller knows (the API: the key's role),
    else any principal that is not staff. A literal actor (``"daemon"``, a management command's label) is the
    system itself, not an agent."""
    if operator is not None:
        return not operator
    if actor is None or isinstance(actor, str):
        return False
    return not is_operator(actor)


def require_scope(actor: object, scope: LearningScope, *, operator: bool | None = None) -> None:
    """403 ``scope_forbidden`` unless the actor may use ``scope``: operators any scope; an agent only the
    workspace, its own sessions, and the personas and projects its sessions are bound to and it is still
    granted (``memory.sessions.caller_scopes``)."""
    if not acts_as_agent(actor, operator):
        return
    if not caller_scopes(cast("User", actor)).allows(scope.kind, scope.id):  # an agent: a principal, not a label
        raise Forbidden(
            f"learning scope {scope.scope_key} is not visible to the caller",
            field="scope",
            domain=DOMAIN,
            code="scope_forbidden",
        )


def _owned_id(value: object, prefix: str) -> int | None:
    return public_ids.parse_id(value, prefix)


def require_own_provenance(
    actor: object, source: object, evidence_refs: object, *, operator: bool | None = None
) -> None:
    """An agent's candidate may claim only its own runs, sessions and agent id (issue 14.2): server-side
    provenance, never a claim on another agent's work. Unknown and foreign ids alike are 403
    ``provenance_forbidden``; values of the wrong type are left to validation's 400. Operators may cite any."""
    if not acts_as_agent(actor, operator):
        return

    def refuse(field: str, what: str) -> None:
        raise Forbidden(f"{field} {what} is not the caller's", field=field, domain=DOMAIN, code="provenance_forbidden")

    agent = cast("User", actor)  # an agent is a principal (acts_as_agent): a user
    runs = Run.objects.filter(session__owner=agent)
    if isinstance(source, dict):
        agent_id = source.get("agent_id")
        if isinstance(agent_id, str) and agent_id != agent.get_username():
            refuse("source.agent_id", str(agent_id))
        session_pk = None
        if isinstance(source.get("session_id"), str):
            session_pk = _owned_id(source["session_id"], "session")
            if session_pk is None or not Session.objects.filter(pk=session_pk, owner=agent).exists():
                refuse("source.session_id", str(source["session_id"]))
        if isinstance(source.get("run_id"), str):
            run_pk = _owned_id(source["run_id"], "run")
            owned = runs.filter(pk=run_pk) if run_pk is not None else runs.none()
            if session_pk is not None:
                owned = owned.filter(session_id=session_pk)
            if not owned.exists():
                refuse("source.run_id", str(source["run_id"]))
    if isinstance(evidence_refs, list):
        for index, ref in enumerate(evidence_refs):
            if isinstance(ref, dict) and isinstance(ref.get("run_id"), str):
                run_pk = _owned_id(ref["run_id"], "run")
                if run_pk is None or not runs.filter(pk=run_pk).exists():
                    refuse(f"evidence_refs[{index}].run_id", str(ref["run_id"]))


class CandidateFields(TypedDict, total=False):
    """The optional fields of :func:`create_candidate_in_transaction` (``learning_create_published`` passes
    them on): the caller's values, checked there."""

    sensitivity: str
    confidence: object
    source: object
    evidence_refs: object
    expires_at_ms: object
    stated_at_ms: object
    operator: bool | None


def candidate_create(**kwargs: Any) -> LearningCandidate:
    """``POST /v1/learning-candidates`` (see :func:`create_candidate_in_transaction`), in its own transaction
    (a savepoint inside the caller's)."""
    with transaction.atomic():
        return create_candidate_in_transaction(**kwargs)


def create_candidate_in_transaction(
    *,
    actor: object,
    scope: LearningScope,
    kind: str,
    content: str,
    queue_review: bool = True,
    **fields: Unpack[CandidateFields],
) -> LearningCandidate:
    """``POST /v1/learning-candidates``, inside a transaction the caller holds: :func:`new_api_candidate` (every
    check), stored with its audit row (:func:`store_new_candidate`), then queued for review (unless the caller
    publishes it in the same transaction: ``queue_review=False``)."""
    candidate = new_api_candidate(actor=actor, scope=scope, kind=kind, content=content, **fields)
    store_new_candidate(candidate, actor=actor)
    if queue_review:
        _enqueue_review(candidate.pk)
    return candidate


def new_api_candidate(
    *,
    actor: object,
    scope: LearningScope,
    kind: str,
    content: str,
    sensitivity: str = Sensitivity.SCOPED,
    confidence: object = 80,
    source: object = None,
    evidence_refs: object = None,
    expires_at_ms: object = None,
    stated_at_ms: object = None,
    operator: bool | None = None,
) -> LearningCandidate:
    """An API candidate, checked and not yet stored: origin is always ``api`` (an API caller cannot forge daemon
    provenance), state ``pending``, created now; validated (§3.4) and screened. An agent actor (``operator``
    False, or by default a non-staff user) may use only its own scopes and cite only its own runs and sessions
    (``require_scope``, ``require_own_provenance``), whichever path calls this. ``stated_at_ms`` (optional):
    when the statement was made, e.g. the date of the conversation it comes from; not in the future."""
    scope = normalise_scope(scope.kind, scope.id)
    require_scope(actor, scope, operator=operator)
    require_own_provenance(actor, source, evidence_refs, operator=operator)
    if not isinstance(content, str):
        raise invalid(LearningValidationError("content", validation.MSG_CONTENT_REQUIRED))
    return _new_candidate(
        origin=CandidateOrigin.API,
        scope=scope_to_store(scope.kind, scope.id),
        kind=kind,
        content=content.strip(),
        sensitivity=sensitivity,
        confidence=confidence,
        source=clean_source(source),
        evidence_refs=clean_evidence_refs(evidence_refs),
        created_at_ms=now_ms(),
        expires_at_ms=clean_expiry(expires_at_ms),
        source_run=None,
        stated_at_ms=clean_stated_at(stated_at_ms),
        proposed_by=actor,
    )


def create_audit(candidate: LearningCandidate, *, actor: object) -> AuditEvent:
    """The ``create`` audit row of a new API candidate (not stored; its subject id once the candidate has a key)."""
    return AuditEvent(
        subject_type="learning_candidate",
        subject_id=candidate.public_id if candidate.pk is not None else "",
        action="create",
        actor=actor_label(actor),
        from_state="",
        to_state=CandidateState.PENDING,
        reason="",
        data={
            "origin": candidate.origin,
            "kind": candidate.kind,
            "scope": candidate.scope_key,
            **_screen_audit(candidate),
        },
        at_ms=now_ms(),
    )


def store_new_candidate(
    candidate: LearningCandidate, *, actor: object, also: str = "", also_params: list[Any] | None = None
) -> tuple[Any, ...]:
    """Insert an API candidate (:func:`new_api_candidate`) and its ``create`` audit row in one statement
    (``memory.sql.insert_audited``); ``also``/``also_params``: more expressions of that statement (a lock, a key
    drawn), whose values are returned."""
    return memory_sql.insert_audited(
        candidate,
        create_audit(candidate, actor=actor),
        subject_prefix=public_ids.LEARNING_CANDIDATE,
        also=also,
        also_params=also_params,
    )


def store_keyed_candidate(candidate: LearningCandidate, audit: AuditEvent) -> LearningCandidate:
    """Insert an API candidate whose key is already drawn, with its ``create`` audit row (:func:`create_audit`),
    in one statement."""
    memory_sql.run_together(
        [memory_sql.insert_with_key_statement(candidate), memory_sql.insert_many_statement([audit])]
    )
    return memory_sql.mark_saved(candidate, candidate.pk)


def daemon_source(run: Run) -> dict[str, str]:
    session = run.session
    return {
        "run_id": run.public_id,
        "session_id": session.public_id,
        "agent_id": session.owner.get_username(),
    }


@transaction.atomic
def daemon_candidate_create(
    *,
    run: Run,
    kind: str,
    content: str,
    confidence: int,
    sensitivity: str = Sensitivity.SCOPED,
    scope: LearningScope | None = None,
    evidence_refs: list[dict[str, Any]] | None = None,
    created_at_ms: int | None = None,
    expires_at_ms: int | None = None,
    stated_at_ms: int | None = None,
) -> tuple[LearningCandidate, bool]:
    """A daemon-origin candidate from a run (capture), deduplicated (§4.9): same origin, scope, kind,
    semantic content key and source run ⇒ the existing candidate is returned. Returns (candidate, created)."""
    scope = scope or LearningScope(kind="session", id=run.session.public_id)
    content = content.strip()
    candidate = _new_candidate(
        origin=CandidateOrigin.DAEMON,
        scope=scope,
        kind=kind,
        content=content,
        sensitivity=sensitivity,
        confidence=confidence,
        source=daemon_source(run),
        evidence_refs=list(evidence_refs or []),
        created_at_ms=now_ms() if created_at_ms is None else created_at_ms,
        expires_at_ms=expires_at_ms,
        source_run=run,
        stated_at_ms=stated_at_ms,
        proposed_by=run.session.owner,
    )
    existing = LearningCandidate.objects.filter(
        origin=CandidateOrigin.DAEMON,
        scope_key=candidate.scope_key,
        kind=kind,
        content_key=candidate.content_key,
        source_run=run,
    ).first()
    if kind == LearningKind.RUN_SUMMARY and existing is None:
        existing = LearningCandidate.objects.filter(source_run=run, kind=LearningKind.RUN_SUMMARY).first()
    if existing is not None:
        return existing, False
    try:
        with transaction.atomic():
            candidate.save()
    except IntegrityError:  # a concurrent capture won: the unique constraints keep one
        existing = (
            LearningCandidate.objects.filter(
                source_run=run,
                kind=kind,
                scope_key=candidate.scope_key,
                origin=CandidateOrigin.DAEMON,
            )
            .filter(content_key=candidate.content_key)
            .first()
            or LearningCandidate.objects.filter(source_run=run, kind=LearningKind.RUN_SUMMARY).first()
        )
        if existing is None:
            raise
        return existing, False
    record_audit(
        subject_type="learning_candidate",
        subject_id=candidate.public_id,
        action="capture",
        actor="daemon",
        to_state=CandidateState.PENDING,
        data={
            "origin": candidate.origin,
            "kind": kind,
            "scope": candidate.scope_key,
            "run_id": run.public_id,
            **_screen_audit(candidate),
        },
    )
    _enqueue_review(candidate.pk)
    return candidate, True


def run_summary_candidate_ensure(*, run: Run, record: RunMemoryRecord) -> tuple[LearningCandidate | None, bool]:
    """§4.8: one run_summary candidate per run (daemon origin, session scope, sensitive, confidence 100,
    the run-memory summary, 30-day expiry). Skipped when the summary is blank."""
    content = (record.summary or "").strip()
    if not content:
        return None, False
    existing = LearningCandidate.objects.filter(source_run=run, kind=LearningKind.RUN_SUMMARY).first()
    if existing is not None:
        return existing, False
    return daemon_candidate_create(
        run=run,
        kind=LearningKind.RUN_SUMMARY,
        content=content,
        confidence=100,
        sensitivity=Sensitivity.SENSITIVE,
        created_at_ms=record.recorded_at_ms,
        expires_at_ms=now_ms() + RUN_SUMMARY_TTL_MS,
    )


def lock_candidate(candidate: LearningCandidate | int) -> LearningCandidate:
    pk = candidate if isinstance(candidate, int) else candidate.pk
    locked = LearningCandidate.objects.select_for_update().filter(pk=pk).first()
    if locked is None:
        raise candidate_not_found(public_ids.candidate_id(pk))
    return locked


def _move_candidate(
    candidate: LearningCandidate,
    *,
    to_state: str,
    actor: object,
    action: str,
    reason: str = "",
    from_states: tuple[str, ...] | None = None,
    **changes: Any,
) -> LearningCandidate:
    """Compare-and-swap the candidate's state and audit the transition (``rows.guarded_move``)."""
    guarded_move(
        candidate,
        field="state",
        expected=from_states or (candidate.state,),
        to=to_state,
        subject_type="learning_candidate",
        action=action,
        actor=actor,
        reason=reason,
        audit_keys=("published_learning", "matched_rule_name"),
        conflict_code="candidate_changed",
        **changes,
    )
    return candidate


def mark_published(
    candidate: LearningCandidate,
    learning: Learning,
    *,
    actor: object,
    reason: str,
    review: dict[str, Any] | None = None,
    revision: int | None = None,
) -> LearningCandidate:
    changes: dict[str, Any] = {"published_learning": learning}
    if review is not None:
        changes.update(_review_fields(review, revision))
    return _move_candidate(
        candidate,
        to_state=CandidateState.PUBLISHED,
        actor=actor,
        action="publish",
        reason=reason,
        from_states=(CandidateState.PENDING, CandidateState.ESCALATED, candidate.state),
        **changes,
    )


def _review_fields(review: dict[str, Any], revision: int | None) -> dict[str, Any]:
    try:
        validation.validate_review_reason(review.get("reason"))
    except LearningValidationError as exc:
        raise invalid(exc, code="invalid_learning_candidate") from exc
    return {
        "automation_review": review,
        "matched_rule_name": (review.get("matched_rule_name") or "")[:200],
        "reviewed_policy_revision": revision,
        "review_lease_until_ms": None,
    }


@transaction.atomic
def candidate_reject(
    *,
    candidate: LearningCandidate | int,
    actor: object,
    reason: str = "",
    review: dict[str, Any] | None = None,
    revision: int | None = None,
) -> LearningCandidate:
    """Reject a pending or escalated candidate (a rejected one: no-op; a published one: 409)."""
    locked = lock_candidate(candidate)
    if locked.state == CandidateState.PUBLISHED:
        raise Conflict(
            f"learning candidate {locked.public_id} was already published",
            domain=DOMAIN,
            code="candidate_already_published",
        )
    if locked.state == CandidateState.REJECTED:
        return locked
    changes = _review_fields(review, revision) if review is not None else {}
    return _move_candidate(
        locked,
        to_state=CandidateState.REJECTED,
        actor=actor,
        action="reject",
        reason=reason or (review or {}).get("reason", ""),
        **changes,
    )


@transaction.atomic
def candidate_escalate(
    *, candidate: LearningCandidate | int, review: dict[str, Any], revision: int | None, actor: object = "daemon"
) -> LearningCandidate:
    """Automation hands a pending candidate to an operator (state ``escalated``) with its review."""
    locked = lock_candidate(candidate)
    if locked.state != CandidateState.PENDING:
        raise Conflict(
            f"learning candidate {locked.public_id} is {locked.state}, not pending",
            domain=DOMAIN,
            code="candidate_changed",
        )
    return _move_candidate(
        locked,
        to_state=CandidateState.ESCALATED,
        actor=actor,
        action="escalate",
        reason=review.get("reason", ""),
        **_review_fields(review, revision),
    )


@transaction.atomic
def candidate_record_review(
    *, candidate: LearningCandidate | int, review: dict[str, Any], revision: int | None, actor: object = "daemon"
) -> LearningCandidate:
    """Store an automation review without changing the state (shadow mode, or a candidate an operator
    already published)."""
    locked = lock_candidate(candidate)
    LearningCandidate.objects.filter(pk=locked.pk, state=locked.state).update(
        updated_at_ms=now_ms(), **_review_fields(review, revision)
    )
    record_audit(
        subject_type="learning_candidate",
        subject_id=locked.public_id,
        action="review",
        actor=actor,
        from_state=locked.state,
        to_state=locked.state,
        reason=review.get("reason", ""),
        data={
            "mode": review.get("mode"),
            "action": review.get("action"),
            "matched_rule_name": review.get("matched_rule_name"),
        },
    )
    locked.refresh_from_db()
    return locked
