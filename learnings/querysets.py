"""Chainable reads of the learning plane: visibility to a caller, review queue, prompt gates, list query; and
the two reads every new run makes (``scoped_rows``, ``scoped_fingerprint``) as hand-written SQL over the
prompt/search gates of ``learnings.recall_sql``."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple, Self, TypeVar, cast

from django.db import connections
from django.db.models import CharField, Field, Model, Q, QuerySet, Value
from django.db.models.functions import Cast, Concat

from learnings import gate, recall_sql
from learnings.vocabulary import (
    CANDIDATE_ID,
    CAPTURED_ONLY_KINDS,
    LEARNING_ID,
    REVIEW_STATES,
    CandidateState,
    LearningKind,
    ScopeKind,
)
from memory import public_ids
from memory.clock import now_ms

if TYPE_CHECKING:  # named as strings in the querysets' base classes (learnings.models imports this module)
    from django.contrib.auth.models import User

    from learnings.models import Learning, LearningCandidate  # noqa: F401

ROW_VERSION = "_row_version"
"""A row version's identity: ``id:xmin:ctid``. ``xmin`` (the writing transaction) changes with
every committed write and ``ctid`` (the tuple's place) with every write inside one transaction, whatever
wrote it - the ORM, raw SQL or a console - so an unchanged identity means an unchanged row."""

SHAPE_GATES = {"for_prompt": recall_sql.GATES["prompt"], "search_visible": recall_sql.GATES["search"]}
"""The hand-written WHERE clause of each shape (``learnings.recall_sql``, over ``learnings_learning l``, with
``%(keys)s`` and ``%(at)s``): the same rows as ``for_prompt`` / ``search_visible``, checked by
``tests/learnings/test_scoped_sql.py``."""

_VERSION_SQL = "(l.id::text || ':' || l.xmin::text || ':' || l.ctid::text)"


class Fingerprint(NamedTuple):
    """What a set of rows is, in one small value: how many, and the digest of their versions."""

    count: int  # type: ignore[assignment]  # a field may shadow tuple.count; mypy reads it as an override
    digest: bytes


def versions_digest(rows: Sequence[tuple]) -> bytes:
    """The digest ``scoped_fingerprint`` computes in SQL, of rows read with ``versioned=True`` (their version
    last): SHA-256 of the versions in primary-key order, comma-joined."""
    versions = sorted((row[-1] for row in rows), key=lambda version: int(version.partition(":")[0]))
    return hashlib.sha256(",".join(versions).encode()).digest()


@lru_cache(maxsize=64)
def _rows_sql(model: type[Model], shape: str, fields: tuple[str, ...], versioned: bool) -> str:
    """``SELECT <fields' columns>[, ROW_VERSION] FROM <table> l WHERE <shape's gates>``."""
    meta = model._meta
    # ``fields`` are plain columns (``scoped_rows``), never relations; cached, so the cast runs once per key
    columns = [
        meta.pk.column if name == "pk" else cast("Field[Any, Any]", meta.get_field(name)).column for name in fields
    ]
    select = [f'l."{column}"' for column in columns] + ([_VERSION_SQL] if versioned else [])
    return f'SELECT {", ".join(select)} FROM "{meta.db_table}" l WHERE {SHAPE_GATES[shape]}'  # noqa: S608


@lru_cache(maxsize=8)
def _fingerprint_sql(model: type[Model], shape: str) -> str:
    """The count and the digest ``versions_digest`` mirrors, of the shape's row versions."""
    return (
        "SELECT count(*), sha256(convert_to(string_agg(v.version, ',' "  # noqa: S608
        "ORDER BY split_part(v.version, ':', 1)::bigint), 'UTF8')) "
        f'FROM (SELECT {_VERSION_SQL} AS version FROM "{model._meta.db_table}" l '
        f"WHERE {SHAPE_GATES[shape]}) v"
    )


def caller_scope_q(user: object) -> Q:
    """The scopes an agent can see: the workspace, its own sessions, and the personas and projects its sessions
    are bound to *and* it is granted now (``memory.sessions.caller_scopes``, the one place that rule lives)."""
    from memory.sessions import caller_scopes

    scopes = caller_scopes(cast("User", user))  # an authenticated principal (visible_to checked it)
    session_ids = scopes.session_pks.annotate(
        public=Concat(Value(f"{public_ids.SESSION}-"), Cast("pk", CharField()), output_field=CharField())
    ).values("public")
    return (
        Q(scope_kind=ScopeKind.WORKSPACE)
        | Q(scope_kind=ScopeKind.SESSION, scope_id__in=session_ids)
        | Q(scope_kind=ScopeKind.PERSONA, scope_id__in=scopes.persona_ids)
        | Q(scope_kind=ScopeKind.PROJECT, scope_id__in=scopes.project_ids)
    )


_M = TypeVar("_M", bound=Model)


class _ScopedQuerySet(QuerySet[_M]):
    id_prefix = ""

    def visible_to(self, user: object, *, operator: bool) -> Self:
        """Operators see everything; an agent only what lies in the scopes of the sessions it owns."""
        if operator:
            return self
        if not getattr(user, "is_authenticated", False):
            return self.none()
        return self.filter(caller_scope_q(user))

    def in_scopes(self, scope_keys: list[str]) -> Self:
        return self.filter(scope_key__in=list(scope_keys))

    def matching_query(self, query: str | None) -> Self:
        """§2.4 list ``query``: case-insensitive substring of the id, the scope key, the compact kind name
        (``runsummary``), the content or the source run id."""
        needle = (query or "").strip().lower()
        if not needle:
            return self
        kinds = [kind for kind in LearningKind.values if needle in kind.replace("_", "")]
        annotated = self.annotate(
            _public_id=Concat(Value(f"{self.id_prefix}-"), Cast("pk", CharField()), output_field=CharField())
        )
        return annotated.filter(
            Q(_public_id__icontains=needle)
            | Q(scope_key__icontains=needle)
            | Q(kind__in=kinds)
            | Q(content__icontains=needle)
            | Q(source__run_id__icontains=needle)
        )


class LearningCandidateQuerySet(_ScopedQuerySet["LearningCandidate"]):
    id_prefix = CANDIDATE_ID

    def visible_to(self, user: object, *, operator: bool) -> Self:
        """Candidates are unreviewed proposals (issue 19.4): an agent sees only its own - those it proposed or
        that were captured from its runs (``proposed_by``) - and only in scopes it can still see; operators see
        all. What other agents published reaches it as learnings (``LearningQuerySet.visible_to``)."""
        if operator:
            return self
        if not getattr(user, "is_authenticated", False):
            return self.none()
        return self.filter(caller_scope_q(user), proposed_by=user)

    def pending_review(self) -> Self:
        """Pending and escalated candidates, whatever their kind."""
        return self.filter(state__in=REVIEW_STATES)

    def awaiting_review(self) -> Self:
        """The review queue: pending and escalated candidates that are work, i.e. not run summaries (review
        material that never reaches a prompt; the queue shows them under their own filter)."""
        return self.pending_review().exclude(kind__in=CAPTURED_ONLY_KINDS)

    def needing_review(self, revision: int, at_ms: int | None = None) -> Self:
        """Pending candidates whose last automation review predates the current policy revision and that
        no sweep currently holds a lease on."""
        at_ms = now_ms() if at_ms is None else at_ms
        return (
            self.filter(state=CandidateState.PENDING)
            .filter(Q(reviewed_policy_revision__isnull=True) | ~Q(reviewed_policy_revision=revision))
            .filter(Q(review_lease_until_ms__isnull=True) | Q(review_lease_until_ms__lt=at_ms))
        )


class LearningQuerySet(_ScopedQuerySet["Learning"]):
    id_prefix = LEARNING_ID

    def scoped_rows(
        self, shape: str, scope_keys: Sequence[str], at_ms: int, fields: tuple[str, ...], *, versioned: bool = False
    ) -> list:
        """``self.<shape>(scope_keys, at_ms).order_by().values_list(*fields)`` as a list of plain tuples
        (``versioned``: each with its ``ROW_VERSION`` last); ``shape`` is ``for_prompt`` or ``search_visible``.

        For the reads every new run makes: building that queryset and compiling it costs milliseconds of
        Python, so the shape's hand-written SQL (``SHAPE_GATES``) runs on a raw cursor with this call's keys and
        time. ``fields`` must be plain columns (no converters).
        """
        keys = list(dict.fromkeys(scope_keys))
        if not keys:
            return []
        with connections[self.db].cursor() as cursor:
            cursor.execute(_rows_sql(self.model, shape, tuple(fields), versioned), {"keys": keys, "at": at_ms})
            return cursor.fetchall()

    def scoped_fingerprint(self, shape: str, scope_keys: Sequence[str], at_ms: int) -> Fingerprint:
        """How many rows ``scoped_rows`` would return and the digest of their versions (``versions_digest``),
        read without the rows: the same answer means the same rows."""
        statement = self.fingerprint_statement(shape, scope_keys, at_ms)
        if statement is None:
            return Fingerprint(0, b"")
        with connections[self.db].cursor() as cursor:
            cursor.execute(*statement)
            count, digest = cursor.fetchone()
        return Fingerprint(count, bytes(digest or b""))

    def fingerprint_statement(self, shape: str, scope_keys: Sequence[str], at_ms: int) -> tuple[str, dict] | None:
        """The SQL and parameters ``scoped_fingerprint`` runs (for EXPLAIN); ``None`` for no keys (no query)."""
        keys = list(dict.fromkeys(scope_keys))
        if not keys:
            return None
        return _fingerprint_sql(self.model, shape), {"keys": keys, "at": at_ms}

    def live(self, at_ms: int | None = None) -> Self:
        """§4.7 visibility: active or provisional, verification not failed, not expired (``gate.VISIBLE``)."""
        at_ms = now_ms() if at_ms is None else at_ms
        return self.filter(*(condition.q(at_ms) for condition in gate.VISIBLE))

    def unshadowed(self, at_ms: int | None = None) -> Self:
        """Drop records that a live record names in ``supersedes``."""
        at_ms = now_ms() if at_ms is None else at_ms
        return self.filter(~gate.shadowing_q(self.model, at_ms))

    def prompt_visible(self) -> Self:
        """§4.7 ``learning_is_prompt_visible`` (``gate.PROMPT_VISIBLE``): active status and tier, not sensitive,
        verification not failed; automatic decisions must be verified, escalated ones never show."""
        return self.filter(*(condition.q(0) for condition in gate.PROMPT_VISIBLE))

    def prompt_kinds(self) -> Self:
        return self.filter(gate.PROMPT_KIND.q(0))

    def for_prompt(self, scope_keys: list[str], at_ms: int | None = None) -> Self:
        """Everything that may enter ``learned_context`` for these scopes (scoring aside): the ``prompt`` shape of
        ``learnings.gate`` - in the scopes, visible, prompt-eligible, unshadowed - in one ``filter()`` call (this
        runs for every new run; chaining would clone the query at each step)."""
        at_ms = now_ms() if at_ms is None else at_ms
        return self.filter(*gate.shape_q("prompt", self.model, scope_keys, at_ms))

    def search_visible(self, scope_keys: list[str], at_ms: int | None = None) -> Self:
        """What memory-search reads (§4.21): the §4.7 visible records of these scopes, never sensitive ones (the
        ``search`` shape of ``learnings.gate``)."""
        at_ms = now_ms() if at_ms is None else at_ms
        return self.filter(*gate.shape_q("search", self.model, scope_keys, at_ms))
