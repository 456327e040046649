"""Chainable reads of the learning plane: visibility to a caller, review queue, prompt gates, list query."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

from django.db import connections
from django.db.models import CharField, Exists, Model, OuterRef, Q, QuerySet, Value
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast, Concat

from memory.clock import now_ms

# Plain strings (not the TextChoices of learnings.models, which imports this module).
LIVE = ("active", "provisional")
KINDS = ("run_summary", "fact", "preference", "decision", "procedure")
PROMPT_KINDS = ("fact", "preference", "decision")


def _unexpired(at_ms: int) -> Q:
    return Q(expires_at_ms__isnull=True) | Q(expires_at_ms__gt=at_ms)


def _shadowing(model: type[Model], at_ms: int) -> QuerySet:
    """Live records naming the outer record in ``supersedes``. ``supersedes IS NOT NULL`` follows from the
    join but is stated, so that PostgreSQL may read the few superseding rows once through the ``supersedes``
    index instead of probing that index once per candidate (about 1,100 probes for a typical session)."""
    return model.objects.filter(
        Q(supersedes=OuterRef("pk")),
        Q(supersedes__isnull=False),
        Q(status__in=LIVE),
        ~Q(verification_status="failed"),
        _unexpired(at_ms),
    )


class _Slot(NamedTuple):
    """Where a parameter of a compiled query comes from: a scope key (by position), the time, or a constant."""

    key: int | None = None
    at: type[int] | None = None  # the type the backend gave the time (psycopg's Int8 on PostgreSQL)
    constant: object = None


# Stand-ins for the call's values while compiling; never sent to the database.
_KEY_STAND_IN = "\x00scope-key-{}\x00"
_AT_STAND_IN = -7_070_707_070_707  # no real epoch-ms timestamp


ROW_VERSION = "_row_version"
"""A row version's identity: ``id:xmin:ctid``. ``xmin`` (the writing transaction) changes with
every committed write and ``ctid`` (the tuple's place) with every write inside one transaction, whatever
wrote it - the ORM, raw SQL or a console - so an unchanged identity means an unchanged row."""


class Fingerprint(NamedTuple):
    """What a set of rows is, in one small value: how many, and the digest of their versions."""

    count: int
    digest: bytes


def versions_digest(rows: Sequence[tuple]) -> bytes:
    """The digest ``scoped_fingerprint`` computes in SQL, of rows read with ``versioned=True`` (their version
    last): SHA-256 of the versions in primary-key order, comma-joined."""
    versions = sorted((row[-1] for row in rows), key=lambda version: int(version.partition(":")[0]))
    return hashlib.sha256(",".join(versions).encode()).digest()


def _row_version(model: type[Model]) -> RawSQL:
    """``ROW_VERSION`` as an annotation: built from the model's own table and column names only."""
    table = f'"{model._meta.db_table}"'
    sql = f"""({table}."{model._meta.pk.column}"::text || ':' || {table}.xmin::text || ':' || {table}.ctid::text)"""
    return RawSQL(sql, ())  # noqa: S611


def _shape_rows(manager: QuerySet, shape: str, keys: list[str], at_ms: int, fields: tuple[str, ...],
                versioned: bool) -> QuerySet:
    """``<shape>(keys, at_ms).order_by().values_list(*fields)``, with each row's ``ROW_VERSION`` last if asked."""
    queryset = getattr(manager, shape)(keys, at_ms).order_by()
    if versioned:
        queryset = queryset.annotate(**{ROW_VERSION: _row_version(manager.model)})
        fields = (*fields, ROW_VERSION)
    return queryset.values_list(*fields)


@lru_cache(maxsize=64)
def _compiled(model: type[Model], alias: str, shape: str, fields: tuple[str, ...], key_count: int,
              versioned: bool = False):
    """SQL and parameter slots of ``model.objects.<shape>(keys, at_ms).order_by().values_list(*fields)`` for
    ``key_count`` distinct keys (``versioned``: with each row's ``ROW_VERSION`` last), or ``None`` if the
    stand-ins cannot all be traced to a parameter."""
    keys = [_KEY_STAND_IN.format(index) for index in range(key_count)]
    queryset = _shape_rows(model.objects.using(alias), shape, keys, _AT_STAND_IN, fields, versioned)
    sql, params = queryset.query.get_compiler(alias).as_sql()
    positions = {key: index for index, key in enumerate(keys)}
    slots = tuple(
        _Slot(key=positions[param]) if isinstance(param, str) and param in positions
        else _Slot(at=type(param)) if isinstance(param, int) and param == _AT_STAND_IN
        else _Slot(constant=param)
        for param in params
    )
    traced = {slot.key for slot in slots if slot.key is not None} == set(range(key_count))
    if not traced or not any(slot.at for slot in slots) or "\x00" in sql or str(_AT_STAND_IN) in sql:
        return None
    return sql, slots


@lru_cache(maxsize=64)
def _compiled_fingerprint(model: type[Model], alias: str, shape: str, key_count: int):
    """:func:`_compiled` of the shape's row versions, wrapped in the aggregate that
    ``versions_digest`` mirrors."""
    compiled = _compiled(model, alias, shape, (), key_count, versioned=True)
    if compiled is None:
        return None
    inner, slots = compiled
    version = f'v."{ROW_VERSION}"'
    sql = (f"SELECT count(*), sha256(convert_to(string_agg({version}, ',' "  # noqa: S608
           f"ORDER BY split_part({version}, ':', 1)::bigint), 'UTF8')) FROM ({inner}) v")
    return sql, slots


def caller_scope_q(user: object) -> Q:
    """The scopes an agent can see: those of the sessions it owns (session, persona, projects) and the
    workspace. Built as subqueries so an agent with many sessions costs one query, not a key list."""
    from memory.models import Session

    owned = Session.objects.filter(owner=user)
    session_ids = owned.annotate(
        public=Concat(Value("session-"), Cast("pk", CharField()), output_field=CharField())
    ).values("public")
    persona_ids = owned.filter(persona__isnull=False).values("persona__persona_id")
    project_ids = owned.filter(projects__isnull=False).values("projects__project_id")
    return (
        Q(scope_kind="workspace")
        | Q(scope_kind="session", scope_id__in=session_ids)
        | Q(scope_kind="persona", scope_id__in=persona_ids)
        | Q(scope_kind="project", scope_id__in=project_ids)
    )


class _ScopedQuerySet(QuerySet):
    id_prefix = ""

    def scoped_rows(self, shape: str, scope_keys: Sequence[str], at_ms: int, fields: tuple[str, ...], *,
                    versioned: bool = False) -> list:
        """``self.<shape>(scope_keys, at_ms).order_by().values_list(*fields)`` as a list of plain tuples
        (``versioned``: each with its ``ROW_VERSION`` last).

        For the reads every new run makes: building that queryset and compiling it costs milliseconds of
        Python, so its SQL is compiled once per (database, shape, fields, number of keys) and run on a raw
        cursor with this call's keys and time. ``fields`` must be plain columns (no converters). The shape
        is the only definition of the query, so both paths always agree.
        """
        keys = list(dict.fromkeys(scope_keys))
        compiled = _compiled(self.model, self.db, shape, tuple(fields), len(keys), versioned) if keys else None
        if compiled is None:
            return list(_shape_rows(self, shape, keys, at_ms, tuple(fields), versioned))
        with connections[self.db].cursor() as cursor:
            cursor.execute(*self._statement(compiled, keys, at_ms))
            return cursor.fetchall()

    def scoped_fingerprint(self, shape: str, scope_keys: Sequence[str], at_ms: int) -> Fingerprint | None:
        """How many rows ``scoped_rows`` would return and the digest of their versions (``versions_digest``),
        read without the rows: the same answer means the same rows. ``None`` when the shape's statement could
        not be prepared (then read the rows)."""
        keys = list(dict.fromkeys(scope_keys))
        if not keys:
            return Fingerprint(0, b"")
        statement = self.fingerprint_statement(shape, keys, at_ms)
        if statement is None:
            return None
        with connections[self.db].cursor() as cursor:
            cursor.execute(*statement)
            count, digest = cursor.fetchone()
        return Fingerprint(count, bytes(digest or b""))

    def fingerprint_statement(self, shape: str, scope_keys: Sequence[str], at_ms: int) -> tuple[str, list] | None:
        """The SQL and parameters ``scoped_fingerprint`` runs (for EXPLAIN), or ``None`` where it runs none."""
        keys = list(dict.fromkeys(scope_keys))
        if not keys:
            return None
        compiled = _compiled_fingerprint(self.model, self.db, shape, len(keys))
        return None if compiled is None else self._statement(compiled, keys, at_ms)

    @staticmethod
    def _statement(compiled: tuple[str, tuple[_Slot, ...]], keys: list[str], at_ms: int) -> tuple[str, list]:
        sql, slots = compiled
        return sql, [
            keys[slot.key] if slot.key is not None else slot.at(at_ms) if slot.at else slot.constant
            for slot in slots
        ]

    def visible_to(self, user: object, *, operator: bool) -> QuerySet:
        """Operators see everything; an agent only what lies in the scopes of the sessions it owns."""
        if operator:
            return self
        if not getattr(user, "is_authenticated", False):
            return self.none()
        return self.filter(caller_scope_q(user))

    def in_scopes(self, scope_keys: list[str]) -> QuerySet:
        return self.filter(scope_key__in=list(scope_keys))

    def matching_query(self, query: str | None) -> QuerySet:
        """§2.4 list ``query``: case-insensitive substring of the id, the scope key, the compact kind name
        (``runsummary``), the content or the source run id."""
        needle = (query or "").strip().lower()
        if not needle:
            return self
        kinds = [kind for kind in KINDS if needle in kind.replace("_", "")]
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


class LearningCandidateQuerySet(_ScopedQuerySet):
    id_prefix = "learning-candidate"

    def pending_review(self) -> QuerySet:
        """The review queue: pending and escalated candidates."""
        return self.filter(state__in=("pending", "escalated"))

    def needing_review(self, revision: int, at_ms: int | None = None) -> QuerySet:
        """Pending candidates whose last automation review predates the current policy revision and that
        no sweep currently holds a lease on."""
        at_ms = now_ms() if at_ms is None else at_ms
        return (
            self.filter(state="pending")
            .filter(Q(reviewed_policy_revision__isnull=True) | ~Q(reviewed_policy_revision=revision))
            .filter(Q(review_lease_until_ms__isnull=True) | Q(review_lease_until_ms__lt=at_ms))
        )


class LearningQuerySet(_ScopedQuerySet):
    id_prefix = "learning"

    def live(self, at_ms: int | None = None) -> QuerySet:
        """§4.7 visibility: active or provisional, verification not failed, not expired."""
        at_ms = now_ms() if at_ms is None else at_ms
        return self.filter(status__in=LIVE).exclude(verification_status="failed").filter(_unexpired(at_ms))

    def unshadowed(self, at_ms: int | None = None) -> QuerySet:
        """Drop records that a live record names in ``supersedes``."""
        at_ms = now_ms() if at_ms is None else at_ms
        return self.filter(~Exists(_shadowing(self.model, at_ms)))

    def prompt_visible(self) -> QuerySet:
        """§4.7 ``learning_is_prompt_visible``: active status and tier, not sensitive, verification not
        failed; automatic decisions must be verified, escalated ones never show."""
        return (
            self.filter(status="active", publish_tier="active", sensitivity="scoped")
            .exclude(verification_status="failed")
            .filter(
                Q(policy_decision__isnull=True)
                | Q(policy_decision="manual")
                | Q(policy_decision="automatic", verification_status="verified")
            )
        )

    def prompt_kinds(self) -> QuerySet:
        return self.filter(kind__in=PROMPT_KINDS)

    def for_prompt(self, scope_keys: list[str], at_ms: int | None = None) -> QuerySet:
        """Everything that may enter ``learned_context`` for these scopes (scoring aside): ``in_scopes``,
        ``live``, ``prompt_visible``, ``prompt_kinds`` and ``unshadowed`` in one ``filter()`` call (this runs
        for every new run; chaining would clone the query at each step)."""
        at_ms = now_ms() if at_ms is None else at_ms
        return self.filter(
            Q(scope_key__in=list(scope_keys)),
            Q(kind__in=PROMPT_KINDS),
            Q(status="active"),
            Q(publish_tier="active"),
            Q(sensitivity="scoped"),
            ~Q(verification_status="failed"),
            Q(policy_decision__isnull=True)
            | Q(policy_decision="manual")
            | Q(policy_decision="automatic", verification_status="verified"),
            _unexpired(at_ms),
            ~Exists(_shadowing(self.model, at_ms)),
        )

    def search_visible(self, scope_keys: list[str], at_ms: int | None = None) -> QuerySet:
        """What memory-search reads (§4.21): the §4.7 visible records of these scopes, never sensitive ones."""
        at_ms = now_ms() if at_ms is None else at_ms
        return self.in_scopes(scope_keys).live(at_ms).unshadowed(at_ms).exclude(sensitivity="sensitive")
