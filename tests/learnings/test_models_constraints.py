"""The §1.5/§1.6 consistency rules hold in the database itself, whatever writes the row."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from learnings.models import Learning, LearningCandidate, key_digest
from tests.factories import LearningCandidateFactory, LearningFactory, SessionFactory
from tests.support.learnings import candidate, learning, terminal_run

pytestmark = pytest.mark.django_db


def raises_integrity(func):
    with pytest.raises(IntegrityError), transaction.atomic():
        func()


def row(**overrides) -> Learning:
    """An unsaved active workspace fact with ``overrides``."""
    return LearningFactory.build(**{"policy_decision": None, "policy_actor": None, **overrides})


@pytest.mark.parametrize(
    "overrides",
    [
        {"status": "provisional", "publish_tier": "active"},
        {"status": "active", "publish_tier": "provisional"},
        {"status": "active", "verification_status": "failed"},
        {"policy_decision": "manual", "policy_actor": None},
        {"policy_decision": "automatic", "policy_actor": ""},
        {"status": "revoked", "revoked_at_ms": None},
        {"status": "superseded"},
        {"scope_kind": "workspace", "scope_id": "other"},
        {"scope_id": ""},
        {"confidence": 101},
        {"content": ""},
        {"content": "x" * 1601},
        {"kind": "gossip"},
        {"status": "zombie"},
        {"sensitivity": "public"},
        {"verification_status": "maybe"},
        {"policy_decision": "whim", "policy_actor": "x"},
    ],
)
def test_learning_constraints(overrides):
    raises_integrity(lambda: row(**overrides).save())
    assert not Learning.objects.exists()


def test_allowed_combinations():
    active = row()
    active.save()
    row(status="provisional", publish_tier="provisional", verification_status="failed").save()
    row(status="revoked", publish_tier="provisional", revoked_at_ms=1).save()
    row(status="superseded", publish_tier="provisional", superseded_by=active).save()
    row(policy_decision="automatic", policy_actor="daemon", verification_status="verified").save()
    assert Learning.objects.count() == 5


def test_learning_cannot_supersede_itself():
    item = row()
    item.save()
    raises_integrity(lambda: Learning.objects.filter(pk=item.pk).update(supersedes=item))


def test_one_learning_per_source_candidate():
    published = learning()
    raises_integrity(lambda: row(source_candidate=published.source_candidate).save())


def test_candidate_constraints():
    cand = candidate()
    raises_integrity(lambda: LearningCandidate.objects.filter(pk=cand.pk).update(state="published"))
    raises_integrity(lambda: LearningCandidate.objects.filter(pk=cand.pk).update(kind="run_summary"))
    raises_integrity(lambda: LearningCandidate.objects.filter(pk=cand.pk).update(state="limbo"))
    raises_integrity(lambda: LearningCandidate.objects.filter(pk=cand.pk).update(origin="cli"))
    raises_integrity(lambda: LearningCandidate.objects.filter(pk=cand.pk).update(confidence=200))


def test_one_run_summary_per_run_and_daemon_dedup():
    run = terminal_run(SessionFactory())
    base = {"origin": "daemon", "scope_kind": "session", "scope_id": run.session.public_id, "source_run": run}
    LearningCandidateFactory(kind="run_summary", content="Request: a", **base)
    raises_integrity(lambda: LearningCandidateFactory(kind="run_summary", content="Request: b", **base))
    LearningCandidateFactory(kind="fact", content="A is b.", content_key=key_digest("a=b"), **base)
    raises_integrity(
        lambda: LearningCandidateFactory(kind="fact", content="a: b", content_key=key_digest("a=b"), **base)
    )


def test_public_ids_and_views():
    published = learning()
    assert published.public_id == f"learning-{published.pk}"
    assert published.source_candidate.public_id == f"learning-candidate-{published.source_candidate_id}"
    assert str(published) == published.public_id
    assert published.is_prompt_visible and published.is_prompt_eligible
