"""``learnings.gate`` is the one definition of the §4.7 prompt and search gates; these tests guard its three
renderings against each other row for row: the SQL (``recall_sql.GATES``, run by ``scoped_rows``), the ORM
(``for_prompt`` / ``search_visible``) and the Python predicate (``gate.shape_rows``, ``Learning.is_prompt_eligible``),
over varied rows (every status, tier, sensitivity, verification, decision, expiry, kind and supersedes link)."""

from __future__ import annotations

import itertools
import random

import pytest

from learnings import gate, recall_sql
from learnings.models import Learning
from learnings.vocabulary import LearningKind, PolicyDecision, PublishTier, Sensitivity, VerificationStatus
from tests.learnings.test_scoped_sql import AT, SCOPES, _key_lists, _varied_rows

SHAPES = {"for_prompt": "prompt", "search_visible": "search"}
FIELDS = (
    "pk",
    "scope_key",
    "kind",
    "status",
    "publish_tier",
    "sensitivity",
    "verification_status",
    "policy_decision",
    "expires_at_ms",
    "supersedes_id",
)


@pytest.mark.django_db
@pytest.mark.parametrize("shape", list(SHAPES))
def test_sql_orm_and_python_renderings_select_the_same_rows(shape):
    rng = random.Random(21)
    _varied_rows(rng, 160)
    records = [dict(zip(FIELDS, row, strict=True)) for row in Learning.objects.values_list(*FIELDS)]
    assert any(record["supersedes_id"] for record in records)
    nonempty = 0
    for keys in _key_lists(rng):
        for at in (AT - 10, AT, AT + 30_000, AT + 120_000):
            orm = set(getattr(Learning.objects, shape)(keys, at).values_list("pk", flat=True))
            sql = {row[0] for row in Learning.objects.scoped_rows(shape, keys, at, ("pk",))}
            python = {record["pk"] for record in gate.shape_rows(SHAPES[shape], records, keys, at)}
            assert sql == orm == python, (keys, at)
            nonempty += bool(orm)
    assert nonempty > 20


@pytest.mark.django_db
def test_the_model_predicate_is_the_prompt_shape_without_scopes_and_shadowing():
    rng = random.Random(5)
    _varied_rows(rng, 120)
    keys = [f"{kind}:{scope_id}" for kind, scope_id in SCOPES]
    in_prompt = set(Learning.objects.for_prompt(keys, AT).values_list("pk", flat=True))
    unshadowed = set(Learning.objects.unshadowed(AT).values_list("pk", flat=True))
    for learning in Learning.objects.all():
        eligible = gate.passes(gate.PROMPT_ELIGIBLE, learning, AT)
        assert (learning.pk in in_prompt) == (eligible and learning.pk in unshadowed), learning.pk


def test_the_shapes_are_the_spec_groups():
    """prompt = visible ∩ prompt-eligible; search = visible and not sensitive (§4.7, §4.21)."""
    assert set(gate.SHAPES["prompt"]) == {*gate.VISIBLE, *gate.PROMPT_ELIGIBLE}
    assert set(gate.SHAPES["search"]) == {*gate.VISIBLE, gate.NOT_SENSITIVE}
    assert {shape: gate.shape_sql(shape) for shape in gate.SHAPES} == recall_sql.GATES


def test_every_failed_gate_has_a_reason_and_only_failed_ones():
    combos = itertools.product(
        LearningKind.values,
        ["active", "provisional", "superseded", "revoked"],
        PublishTier.values,
        Sensitivity.values,
        VerificationStatus.values,
        [None, *PolicyDecision.values],
        [None, AT - 1, AT + 1],
    )
    for kind, status, tier, sensitivity, verification, decision, expires in combos:
        record = {
            "kind": kind,
            "status": status,
            "publish_tier": tier,
            "sensitivity": sensitivity,
            "verification_status": verification,
            "policy_decision": decision,
            "expires_at_ms": expires,
        }
        failed = gate.failures(gate.PROMPT_ELIGIBLE, record, AT)
        reasons = gate.reasons(gate.PROMPT_ELIGIBLE, record, AT)
        assert all(condition.reason(record, str) for condition in failed)
        assert (reasons == []) == gate.passes(gate.PROMPT_ELIGIBLE, record, AT)


def test_sql_literals_are_vocabulary_values_only():
    with pytest.raises(ValueError, match="not a vocabulary value"):
        gate.Is("status", "active'; DROP TABLE x; --").sql("l")
