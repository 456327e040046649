"""Publication (spec §4.14): ``candidate_publish`` turns a candidate into a learning. Operators publish
``manual`` with optional edits (``PublishEdits``); automation passes its governance and review
(``AutomationDecision``); both travel in one ``PublishOptions``. Equivalent learnings are reused,
``supersedes`` replaces a learning, a same-subject conflict is refused."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from typing import Any, TypedDict, Unpack, cast

from django.db import transaction
from django.db.models import Model
from psycopg.types.json import Jsonb

from learnings.learning_policy import policy_actor_for, status_for_tier
from learnings.models import (
    CandidateState,
    Learning,
    LearningCandidate,
    PolicyDecision,
    PublishTier,
    VerificationStatus,
)
from learnings.selectors import (
    DOMAIN,
    equivalent_or_conflict_ids,
    find_conflict,
    find_equivalent,
    find_equivalent_or_conflict,
    split_equivalent_or_conflict,
)
from learnings.services.candidates import CandidateFields, lock_candidate, mark_published, store_keyed_candidate
from learnings.services.cleaning import (
    clean_content,
    clean_evidence_refs,
    clean_expiry,
    scope_to_store,
    semantic_key_digests,
)
from learnings.services.rows import (
    SCOPE_LOCK_SQL,
    LearningConflict,
    candidate_publish_row,
    fire_revoking,
    learning_publish_row,
    lock_scope_drawing_keys,
    publish_audit_data,
    record_supersede,
    scope_lock_key,
    serialize_scope,
    supersede_target,
    validated_learning,
)
from learnings.validation import LearningScope
from memory import sql as memory_sql
from memory.audit import actor_label, record_audit
from memory.clock import now_ms
from memory.errors import Conflict, ValidationFailed
from memory.models import AuditEvent

MSG_SUPERSEDE_TIER = "superseding learnings must use the active publish tier"


@dataclass(frozen=True)
class Governance:
    """Who decided a publication and what it is: tier, decision, verification, expiry override."""

    publish_tier: str = PublishTier.ACTIVE
    policy_decision: str = PolicyDecision.MANUAL
    verification_status: str = VerificationStatus.UNVERIFIED
    expires_at_ms: int | None = None
    use_expiry: bool = False  # True: expires_at_ms replaces the candidate's expiry even when None


@dataclass(frozen=True)
class PublishEdits:
    """What an operator may change while publishing (``PublishLearningCandidateRequest``, spec §2.4): the
    tier, the learning to supersede, and overrides of the candidate's scope, kind, sensitivity, content,
    confidence, expiry and evidence. ``None`` keeps the candidate's value."""

    publish_tier: str = PublishTier.ACTIVE
    supersedes: str | None = None
    scope: LearningScope | None = None
    kind: str | None = None
    sensitivity: str | None = None
    content: str | None = None
    confidence: object = None
    expires_at_ms: object = None
    evidence_refs: object = None


class EditFields(TypedDict, total=False):
    """``PublishEdits``' fields as keyword arguments (``PublishOptions.manual`` / ``automated``)."""

    publish_tier: str
    supersedes: str | None
    scope: LearningScope | None
    kind: str | None
    sensitivity: str | None
    content: str | None
    confidence: object
    expires_at_ms: object
    evidence_refs: object


@dataclass(frozen=True)
class AutomationDecision:
    """An automated publication: its governance and the review (with the policy revision) that decided it."""

    governance: Governance
    review: dict[str, Any] | None = None
    revision: int | None = None


@dataclass(frozen=True)
class PublishOptions:
    """Everything ``candidate_publish`` takes besides the candidate and the actor: an operator's ``edits``
    and, for automation, its ``automation`` decision (whose governance then replaces the edits' tier)."""

    edits: PublishEdits = field(default_factory=PublishEdits)
    automation: AutomationDecision | None = None

    @classmethod
    def manual(cls, **edits: Unpack[EditFields]) -> PublishOptions:
        """An operator's publication: ``PublishOptions.manual(publish_tier="provisional", supersedes=...)``."""
        return cls(edits=PublishEdits(**edits))

    @classmethod
    def automated(
        cls,
        governance: Governance,
        *,
        review: dict[str, Any] | None = None,
        revision: int | None = None,
        **edits: Unpack[EditFields],
    ) -> PublishOptions:
        """An automated publication with the governance and review that decided it (and optional edits)."""
        return cls(edits=PublishEdits(**edits), automation=AutomationDecision(governance, review, revision))


@transaction.atomic
def candidate_publish(
    *,
    candidate: LearningCandidate | int,
    actor: object,
    options: PublishOptions | None = None,
) -> Learning:
    """Publish a candidate (§4.14); operators publish ``manual`` (``options.edits``), automation passes
    ``options.automation`` (its governance, review and policy revision).

    Unknown → 404; rejected → 409; a learning already built from it repairs the candidate and is returned;
    already published → 409; an equivalent prompt-visible learning is reused; ``supersedes`` needs the active
    tier and reuses a live replacement; a same-subject conflict → 409 unless superseded.
    """
    options = options or PublishOptions()
    edits, automation = options.edits, options.automation
    supersedes = edits.supersedes
    governance = automation.governance if automation else Governance(publish_tier=edits.publish_tier)
    if governance.publish_tier not in PublishTier.values:
        raise ValidationFailed(
            f"unknown learning publish tier `{governance.publish_tier}`",
            field="publish_tier",
            domain=DOMAIN,
            code="invalid_learning",
        )
    if supersedes is not None and governance.publish_tier != PublishTier.ACTIVE:
        raise ValidationFailed(MSG_SUPERSEDE_TIER, field="publish_tier", domain=DOMAIN, code="invalid_learning")
    locked = lock_candidate(candidate)
    return _publish_locked(locked, actor=actor, options=options)


@dataclass(frozen=True)
class Fresh:
    """What ``learning_create_published`` did with the candidate it has just created: the (scope, kind) whose
    publication lock it took (``rows.serialize_scope``), the key it drew for the learning (None: none drawn),
    and - while the candidate is not stored yet (its key drawn too) - its ``create`` audit row, stored with it."""

    locked_scope: tuple[str, str]
    learning_key: int | None = None
    unstored: AuditEvent | None = None


def _publish_locked(
    locked: LearningCandidate, *, actor: object, options: PublishOptions, fresh: Fresh | None = None
) -> Learning:
    """``candidate_publish`` once the candidate row is this transaction's: locked, or created by it
    (``fresh``: no learning can have been built from it yet)."""
    edits, automation = options.edits, options.automation
    supersedes, scope = edits.supersedes, edits.scope
    review, revision = (automation.review, automation.revision) if automation else (None, None)
    governance = automation.governance if automation else Governance(publish_tier=edits.publish_tier)
    actor_label = (
        policy_actor_for(governance.policy_decision)
        if governance.policy_decision != PolicyDecision.ESCALATED
        else "operator"
    )
    if locked.state == CandidateState.REJECTED:
        raise Conflict(f"learning candidate {locked.public_id} was rejected", domain=DOMAIN, code="candidate_rejected")
    built = None if fresh is not None else Learning.objects.filter(source_candidate=locked).first()
    if built is not None:
        if locked.state != CandidateState.PUBLISHED or locked.published_learning_id != built.pk:
            mark_published(locked, built, actor=actor, reason="repaired from the learning built from it")
        return built
    if locked.state == CandidateState.PUBLISHED:
        raise Conflict(
            f"learning candidate {locked.public_id} was already published",
            domain=DOMAIN,
            code="candidate_already_published",
        )
    if automation is not None and locked.screen_flagged:  # the screen gate, held here too (issue 19.5)
        raise Conflict(
            f"learning candidate {locked.public_id} was flagged by the memory-poisoning screen: only an operator "
            "may publish it",
            domain=DOMAIN,
            code="candidate_screen_flagged",
        )

    at = now_ms()
    scope = (
        scope_to_store(scope.kind, scope.id)
        if scope is not None
        else LearningScope(kind=locked.scope_kind, id=locked.scope_id)
    )
    body = clean_content(edits.content) if edits.content is not None else locked.content
    refs = clean_evidence_refs(edits.evidence_refs)
    if governance.use_expiry:
        expiry = governance.expires_at_ms
    else:
        override = clean_expiry(edits.expires_at_ms)
        expiry = override if override is not None else locked.expires_at_ms
    content_key, subject_key = (  # a fresh candidate's keys were derived from this very content a moment ago
        (locked.content_key, locked.subject_key)
        if fresh is not None and body == locked.content
        else semantic_key_digests(body)
    )
    learning = Learning(
        scope_kind=scope.kind,
        scope_id=scope.id,
        scope_key=scope.scope_key,
        kind=edits.kind or locked.kind,
        sensitivity=edits.sensitivity or locked.sensitivity,
        content=body,
        # the operator's value: validated_learning checks it below
        confidence=locked.confidence if edits.confidence is None else cast(int, edits.confidence),
        source=locked.source,
        source_run_id=locked.source_run_id,
        evidence_refs=refs or locked.evidence_refs,
        created_at_ms=locked.created_at_ms,
        published_at_ms=at,
        expires_at_ms=expiry,
        stated_at_ms=locked.stated_at_ms,
        status=status_for_tier(governance.publish_tier),
        publish_tier=governance.publish_tier,
        policy_decision=governance.policy_decision,
        policy_actor=actor_label,
        verification_status=governance.verification_status,
        content_key=content_key,
        subject_key=subject_key,
        source_candidate=locked,
        updated_at_ms=at,
    )
    # A fresh candidate passed the secret guard a moment ago in this transaction: on the same kind and
    # content its answer is known (validation.validate_learning runs it again on anything else).
    validated_learning(learning, secret_guarded=(locked.kind, locked.content) if fresh is not None else None)
    reason = (
        "published by an operator"
        if governance.policy_decision == PolicyDecision.MANUAL
        else (review or {}).get("reason", "published by automation")
    )

    conflict: Learning | None = None
    fast = (
        fresh is not None
        and fresh.learning_key is not None
        and fresh.locked_scope == (learning.scope_key, learning.kind)
        and supersedes is None
        and review is None
    )
    if fresh is not None and fresh.unstored is not None and not fast:  # not the one-statement path after all
        store_keyed_candidate(locked, fresh.unstored)
    if (
        fresh is not None
        and fresh.learning_key is not None
        and fresh.locked_scope == (learning.scope_key, learning.kind)
        and supersedes is None
        and review is None
    ):  # the scope is locked and the key drawn: read, store and mark published in one statement
        learning.derive_embedding()  # what Learning.save does, before the hand-written INSERT
        found = _store_fresh_unless_found(
            locked, learning, fresh.learning_key, actor=actor, reason=reason, created=fresh.unstored
        )
        if not found:
            return learning
        equivalent, conflict = split_equivalent_or_conflict(found, content_key)
        if fresh.unstored is not None and conflict is None:  # the candidate is stored, then moves to it
            store_keyed_candidate(locked, fresh.unstored)
    elif supersedes is None:  # nothing to exclude from the conflict: both reads in one statement
        if fresh is None or fresh.locked_scope != (learning.scope_key, learning.kind):
            serialize_scope(learning.scope_key, learning.kind)
        equivalent, conflict = find_equivalent_or_conflict(
            scope_key=learning.scope_key, kind=learning.kind, subject_key=subject_key, content_key=content_key, at_ms=at
        )
    else:
        if fresh is None or fresh.locked_scope != (learning.scope_key, learning.kind):
            serialize_scope(learning.scope_key, learning.kind)
        equivalent = find_equivalent(
            scope_key=learning.scope_key, kind=learning.kind, content_key=content_key, at_ms=at
        )
    if equivalent is not None:
        mark_published(
            locked,
            equivalent,
            actor=actor,
            reason=f"equivalent to {equivalent.public_id}",
            review=review,
            revision=revision,
        )
        return equivalent

    target = None
    if supersedes is not None:
        target, replacement = supersede_target(supersedes, scope_key=learning.scope_key)
        if replacement is not None:
            mark_published(
                locked,
                replacement,
                actor=actor,
                reason=f"reused replacement {replacement.public_id}",
                review=review,
                revision=revision,
            )
            return replacement
    if supersedes is not None:
        conflict = find_conflict(
            scope_key=learning.scope_key,
            kind=learning.kind,
            subject_key=subject_key,
            content_key=content_key,
            at_ms=at,
            exclude_ids=(target.pk,) if target else (),
        )
    if conflict is not None:
        raise LearningConflict(conflict)
    if target is not None:
        fire_revoking(
            target,
            actor=actor,
            reason=f"source learning {target.public_id} is being superseded",
            superseding=True,
        )
        learning.supersedes = target
    learning.derive_embedding()  # what Learning.save does, before the hand-written INSERT
    memory_sql.insert(learning)
    if target is not None:
        record_supersede(target, learning, actor=actor)
    else:
        record_audit(
            subject_type="learning",
            subject_id=learning.public_id,
            action="publish",
            actor=actor,
            to_state=learning.status,
            reason=reason,
            data=publish_audit_data(learning, locked.public_id),
        )
    mark_published(locked, learning, actor=actor, reason=reason, review=review, revision=revision)
    return learning


def _store_fresh_unless_found(
    candidate: LearningCandidate,
    learning: Learning,
    key: int,
    *,
    actor: object,
    reason: str,
    created: AuditEvent | None = None,
) -> list[Learning]:
    """For a candidate this transaction created (``fresh``), under its (scope, kind) lock: the equivalence and
    conflict reads, and - only when they find nothing - the new learning stored under the key drawn for it, the
    candidate's ``mark_published`` (the same compare-and-swap from pending: 409 if it moved, and the transaction
    is rolled back, so nothing stays half-written) and the same two publish audit rows, all in one statement
    (its snapshot is taken after the lock was granted, as the reads' own would be). Returns what the reads found
    (the caller reuses the equivalent or refuses the conflict); nothing was written then. The candidate's new
    state is set on it rather than re-read.

    ``created``: the candidate is not stored yet (its key drawn) and this is its ``create`` audit row. Then the
    same statement inserts it, with that row, directly in the state the compare-and-swap would leave it in
    (published, its learning set) - the rows and the audit trail are those of the two steps, without the
    UPDATE of a row no other transaction can see yet."""
    at = now_ms()
    learning.pk = key
    who = actor_label(actor)
    audits = [
        learning_publish_row(learning, candidate.public_id, who=who, reason=reason, at_ms=at),
        candidate_publish_row(candidate.public_id, learning.public_id, who=who, reason=reason, at_ms=at),
    ]
    reads = equivalent_or_conflict_ids(  # s0
        scope_key=learning.scope_key,
        kind=learning.kind,
        subject_key=learning.subject_key,
        content_key=learning.content_key,
        at_ms=learning.published_at_ms,
    )
    if created is None:  # s2: the stored candidate's compare-and-swap from pending
        move = memory_sql.update_statement(
            LearningCandidate,
            candidate.pk,
            where={"state": CandidateState.PENDING},
            only_if="s1",
            state=CandidateState.PUBLISHED,
            published_learning_id=key,
            updated_at_ms=at,
        )
        statements = [reads, memory_sql.insert_with_key_statement(learning, unless="s0"), move]
        found, _, moved, *_, found_ids = _run_prepared(
            [*statements, *(memory_sql.insert_select_statement(audit, "s1", {}) for audit in audits)],
            also=", ARRAY(SELECT id FROM s0)",
        )
    else:  # s2: the candidate inserted in its published state, then (s5) its create audit row
        pending = (candidate.state, candidate.published_learning_id, candidate.updated_at_ms)
        candidate.state, candidate.published_learning_id = CandidateState.PUBLISHED, key
        candidate.updated_at_ms = at
        rows = [_packed_values(learning, keyed=True), _packed_values(candidate, keyed=True)]
        candidate.state, candidate.published_learning_id, candidate.updated_at_ms = pending
        audits.insert(0, created)  # the CTEs run in the order the outer SELECT reads them: create, then publish
        sql, params = reads
        found, _, moved, *_, found_ids = _run_prepared_text(
            _fresh_statement(sql),
            [*params, *rows, *(_packed_values(audit, keyed=False) for audit in audits)],
        )
    if found:
        learning.pk = None
        return memory_sql.select_instances(Learning, 'WHERE "id" = ANY(%s) ORDER BY "id"', [found_ids])
    if moved != 1:
        raise Conflict(
            f"learning candidate {candidate.public_id} changed concurrently; retry",
            domain=DOMAIN,
            code="candidate_changed",
        )
    memory_sql.mark_saved(learning, key)
    if created is not None:
        memory_sql.mark_saved(candidate, candidate.pk)
    candidate.state, candidate.published_learning_id = CandidateState.PUBLISHED, key
    candidate.updated_at_ms = at
    return []


def _run_prepared(statements: list[tuple[str, list[Any]]], *, also: str = "") -> list[Any]:
    """``memory.sql.run_together`` through ``memory.sql.prepared_cursor`` (the parameters bound on the server), for
    the fresh publication of a candidate already stored; a new one takes ``_fresh_statement``."""
    ctes = ", ".join(f"s{i} AS ({sql})" for i, (sql, _) in enumerate(statements))
    counts = ", ".join(f"(SELECT count(*) FROM s{i})" for i in range(len(statements)))  # noqa: S608
    params = [param for _, statement_params in statements for param in statement_params]
    return _run_prepared_text(f"WITH {ctes} SELECT {counts}{also}", params)


def _run_prepared_text(sql: str, params: list[Any]) -> list[Any]:
    """One row of a statement run through ``memory.sql.prepared_cursor``: its parameters bound on the server, so
    psycopg prepares a text it has run twice on the connection and PostgreSQL parses and plans it once per
    connection (the values reach the columns through the same casts as client-side)."""
    with memory_sql.prepared_cursor(transaction.get_connection().alias) as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return list(row)


_FRESH_ROWS = ((Learning, True, "s0"), (LearningCandidate, True, "s0"), *[(AuditEvent, False, "s1")] * 3)
"""The rows of a fresh create-and-publish after its reads (s0): the learning (s1) and the candidate (s2) unless
the reads found a row, then the candidate's ``create`` audit row and the two ``publish`` ones (s3-s5), each only
where the learning was inserted."""


@cache
def _fresh_statement(reads: str) -> str:
    """The text of the fresh create-and-publish statement (``_store_fresh_unless_found``), built once per shape of
    its reads (``selectors.equivalent_or_conflict_ids``: with or without the conflict): what
    ``memory.sql.run_together`` builds from ``insert_with_key_statement`` and ``insert_select_statement``, each row's
    values passed as one ``text[]`` parameter (``_packed_values``). With 16 parameters at most, psycopg converts the
    text once per process and caches it (it caches no statement with over 50); the server plans it once per
    connection (``_run_prepared``)."""
    ctes = [f"s0 AS ({reads})"]
    for i, (model, keyed, after) in enumerate(_FRESH_ROWS, start=1):
        ctes.append(f"s{i} AS ({_packed_insert_sql(model, keyed=keyed, after=after)})")
    counts = ", ".join(f"(SELECT count(*) FROM s{i})" for i in range(len(ctes)))  # noqa: S608
    return f"WITH {', '.join(ctes)} SELECT {counts}, ARRAY(SELECT id FROM s0)"  # noqa: S608


def _packed_insert_sql(model: type[Model], *, keyed: bool, after: str) -> str:
    """``INSERT … SELECT`` of one row whose values come as one ``text[]`` parameter, in the order of
    ``_packed_values``: a text column takes its element as it is (the INSERT's assignment cast checks its length,
    as for a parameter), any other column its element cast to the column's type (what the server does with a
    parameter sent as text). ``keyed``: the key is the first element, and the row is inserted only when the CTE
    ``after`` has no row; otherwise the key comes from the sequence and the row is inserted once per row of
    ``after``."""
    conn = transaction.get_connection()
    meta = model._meta
    fields = [field for field, _ in memory_sql._copy_plan(model)]
    if keyed:
        fields.insert(0, meta.pk)
    columns = ", ".join(f'"{field.column}"' for field in fields)
    values = ", ".join(
        f"v[{i}]" if field.get_internal_type() in _TEXT_TYPES else f"v[{i}]::{field.db_type(conn)}"
        for i, field in enumerate(fields, start=1)
    )
    source = "(SELECT %s::text[] AS v) r"
    where = f"{source} WHERE NOT EXISTS (SELECT 1 FROM {after})" if keyed else f"{after}, {source}"  # noqa: S608
    return f'INSERT INTO "{meta.db_table}" ({columns}) SELECT {values} FROM {where} RETURNING "{meta.pk.column}"'  # noqa: S608


_TEXT_TYPES = frozenset({"CharField", "TextField"})


def _packed_values(instance: Model, *, keyed: bool) -> str:
    """The row of ``instance`` for ``_packed_insert_sql``, as the literal of a ``text[]``: each column's value
    prepared as ``memory.sql`` prepares it for an INSERT (``insert_with_key_statement``: ``_copy_row``), in the
    text the server would have received for it as a parameter (psycopg sends every parameter as text): a number
    in decimal, a boolean as true/false, JSON as the text its field's dumps gives, an embedding as its array
    literal; each element quoted (a backslash before ``\\`` and ``"``), NULL unquoted. Written here rather than
    by psycopg's list dumper, which runs a regular expression over every element (the embedding's 5 kB too)."""
    conn = transaction.get_connection()
    row = memory_sql._copy_row(memory_sql._copy_plan(type(instance)), instance, conn)
    if keyed:
        row.insert(0, instance.pk)
    elements = [  # the common values at once, without a call: NULL, a plain string, a number
        "NULL"
        if value is None
        else f'"{value}"'
        if (type(value) is str and '"' not in value and "\\" not in value) or type(value) is int
        else _element(value)
        for value in row
    ]
    return "{" + ",".join(elements) + "}"


def _element(value: object) -> str:
    text = value if type(value) is str else _as_text(value)
    if text is None:
        return "NULL"
    if '"' in text or "\\" in text:
        text = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def _as_text(value: object) -> str | None:
    if value is None or type(value) is str:
        return value
    if isinstance(value, str):  # a TextChoices member: its string, as psycopg dumps it (str before Enum)
        return str.__str__(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, Jsonb):  # a JSON field's value, as psycopg would dump it
        dumped = (value.dumps or json.dumps)(value.obj)
        return dumped.decode() if isinstance(dumped, bytes) else dumped
    raise TypeError(f"no text form for a {type(value).__name__} parameter")


@transaction.atomic
def learning_create_published(
    *,
    actor: object,
    scope: LearningScope,
    kind: str,
    content: str,
    publish_tier: str = PublishTier.ACTIVE,
    supersedes: str | None = None,
    **candidate: Unpack[CandidateFields],
) -> tuple[Learning, LearningCandidate]:
    """``POST /v1/learnings``: an operator's fact in one call - the candidate is created (``candidate_create``:
    every validation, the secret guard, its audit row) and published manually in the same transaction
    (``candidate_publish``'s checks: equivalence, conflict, supersede; the learning's embedding and audit
    rows). The new candidate is this transaction's own, so it is neither locked nor queued for review.
    Returns the learning (a new one, or the equivalent one reused) and the candidate."""
    from learnings.services.candidates import create_audit, new_api_candidate, store_new_candidate

    if publish_tier not in PublishTier.values:
        raise ValidationFailed(
            f"unknown learning publish tier `{publish_tier}`",
            field="publish_tier",
            domain=DOMAIN,
            code="invalid_learning",
        )
    if supersedes is not None and publish_tier != PublishTier.ACTIVE:
        raise ValidationFailed(MSG_SUPERSEDE_TIER, field="publish_tier", domain=DOMAIN, code="invalid_learning")
    created = new_api_candidate(actor=actor, scope=scope, kind=kind, content=content, **candidate)
    lock = (created.scope_key, created.kind)
    if supersedes is None:
        # One statement takes the (scope, kind) publication lock the equivalence and conflict checks need and
        # draws both keys; the next reads and, where they find nothing, stores everything (_publish_locked).
        created.pk, learning_key = lock_scope_drawing_keys(*lock)
        fresh = Fresh(locked_scope=lock, learning_key=learning_key, unstored=create_audit(created, actor=actor))
    else:  # a supersede: the candidate stored with its audit row and the lock, then published step by step
        store_new_candidate(created, actor=actor, also=f", {SCOPE_LOCK_SQL}", also_params=[scope_lock_key(*lock)])
        fresh = Fresh(locked_scope=lock)
    options = PublishOptions.manual(publish_tier=publish_tier, supersedes=supersedes)
    return _publish_locked(created, actor=actor, options=options, fresh=fresh), created
