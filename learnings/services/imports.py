"""Bulk import of memories (issue 23.3): facts from another memory system published as learnings in batches,
with the gates of the one-at-a-time path (``candidate_create`` then ``candidate_publish``) applied to the whole
batch at once.

Per item: the candidate's validation (§3.4: scope, kind, content rules, the secret guard, confidence, expiry)
and the learning's (§1.6). Per batch: items already imported (their ``external_id`` in their scope) are
skipped; duplicates inside the batch and items equivalent to a live prompt-visible learning reuse it (as a
publication does); an item about the same subject as a live learning, or as an earlier item of the batch,
with another value is a conflict: its candidate is kept pending and queued for review, never published over
the other. Rows are written with one multi-row statement per table - candidates, learnings (with their
embeddings, computed in one batch), the candidates' move to ``published``, and the audit rows each
transition writes on the single path (candidate create, learning publish, candidate publish) - inside one
transaction per batch, under the same per-(scope, kind) advisory locks as a publication."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from django.db import connection, transaction

from learnings.learning_policy import policy_actor_for, status_for_tier
from learnings.models import (
    CandidateOrigin,
    CandidateState,
    Learning,
    LearningCandidate,
    PolicyDecision,
    PublishTier,
    Sensitivity,
    VerificationStatus,
)
from learnings.querysets import LearningQuerySet
from learnings.services.candidates import _new_candidate
from learnings.services.cleaning import (
    clean_evidence_refs,
    clean_expiry,
    clean_source,
    clean_stated_at,
    normalise_scope,
)
from learnings.services.queue import enqueue_review_on_commit
from learnings.services.rows import validated_learning
from learnings.validation import LearningScope
from learnings.vocabulary import SEMANTIC_KINDS
from memory import public_ids
from memory import sql as memory_sql
from memory.audit import actor_label
from memory.clock import now_ms
from memory.embedding import embed_many
from memory.errors import AppError
from memory.models import AuditEvent

MAX_EXTERNAL_ID = 200
REASON = "imported by an operator"


@dataclass(frozen=True)
class ImportItem:
    """One memory to import: what a candidate takes, and the id it has in the system it comes from."""

    external_id: str
    content: str
    kind: str
    scope: LearningScope
    stated_at_ms: int | None = None
    source: dict[str, Any] | None = None
    evidence_refs: list[dict[str, Any]] | None = None
    confidence: int = 80
    expires_at_ms: int | None = None
    sensitivity: str = Sensitivity.SCOPED


@dataclass
class ImportOutcome:
    published: int = 0
    reused: int = 0  # equivalent to a live learning (or an earlier item): the candidate points at it
    already_imported: int = 0
    held: int = 0  # same subject, another value: pending for review
    invalid: list[tuple[str, str]] = field(default_factory=list)  # (external id, message)

    def add(self, other: ImportOutcome) -> None:
        self.published += other.published
        self.reused += other.reused
        self.already_imported += other.already_imported
        self.held += other.held
        self.invalid += other.invalid


def _locks(pairs: Iterable[tuple[str, str]]) -> None:
    names = sorted({f"learnings:{scope_key}:{kind}" for scope_key, kind in pairs})
    if names:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(n, 0)) FROM unnest(%s::text[]) n ORDER BY n", [names]
            )


def _live_prompt_visible(at: int, scope_keys: set[str]) -> LearningQuerySet:
    return Learning.objects.filter(scope_key__in=scope_keys).live(at).prompt_visible()


@transaction.atomic
def import_batch(items: list[ImportItem], *, actor: object, publish_tier: str = PublishTier.ACTIVE) -> ImportOutcome:
    """Import one batch in one transaction (see the module's description); returns what happened to each."""
    outcome = ImportOutcome()
    at = now_ms()
    # 1. Each item as the candidate candidate_create would build, validated; invalid ones are reported.
    built: list[tuple[ImportItem, LearningCandidate]] = []
    seen: set[tuple[str, str]] = set()
    for item in items:
        external_id = (item.external_id or "").strip()
        try:
            if not external_id or len(external_id) > MAX_EXTERNAL_ID:
                raise ValueError(f"external id must be 1 to {MAX_EXTERNAL_ID} characters")
            scope = normalise_scope(item.scope.kind, item.scope.id)
            candidate = _new_candidate(
                origin=CandidateOrigin.API,
                scope=scope,
                kind=item.kind,
                content=item.content.strip() if isinstance(item.content, str) else item.content,
                sensitivity=item.sensitivity,
                confidence=item.confidence,
                source=clean_source(item.source),
                evidence_refs=clean_evidence_refs(item.evidence_refs),
                created_at_ms=at,
                expires_at_ms=clean_expiry(item.expires_at_ms),
                source_run=None,
                stated_at_ms=clean_stated_at(item.stated_at_ms),
            )
        except (AppError, ValueError, TypeError, AttributeError) as exc:
            field_name = getattr(exc, "field", None)
            where = f" ({field_name})" if field_name else ""
            outcome.invalid.append((external_id, f"{getattr(exc, 'detail', None) or exc}{where}"))
            continue
        candidate.external_id = external_id
        if (candidate.scope_key, external_id) in seen:
            outcome.already_imported += 1
            continue
        seen.add((candidate.scope_key, external_id))
        built.append((item, candidate))
    if not built:
        return outcome
    scope_keys = {candidate.scope_key for _, candidate in built}
    _locks((candidate.scope_key, candidate.kind) for _, candidate in built)
    # 2. Already imported (an earlier run, or another process): skipped - the import is idempotent.
    known = set(
        LearningCandidate.objects.filter(
            scope_key__in=scope_keys, external_id__in=[c.external_id for _, c in built]
        ).values_list("scope_key", "external_id")
    )
    fresh = [(item, c) for item, c in built if (c.scope_key, c.external_id) not in known]
    outcome.already_imported += len(built) - len(fresh)
    if not fresh:
        return outcome
    # 3. Equivalence and conflict against the live learnings of these scopes (one read), then in the batch.
    live = (
        _live_prompt_visible(at, scope_keys)
        .filter(
            content_key__in={c.content_key for _, c in fresh} | {""},
        )
        .only("id", "scope_key", "kind", "content_key")
    )
    equivalent: dict[tuple[str, str, str], int] = {}
    for row in live.order_by("id"):
        equivalent.setdefault((row.scope_key, row.kind, row.content_key), row.pk)
    subjects = (
        _live_prompt_visible(at, scope_keys)
        .filter(
            subject_key__in={c.subject_key for _, c in fresh if c.subject_key},
            kind__in=SEMANTIC_KINDS,
        )
        .values_list("scope_key", "kind", "subject_key", "content_key")
    )
    subject_values: dict[tuple[str, str, str], set[str]] = {}
    for scope_key, kind, subject_key, content_key in subjects:
        subject_values.setdefault((scope_key, kind, subject_key), set()).add(content_key)
    to_publish: list[tuple[ImportItem, LearningCandidate]] = []
    reuse: list[tuple[LearningCandidate, tuple[str, str, str]]] = []
    held: list[LearningCandidate] = []
    publishing: set[tuple[str, str, str]] = set()  # the keys of to_publish
    for item, c in fresh:
        key = (c.scope_key, c.kind, c.content_key)
        if key in equivalent or key in publishing:
            reuse.append((c, key))
            continue
        subject = (c.scope_key, c.kind, c.subject_key)
        if c.kind in SEMANTIC_KINDS and c.subject_key and subject_values.get(subject, set()) - {c.content_key}:
            held.append(c)
            continue
        if c.kind in SEMANTIC_KINDS and c.subject_key:
            subject_values.setdefault(subject, set()).add(c.content_key)
        to_publish.append((item, c))
        publishing.add(key)
    # 4. The learnings, validated as a publication validates them, embedded in one batch.
    candidates = [c for _, c in fresh]
    for c in candidates:
        c.updated_at_ms = at
    memory_sql.copy_instances(LearningCandidate, candidates)
    learnings = []
    vectors: Iterable[np.ndarray] = embed_many([c.content for _, c in to_publish]) if to_publish else []
    label = policy_actor_for(PolicyDecision.MANUAL)
    for (_, c), vector in zip(to_publish, vectors, strict=True):
        learning = Learning(
            scope_kind=c.scope_kind,
            scope_id=c.scope_id,
            scope_key=c.scope_key,
            kind=c.kind,
            sensitivity=c.sensitivity,
            content=c.content,
            confidence=c.confidence,
            source=c.source,
            evidence_refs=c.evidence_refs,
            created_at_ms=c.created_at_ms,
            published_at_ms=at,
            expires_at_ms=c.expires_at_ms,
            status=status_for_tier(publish_tier),
            publish_tier=publish_tier,
            policy_decision=PolicyDecision.MANUAL,
            policy_actor=label,
            verification_status=VerificationStatus.UNVERIFIED,
            content_key=c.content_key,
            subject_key=c.subject_key,
            source_candidate=c,
            stated_at_ms=c.stated_at_ms,
            updated_at_ms=at,
            embedding=np.round(np.asarray(vector, dtype=np.float64), 6).tolist(),
        )
        learnings.append(validated_learning(learning))
    memory_sql.copy_instances(Learning, learnings)
    for learning in learnings:
        equivalent.setdefault((learning.scope_key, learning.kind, learning.content_key), learning.pk)
    # 5. The candidates' move to published (one UPDATE), and every audit row of the single path.
    published = [(c, learning.pk, REASON) for (_, c), learning in zip(to_publish, learnings, strict=True)]
    published += [(c, equivalent[key], f"equivalent to {public_ids.learning_id(equivalent[key])}") for c, key in reuse]
    if published:
        with connection.cursor() as cursor:
            cursor.execute(
                'UPDATE "learnings_learningcandidate" c SET state = %s, published_learning_id = v.learning, '
                "updated_at_ms = %s FROM unnest(%s::bigint[], %s::bigint[]) AS v(candidate, learning) "
                "WHERE c.id = v.candidate AND c.state = %s",
                [
                    CandidateState.PUBLISHED,
                    at,
                    [c.pk for c, _, _ in published],
                    [pk for _, pk, _ in published],
                    CandidateState.PENDING,
                ],
            )
    who = actor_label(actor)
    audit = [
        AuditEvent(
            subject_type="learning_candidate",
            subject_id=c.public_id,
            action="create",
            actor=who,
            to_state=CandidateState.PENDING,
            at_ms=at,
            data={"origin": c.origin, "kind": c.kind, "scope": c.scope_key, "external_id": c.external_id},
        )
        for c in candidates
    ]
    audit += [
        AuditEvent(
            subject_type="learning",
            subject_id=learning.public_id,
            action="publish",
            actor=who,
            to_state=learning.status,
            reason=REASON,
            at_ms=at,
            data={
                "candidate": c.public_id,
                "publish_tier": learning.publish_tier,
                "policy_decision": learning.policy_decision,
                "verification_status": learning.verification_status,
            },
        )
        for (_, c), learning in zip(to_publish, learnings, strict=True)
    ]
    audit += [
        AuditEvent(
            subject_type="learning_candidate",
            subject_id=c.public_id,
            action="publish",
            actor=who,
            from_state=CandidateState.PENDING,
            to_state=CandidateState.PUBLISHED,
            at_ms=at,
            reason=reason,
            data={"published_learning": public_ids.learning_id(pk)},
        )
        for c, pk, reason in published
    ]
    memory_sql.copy_instances(AuditEvent, audit)
    for c in held:
        enqueue_review_on_commit(c.pk)
    outcome.published += len(learnings)
    outcome.reused += len(reuse)
    outcome.held += len(held)
    return outcome
