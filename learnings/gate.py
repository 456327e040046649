"""The prompt gate, written once (spec §4.7, issue 21.2): what may enter a prompt, and what memory-search sees.

Each gate is a named :class:`Condition` over a learning's columns. One condition renders

* its SQL fragment over a table alias (``learnings.recall_sql`` and the lexical path of ``learnings.querysets``
  run these), with the parameters ``%(keys)s`` (scope keys) and ``%(at)s`` (the time, epoch ms);
* its ORM ``Q`` (``LearningQuerySet.live`` / ``prompt_visible`` / ``for_prompt`` / ``search_visible``);
* its Python predicate over a model instance or a mapping of the same names (``Learning.is_prompt_eligible``,
  the memory-search hits' ``prompt_eligible``), compiled once per group of conditions (``predicate``);
* the reason an operator reads when a record fails it (the console's explainer, ``kheish.console.explain``).

The groups below are the spec's: **visible** (live status, verification not failed, unexpired, not shadowed),
**prompt-visible** (``learning_is_prompt_visible``: active status and tier, not sensitive, not failed, the
policy decision rule) and the **prompt kinds**. The shapes combine them with the scope keys. The values come
from ``learnings.vocabulary``. ``tests/learnings/test_gate.py`` checks SQL, ORM and Python row for row, and
``tests/kheish/test_console_explains.py`` the reasons against the predicate: guards, not the thing that keeps
copies in step.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import Exists, Expression, OuterRef, Q

from learnings.vocabulary import (
    LIVE_STATUSES,
    PROMOTABLE_KINDS,
    PROMPT_KINDS,
    LearningStatus,
    PolicyDecision,
    PublishTier,
    Sensitivity,
    VerificationStatus,
    kind_plural,
    listing,
)
from memory import public_ids

TABLE = "learnings_learning"
_WORD = re.compile(r"[a-z_]+", re.ASCII)


def _read(record: Any, name: str) -> Any:
    if isinstance(record, Mapping):
        return record.get(name)
    return getattr(record, name, None)


def _literal(value: str) -> str:
    if _WORD.fullmatch(value) is None:  # vocabulary values only; anything else is a parameter
        raise ValueError(f"not a vocabulary value: {value!r}")
    return f"'{value}'"


# ---- terms: each renders SQL, a Q and a Python test ---------------------------------------------------------


class Term:
    def sql(self, alias: str) -> str:
        raise NotImplementedError

    def q(self, at_ms: int) -> Q:
        raise NotImplementedError

    def py(self, get: Callable[[str], str]) -> str:
        """The Python expression over ``r`` (``get(field)`` reads a field) and ``at``, compiled by ``predicate``."""
        raise NotImplementedError

    def holds(self, record: Any, at_ms: int) -> bool:
        return predicate((Condition("", self, _no_reason),), isinstance(record, Mapping))(record, at_ms)


@dataclass(frozen=True)
class Is(Term):
    field: str
    value: str

    def sql(self, alias: str) -> str:
        return f"{alias}.{self.field} = {_literal(self.value)}"

    def q(self, at_ms: int) -> Q:
        return Q(**{self.field: self.value})

    def py(self, get: Callable[[str], str]) -> str:
        return f"{get(self.field)} == {_literal(self.value)}"


@dataclass(frozen=True)
class IsNot(Term):
    """For a NOT NULL column."""

    field: str
    value: str

    def sql(self, alias: str) -> str:
        return f"{alias}.{self.field} <> {_literal(self.value)}"

    def q(self, at_ms: int) -> Q:
        return ~Q(**{self.field: self.value})

    def py(self, get: Callable[[str], str]) -> str:
        return f"{get(self.field)} != {_literal(self.value)}"


@dataclass(frozen=True)
class OneOf(Term):
    field: str
    values: tuple[str, ...]

    def sql(self, alias: str) -> str:
        return f"{alias}.{self.field} IN ({', '.join(map(_literal, self.values))})"

    def q(self, at_ms: int) -> Q:
        return Q(**{f"{self.field}__in": self.values})

    def py(self, get: Callable[[str], str]) -> str:
        return f"{get(self.field)} in ({', '.join(map(_literal, self.values))},)"


@dataclass(frozen=True)
class IsNull(Term):
    field: str

    def sql(self, alias: str) -> str:
        return f"{alias}.{self.field} IS NULL"

    def q(self, at_ms: int) -> Q:
        return Q(**{f"{self.field}__isnull": True})

    def py(self, get: Callable[[str], str]) -> str:
        return f"{get(self.field)} is None"


@dataclass(frozen=True)
class AllOf(Term):
    terms: tuple[Term, ...]

    def sql(self, alias: str) -> str:
        return "(" + " AND ".join(term.sql(alias) for term in self.terms) + ")"

    def q(self, at_ms: int) -> Q:
        result = Q()
        for term in self.terms:
            result &= term.q(at_ms)
        return result

    def py(self, get: Callable[[str], str]) -> str:
        return "(" + " and ".join(term.py(get) for term in self.terms) + ")"


@dataclass(frozen=True)
class AnyOf(Term):
    terms: tuple[Term, ...]

    def sql(self, alias: str) -> str:
        return "(" + " OR ".join(term.sql(alias) for term in self.terms) + ")"

    def q(self, at_ms: int) -> Q:
        result = Q()
        for term in self.terms:
            result |= term.q(at_ms)
        return result

    def py(self, get: Callable[[str], str]) -> str:
        return "(" + " or ".join(term.py(get) for term in self.terms) + ")"


@dataclass(frozen=True)
class Unexpired(Term):
    """No expiry, or one after the time (``expires_at > now``)."""

    def sql(self, alias: str) -> str:
        return f"({alias}.expires_at_ms IS NULL OR {alias}.expires_at_ms > %(at)s)"

    def q(self, at_ms: int) -> Q:
        return Q(expires_at_ms__isnull=True) | Q(expires_at_ms__gt=at_ms)

    def py(self, get: Callable[[str], str]) -> str:
        return f"({get('expires_at_ms')} is None or {get('expires_at_ms')} > at)"


# ---- the conditions -----------------------------------------------------------------------------------------

Reason = Callable[[Any, Callable[[int], str]], str]


@dataclass(frozen=True)
class Condition:
    """One named gate: its term, and what an operator reads when a record fails it (``reason(record, when)``,
    ``when`` formatting an epoch-ms time)."""

    name: str
    term: Term
    reason: Reason

    def sql(self, alias: str = "l") -> str:
        return self.term.sql(alias)

    def q(self, at_ms: int) -> Q:
        return self.term.q(at_ms)

    def holds(self, record: Any, at_ms: int) -> bool:
        return predicate((self,), isinstance(record, Mapping))(record, at_ms)


def _no_reason(record: Any, when: Callable[[int], str]) -> str:
    return ""


def kind_reason(kind: str) -> str:
    names = listing([kind_plural(k) for k in PROMPT_KINDS], sep=", ", last=" and ")
    if kind in PROMPT_KINDS:
        return ""
    reason = f"{kind_plural(kind)} never reach a prompt (only {names} do)"
    if kind in PROMOTABLE_KINDS:
        reason += "; promote one to a skill instead"
    return reason


def _status_reason(record: Any, when: Callable[[int], str]) -> str:
    status = _read(record, "status")
    if status == LearningStatus.SUPERSEDED:
        replacement = _read(record, "superseded_by_id")
        return "superseded" + (f" by {public_ids.learning_id(replacement)}" if replacement else "")
    if status == LearningStatus.REVOKED:
        reason = _read(record, "revoked_reason")
        return "revoked" + (f": {reason}" if reason else "")
    return TIER_REASON


TIER_REASON = "provisional tier: kept, never injected"


def _decision_reason(record: Any, when: Callable[[int], str]) -> str:
    if _read(record, "policy_decision") == PolicyDecision.ESCALATED:
        return "escalated: waits for an operator"
    return f"published automatically and not verified (verification {_read(record, 'verification_status')})"


PROMPT_KIND = Condition(
    "prompt kind", OneOf("kind", PROMPT_KINDS), lambda record, when: kind_reason(_read(record, "kind"))
)
LIVE_STATUS = Condition("live status", OneOf("status", LIVE_STATUSES), _status_reason)
ACTIVE_STATUS = Condition("active status", Is("status", LearningStatus.ACTIVE), _status_reason)
ACTIVE_TIER = Condition("active tier", Is("publish_tier", PublishTier.ACTIVE), lambda record, when: TIER_REASON)
NOT_SENSITIVE = Condition(
    "not sensitive", IsNot("sensitivity", Sensitivity.SENSITIVE), lambda record, when: "sensitive: never injected"
)
NOT_FAILED = Condition(
    "verification not failed",
    IsNot("verification_status", VerificationStatus.FAILED),
    lambda record, when: "verification failed",
)
DECISION = Condition(
    "policy decision allows",
    AnyOf(
        (
            IsNull("policy_decision"),
            Is("policy_decision", PolicyDecision.MANUAL),
            AllOf(
                (
                    Is("policy_decision", PolicyDecision.AUTOMATIC),
                    Is("verification_status", VerificationStatus.VERIFIED),
                )
            ),
        )
    ),
    _decision_reason,
)
"""automatic ⇒ verified; escalated ⇒ never; manual or none ⇒ yes."""
UNEXPIRED = Condition(
    "not expired", Unexpired(), lambda record, when: f"expired {when(_read(record, 'expires_at_ms'))}"
)

VISIBLE: tuple[Condition, ...] = (LIVE_STATUS, NOT_FAILED, UNEXPIRED)
"""§4.7 visibility, the row's part (the shapes add the scope keys and ``not shadowed``); a record visible this way
shadows the one it names in ``supersedes``."""
PROMPT_VISIBLE: tuple[Condition, ...] = (ACTIVE_STATUS, ACTIVE_TIER, NOT_SENSITIVE, NOT_FAILED, DECISION)
"""§4.7 ``learning_is_prompt_visible``."""
PROMPT_ELIGIBLE: tuple[Condition, ...] = (PROMPT_KIND, *PROMPT_VISIBLE, UNEXPIRED)
"""A record's own prompt gates, in the order the explainer names them: kind, ``learning_is_prompt_visible``,
expiry (``Learning.is_prompt_eligible``)."""

SHAPES: dict[str, tuple[Condition, ...]] = {
    "prompt": (PROMPT_KIND, ACTIVE_STATUS, LIVE_STATUS, ACTIVE_TIER, NOT_SENSITIVE, NOT_FAILED, DECISION, UNEXPIRED),
    "search": (LIVE_STATUS, NOT_FAILED, NOT_SENSITIVE, UNEXPIRED),
}
"""Per shape, the row conditions besides the scope keys and ``not shadowed``: the prompt set is visible ∩
prompt-eligible; memory-search reads the visible records that are not sensitive (§4.21)."""


_PREDICATES: dict[tuple[tuple[Condition, ...], bool], Callable[[Any, int], bool]] = {}


def predicate(conditions: Iterable[Condition], mapping: bool = False) -> Callable[[Any, int], bool]:
    """``(record, at_ms) -> bool``: all ``conditions`` hold, compiled once from their terms into one Python
    expression (over a model instance's attributes, or a mapping's keys). A check runs for every search hit and
    every explained row, so it is not an interpreted walk over the terms."""
    key = (tuple(conditions), mapping)
    found = _PREDICATES.get(key)
    if found is None:
        get = (lambda field: f"r.get({field!r})") if mapping else (lambda field: f"r.{field}")
        body = " and ".join(f"({condition.term.py(get)})" for condition in key[0]) or "True"
        namespace: dict[str, Any] = {}
        exec(f"def check(r, at):\n    return {body}\n", namespace)  # noqa: S102 - vocabulary literals only
        found = _PREDICATES[key] = namespace["check"]
    return found


def passes(conditions: Iterable[Condition], record: Any, at_ms: int) -> bool:
    return bool(predicate(conditions, isinstance(record, Mapping))(record, at_ms))


is_prompt_visible = predicate(PROMPT_VISIBLE)
"""``(learning, at_ms)``: ``Learning.is_prompt_visible``."""
is_prompt_eligible = predicate(PROMPT_ELIGIBLE)
"""``(learning, at_ms)``: ``Learning.is_prompt_eligible``."""


def failures(conditions: Iterable[Condition], record: Any, at_ms: int) -> list[Condition]:
    return [condition for condition in conditions if not condition.holds(record, at_ms)]


def reasons(conditions: Iterable[Condition], record: Any, at_ms: int, when: Callable[[int], str] = str) -> list[str]:
    """What an operator reads for each condition ``record`` fails, each phrase once, in the conditions' order."""
    return list(dict.fromkeys(condition.reason(record, when) for condition in failures(conditions, record, at_ms)))


# ---- the relational gates: scope keys and shadowing -----------------------------------------------------------


def shadowing_sql(alias: str = "l", inner: str = "s") -> str:
    """``NOT EXISTS`` a visible record naming ``alias`` in ``supersedes``. ``supersedes IS NOT NULL`` follows from
    the join but is stated, so that PostgreSQL may read the few superseding rows once through the ``supersedes``
    index instead of probing it once per candidate."""
    visible = " AND ".join(condition.sql(inner) for condition in VISIBLE)
    return (
        f"NOT EXISTS (\n    SELECT 1 FROM {TABLE} {inner}\n"  # noqa: S608 - vocabulary literals only
        f"    WHERE {inner}.supersedes_id = {alias}.id AND {inner}.supersedes_id IS NOT NULL\n"
        f"      AND {visible})"
    )


def shadowing_q(model: Any, at_ms: int) -> Exists:
    """The ORM's ``Exists`` of the same: live records naming the outer record in ``supersedes``."""
    return Exists(
        model.objects.filter(
            Q(supersedes=OuterRef("pk")), Q(supersedes__isnull=False), *(condition.q(at_ms) for condition in VISIBLE)
        )
    )


def shape_sql(shape: str, alias: str = "l") -> str:
    """The WHERE clause of a shape over ``learnings_learning <alias>``, with ``%(keys)s`` and ``%(at)s``."""
    lines = [
        f"{alias}.scope_key = ANY(%(keys)s)",
        *(condition.sql(alias) for condition in SHAPES[shape]),
        shadowing_sql(alias),
    ]
    return "\n  " + "\n  AND ".join(lines)


def shape_q(shape: str, model: Any, scope_keys: Sequence[str], at_ms: int) -> list[Q | Expression]:
    """The same as ``filter()`` arguments, in one call (no clone per step)."""
    return [
        Q(scope_key__in=list(scope_keys)),
        *(condition.q(at_ms) for condition in SHAPES[shape]),
        ~shadowing_q(model, at_ms),
    ]


def shape_rows(shape: str, records: Sequence[Any], scope_keys: Sequence[str], at_ms: int) -> list[Any]:
    """The same in Python over ``records`` (every row, superseders included; each with ``pk``, ``supersedes_id``
    and the gates' fields): the third rendering, for the equivalence test."""
    shadowed = {
        _read(r, "supersedes_id")
        for r in records
        if _read(r, "supersedes_id") is not None and passes(VISIBLE, r, at_ms)
    }
    keys = set(scope_keys)
    return [
        r
        for r in records
        if _read(r, "scope_key") in keys and passes(SHAPES[shape], r, at_ms) and _read(r, "pk") not in shadowed
    ]
