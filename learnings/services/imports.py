"""Bulk import of memories (issue 23.3): facts from another memory system published as learnings in batches,
with the gates of the one-at-a-time path (``candidate_create`` then ``candidate_publish``) applied to the whole
batch at once.

Per item: the candidate's validation (§3.4: scope, kind, content rules, the secret guard, confidence, expiry)
and the learning's (§1.6). Per batch: items already imported (their ``external_id`` in their scope) are
skipped; duplicates inside the batch and items equivalent to a live prompt-visible learning reuse it (as a
publication does); an item about the same subject as a live learning, or as an earlier item of the batch,
with another value is a conflict: its candidate is kept pending and queued for review, never published over
the other. Rows are written with one ``COPY`` per table - candidates (a published one already in its final
state, pointing at its learning: the keys of both tables are drawn first), learnings (with their embeddings,
computed in one batch), and the audit rows each transition writes on the single path (candidate create, with
the screen's flag; learning publish; candidate publish) - inside one transaction per batch, under the same
per-(scope, kind) advisory locks as a publication.

A batch is imported in two stages: :func:`prepare_batch` (every per-item gate, each run once per item, and
the embeddings: pure Python, no database) and :func:`write_batch` (the reads and writes, one transaction).
:func:`import_batches` prepares the next batch in a worker thread (or process) while the current one is
written, so the database's share of the work overlaps with Python's; a big import loads with the vector
index dropped and builds it again at the end (the section at the end of this module)."""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import numpy as np
from django.db import DatabaseError, connection, models, transaction
from django.db.models import signals
from django.db.models.base import ModelState

from learnings import gate
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
from learnings.services.candidates import _new_candidate
from learnings.services.cleaning import (
    clean_evidence_refs,
    clean_expiry,
    clean_source,
    clean_stated_at,
    normalise_scope,
)
from learnings.services.queue import enqueue_review_on_commit
from learnings.services.rows import candidate_publish_row, learning_publish_row, validated_learning
from learnings.speakers import without_label
from learnings.validation import LearningScope
from learnings.vocabulary import SEMANTIC_KINDS
from memory import metrics, public_ids
from memory import sql as memory_sql
from memory.audit import actor_label
from memory.clock import now_ms
from memory.embedding import embed_many
from memory.errors import AppError
from memory.models import AuditEvent

M = TypeVar("M", bound=models.Model)

MAX_EXTERNAL_ID = 200
REASON = "imported by an operator"
SCREEN_FLAGGED_METRIC = "learning.screening.flagged_total"

# The learnings' HNSW index (migration 0002, where the server has pgvector): its definition, the session lock
# an import holds while it loads without it, and when ``auto`` loads without it (below).
VECTOR_INDEX = "learning_embedding_hnsw_idx"
VECTOR_INDEX_SQL = (
    "CREATE INDEX {concurrently} IF NOT EXISTS learning_embedding_hnsw_idx ON learnings_learning "
    "USING hnsw (embedding_vec vector_cosine_ops) WHERE status IN ('active', 'provisional')"
)
VECTOR_INDEX_LOCK = "learnings:vector-index"
TEXT_INDEX = "learning_search_tsv_idx"  # the GIN index of the lexical arm (migration 0002)
VECTOR_INDEX_BUILD_MEMORY = "256MB"  # maintenance_work_mem of the rebuild: the graph of ~100k rows in memory
REBUILD_MIN_ITEMS = 1000
REBUILD_TABLE_FACTOR = 2
INDEX_MODES = ("auto", "keep", "rebuild")
PREPARE_MODES = ("auto", "process", "thread")
PROCESS_MIN_CORES = 2  # auto prepares in a process from this many cores on (see _preparing_pool)


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


LIVE_PROMPT_VISIBLE_SQL = " AND ".join(condition.sql("l") for condition in (*gate.VISIBLE, *gate.PROMPT_VISIBLE))
"""``Learning.objects.live(at).prompt_visible()`` over ``learnings_learning l`` (``learnings.gate`` renders both),
with ``%(at)s``: the learnings a publication is checked against (equivalence, conflict)."""
KNOWN_SQL = (
    "SELECT scope_key, external_id FROM learnings_learningcandidate "
    "WHERE scope_key = ANY(%(keys)s) AND external_id = ANY(%(ids)s)"
)
EQUIVALENT_SQL = (  # the gate's own SQL, no input
    "SELECT l.id, l.scope_key, l.kind, l.content_key FROM learnings_learning l "  # noqa: S608
    "WHERE l.scope_key = ANY(%(keys)s) "
    f"AND l.content_key = ANY(%(content_keys)s) AND {LIVE_PROMPT_VISIBLE_SQL} ORDER BY l.id"
)
SUBJECTS_SQL = (  # the gate's own SQL, no input
    "SELECT l.scope_key, l.kind, l.subject_key, l.content_key FROM learnings_learning l "  # noqa: S608
    "WHERE l.scope_key = ANY(%(keys)s) AND l.subject_key = ANY(%(subject_keys)s) AND l.kind = ANY(%(kinds)s) "
    f"AND {LIVE_PROMPT_VISIBLE_SQL}"
)


def _rows(sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """A batch's reads take its keys as arrays (``= ANY(%(…)s)``): one parameter each, where ``__in`` lists
    put a thousand placeholders in the statement, to build, send and parse for every batch."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


@dataclass
class PreparedBatch:
    """A batch after every check that needs no database (:func:`prepare_batch`): what was refused, and each
    valid item as its candidate and the learning a publication of it makes - validated, embedded - which
    :func:`write_batch` stores (or not: already imported, equivalent, held)."""

    outcome: ImportOutcome
    built: list[tuple[LearningCandidate, Learning]]
    # each learning's embedding in the binary form COPY writes (memory.sql.packed_float8_arrays), made here,
    # beside the vectors, rather than by the writer
    embeddings_packed: list[memory_sql.PackedFloat8Array] = field(default_factory=list)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (a worker process hands the batch back): the embeddings travel once, packed, rather than
        also as lists of Python floats. The pickled batch is the worker's last use of it: its learnings lose
        their lists meanwhile, and get them back (the same values) when it is unpickled."""
        if len(self.embeddings_packed) != len(self.built):
            return self.__dict__
        for _, learning in self.built:
            learning.embedding = None
        return dict(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if len(self.embeddings_packed) == len(self.built):
            for (_, learning), packed in zip(self.built, self.embeddings_packed, strict=True):
                learning.embedding = cast(np.ndarray, memory_sql.float_array(packed)).tolist()  # never NULL


def prepare_batch(items: list[ImportItem], *, publish_tier: str = PublishTier.ACTIVE) -> PreparedBatch:
    """Steps 1 and 4 of the module's description, which read no rows (safe in a worker thread): each item as
    the candidate ``candidate_create`` would build (scope, kind, content rules, the secret guard, the
    poisoning screen, confidence, expiry, provenance), the learning ``candidate_publish`` would build from
    it (§1.6; the secret guard's answer on the same kind and content is the candidate's), and every
    learning's embedding in one call for the batch. Timestamps are set when the batch is written."""
    outcome = ImportOutcome()
    at = now_ms()
    candidates: list[LearningCandidate] = []
    seen: set[tuple[str, str]] = set()
    make_candidate = instance_maker(LearningCandidate)
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
                make=make_candidate,
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
        candidates.append(candidate)
    # What Learning.save embeds (the text without its speaker label), rounded as a stored embedding is. The
    # texts are embedded shortest first (then put back in order): the model's chunks then pad each text to
    # lengths like its own, and a text's vector does not depend on its chunk (padding is masked out).
    texts = [without_label(c.content) for c in candidates]
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    vectors = np.empty((len(texts), 0))
    if texts:
        by_length = np.round(embed_many([texts[i] for i in order]).astype(np.float64), 6)
        vectors = np.empty_like(by_length)
        vectors[order] = by_length
    label = policy_actor_for(PolicyDecision.MANUAL)
    status = status_for_tier(publish_tier)
    built = []
    rows = vectors.tolist()
    make_learning = instance_maker(
        Learning,
        status=status,
        publish_tier=publish_tier,
        policy_decision=PolicyDecision.MANUAL,
        policy_actor=label,
        verification_status=VerificationStatus.UNVERIFIED,
    )
    for c, vector in zip(candidates, rows, strict=True):
        learning = make_learning(
            scope_kind=c.scope_kind,
            scope_id=c.scope_id,
            scope_key=c.scope_key,
            kind=c.kind,
            sensitivity=c.sensitivity,
            content=c.content,
            confidence=c.confidence,
            source=c.source,
            evidence_refs=c.evidence_refs,
            expires_at_ms=c.expires_at_ms,
            content_key=c.content_key,
            subject_key=c.subject_key,
            stated_at_ms=c.stated_at_ms,
            embedding=vector,
        )
        built.append((c, validated_learning(learning, secret_guarded=(c.kind, c.content))))
    return PreparedBatch(outcome, built, memory_sql.packed_float8_arrays(vectors) if rows else [])


def instance_maker(model: type[M], **common: Any) -> Callable[..., M]:
    """A function that makes ``model(**common, **fields)`` - the same instance - by copying the attributes of
    one such instance built once (for a batch) and setting ``fields`` over them, rather than running the
    model's ``__init__`` (its loop over every field costs ~10-20 us an instance, for a learning a tenth of
    what preparing a fact costs). As ``__init__`` does, each field with a callable default that is not given
    gets its own value (``now_ms()``, a new dict or list); ``fields`` must be plain concrete fields (attribute
    name = field name, no descriptor on write); the state is new. With an init signal listening, the model's
    ``__init__`` itself is used. ``tests/learnings/test_import_prepare.py`` compares the two."""
    if signals.pre_init.has_listeners(model) or signals.post_init.has_listeners(model):
        return lambda **fields: model(**common, **fields)
    template = dict(model(**common).__dict__)
    del template["_state"]
    fresh = [
        (f.attname, f.get_default)
        for f in model._meta.concrete_fields
        if f.has_default() and callable(f.default) and f.attname not in common
    ]

    def make(**fields: Any) -> M:
        instance = model.__new__(model)
        stored = instance.__dict__
        stored.update(template)
        stored["_state"] = ModelState()
        for attname, default in fresh:
            if attname not in fields:
                stored[attname] = default()
        stored.update(fields)
        return instance

    return make


def import_batch(items: list[ImportItem], *, actor: object, publish_tier: str = PublishTier.ACTIVE) -> ImportOutcome:
    """Import one batch in one transaction (see the module's description); returns what happened to each."""
    return write_batch(prepare_batch(items, publish_tier=publish_tier), actor=actor)


def _quiet_worker() -> None:
    """A preparing process leaves Ctrl-C to the command (which stops, keeps what was committed, and builds the
    vector index again) and tokenises on its one core (the tokenizer's threads do not survive a fork)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ["TOKENIZERS_PARALLELISM"] = "false"


def _prepare(batch: list[ImportItem], publish_tier: str) -> PreparedBatch:
    """:func:`prepare_batch` as a worker process runs it (found by name there, so picklable)."""
    return prepare_batch(batch, publish_tier=publish_tier)


def _preparing_pool(prepare_in: str) -> Executor:
    """Where the next batch is prepared while one is written: a forked process (``process``; ``auto`` where
    fork exists and there are at least ``PROCESS_MIN_CORES`` cores) - the gates and the embeddings are pure
    Python and read no rows, so they run beside the writer rather than under its GIL; the prepared batch
    comes back pickled - or a thread (``thread``, and ``auto`` elsewhere). A process costs some CPU more
    (pickling, a second interpreter) but the writer's Python no longer waits for the preparer's: on two cores
    shared with the server, 10,000 facts, a process measured 2,046-2,219 facts/s and a thread 1,768-1,919
    (three runs each, alternated)."""
    if prepare_in not in PREPARE_MODES:
        raise ValueError(f"prepare_in must be one of {', '.join(PREPARE_MODES)}")
    forks = "fork" in multiprocessing.get_all_start_methods()
    if prepare_in == "process" or (prepare_in == "auto" and forks and (os.cpu_count() or 1) >= PROCESS_MIN_CORES):
        return ProcessPoolExecutor(
            max_workers=1, mp_context=multiprocessing.get_context("fork"), initializer=_quiet_worker
        )
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="import-prepare")


def import_batches(
    batches: Iterable[list[ImportItem]],
    *,
    actor: object,
    publish_tier: str = PublishTier.ACTIVE,
    expected: int | None = None,
    vector_index: str = "auto",
    prepare_in: str = "auto",
) -> Generator[ImportOutcome, None, None]:
    """:func:`import_batch` of each batch in turn, one transaction each, with the next batch prepared
    (:func:`prepare_batch`: its gates and embeddings, which read no rows) in a worker process (or thread:
    ``prepare_in``, :func:`_preparing_pool`) while this one is written: the database's share of a batch and
    the writer's overlap with the preparation of the next. Batches are still written one after the other, in
    order; the outcome of each is yielded as soon as it is committed (an interrupted import keeps every batch
    yielded so far). ``expected`` (how many items the batches hold, when known) and ``vector_index``
    (``auto``, ``keep``, ``rebuild``) say whether the rows are loaded with the vector index dropped and the
    index built again at the end (:func:`rebuilds_vector_index`)."""
    rebuild = rebuilds_vector_index(expected, vector_index)
    with _tidied_text_index(), _without_vector_index(rebuild), _preparing_pool(prepare_in) as pool:
        pending = iter(batches)

        def ahead() -> Future[PreparedBatch] | None:
            batch = next(pending, None)
            return None if batch is None else pool.submit(_prepare, batch, publish_tier)

        following = ahead()
        while following is not None:
            prepared = following.result()
            following = ahead()
            yield write_batch(prepared, actor=actor)


@transaction.atomic
def write_batch(prepared: PreparedBatch, *, actor: object) -> ImportOutcome:
    """Steps 2, 3 and 5 of the module's description for a prepared batch, in one transaction."""
    outcome = prepared.outcome
    built = prepared.built
    if not built:
        return outcome
    at = now_ms()
    scope_keys = {candidate.scope_key for candidate, _ in built}
    _locks((candidate.scope_key, candidate.kind) for candidate, _ in built)
    # 2. Already imported (an earlier run, or another process): skipped - the import is idempotent.
    keys = sorted(scope_keys)
    known = set(
        _rows(
            KNOWN_SQL,
            {"keys": keys, "ids": [c.external_id for c, _ in built]},
        )
    )
    fresh = [(c, learning) for c, learning in built if (c.scope_key, c.external_id) not in known]
    outcome.already_imported += len(built) - len(fresh)
    if not fresh:
        return outcome
    # 3. Equivalence and conflict against the live learnings of these scopes (one read), then in the batch.
    live = _rows(
        EQUIVALENT_SQL,
        {"keys": keys, "at": at, "content_keys": sorted({c.content_key for c, _ in fresh} | {""})},
    )
    equivalent: dict[tuple[str, str, str], int] = {}
    for pk, scope_key, kind, content_key in live:
        equivalent.setdefault((scope_key, kind, content_key), pk)
    subjects = _rows(
        SUBJECTS_SQL,
        {
            "keys": keys,
            "at": at,
            "subject_keys": sorted({c.subject_key for c, _ in fresh if c.subject_key}),
            "kinds": sorted(SEMANTIC_KINDS),
        },
    )
    subject_values: dict[tuple[str, str, str], set[str]] = {}
    for scope_key, kind, subject_key, content_key in subjects:
        subject_values.setdefault((scope_key, kind, subject_key), set()).add(content_key)
    to_publish: list[tuple[LearningCandidate, Learning]] = []
    reuse: list[tuple[LearningCandidate, tuple[str, str, str]]] = []
    held: list[LearningCandidate] = []
    publishing: set[tuple[str, str, str]] = set()  # the keys of to_publish
    for c, learning in fresh:
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
        to_publish.append((c, learning))
        publishing.add(key)
    # 4. The candidates, then the learnings (validated and embedded when the batch was prepared), each row
    # written once in its final state: the keys are drawn first, so that a published candidate is stored
    # with its learning (the two foreign keys are checked at commit) rather than stored pending and updated.
    candidates = [c for c, _ in fresh]
    learnings = [learning for _, learning in to_publish]
    for c, pk in zip(candidates, memory_sql.draw_keys(LearningCandidate, len(candidates)), strict=True):
        c.pk = pk
        c.created_at_ms = c.updated_at_ms = at
    for (c, learning), pk in zip(to_publish, memory_sql.draw_keys(Learning, len(learnings)), strict=True):
        learning.pk = pk
        learning.created_at_ms = learning.published_at_ms = learning.updated_at_ms = at
        learning.source_candidate = c
        equivalent.setdefault((learning.scope_key, learning.kind, learning.content_key), pk)
    # 5. The candidates' move to published, and every audit row of the single path.
    published = [(c, learning.pk, REASON) for c, learning in to_publish]
    published += [(c, equivalent[key], f"equivalent to {public_ids.learning_id(equivalent[key])}") for c, key in reuse]
    for c, pk, _ in published:
        c.state = CandidateState.PUBLISHED
        c.published_learning_id = pk
    memory_sql.copy_keyed_instances(LearningCandidate, candidates)
    packed = None
    if len(prepared.embeddings_packed) == len(built):
        pairs = zip(built, prepared.embeddings_packed, strict=True)
        packed_of = {id(learning): value for (_, learning), value in pairs}
        packed = {"embedding": [packed_of[id(learning)] for learning in learnings]}
    memory_sql.copy_keyed_instances(Learning, learnings, packed=packed)
    who = actor_label(actor)
    created_row = instance_maker(
        AuditEvent, subject_type="learning_candidate", action="create", actor=who, to_state=CandidateState.PENDING
    )
    audit = [
        created_row(
            subject_id=c.public_id,
            at_ms=at,
            data={
                "origin": c.origin,
                "kind": c.kind,
                "scope": c.scope_key,
                "external_id": c.external_id,
                **_screen_audit(c),
            },
        )
        for c in candidates
    ]
    row = instance_maker(AuditEvent)
    audit += [
        learning_publish_row(
            learning,
            cast("LearningCandidate", learning.source_candidate).public_id,  # set when built
            who=who,
            reason=REASON,
            at_ms=at,
            make=row,
        )
        for learning in learnings
    ]
    audit += [
        candidate_publish_row(c.public_id, public_ids.learning_id(pk), who=who, reason=reason, at_ms=at, make=row)
        for c, pk, reason in published
    ]
    memory_sql.copy_instances(AuditEvent, audit)
    flagged = sum(c.screen_flagged for c in candidates)
    if flagged:  # as candidate_create counts them, in one statement for the batch
        metrics.increment(SCREEN_FLAGGED_METRIC, flagged)
    for c in held:
        enqueue_review_on_commit(c.pk)
    outcome.published += len(learnings)
    outcome.reused += len(reuse)
    outcome.held += len(held)
    return outcome


def _screen_audit(candidate: LearningCandidate) -> dict[str, Any]:
    """What a new candidate's audit row says about the poisoning screen (only when it flagged something), as
    ``candidate_create`` records it."""
    if not candidate.screen_flagged:
        return {}
    return {"screening": {"flagged": True, "categories": (candidate.screening or {}).get("categories", [])}}


# ---- the vector index during a big import ------------------------------------------------------------------
#
# Maintaining the HNSW index costs ~1.5 ms of the server's time per inserted row, ten times what building it
# costs per row. A big import (``vector_index="rebuild"``, or ``"auto"`` when it is at least a third of what
# the table will hold) therefore loads with the index dropped and builds it again at the end (``CREATE INDEX
# CONCURRENTLY`` outside a transaction: readers and writers are never blocked). Meanwhile searches stay
# correct - the semantic arm's ``ORDER BY embedding_vec <=> q`` is answered exactly by a scan - only slower
# over big scopes. The index is built again when the import ends however it ends (an error, Ctrl-C); after a
# crash (the process killed) the next import, and ``manage.py repair --apply`` (hourly, and when a worker
# starts), build it: ``ensure_vector_index``. An import holds a session lock while it loads without the index
# (the repair leaves the index alone meanwhile), and a build interrupted half-way (an invalid index) is
# dropped and built again.


def _vector_index_state(cursor: Any) -> str | None:
    """``valid``, ``invalid`` (a concurrent build that was interrupted) or ``missing``; None when the server
    has no pgvector column (no index to keep)."""
    cursor.execute(
        "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() "
        "AND table_name = 'learnings_learning' AND column_name = 'embedding_vec'"
    )
    if cursor.fetchone() is None:
        return None
    cursor.execute(
        "SELECT i.indisvalid FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid "
        "WHERE c.relname = %s AND c.relnamespace = current_schema()::regnamespace",
        [VECTOR_INDEX],
    )
    row = cursor.fetchone()
    return "missing" if row is None else ("valid" if row[0] else "invalid")


def _build_vector_index(cursor: Any) -> None:
    """Build the index (concurrently unless inside a transaction), with enough ``maintenance_work_mem`` for the
    graph to be built in memory; the setting is put back afterwards."""
    concurrently = "" if connection.in_atomic_block else "CONCURRENTLY"
    cursor.execute("SELECT current_setting('maintenance_work_mem')")
    before = cursor.fetchone()[0]
    cursor.execute(
        "SELECT set_config('maintenance_work_mem', %s, false) "
        "WHERE pg_size_bytes(current_setting('maintenance_work_mem')) < pg_size_bytes(%s)",
        [VECTOR_INDEX_BUILD_MEMORY, VECTOR_INDEX_BUILD_MEMORY],
    )
    try:
        cursor.execute(VECTOR_INDEX_SQL.format(concurrently=concurrently))
    finally:
        cursor.execute("SELECT set_config('maintenance_work_mem', %s, false)", [before])


def _lock_vector_index(cursor: Any, *, wait: bool) -> bool:
    if wait:
        cursor.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", [VECTOR_INDEX_LOCK])
        return True
    cursor.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", [VECTOR_INDEX_LOCK])
    return bool(cursor.fetchone()[0])


def _unlock_vector_index(cursor: Any) -> None:
    cursor.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [VECTOR_INDEX_LOCK])


def ensure_vector_index(*, apply: bool = True) -> str:
    """Whether the learnings' vector index is there and valid, and (``apply``) build it when it is not: a big
    import that was killed while it loaded without it, or a concurrent build that was interrupted (dropped
    first). Returns ``ok``, ``created`` or ``rebuilt`` (``missing``/``invalid`` on a dry run), ``busy`` (an
    import is loading without it and builds it when it ends) or ``none`` (no pgvector on this server)."""
    with connection.cursor() as cursor:
        if not _lock_vector_index(cursor, wait=False):
            return "busy"
        try:
            state = _vector_index_state(cursor)
            if state is None:
                return "none"
            if state == "valid":
                return "ok"
            if not apply:
                return state
            if state == "invalid":
                concurrently = "" if connection.in_atomic_block else "CONCURRENTLY"
                cursor.execute(f"DROP INDEX {concurrently} IF EXISTS {VECTOR_INDEX}")
            _build_vector_index(cursor)
            return "created" if state == "missing" else "rebuilt"
        finally:
            _unlock_vector_index(cursor)


def rebuilds_vector_index(expected: int | None, vector_index: str = "auto") -> bool:
    """Whether an import of ``expected`` items loads without the vector index (see above): always for
    ``rebuild``, never for ``keep``; for ``auto`` when it has at least ``REBUILD_MIN_ITEMS`` items and the
    table holds at most ``REBUILD_TABLE_FACTOR`` times as many rows (counted up to that bound), outside a
    transaction (inside one the rebuild could not be concurrent)."""
    if vector_index not in INDEX_MODES:
        raise ValueError(f"vector_index must be one of {', '.join(INDEX_MODES)}")
    if vector_index != "auto":
        return vector_index == "rebuild"
    if expected is None or expected < REBUILD_MIN_ITEMS or connection.in_atomic_block:
        return False
    bound = REBUILD_TABLE_FACTOR * expected
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM (SELECT 1 FROM learnings_learning LIMIT %s) t", [bound + 1])
        return bool(cursor.fetchone()[0] <= bound)


@contextmanager
def _without_vector_index(rebuild: bool) -> Iterator[None]:
    """Inside: the vector index dropped (when ``rebuild`` and the server has one), under the session lock;
    on the way out, however the block ends, the index built again and the lock released. When another
    session holds the lock (another big import, or a repair building the index) the index is left as it is:
    this import loads beside it, the other one builds the index when it ends."""
    if not rebuild:
        yield
        return
    with connection.cursor() as cursor:
        locked = _lock_vector_index(cursor, wait=False)
    if not locked:
        yield
        return
    with connection.cursor() as cursor:
        try:
            state = _vector_index_state(cursor)
            if state is not None:
                concurrently = "" if connection.in_atomic_block else "CONCURRENTLY"
                cursor.execute(f"DROP INDEX {concurrently} IF EXISTS {VECTOR_INDEX}")
        except BaseException:
            _unlock_vector_index(cursor)
            raise
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            try:
                if state is not None:
                    _build_vector_index(cursor)
            finally:
                _unlock_vector_index(cursor)


@contextmanager
def _tidied_text_index() -> Iterator[None]:
    """On the way out of an import (outside a transaction): the text index's pending list merged into the
    index. A GIN index takes new rows into a pending list that every lexical search scans whole until a
    vacuum merges it; after thousands of rows loaded in seconds, before autovacuum comes by, that made a
    search ~5x slower (measured: 5.3 ms, 0.9 ms once merged; the merge of 10,000 rows took 0.07 s)."""
    try:
        yield
    finally:
        if not connection.in_atomic_block:
            try:
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT gin_clean_pending_list(to_regclass(%s)) WHERE to_regclass(%s) IS NOT NULL",
                        [TEXT_INDEX, TEXT_INDEX],
                    )
            except DatabaseError:  # best effort (a broken connection: the import's own error tells)
                pass
