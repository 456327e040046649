"""``scoped_rows`` / ``scoped_fingerprint`` run hand-written SQL (``learnings.querysets.SHAPE_GATES``, the
gates of ``learnings.recall_sql``): over varied rows - every status, tier, sensitivity, verification, policy
decision (NULL included), expiry (NULL, past, future), kind and supersedes link (live, failed, expired, revoked
superseders; a superseder in another scope) - they return exactly the rows of the ORM's ``for_prompt`` /
``search_visible``, for key lists of every size, and the fingerprint is the digest of those rows."""

from __future__ import annotations

import random

import pytest
from django.db import IntegrityError, transaction

from learnings.models import Learning
from learnings.querysets import versions_digest
from tests.factories import LearningFactory

pytestmark = pytest.mark.django_db

SCOPES = [
    ("workspace", "default"),
    ("project", "atlas"),
    ("project", "other"),
    ("session", "session-1"),
    ("persona", "reviewer"),
]
AT = 1_800_000_000_000
FIELDS = (
    "pk",
    "kind",
    "content",
    "scope_kind",
    "scope_id",
    "scope_key",
    "published_at_ms",
    "status",
    "publish_tier",
    "verification_status",
    "policy_decision",
    "sensitivity",
    "expires_at_ms",
)


def _varied_rows(rng: random.Random, count: int) -> list[Learning]:
    made: list[Learning] = []
    for n in range(count):
        status = rng.choice(["active", "active", "provisional", "revoked", "superseded"])
        decision = rng.choice([None, "manual", "automatic", "escalated"])
        values = {
            "scope_kind": (scope := rng.choice(SCOPES))[0],
            "scope_id": scope[1],
            "kind": rng.choice(["fact", "preference", "decision", "procedure", "run_summary"]),
            "content": f"Varied learning {n} about the editor.",
            "status": status,
            "publish_tier": "provisional" if status == "provisional" else rng.choice(["active", "provisional"]),
            "sensitivity": rng.choice(["scoped", "scoped", "sensitive"]),
            "verification_status": rng.choice(["unverified", "verified", "failed"]),
            "policy_decision": decision,
            "policy_actor": None if decision is None else "operator",
            "expires_at_ms": rng.choice([None, None, AT - 1, AT, AT + 1, AT + 60_000]),
            "revoked_at_ms": AT - 5 if status == "revoked" else None,
        }
        if status == "active":
            values["publish_tier"] = "active"
        if status == "superseded":
            if not made:
                continue
            values["superseded_by"] = rng.choice(made)
        try:
            with transaction.atomic():
                made.append(LearningFactory(**values))
        except IntegrityError:  # a combination the schema forbids (active and failed, …): not a row
            continue
    for row in rng.sample(made, len(made) // 3):  # supersedes links, in any scope, to any row but itself
        target = rng.choice(made)
        if target.pk != row.pk:
            Learning.objects.filter(pk=row.pk).update(supersedes=target)
    return made


def _key_lists(rng: random.Random) -> list[list[str]]:
    keys = [f"{kind}:{scope_id}" for kind, scope_id in SCOPES]
    lists = [keys, keys[:1], keys[1:3], [*keys, keys[0], keys[2]], ["project:nothing-here"], []]
    lists += [rng.sample(keys, rng.randint(1, len(keys))) for _ in range(6)]
    return lists


@pytest.mark.parametrize("shape", ["for_prompt", "search_visible"])
def test_scoped_rows_equal_the_orm_over_varied_rows(shape):
    rng = random.Random(11)
    made = _varied_rows(rng, 160)
    assert len(made) > 100
    nonempty = 0
    for keys in _key_lists(rng):
        for at in (AT - 10, AT, AT + 30_000, AT + 120_000):
            expected = sorted(getattr(Learning.objects, shape)(keys, at).order_by().values_list(*FIELDS))
            rows = Learning.objects.scoped_rows(shape, keys, at, FIELDS)
            assert sorted(rows) == expected, (keys, at)
            versioned = Learning.objects.scoped_rows(shape, keys, at, ("pk",), versioned=True)
            fingerprint = Learning.objects.scoped_fingerprint(shape, keys, at)
            assert fingerprint.count == len(versioned) == len(expected)
            assert fingerprint.digest == (versions_digest(versioned) if versioned else b"")  # no row: no digest
            nonempty += bool(expected)
    assert nonempty > 20  # the data is varied enough that most gates let something through


def test_the_gates_drop_what_the_orm_drops():
    """The rows the shapes hide are there (so the equivalence above is not between two empty answers)."""
    rng = random.Random(3)
    _varied_rows(rng, 160)
    keys = [f"{kind}:{scope_id}" for kind, scope_id in SCOPES]
    prompt = {row[0] for row in Learning.objects.scoped_rows("for_prompt", keys, AT, ("pk",))}
    search = {row[0] for row in Learning.objects.scoped_rows("search_visible", keys, AT, ("pk",))}
    everything = set(Learning.objects.values_list("pk", flat=True))
    assert prompt and search and prompt < everything and search < everything and prompt - search == set()
