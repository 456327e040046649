"""Plane 2 services: record on terminal runs, prune, bundle for a new input, search, status, repair.

The pure rules (record building, ranking, rendering, packing, the policy) live in memory.recall and
memory.run_memory_policy; this module applies them to the database.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
from django.db import connection, transaction
from django.db.models import CharField, Count, Exists, OuterRef, Q, QuerySet, Value
from django.db.models.functions import Concat

from memory import embedding, hooks, metrics, public_ids, ranking, revisioned_policies, sql
from memory import run_memory_store as store
from memory.clock import now_ms
from memory.errors import ValidationFailed
from memory.lru import BoundedLRU
from memory.models import (
    TERMINAL_STATUSES,
    MaintenanceReport,
    Persona,
    PolicyKind,
    Project,
    Run,
    RunMemoryRecord,
    RunMemoryScope,
    SemanticCapture,
    Session,
)
from memory.recall import rank_entries, score_entry
from memory.run_memory_policy import (
    SEARCH_VISIBILITY_LEARNING_SCOPES,
    SEARCH_VISIBILITY_SESSION_ONLY,
    SEARCH_VISIBILITY_WORKSPACE,
    PolicyValidationError,
    RunMemoryPolicy,
)
from memory.run_records import (
    RecoveredEntry,
    RunFacts,
    build_record,
    partition_for_retention,
    request_preview_source,
)

logger = logging.getLogger(__name__)

M = "run_memory."
RECENCY_PRIOR = 0.01
"""Hybrid ranking: fused-score bonus of the newest record (the oldest gets none)."""
METRIC_NAMES = (
    "stored_total",
    "injected_total",
    "skipped_unreadable_total",
    "pruned_ttl_total",
    "pruned_overflow_total",
    "pruned_orphan_total",
    "redacted_fields_total",
    "ranked_candidates_total",
    "prompt_limit_omitted_total",
)
MAX_DIAGNOSTICS = 32


# ---- policy ---------------------------------------------------------------------------------------------


def current_policy() -> RunMemoryPolicy:
    data, _ = revisioned_policies.current_policy_dict(PolicyKind.RUN_MEMORY)
    if not data:
        return RunMemoryPolicy()
    try:
        return RunMemoryPolicy.from_dict(data)
    except PolicyValidationError:
        logger.error("stored run-memory policy is invalid; using defaults")
        return RunMemoryPolicy()


def policy_revision() -> int:
    return revisioned_policies.current_policy_dict(PolicyKind.RUN_MEMORY)[1]


def parse_policy(data: object) -> RunMemoryPolicy:
    try:
        policy = RunMemoryPolicy.from_dict(data)
        policy.validate()
    except PolicyValidationError as exc:
        raise ValidationFailed(
            exc.message,
            field=f"policy.{exc.field}" if exc.field else "policy",
            domain="runtime",
            code="invalid_run_memory_policy",
        ) from exc
    return policy


def set_policy(
    *, data: object, expected_revision: int | None, actor: object
) -> tuple[RunMemoryPolicy, int, dict[str, Any]]:
    """Validate, store a new revision, and re-apply pruning at once. Enforcement errors reach the caller:
    the policy and its enforcement commit together or not at all."""
    policy = parse_policy(data)
    with transaction.atomic():
        row = revisioned_policies.save_policy(
            kind=PolicyKind.RUN_MEMORY, policy=policy.to_dict(), expected_revision=expected_revision, actor=actor
        )
        report = enforce_policy(policy=policy, source="runtime_policy")
    return policy, row.revision, report


# ---- recording ------------------------------------------------------------------------------------------


def run_facts(run: Run) -> RunFacts:
    data = run.input or {}
    return RunFacts(
        run_id=run.public_id,
        status=run.status,
        kind=run.kind,
        input_content=data.get("content"),
        input_items=data.get("input_items") or [],
        attachments=data.get("attachments") or [],
        text_preview=(run.request or {}).get("text_preview"),
        outputs=run.outputs or [],
        error=run.error,
        finished_at_ms=run.finished_at_ms,
        updated_at_ms=run.updated_at_ms,
    )


def request_text(run: Run) -> str | None:
    """The run's whole request text before scrubbing and truncation (what its request preview is cut from)."""
    return request_preview_source(run_facts(run))


def entry_of(record: RunMemoryRecord) -> RecoveredEntry:
    return RecoveredEntry(
        run_id=public_ids.run_id(record.run_id),
        recorded_at_ms=record.recorded_at_ms,
        status=record.status,
        request_preview=record.request_preview,
        outcome_preview=record.outcome_preview,
        artifact_ids=list(record.artifact_ids),
        failure_markers=list(record.failure_markers),
        summary=record.summary,
    )


def record_terminal_run(
    run: Run,
    *,
    policy: RunMemoryPolicy | None = None,
    semantic_capture_enabled: bool | None = None,
    scope_keys: list[str] | None = None,
    fresh: bool = False,
) -> RunMemoryRecord | None:
    """Build, scrub, store and prune the record of a terminal run (in the caller's transaction).

    ``fresh`` is the terminal_run hook's case: the run turned terminal in this very transaction, so no record
    can exist yet and the transition's journal append already holds the session row lock. Every terminal run
    passes here, so the writes are a handful of hand-written statements (``memory.run_memory_store``).
    """
    policy = policy or current_policy()
    if not policy.enabled:
        if not fresh:
            _delete_records(RunMemoryRecord.objects.filter(run=run))
        return None
    if run.status not in TERMINAL_STATUSES:
        return None
    built = build_record(run_facts(run), redact_pii=policy.redact_pii)
    if built is None:
        return None
    if not fresh:
        # Concurrent terminal runs of one session record and prune one at a time, so the bound holds exactly.
        store.lock_session(run.session_id)
    snapshot = store.session_snapshot(run.session_id)
    scope_keys = snapshot.scope_keys if scope_keys is None else scope_keys
    existing = None if fresh else RunMemoryRecord.objects.filter(run=run).first()
    previous = existing.semantic_capture if existing else None
    if previous in (SemanticCapture.COMPLETED, SemanticCapture.SKIPPED):
        capture = previous
    else:
        enabled = semantic_capture_enabled if semantic_capture_enabled is not None else _semantic_capture_on()
        capture = SemanticCapture.PENDING if enabled else SemanticCapture.SKIPPED
    entry = built.entry
    vector = embedding.embed(ranked_text(entry))
    fields = {
        "session_id": run.session_id,
        "scope_keys": scope_keys,
        "semantic_capture": capture,
        "recorded_at_ms": entry.recorded_at_ms,
        "status": entry.status,
        "request_preview": entry.request_preview,
        "outcome_preview": entry.outcome_preview,
        "artifact_ids": entry.artifact_ids,
        "failure_markers": entry.failure_markers,
        "summary": entry.summary,
        "redaction_count": built.redaction_count,
        "embedding": vector,
    }
    # Retention is decided with the new record counted in: what the policy drops (TTL, overflow) is deleted,
    # and a new record that is itself dropped is never written.
    pairs = [pair for pair in snapshot.pairs if pair[0] != run.pk]
    outcome = _partition(pairs + [(run.pk, entry.recorded_at_ms)], policy, now_ms())
    doomed = outcome.run_pks()
    counters = {
        M + "stored_total": 1,
        M + "redacted_fields_total": built.redaction_count,
        M + "pruned_ttl_total": len(outcome.ttl),
        M + "pruned_overflow_total": len(outcome.overflow),
    }
    if existing is None:
        record = None if run.pk in doomed else RunMemoryRecord(run_id=run.pk, **fields)
        written = store.write_new_record(
            delete_run_pks=sorted(doomed - {run.pk}), counters=counters, record=record, scope_keys=scope_keys
        )
        if written is not None:
            _remember_vector(written.pk, entry, vector)
        return written
    store.delete_records_of_runs(sorted(doomed))
    metrics.increment_many(counters)
    if run.pk in doomed:
        return None
    RunMemoryRecord.objects.filter(pk=existing.pk).update(**fields)
    _remember_vector(existing.pk, entry, vector)
    for name, value in fields.items():
        setattr(existing, name, value)
    RunMemoryScope.objects.filter(record=existing).delete()
    store.insert_scopes(existing, dict.fromkeys(scope_keys))
    return existing


# ---- capture replay claims ------------------------------------------------------------------------------
# A capture task is queued for a run only by the call that claims its record: the claim is the record's
# ``capture_queued_at_ms``, set by one conditional UPDATE … RETURNING, so two replays (or a replay and the
# on-commit queueing of a terminal run) never queue the same run twice. The task clears the claim when it ends;
# a lost task's claim lapses after the lease and the next replay queues the run again.

DEFAULT_QUEUE_LEASE_S = 40


def queue_lease_ms() -> int:
    """How long a queued task's claim holds (``KHEISH_QUEUE_LEASE_S``, 40 s by default). The broker keeps a
    queued message until a worker acknowledges it, so the claim lapsing matters only when the task itself was
    lost or failed (a send or a release that hit a dead database): the next replay then queues the run again
    within a minute. A message that waits longer than this in a busy queue may be queued a second time; the
    tasks are idempotent, so that costs one cheap no-op delivery."""
    from django.conf import settings

    return int(float(getattr(settings, "KHEISH_QUEUE_LEASE_S", DEFAULT_QUEUE_LEASE_S)) * 1000)


def capture_claimable(at_ms: int | None = None) -> QuerySet[RunMemoryRecord]:
    """Records no capture task is queued for: never claimed, or the claim has lapsed."""
    at_ms = now_ms() if at_ms is None else at_ms
    lapsed = at_ms - queue_lease_ms()
    return RunMemoryRecord.objects.filter(Q(capture_queued_at_ms__isnull=True) | Q(capture_queued_at_ms__lt=lapsed))


_RECORDS_TABLE = RunMemoryRecord._meta.db_table
_CLAIM_CAPTURES = (  # the table name is a model constant, never input
    f'WITH picked AS (SELECT "id" FROM "{_RECORDS_TABLE}" WHERE "run_id" = ANY(%s) '  # noqa: S608
    'AND ("capture_queued_at_ms" IS NULL OR "capture_queued_at_ms" < %s) FOR UPDATE SKIP LOCKED) '
    f'UPDATE "{_RECORDS_TABLE}" AS r SET "capture_queued_at_ms" = %s FROM picked WHERE r."id" = picked."id" '
    'RETURNING r."run_id"'
)


def claim_captures(run_pks: list[int], *, at_ms: int | None = None) -> list[int]:
    """Claim the records of ``run_pks`` for one capture task each; returns the runs this call claimed, in the
    given order. One statement: the rows are locked as they are picked and the claim re-checked on the row's
    latest version; a row another transaction holds is skipped (that one is claiming or capturing it), so a run
    is returned to one caller only and claimers never wait on each other (nor deadlock). Runs without a record
    are never claimed."""
    wanted = list(dict.fromkeys(int(pk) for pk in run_pks))
    if not wanted:
        return []
    at_ms = now_ms() if at_ms is None else at_ms
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM_CAPTURES, [wanted, at_ms - queue_lease_ms(), at_ms])
        claimed = {row[0] for row in cursor.fetchall()}
    return [pk for pk in wanted if pk in claimed]


def release_capture(run_pk: int) -> None:
    """The capture task for ``run_pk`` has ended (or could not be queued): the next replay may queue it."""
    RunMemoryRecord.objects.filter(run_id=run_pk, capture_queued_at_ms__isnull=False).update(capture_queued_at_ms=None)


def _semantic_capture_on() -> bool:
    """Whether the learning plane wants semantic capture (its listener of the hook, registered at ready-time)."""
    return any(hooks.fire(hooks.SEMANTIC_CAPTURE_ENABLED))


def _delete_records(qs: QuerySet[RunMemoryRecord]) -> int:
    ids = list(qs.values_list("pk", flat=True))
    if ids:
        RunMemoryRecord.objects.filter(pk__in=ids).delete()
    return len(ids)


# ---- pruning --------------------------------------------------------------------------------------------


@dataclass
class PruneOutcome:
    ttl: list[str] = field(default_factory=list)
    overflow: list[str] = field(default_factory=list)

    def run_pks(self) -> set[int]:
        """The pruned runs' primary keys (their ids were formatted from them: each parses)."""
        return {cast(int, public_ids.parse_id(run_id, public_ids.RUN)) for run_id in (*self.ttl, *self.overflow)}


def _partition(pairs: list[tuple[int, int]], policy: RunMemoryPolicy, now: int) -> PruneOutcome:
    part = partition_for_retention([(public_ids.run_id(pk), ts) for pk, ts in pairs], policy, now)
    return PruneOutcome(ttl=[r for r, _ in part.ttl], overflow=[r for r, _ in part.overflow])


def prune_session(
    session_id: int, *, policy: RunMemoryPolicy, now: int | None = None, count_metrics: bool = True
) -> PruneOutcome:
    outcome = _partition(store.record_pairs(session_id), policy, now_ms() if now is None else now)
    doomed = outcome.run_pks()
    if doomed:
        store.delete_records_of_runs(sorted(doomed))
        if count_metrics:
            metrics.increment_many(
                {M + "pruned_ttl_total": len(outcome.ttl), M + "pruned_overflow_total": len(outcome.overflow)}
            )
    return outcome


def enforce_policy(
    *, policy: RunMemoryPolicy | None = None, source: str, apply: bool = True, now: int | None = None
) -> dict[str, Any]:
    """Rebuild/prune every session's records under the policy; write the bounded maintenance report.

    Also finds orphans: records whose run is missing or not terminal, and records whose session does not
    match their run's session; and stale scope keys. With apply=False nothing changes (dry run)."""
    policy = policy or current_policy()
    now = now_ms() if now is None else now
    diagnostics: list[dict[str, Any]] = []
    counts = {"ttl": 0, "overflow": 0, "orphan": 0, "rescoped": 0}

    def diag(action: str, reason: str, run_id: str | None, message: str) -> None:
        if len(diagnostics) < MAX_DIAGNOSTICS:
            diagnostics.append({"action": action, "reason": reason, "run_id": run_id, "path": None, "message": message})

    with transaction.atomic():
        orphans = RunMemoryRecord.objects.exclude(status__in=TERMINAL_STATUSES) | RunMemoryRecord.objects.exclude(
            run__status__in=TERMINAL_STATUSES
        )
        mismatched = [
            r.pk
            for r in RunMemoryRecord.objects.select_related("run").only("pk", "session_id", "run__session_id")
            if r.session_id != r.run.session_id
        ]
        orphan_ids = set(orphans.values_list("pk", flat=True)) | set(mismatched)
        for run_pk in RunMemoryRecord.objects.filter(pk__in=orphan_ids).values_list("run_id", flat=True):
            diag(
                "delete_run_memory",
                "orphan_record",
                public_ids.run_id(run_pk),
                "run-memory record without a matching terminal run deleted",
            )
        counts["orphan"] = len(orphan_ids)
        if apply and orphan_ids:
            RunMemoryRecord.objects.filter(pk__in=orphan_ids).delete()
        for session_id in RunMemoryRecord.objects.values_list("session_id", flat=True).distinct().order_by():
            if apply:
                outcome = prune_session(session_id, policy=policy, now=now)
            else:
                pairs = [
                    (public_ids.run_id(r), ts)
                    for r, ts in RunMemoryRecord.objects.filter(session_id=session_id).values_list(
                        "run_id", "recorded_at_ms"
                    )
                ]
                part = partition_for_retention(pairs, policy, now)
                outcome = PruneOutcome([r for r, _ in part.ttl], [r for r, _ in part.overflow])
            counts["ttl"] += len(outcome.ttl)
            counts["overflow"] += len(outcome.overflow)
            for run_id in outcome.ttl:
                diag("delete_run_memory", "ttl_expired", run_id, "expired run-memory record deleted")
            for run_id in outcome.overflow:
                diag("delete_run_memory", "session_overflow", run_id, "overflow run-memory record deleted")
        counts["rescoped"] = _repair_scopes(apply=apply, diag=diag)
        if apply and counts["orphan"]:
            metrics.increment(M + "pruned_orphan_total", counts["orphan"])
        report = {
            "checked_at_ms": now,
            "source": source,
            "index_rebuilt": bool(counts["rescoped"]),
            "pruned_ttl_count": counts["ttl"],
            "pruned_overflow_count": counts["overflow"],
            "pruned_orphan_file_count": counts["orphan"],
            "scan_error_count": 0,
            "prune_error_count": 0,
            "rescoped_record_count": counts["rescoped"],
            "applied": apply,
            "diagnostics": diagnostics,
        }
        if apply:
            MaintenanceReport.objects.create(source=source, report=report, checked_at_ms=now)
    return report


def _repair_scopes(*, apply: bool, diag: Callable[[str, str, str | None, str], None]) -> int:
    """Stale scope keys: a record's keys must equal its session's bound scope keys."""
    from memory.sessions import bound_scope_keys

    fixed = 0
    sessions = (
        Session.objects.filter(memory_records__isnull=False)
        .distinct()
        .select_related("persona")
        .prefetch_related("projects")
    )
    for session in sessions.iterator(chunk_size=200):
        keys = bound_scope_keys(session)  # records are indexed under the bindings; reads narrow them
        for record in RunMemoryRecord.objects.filter(session=session).prefetch_related("scopes"):
            indexed = sorted(s.scope_key for s in record.scopes.all())
            if record.scope_keys == keys and indexed == sorted(set(keys)):
                continue
            fixed += 1
            diag(
                "replace_run_memory_index",
                "stale_scope_keys",
                public_ids.run_id(record.run_id),
                "run-memory scope keys rebuilt from the session",
            )
            if apply:
                RunMemoryRecord.objects.filter(pk=record.pk).update(scope_keys=keys)
                RunMemoryScope.objects.filter(record=record).delete()
                RunMemoryScope.objects.bulk_create(
                    [
                        RunMemoryScope(record=record, scope_key=k, recorded_at_ms=record.recorded_at_ms)
                        for k in dict.fromkeys(keys)
                    ]
                )
    return fixed


@dataclass
class MissingRecords:
    """What rebuilding missing records does: ``rebuilt`` runs whose record is (re)written, and the records of
    other runs their retention prunes to make room (the older ones beyond ``max_tracked_per_session``, or
    expired), so that a report reconciles: records before + rebuilt - pruned = records after."""

    rebuilt: list[str] = field(default_factory=list)
    pruned_overflow: int = 0
    pruned_ttl: int = 0


def missing_records(*, apply: bool, policy: RunMemoryPolicy | None = None) -> MissingRecords:
    """Terminal runs that should have a record and do not (e.g. recorded while disabled). Rebuilds them.

    A run is missing only if retention would keep its record: with the session's records and the other
    candidates counted in, a run beyond ``max_tracked_per_session`` (or expired) is what pruning removed, not
    a loss, so a repair after ``--apply`` finds nothing and the counters do not move. A rebuilt record may push
    older records of its session out (issue 22.7): those are reported as pruned, predicted by a dry run and
    counted from what is stored after ``--apply``."""
    policy = policy or current_policy()
    result = MissingRecords()
    if not policy.enabled:
        return result
    now = now_ms()
    missing = Run.objects.filter(
        status__in=TERMINAL_STATUSES, memory_record__isnull=True, finished_at_ms__gte=now - policy.retention_ms
    )
    by_session: dict[int, list[tuple[int, int]]] = {}
    for session_id, pk, finished in missing.values_list("session_id", "pk", "finished_at_ms").iterator(2000):
        by_session.setdefault(session_id, []).append((pk, cast(int, finished)))  # finished_at_ms__gte: never NULL
    for session_id, pairs in sorted(by_session.items()):
        existing = store.record_pairs(session_id)
        outcome = _partition(existing + pairs, policy, now)
        doomed = outcome.run_pks()
        kept = sorted({pk for pk, _ in pairs} - doomed)
        rebuildable = [
            run
            for run in Run.objects.filter(pk__in=kept).order_by("id")
            if build_record(run_facts(run), redact_pii=policy.redact_pii) is not None
        ]
        if not rebuildable:  # nothing written here: what retention drops, enforce_policy prunes and reports
            continue
        if not apply:
            held = {pk for pk, _ in existing}
            result.rebuilt += [run.public_id for run in rebuildable]
            result.pruned_overflow += sum(1 for r in outcome.overflow if public_ids.parse_id(r, public_ids.RUN) in held)
            result.pruned_ttl += sum(1 for r in outcome.ttl if public_ids.parse_id(r, public_ids.RUN) in held)
            continue
        before = {pk for pk, _ in existing}
        written = []
        for run in rebuildable:
            with transaction.atomic():
                if record_terminal_run(run, policy=policy) is not None:
                    written.append(run)
        after = {pk for pk, _ in store.record_pairs(session_id)}
        result.rebuilt += [run.public_id for run in written if run.pk in after]
        gone = before - after
        expired = {public_ids.parse_id(r, public_ids.RUN) for r in outcome.ttl}
        result.pruned_ttl += len(gone & expired)
        result.pruned_overflow += len(gone - expired)
    return result


# ---- reading: bundle, search ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Bundle:
    entries: list[RecoveredEntry]
    truncated: bool
    valid: int


def ranked_text(entry: RecoveredEntry) -> str:
    """What the hybrid ranker reads of a record: its summary, previews and failure markers."""
    return " ".join(filter(None, (entry.summary, entry.request_preview, entry.outcome_preview, *entry.failure_markers)))


def rank_hybrid(
    entries: list[RecoveredEntry],
    query: str | None,
    vectors: Sequence[Sequence[float] | np.ndarray | None] | None = None,
    query_vectors: dict[str, np.ndarray] | None = None,
) -> list[RecoveredEntry]:
    """The shared hybrid ranker (``memory.ranking``) over the entries' ranked fields (with their stored
    embeddings when given; computed otherwise); irrelevant entries are dropped when there is a query; newest
    first without one (as §4.5 orders equal scores). ``query_vectors``: the query's embedding, kept there by
    its text, for a caller that ranks twice for one query (a memory-search: the bundle, then the hits)."""
    if query is None or not query.strip() or not entries:
        return entries
    texts = [ranked_text(entry) for entry in entries]
    count = len(entries)
    recency = [RECENCY_PRIOR * (count - 1 - index) / max(1, count - 1) for index in range(count)]
    if vectors is None or any(vector is None for vector in vectors):
        ranked = ranking.rank_texts(query.strip(), texts, priors=recency)
    else:
        query_vector = None if query_vectors is None else query_vectors.get(query.strip())
        if query_vector is None:
            query_vector = embedding.embed_query(query.strip())
            if query_vectors is not None:
                query_vectors[query.strip()] = query_vector
        ranked = ranking.rank(query.strip(), texts, np.array(vectors, dtype=np.float64), query_vector, priors=recency)
    return [entries[index] for index in ranked.order]


_BUNDLE_FIELDS = (
    "id",
    "run_id",
    "recorded_at_ms",
    "status",
    "request_preview",
    "outcome_preview",
    "artifact_ids",
    "failure_markers",
    "summary",
)
"""What a prompt's bundle reads of a record: its key and its ``RecoveredEntry`` (``entry_of``) ..."""
_BUNDLE_FIELDS_RANKED = (*_BUNDLE_FIELDS, "embedding")
"""... and, for the hybrid ranker with a query, its stored embedding (read only for records this process does
not hold: ``_RECORD_VECTORS``)."""

RECORD_VECTORS_CACHED = 20_000
_RECORD_VECTORS: BoundedLRU[tuple[int, str], np.ndarray] = BoundedLRU(RECORD_VECTORS_CACHED)
"""Stored embeddings of run-memory records by (record id, ranked text). A record's embedding is written with it
and computed from that very text (``record_terminal_run``), so the pair names one stored value. Every run a
session opens ranks its newest records against the input: reading their 2 KB vectors again each time cost
~1.3 ms of the 1.7 ms read (32 records); held here (~2 KB each, bounded), a record's vector is read once per
process, or never when this process wrote it."""


def _remember_vector(pk: int, entry: RecoveredEntry, stored: list[float] | None) -> None:
    if stored is not None:
        _RECORD_VECTORS.put_many({(pk, ranked_text(entry)): np.asarray(stored, dtype=np.float64)})


def _record_vectors(pks: list[int], entries: list[RecoveredEntry]) -> list[np.ndarray | None]:
    """The stored embeddings of these records (None where a record has none), from ``_RECORD_VECTORS``, the
    ones it lacks read in one statement (with their text, so a record rewritten meanwhile is keyed by what
    it holds now)."""
    keys = [(pk, ranked_text(entry)) for pk, entry in zip(pks, entries, strict=True)]
    found: dict[tuple[int, str], np.ndarray | None] = dict(_RECORD_VECTORS.get_many(keys))
    missing = [pk for pk, text in keys if (pk, text) not in found]
    if missing:
        fresh: dict[tuple[int, str], np.ndarray] = {}
        for row in sql.select(
            RunMemoryRecord,
            'WHERE "id" = ANY(%s)',
            [missing],
            fields=_BUNDLE_FIELDS_RANKED,
            float_arrays=("embedding",),
        ):
            key = (row[0], ranked_text(_bundle_entry(row)))
            found[key] = row[9]
            if row[9] is not None:
                fresh[key] = row[9]
            if key not in keys:  # rewritten since the first read: its new text and vector stand for it
                found[keys[pks.index(row[0])]] = row[9]
        _RECORD_VECTORS.put_many(fresh)
    return [found.get(key) for key in keys]


_UNRANKED = [field for field in RunMemoryRecord._meta.concrete_fields if field.name != "embedding"]


def _with_vectors(records: list[RunMemoryRecord]) -> list[RunMemoryRecord]:
    """Records read without their embedding (deferred), given the stored one from ``_record_vectors``."""
    vectors = _record_vectors([record.pk for record in records], [entry_of(record) for record in records])
    for record, vector in zip(records, vectors, strict=True):
        record.embedding = None if vector is None else vector.tolist()
    return records


def _select_records(tail: str, params: list[Any]) -> list[RunMemoryRecord]:
    """``sql.select_instances`` of the records ``tail`` picks, each with its stored embedding (``_with_vectors``:
    the 2 KB arrays are not read again for records this process holds)."""
    rows = sql.select(RunMemoryRecord, tail, params, fields=tuple(field.name for field in _UNRANKED))
    attnames = [field.attname for field in _UNRANKED]
    return _with_vectors([RunMemoryRecord.from_db("default", attnames, row) for row in rows])


def _bundle_entry(row: tuple[Any, ...]) -> RecoveredEntry:
    """``entry_of`` of a record read as ``_BUNDLE_FIELDS``."""
    _, run_pk, recorded_at_ms, status, request_preview, outcome_preview, artifact_ids, failure_markers, summary = row[
        :9
    ]
    return RecoveredEntry(
        run_id=public_ids.run_id(run_pk),
        recorded_at_ms=recorded_at_ms,
        status=status,
        request_preview=request_preview,
        outcome_preview=outcome_preview,
        artifact_ids=list(artifact_ids),
        failure_markers=list(failure_markers),
        summary=summary,
    )


def recovered_bundle(
    session: Session,
    query: str | None,
    *,
    usage: str = "preview",
    policy: RunMemoryPolicy | None = None,
    ranker: str = "lexical",
    counts: dict[str, int] | None = None,
) -> Bundle:
    """Rank the current session's records against the pending input (§4.5, or the hybrid ranker when
    ``ranker`` is ``hybrid``: irrelevant records are then left out); read-time expiry prunes. For a prompt
    (``usage="prompt"``) the ranked and omitted counters move: added into ``counts`` when given (the caller
    writes them, with its own, in one statement), in one statement here otherwise."""
    policy = policy or current_policy()
    if not policy.enabled or policy.max_prompt_entries == 0:
        return Bundle([], False, 0)
    now = now_ms()
    ranked = ranker == "hybrid" and bool(query and query.strip())
    rows = sql.select(  # hand-written, and only what the bundle reads (the vectors, to rank, held per process)
        RunMemoryRecord,
        'WHERE "session_id" = %s ORDER BY "recorded_at_ms" DESC, "run_id" DESC LIMIT %s',
        [session.pk, policy.max_tracked_per_session + 8],
        fields=_BUNDLE_FIELDS,
    )
    expired = [row[0] for row in rows if now - row[2] > policy.retention_ms]
    if expired:
        _prune_expired(expired)
        gone = set(expired)
        rows = [row for row in rows if row[0] not in gone]
    kept = rows[: policy.max_tracked_per_session]
    entries = [_bundle_entry(row) for row in kept]
    return _ranked_bundle(
        entries,
        _record_vectors([row[0] for row in kept], entries) if ranked else None,
        query,
        policy=policy,
        usage=usage,
        ranker=ranker,
        counts=counts,
    )


def _prune_expired(pks: list[int]) -> None:
    """Read-time expiry: delete these records (past retention) and count them."""
    with transaction.atomic():
        RunMemoryRecord.objects.filter(pk__in=pks).delete()
    metrics.increment(M + "pruned_ttl_total", len(pks))


def _ranked_bundle(
    valid: list[RecoveredEntry],
    vectors: Sequence[Sequence[float] | np.ndarray | None] | None,
    query: str | None,
    *,
    policy: RunMemoryPolicy,
    usage: str,
    ranker: str,
    counts: dict[str, int] | None,
    query_vectors: dict[str, np.ndarray] | None = None,
) -> Bundle:
    """The bundle of the session's valid (unexpired, at most ``max_tracked_per_session``, newest first)
    entries: ranked, cut to ``max_prompt_entries``; for a prompt, its counters (see ``recovered_bundle``)."""
    if ranker == "hybrid":
        ordered = rank_hybrid(valid, query, vectors, query_vectors)
    else:
        ordered = [entry for _, entry in rank_entries(valid, query)]
    taken = ordered[: policy.max_prompt_entries]
    if usage == "prompt":
        amounts = {M + "prompt_limit_omitted_total": len(valid) - len(taken)}
        if query and query.strip():
            amounts[M + "ranked_candidates_total"] = len(valid)
        if counts is None:
            metrics.increment_many(amounts)
        else:
            for name, amount in amounts.items():
                counts[name] = counts.get(name, 0) + amount
    return Bundle(taken, len(valid) > len(taken), len(valid))


SEARCH_RECORDS_MAX = 500  # the newest records one memory-search reads


def search_records(
    session: Session, scope_keys: list[str], *, policy: RunMemoryPolicy | None = None
) -> list[RunMemoryRecord]:
    """Records visible to memory-search (``search_visibility``, issue 19.3): the session's own; with
    ``learning_scopes`` also those indexed under one of the session's effective persona/project keys
    (``scope_keys``, already narrowed to its owner's grants) whose own session's owner is still granted that key
    too - never through ``workspace:default`` or a session key; with ``workspace`` every record."""
    policy = policy or current_policy()
    if not policy.enabled:
        return []
    if policy.search_visibility == SEARCH_VISIBILITY_LEARNING_SCOPES:
        qs = RunMemoryRecord.objects.filter(Q(session=session) | Q(Exists(_shared_scope(scope_keys))))
        records = _with_vectors(list(qs.defer("embedding").order_by("-recorded_at_ms")[:SEARCH_RECORDS_MAX]))
    else:  # the session's own, or every record: hand-written (the ORM's statement for these, uncompiled)
        own = policy.search_visibility != SEARCH_VISIBILITY_WORKSPACE
        records = _select_records(
            ('WHERE "session_id" = %s ' if own else "") + 'ORDER BY "recorded_at_ms" DESC LIMIT %s',
            [session.pk, SEARCH_RECORDS_MAX] if own else [SEARCH_RECORDS_MAX],
        )
    now = now_ms()
    expired = [r.pk for r in records if now - r.recorded_at_ms > policy.retention_ms]
    if expired:
        with transaction.atomic():
            RunMemoryRecord.objects.filter(pk__in=expired).delete()
        metrics.increment(M + "pruned_ttl_total", len(expired))
    return [r for r in records if r.pk not in expired]


def _own_records_for_search(
    session: Session,
    query: str | None,
    *,
    policy: RunMemoryPolicy,
    ranker: str,
    query_vectors: dict[str, np.ndarray],
) -> tuple[Bundle, list[RunMemoryRecord]] | None:
    """A memory-search under ``session_only`` visibility: ``recovered_bundle(usage="preview")`` and
    ``search_records`` from one read of the session's newest records (the bundle's are the first
    ``max_tracked_per_session + 8`` of the search's, in the bundle's order), expired ones pruned once. None when
    they cannot share it (another visibility, disabled, a bundle wider than the search's read, or a full read
    that expiry thinned: then the two reads are made as before)."""
    if not policy.enabled or policy.search_visibility != SEARCH_VISIBILITY_SESSION_ONLY:
        return None
    window = policy.max_tracked_per_session + 8
    if window > SEARCH_RECORDS_MAX:
        return None
    records = _select_records(
        'WHERE "session_id" = %s ORDER BY "recorded_at_ms" DESC, "run_id" DESC LIMIT %s',
        [session.pk, SEARCH_RECORDS_MAX],
    )
    now = now_ms()
    expired = {r.pk for r in records if now - r.recorded_at_ms > policy.retention_ms}
    if expired and len(records) == SEARCH_RECORDS_MAX:
        return None  # the separate reads would each see further records once these are gone
    if expired:
        _prune_expired(sorted(expired))
    if policy.max_prompt_entries == 0:
        bundle = Bundle([], False, 0)
    else:
        kept = [r for r in records[:window] if r.pk not in expired][: policy.max_tracked_per_session]
        bundle = _ranked_bundle(
            [entry_of(r) for r in kept],
            [r.embedding for r in kept],
            query,
            policy=policy,
            usage="preview",
            ranker=ranker,
            counts=None,
            query_vectors=query_vectors,
        )
    return bundle, [r for r in records if r.pk not in expired]


EXCERPT_CHARS = 180


def search_hits(
    *,
    session: Session,
    scope_keys: list[str],
    query: str | None,
    ranker: str = "lexical",
    policy: RunMemoryPolicy | None = None,
) -> list[dict[str, Any]]:
    """memory-search hits for recovered runs (§4.21): the records ``search_records`` lets the session see.
    ``lexical``: +100 per field (summary, request_preview, outcome_preview, failure_markers) that contains the
    whole query, +10 per whitespace term it contains, plus the §4.5 score; zero scores are dropped. ``hybrid``:
    the shared hybrid ranker's order, scored on the learnings' scale. Without a query every record, score 0.
    ``prompt_eligible`` says whether the record would enter the session's next prompt."""
    policy = policy or current_policy()
    normalized = (query or "").strip().lower() or None
    query_vectors: dict[str, np.ndarray] = {}
    shared = _own_records_for_search(session, query, policy=policy, ranker=ranker, query_vectors=query_vectors)
    if shared is None:
        bundle = recovered_bundle(session, query, usage="preview", policy=policy, ranker=ranker)
        records = search_records(session, scope_keys, policy=policy)
    else:
        bundle, records = shared
    eligible = {e.run_id for e in bundle.entries}
    if ranker == "hybrid":
        return _hybrid_hits(records, normalized, eligible, query_vectors)
    hits = []
    for record in records:
        entry = entry_of(record)
        score = 0
        matched = []
        if normalized:
            fields = {
                "summary": entry.summary,
                "request_preview": entry.request_preview or "",
                "outcome_preview": entry.outcome_preview or "",
                "failure_markers": " ".join(entry.failure_markers),
            }
            terms = normalized.split()
            for name, value in fields.items():
                low = value.lower()
                field_score = (100 if normalized in low else 0) + sum(10 for t in terms if t in low)
                if field_score:
                    matched.append(name)
                    score += field_score
            score += score_entry(entry, query)
            if score == 0:
                continue
        hits.append(_hit(entry, record, score, eligible, matched))
    return hits


def _hit(
    entry: RecoveredEntry, record: RunMemoryRecord, score: int, eligible: set[str], matched: list[str]
) -> dict[str, Any]:
    summary = entry.summary
    return {
        "kind": "recovered_run",
        "source_id": entry.run_id,
        "title": f"Recovered run {entry.run_id}",
        "excerpt": summary if len(summary) <= EXCERPT_CHARS else summary[:EXCERPT_CHARS] + "…",
        "score": score,
        "timestamp_ms": entry.recorded_at_ms,
        "scope": f"session:{public_ids.session_id(record.session_id)}",
        "prompt_eligible": entry.run_id in eligible,
        "matched_fields": matched,
    }


def _hybrid_hits(
    records: list[RunMemoryRecord],
    query: str | None,
    eligible: set[str],
    query_vectors: dict[str, np.ndarray] | None = None,
) -> list[dict[str, Any]]:
    """Hits ranked by the hybrid ranker (scores on the learnings' scale: fused position × 1000)."""
    pairs = [(record, entry_of(record)) for record in records]
    if not query:
        return [_hit(entry, record, 0, eligible, []) for record, entry in pairs]
    ranked = rank_hybrid([entry for _, entry in pairs], query, [record.embedding for record, _ in pairs], query_vectors)
    by_run = {entry.run_id: record for record, entry in pairs}
    return [
        _hit(
            entry,
            by_run[entry.run_id],
            round(ranking.SEARCH_SCORE_SCALE * (1 - position / max(1, len(ranked)))),
            eligible,
            ["summary"],
        )
        for position, entry in enumerate(ranked)
    ]


def _shared_scope(scope_keys: list[str]) -> QuerySet[RunMemoryScope]:
    """The outer record's scope rows that are one of these persona/project keys and that the record's own
    session owner is granted now (or is an operator)."""
    shared = [key for key in scope_keys if key.startswith(("persona:", "project:"))]
    owner = OuterRef("record__session__owner")
    granted_personas = (
        Persona.objects.filter(agent_grants__user=owner)
        .annotate(key=Concat(Value("persona:"), "persona_id", output_field=CharField()))
        .values("key")
    )
    granted_projects = (
        Project.objects.filter(agent_grants__user=owner)
        .annotate(key=Concat(Value("project:"), "project_id", output_field=CharField()))
        .values("key")
    )
    return RunMemoryScope.objects.filter(
        Q(record=OuterRef("pk")),
        Q(scope_key__in=shared),
        Q(record__session__owner__is_staff=True)
        | Q(scope_key__in=granted_personas)
        | Q(scope_key__in=granted_projects),
    )


# ---- status ---------------------------------------------------------------------------------------------


def latest_report() -> dict[str, Any] | None:
    row = MaintenanceReport.objects.order_by("-id").first()
    return row.report if row else None


def status_view() -> dict[str, Any]:
    policy = current_policy()
    now = now_ms()
    per_session = RunMemoryRecord.objects.values("session_id").annotate(n=Count("id"))
    stale = (
        RunMemoryRecord.objects.filter(recorded_at_ms__lt=now - policy.retention_ms).count()
        if policy.enabled
        else RunMemoryRecord.objects.count()
    )
    counters = metrics.read(M + name for name in METRIC_NAMES)
    return {
        "policy": policy.to_dict(),
        "policy_revision": policy_revision(),
        "maintenance": latest_report(),
        "indexed_session_count": per_session.count(),
        "indexed_record_count": RunMemoryRecord.objects.count(),
        "indexed_scope_count": RunMemoryScope.objects.values("scope_key").distinct().count(),
        "stale_indexed_record_count": stale,
        "metrics": {name: counters[M + name] for name in METRIC_NAMES},
    }


def health_warnings(status: dict[str, Any]) -> list[dict[str, str]]:
    warnings = []
    report = status.get("maintenance") or {}
    if report.get("scan_error_count") or report.get("prune_error_count"):
        warnings.append(
            {
                "code": "run_memory_maintenance_failed",
                "level": "warning",
                "message": "run-memory maintenance reported scan or prune errors",
            }
        )
    if status["stale_indexed_record_count"]:
        warnings.append(
            {
                "code": "run_memory_stale_indexed_records",
                "level": "warning",
                "message": f"{status['stale_indexed_record_count']} run-memory records are past "
                "retention and still indexed",
            }
        )
    if status["metrics"]["skipped_unreadable_total"]:
        warnings.append(
            {
                "code": "run_memory_unreadable_records",
                "level": "warning",
                "message": f"{status['metrics']['skipped_unreadable_total']} unreadable run-memory "
                "records were skipped",
            }
        )
    repaired = sum(report.get(k, 0) for k in ("pruned_orphan_file_count", "rescoped_record_count"))
    if repaired and not (report.get("scan_error_count") or report.get("prune_error_count")):
        warnings.append(
            {
                "code": "run_memory_maintenance_repaired",
                "level": "info",
                "message": f"run-memory maintenance repaired {repaired} records",
            }
        )
    return warnings
