"""Runs: the status machine of spec §1.2, enforced server-side. Every status change goes through
`run_transition`, a compare-and-swap update that writes a journal lifecycle event and an audit row in the
same transaction; a terminal transition fires the `terminal_run` hook (the run-memory record, capture)."""

from __future__ import annotations

import hashlib
import json
import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import QuerySet

from memory import compaction, hooks, limits, public_ids, sql
from memory.audit import actor_label, record_audit
from memory.clock import now_ms
from memory.errors import Conflict, NotFound, ValidationFailed
from memory.journal import append_event, appends_with
from memory.models import TERMINAL_STATUSES, AuditEvent, Run, RunKind, RunStatus, Session
from memory.run_records import truncate_preview

if TYPE_CHECKING:
    from django.contrib.auth.models import User

S = RunStatus
ALLOWED_TRANSITIONS: dict[str, frozenset[str]] = {
    S.QUEUED: frozenset({S.RUNNING, S.FAILED, S.CANCELLED}),
    S.RUNNING: frozenset(
        {S.WAITING_FOR_APPROVAL, S.WAITING_FOR_USER_QUESTION, S.COMPLETED, S.FAILED, S.INTERRUPTED, S.CANCELLED}
    ),
    S.WAITING_FOR_APPROVAL: frozenset({S.RUNNING, S.FAILED, S.INTERRUPTED, S.CANCELLED}),
    S.WAITING_FOR_USER_QUESTION: frozenset({S.RUNNING, S.COMPLETED, S.FAILED, S.INTERRUPTED, S.CANCELLED}),
    S.COMPLETED: frozenset(),
    S.FAILED: frozenset(),
    S.INTERRUPTED: frozenset(),
    S.CANCELLED: frozenset(),
}

MAX_CONTENT_CHARS = 200_000

# Run services nest inside the API's transaction (which already holds the run row lock); a savepoint per call
# would cost two extra round trips on every journal append. An error still rolls back the whole transaction.
_in_transaction = transaction.atomic(savepoint=False)


def transition_allowed(from_status: str, to_status: str) -> bool:
    return from_status == to_status or to_status in ALLOWED_TRANSITIONS[from_status]


def get_run(run_id: str, *, queryset: QuerySet[Run] | None = None) -> Run:
    pk = public_ids.parse_or_404(run_id, public_ids.RUN, domain="runs", code="run_not_found", noun="run")
    qs = queryset if queryset is not None else Run.objects.all()
    run = qs.select_related("session").filter(pk=pk).first()
    if run is None:
        raise NotFound(f"unknown run {run_id}", domain="runs", code="run_not_found")
    return run


def get_locked_run(run_id: str, *, owner: User | None = None) -> Run:
    """The run row locked for this transaction, for a run action. With ``owner`` only that owner's runs are
    visible (another's is "unknown", never "forbidden"). Every run action starts here, so it is one
    hand-written query (``memory.sql.locked_run``) rather than a compiled ORM join; ``run.session`` and
    ``run.session.owner`` come loaded with it."""
    pk = public_ids.parse_or_404(run_id, public_ids.RUN, domain="runs", code="run_not_found", noun="run")
    run = lock_run(pk, owner=owner)
    if run is None:
        raise NotFound(f"unknown run {run_id}", domain="runs", code="run_not_found")
    return run


def lock_run(pk: int, *, owner: User | None = None) -> Run | None:
    """``get_locked_run`` by primary key; None when there is no such run (visible to ``owner``)."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("lock_run must be called inside transaction.atomic()")
    run = sql.locked_run(pk, owner_pk=None if owner is None else owner.pk)
    if run is None:
        return None
    _LOCKED.remember(run)
    return run


class _LockedInstances(threading.local):
    """The ``Run`` instances ``lock_run`` returned in this thread (a thread has its own database connection),
    by identity: a model's ``==`` compares primary keys, which would let another, unlocked instance of the
    same row pass. An instance is forgotten when it is garbage-collected."""

    def __init__(self) -> None:
        self._refs: dict[int, weakref.ref[Run]] = {}

    def remember(self, run: Run) -> None:
        key, refs = id(run), self._refs
        refs[key] = weakref.ref(run, lambda ref: refs.pop(key) if refs.get(key) is ref else None)

    def holds(self, run: Run) -> bool:
        ref = self._refs.get(id(run))
        return ref is not None and ref() is run


_LOCKED = _LockedInstances()


# --------------------------------------------------------------------------------------------------------
# Opening a run


@dataclass(frozen=True)
class RunInput:
    content: str
    attachments: list[Any]
    metadata: dict[str, Any]


def request_fingerprint(run_input: RunInput, kind: str) -> str:
    blob = json.dumps({"input": run_input.__dict__, "kind": kind}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def canonical_input(run_input: RunInput) -> dict[str, Any]:
    """The input as the journal keeps it: derived memory sections are never part of it (spec §0)."""
    metadata = run_input.metadata
    if not isinstance(metadata, dict):
        metadata = {"user_metadata": metadata}
    metadata = {k: v for k, v in metadata.items() if k not in ("recovered_memory", "learned_context")}
    data: dict[str, Any] = {"content": run_input.content, "attachments": list(run_input.attachments)}
    if metadata:
        data["metadata"] = metadata
    return data


_UNREAD = object()  # a session without ``active_run_pk`` (not read by ``memory.sql.visible_session``)

REQUEST_SOURCE_PLUGIN = "api"
"""``request.source_plugin`` of a run opened through ``/v1`` (REST, the Python client and the MCP server alike)."""


def _principal_name(actor: object) -> str:
    """The username of the principal that opened the run (an agent's or an operator's), "" when unknown."""
    get_username = getattr(actor, "get_username", None)
    return get_username() if callable(get_username) else ""


@_in_transaction
def run_open(
    *,
    session: Session,
    run_input: RunInput,
    kind: str = RunKind.INPUT,
    idempotency_key: str | None = None,
    model: dict[str, Any] | None = None,
    actor: object = None,
    context: OpenedContext | None = None,
) -> tuple[Run, bool]:
    """Queue a run for the session. Returns (run, created); a repeated idempotency key returns the first run.
    ``context``: filled, for a created run, with the live context its write statement read (``OpenedContext``)."""
    if kind not in RunKind.values:
        raise ValidationFailed(f"kind must be one of: {', '.join(RunKind.values)}", field="kind")
    limits.check_metadata(run_input.metadata, field="input.metadata")
    fingerprint = request_fingerprint(run_input, kind)
    # Lock the session row: serialises concurrent opens so "session busy" is decided once (its run in flight
    # read under the same lock, in the same statement). A session read just before (``memory.sql.visible_session``,
    # the API's) that found no run in flight, for an open without an idempotency key, needs no lock first: the
    # run's INSERT (``ON CONFLICT DO NOTHING`` on one run in flight a session) waits for a concurrent open and
    # decides, and the lock is then taken for the busy answer (below); its journal append locks the row.
    locked = idempotency_key is not None or getattr(session, "active_run_pk", _UNREAD) is not None
    busy = sql.lock_session(session.pk)[1] if locked else None
    if idempotency_key is not None:
        existing = Run.objects.filter(session=session, idempotency_key=idempotency_key).first()
        if existing is not None:
            if existing.request_fingerprint != fingerprint:
                raise Conflict(
                    "idempotency key was already used for a different request",
                    field="idempotency_key",
                    domain="runs",
                    code="idempotency_key_reused",
                )
            return existing, False
    if busy is not None:
        raise Conflict(
            f"session {session.public_id} already has run {public_ids.run_id(busy)} in flight",
            domain="sessions",
            code="session_busy",
        )
    ts = now_ms()
    # RunRequestSummary (spec §1.2): the reference fills in fixed defaults (plugin "daemon", actor "api-user");
    # here every run is opened through the /v1 API by a known principal, so the summary says so (issue 25.3).
    request = {
        "source_plugin": REQUEST_SOURCE_PLUGIN,
        "source_kind": "api",
        "actor_id": _principal_name(actor) or session.owner.get_username(),
        "text_preview": truncate_preview(run_input.content),
    }
    if model and model.get("name"):
        request["model"] = model["name"]
    run = Run(
        session=session,
        kind=kind,
        status=RunStatus.QUEUED,
        submitted_at_ms=ts,
        updated_at_ms=ts,
        request=request,
        input=canonical_input(run_input),
        idempotency_key=idempotency_key,
        request_fingerprint=fingerprint,
        model=model or None,
    )
    # False: a unique constraint holds (one run in flight a session, one run an idempotency key) - a run opened
    # concurrently, now committed; answered as above
    if not _insert_opened(run, actor=actor, context=context):
        if not locked:
            busy = sql.lock_session(session.pk)[1]
        if busy is not None:
            raise Conflict(
                f"session {session.public_id} already has run {public_ids.run_id(busy)} in flight",
                domain="sessions",
                code="session_busy",
            )
        raise Conflict(
            f"session {session.public_id} already has a run in flight", domain="sessions", code="session_busy"
        )
    return run, True


@dataclass
class OpenedContext:
    """What ``run_open(context=...)`` read of the live context in its write statement, for
    ``memory.compaction.context_tokens(read=..., newest=..., known=...)``: the rows before its appends (committed
    events only: the open's statement is its transaction's first append), its events, and the prefix the read
    skipped."""

    read: list[tuple[Any, ...]] | None = None
    newest: list[dict[str, Any]] | None = None
    known: compaction.KnownPrefix | None = None  # what the read skipped (``compaction.known_prefix``)


def _insert_opened(run: Run, *, actor: object, context: OpenedContext | None = None) -> bool:
    """The writes of an open, in one statement (data-modifying CTEs): the run row (``INSERT … ON CONFLICT DO
    NOTHING``), then - only when it was inserted - its two journal events (``input_received``, the ``accepted``
    lifecycle event; ``memory.journal.appends_with``) and its ``open`` audit row (``record_audit``'s row). What
    ``sql.insert_unless_conflict``, two ``append_event`` and ``record_audit`` wrote, in one round trip. False when
    a unique constraint already holds the run (nothing written); ``run`` comes back stored otherwise. With
    ``context``, the statement also returns the session's live context as it was before (``OpenedContext``)."""
    run_sql, run_params = sql.insert_statement(run)
    head, _, returning = run_sql.rpartition(" RETURNING ")
    events = [
        {"type": "input_received", "input": run.input},
        {"type": "run_lifecycle", "run_event": {"type": "accepted"}, "to_status": run.status},
    ]
    journal_ctes, journal_params, _ = appends_with(session_id=run.session_id, events=events, run_source="opened")
    audit = AuditEvent(
        subject_type="run",
        subject_id="",
        action="open",
        from_state="",
        to_state=RunStatus.QUEUED,
        actor=actor_label(actor),
        reason="",
        data={},
        at_ms=now_ms(),
    )
    audit_sql, audit_params = sql.insert_select_statement(
        audit, source="opened", expressions={"subject_id": (f"'{public_ids.RUN}-' || opened.id", [])}
    )
    statement = (  # every part is built from model constants; values are parameters
        f"WITH opened AS ({head} ON CONFLICT DO NOTHING RETURNING {returning}), {', '.join(journal_ctes)}, "  # noqa: S608
        f"audited AS ({audit_sql}) SELECT opened.id, (SELECT count(*) FROM journal_appended) FROM opened"
    )
    params = [*run_params, *journal_params, *audit_params]
    if context is not None:  # the live context as it was before these appends, returned by the same statement
        statement = (
            f"WITH opened AS ({head} ON CONFLICT DO NOTHING RETURNING {returning}), {', '.join(journal_ctes)}, "  # noqa: S608
            f"audited AS ({audit_sql}), {compaction.CONTEXT_CHECKPOINT_CTE} "
            "SELECT 0, opened.id, (SELECT count(*) FROM journal_appended), NULL::jsonb FROM opened UNION ALL "
            f"SELECT 1, * FROM ({compaction.CONTEXT_ROWS_SQL}) context"
        )
        context.known = compaction.known_prefix(run.session)
        params += [run.session_id, run.session_id, context.known.after, context.known.upto]
    # Bound on the server: parsed and planned once per connection, not on every open (measured with the
    # reads' change: a run open 14.5 -> 12 ms in-process, docs/architecture.md).
    with sql.prepared_cursor(transaction.get_connection().alias) as cursor:
        cursor.execute(statement, params)
        rows = cursor.fetchall()
    if context is not None:
        context.read = [tuple(r[1:]) for r in rows if r[0] == 1]
        context.newest = events
        rows = [r[1:] for r in rows if r[0] == 0]
    row = rows[0] if rows else None
    if row is None:
        return False
    if row[1] != len(events):  # the session row is gone (the caller holds its lock: never, in practice)
        raise NotFound(
            f"unknown session {public_ids.session_id(run.session_id)}", domain="sessions", code="session_not_found"
        )
    sql.mark_saved(run, row[0])
    return True


# --------------------------------------------------------------------------------------------------------
# Transitions


@_in_transaction
def run_transition(
    *,
    run: Run,
    to_status: str,
    actor: object = None,
    run_event: dict[str, Any] | None = None,
    changes: dict[str, Any] | None = None,
    reason: str = "",
) -> Run:
    """Move a run to `to_status` if the status machine allows it from its current status (CAS update)."""
    current = _locked(run)
    from_status = current.status
    if from_status == to_status and from_status in TERMINAL_STATUSES:
        # same→same is allowed (spec §1.2) and a terminal run is final: a repeated terminal action answers
        # with the run as it is, writing no journal event and moving no timestamp.
        return current
    if not transition_allowed(from_status, to_status):
        raise Conflict(
            f"run {current.public_id} cannot transition from {from_status} to {to_status}",
            domain="runs",
            code="invalid_transition",
        )
    ts = now_ms()
    fields = {"status": to_status, "updated_at_ms": ts, **(changes or {})}
    if to_status == RunStatus.RUNNING and current.started_at_ms is None:
        fields["started_at_ms"] = ts
    if to_status in TERMINAL_STATUSES:
        fields["finished_at_ms"] = ts
        fields["pending_approval_ids"] = []
        fields["pending_question_ids"] = []
        fields["pending_question"] = ""
    updated = sql.update(Run, current.pk, where={"status": from_status}, **fields)
    if updated != 1:
        raise Conflict(f"run {current.public_id} changed concurrently; retry", domain="runs", code="invalid_transition")
    for name, value in fields.items():  # the row now holds exactly these values; no need to read it back
        setattr(current, name, value)
    lifecycle = dict(run_event or {"type": to_status})
    append_event(
        session_id=current.session_id,
        run=current,
        event={"type": "run_lifecycle", "run_event": lifecycle, "from_status": from_status, "to_status": to_status},
    )
    record_audit(
        subject_type="run",
        subject_id=current.public_id,
        action="transition",
        actor=actor,
        from_state=from_status,
        to_state=to_status,
        reason=reason,
    )
    if to_status in TERMINAL_STATUSES and from_status != to_status:
        hooks.fire(hooks.TERMINAL_RUN, current)
    return current


def _locked(run: Run) -> Run:
    """The run row, locked for this transaction. An instance ``lock_run`` returned (the API takes the lock
    together with its visibility check) is used as it is while a transaction is open."""
    if _LOCKED.holds(run) and transaction.get_connection().in_atomic_block:
        return run
    locked = lock_run(run.pk)
    if locked is None:
        raise NotFound(f"unknown run {run.public_id}", domain="runs", code="run_not_found")
    return locked


def _require_active(run: Run, action: str) -> Run:
    current = _locked(run)
    if current.status in TERMINAL_STATUSES:
        raise Conflict(
            f"run {current.public_id} is {current.status}; {action} needs a run in flight",
            domain="runs",
            code="invalid_transition",
        )
    return current


def _clean_text(value: object, field: str, *, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise ValidationFailed(f"{field} must be a string", field=field)
    if required and not value.strip():
        raise ValidationFailed(f"{field} is required", field=field)
    if len(value) > MAX_CONTENT_CHARS:
        raise ValidationFailed(f"{field} exceeds the {MAX_CONTENT_CHARS} character limit", field=field)
    return value


@_in_transaction
def run_start(*, run: Run, actor: object = None) -> Run:
    return run_transition(run=run, to_status=RunStatus.RUNNING, actor=actor, run_event={"type": "started"})


MAX_INLINE_OUTPUTS = 16
"""A run keeps its newest outputs inline (the view, the run-memory record); every output is a journal event,
paged whole at ``GET /v1/runs/{id}/outputs`` (issue 14.10)."""


@_in_transaction
def run_record_output(*, run: Run, content: str, artifacts: list[Any] | None = None, actor: object = None) -> Run:
    current = _require_active(run, "recording an output")
    if current.status != RunStatus.RUNNING:
        raise Conflict(
            f"run {current.public_id} is {current.status}; outputs need a running run",
            domain="runs",
            code="invalid_transition",
        )
    output = {
        "session_id": public_ids.session_id(current.session_id),
        "run_id": current.public_id,
        "content": content,
        "parts": [],
        "artifacts": list(artifacts or []),
        "source_kind": "assistant",
    }
    current.outputs = [*current.outputs, output][-MAX_INLINE_OUTPUTS:]  # all of them are in the journal
    current.updated_at_ms = now_ms()
    sql.update(Run, current.pk, outputs=current.outputs, updated_at_ms=current.updated_at_ms)
    append_event(
        session_id=current.session_id,
        run=current,
        event={
            "type": "message_appended",
            "message": {"role": "assistant", "content": content, "artifacts": list(artifacts or [])},
        },
    )
    return current


@_in_transaction
def run_tool_call_started(*, run: Run, call_id: str, name: str, tool_input: object = None, actor: object = None) -> Run:
    current = _require_active(run, "starting a tool call")
    if current.status != RunStatus.RUNNING:
        raise Conflict(
            f"run {current.public_id} is {current.status}; tool calls need a running run",
            domain="runs",
            code="invalid_transition",
        )
    if call_id in current.open_tool_calls:
        raise Conflict(f"tool call {call_id} is already open", field="call_id", domain="runs", code="tool_call_open")
    call = {"call_id": call_id, "name": name, "input": tool_input}
    current.open_tool_calls = {**current.open_tool_calls, call_id: call}
    current.updated_at_ms = now_ms()
    sql.update(Run, current.pk, open_tool_calls=current.open_tool_calls, updated_at_ms=current.updated_at_ms)
    append_event(session_id=current.session_id, run=current, event={"type": "tool_call_started", "call": call})
    return current


@_in_transaction
def run_tool_call_finished(
    *, run: Run, call_id: str, output: object = None, is_error: bool = False, actor: object = None
) -> Run:
    current = _require_active(run, "finishing a tool call")
    if call_id not in current.open_tool_calls:
        raise Conflict(
            f"tool call {call_id} is not open on run {current.public_id}",
            field="call_id",
            domain="runs",
            code="tool_call_not_open",
        )
    open_calls = dict(current.open_tool_calls)
    call = open_calls.pop(call_id)
    result = {"call_id": call_id, "name": call.get("name"), "output": output, "is_error": bool(is_error)}
    current.open_tool_calls = open_calls
    current.updated_at_ms = now_ms()
    sql.update(Run, current.pk, open_tool_calls=open_calls, updated_at_ms=current.updated_at_ms)
    append_event(session_id=current.session_id, run=current, event={"type": "tool_call_finished", "result": result})
    return current


@_in_transaction
def run_wait_for_approval(*, run: Run, request_ids: list[str], question: str = "", actor: object = None) -> Run:
    """running → waiting_for_approval; ``question`` (what the approver is asked) is kept on the run and in the
    journal event, and shown in ``pending_approvals`` until the run resumes."""
    event = {"type": "waiting_for_approval", "request_ids": request_ids}
    if question:
        event["question"] = question
    return run_transition(
        run=run,
        to_status=RunStatus.WAITING_FOR_APPROVAL,
        actor=actor,
        run_event=event,
        changes={"pending_approval_ids": request_ids, "pending_question": question},
    )


@_in_transaction
def run_wait_for_user_question(*, run: Run, request_ids: list[str], question: str = "", actor: object = None) -> Run:
    updated = run_transition(
        run=run,
        to_status=RunStatus.WAITING_FOR_USER_QUESTION,
        actor=actor,
        run_event={"type": "waiting_for_user_question", "request_ids": request_ids},
        changes={"pending_question_ids": request_ids, "pending_question": question},
    )
    append_event(
        session_id=updated.session_id,
        run=updated,
        event={"type": "user_question_requested", "request": {"request_ids": request_ids, "question": question}},
    )
    return updated


@_in_transaction
def run_resume(*, run: Run, resolution: dict[str, Any] | None = None, actor: object = None) -> Run:
    current = _locked(run)
    if current.status not in (RunStatus.WAITING_FOR_APPROVAL, RunStatus.WAITING_FOR_USER_QUESTION):
        raise Conflict(
            f"run {current.public_id} cannot transition from {current.status} to running",
            domain="runs",
            code="invalid_transition",
        )
    was_question = current.status == RunStatus.WAITING_FOR_USER_QUESTION
    pending = current.pending_question_ids if was_question else current.pending_approval_ids
    event_type = "user_question_resolved" if was_question else "approval_resolved"
    updated = run_transition(
        run=current,
        to_status=RunStatus.RUNNING,
        actor=actor,
        run_event={"type": event_type, "request_ids": pending},
        changes={"pending_approval_ids": [], "pending_question_ids": [], "pending_question": ""},
    )
    if was_question:
        append_event(
            session_id=updated.session_id,
            run=updated,
            event={"type": "user_question_resolved", "resolution": {"request_ids": pending, **(resolution or {})}},
        )
    return updated


@_in_transaction
def run_complete(*, run: Run, output: str | None = None, actor: object = None) -> Run:
    run = _locked(run)
    if run.status == RunStatus.COMPLETED:  # a repeated complete: unchanged, unless it brings a new output
        last = run.outputs[-1].get("content") if run.outputs else None
        if output is not None and output != last:
            raise Conflict(
                f"run {run.public_id} is completed; recording an output needs a run in flight",
                domain="runs",
                code="invalid_transition",
            )
        return run
    if output is not None and run.status not in TERMINAL_STATUSES:  # on a terminal run: the 409 below
        run = run_record_output(run=run, content=output, actor=actor)
    return run_transition(run=run, to_status=RunStatus.COMPLETED, actor=actor, run_event={"type": "completed"})


@_in_transaction
def run_fail(*, run: Run, error: str, actor: object = None) -> Run:
    return run_transition(
        run=run,
        to_status=RunStatus.FAILED,
        actor=actor,
        run_event={"type": "failed", "error": error},
        changes={"error": error},
    )


@_in_transaction
def run_interrupt(*, run: Run, actor: object = None) -> Run:
    return run_transition(run=run, to_status=RunStatus.INTERRUPTED, actor=actor, run_event={"type": "interrupted"})


@_in_transaction
def run_cancel(*, run: Run, actor: object = None) -> Run:
    return run_transition(run=run, to_status=RunStatus.CANCELLED, actor=actor, run_event={"type": "cancelled"})
