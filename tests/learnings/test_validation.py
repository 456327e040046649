"""Candidate and learning validation (§2.3 scope parsing, §3.4 literal messages, §1.6 consistency)."""

from __future__ import annotations

import sys
import types
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from learnings.validation import (
    LearningScope,
    LearningValidationError,
    content_has_secret_material,
    normalise_scope,
    parse_scope_query,
    scope_key,
    validate_candidate,
    validate_candidate_kind_origin,
    validate_confidence,
    validate_content,
    validate_learning,
    validate_learning_consistency,
    validate_review_reason,
    validate_scope,
    validate_secret_guard,
)
from tests.support.secret_stub import secret_classifier_fixtures

# The secret classifier belongs to memory.redaction (another module); these tests use a deterministic
# stand-in so they exercise this module's wiring only. Tests asking for `real_secret_classifier` run against
# the real one and are skipped while it is not available.
_FAKE_SECRET_MARKERS = ("<redacted", "sk-", "api key is", "api-key:", "clientsecret:", "secret_token=")


fake_secret_classifier, real_secret_classifier = secret_classifier_fixtures(_FAKE_SECRET_MARKERS)


@contextmanager
def raises(message, field=None):
    """Expect a LearningValidationError with exactly this message (and field, when given)."""
    with pytest.raises(LearningValidationError) as info:
        yield info
    assert info.value.message == message
    assert str(info.value) == message
    if field is not None:
        assert info.value.field == field


# --- scopes -------------------------------------------------------------------------------------------


def test_scope_key_format():
    assert scope_key("session", " session-1 ") == "session:session-1"
    assert LearningScope("workspace", "default").scope_key == "workspace:default"
    assert LearningScope("project", "proj").scope_key == "project:proj"


def test_normalise_scope_fills_and_trims():
    assert normalise_scope("workspace", "") == LearningScope("workspace", "default")
    assert normalise_scope("workspace", None) == LearningScope("workspace", "default")
    assert normalise_scope("workspace", " default ") == LearningScope("workspace", "default")
    assert normalise_scope("session", " demo ") == LearningScope("session", "demo")
    assert normalise_scope("persona", "writer") == LearningScope("persona", "writer")


def test_normalise_scope_rejects_custom_workspace_id():
    with raises("workspace learning scope id must be `default`", "scope.id"):
        normalise_scope("workspace", "custom")


@pytest.mark.parametrize("scope_id", ["", "   ", None])
def test_normalise_scope_requires_id_outside_workspace(scope_id):
    with raises("learning scope id is required", "scope.id"):
        normalise_scope("project", scope_id)


def test_normalise_scope_rejects_unknown_kind():
    with raises("unknown learning scope kind `team`", "scope.kind"):
        normalise_scope("team", "x")


def test_validate_scope_accepts_canonical_scopes_and_refuses_their_near_misses():
    validate_scope("session", "demo")
    validate_scope("workspace", "default")
    with raises("learning scope id must not contain leading or trailing whitespace", "scope.id"):
        validate_scope("session", "demo\t")
    with raises("workspace learning scope id must be `default`", "scope.id"):
        validate_scope("workspace", "Default")


def test_validate_scope_rejects_whitespace_instead_of_trimming():
    with raises("learning scope id must not contain leading or trailing whitespace", "scope.id"):
        validate_scope("session", " demo ")
    with raises("learning scope id must not contain leading or trailing whitespace"):
        validate_scope("workspace", "default ")


def test_validate_scope_rejects_custom_workspace_id():
    with raises("workspace learning scope id must be `default`", "scope.id"):
        validate_scope("workspace", "custom")


@pytest.mark.parametrize("scope_id", ["", "  ", None])
def test_validate_scope_requires_id(scope_id):
    with raises("learning scope id is required", "scope.id"):
        validate_scope("workspace", scope_id)


def test_parse_scope_query_cases():
    assert parse_scope_query(None, None) is None
    assert parse_scope_query("", "  ") is None
    assert parse_scope_query("workspace", None) == LearningScope("workspace", "default")
    assert parse_scope_query("workspace", "default") == LearningScope("workspace", "default")
    assert parse_scope_query("session", " demo ") == LearningScope("session", "demo")


@pytest.mark.parametrize("scope_id", [None, "", "   "])
def test_parse_scope_query_requires_id_for_non_workspace_kinds(scope_id):
    with raises("scope_id is required for the selected learning scope", "scope_id"):
        parse_scope_query("project", scope_id)


def test_parse_scope_query_requires_kind_with_id():
    with raises("scope_kind is required when scope_id is provided", "scope_kind"):
        parse_scope_query(None, "demo")


def test_parse_scope_query_rejects_custom_workspace_and_unknown_kind():
    with raises("workspace learning scope id must be `default`", "scope_id"):
        parse_scope_query("workspace", "custom")
    with raises("unknown learning scope kind `team`", "scope_kind"):
        parse_scope_query("team", "x")


# --- content, confidence, kind/origin -----------------------------------------------------------------


@pytest.mark.parametrize("content", ["", "   \n", None])
def test_content_is_required(content):
    with raises("learning content is required", "content"):
        validate_content(content)


def test_content_limit_is_1600_characters_after_trim():
    validate_content("x" * 1600)
    validate_content("  " + "x" * 1600 + "\n")
    validate_content("é" * 1600)  # characters, not bytes
    with raises("learning content exceeds the 1600 character limit", "content"):
        validate_content("x" * 1601)


@pytest.mark.parametrize(("confidence", "near_miss"), [(0, -1), (55, 55.5), (100, 101)])
def test_confidence_in_range_and_its_nearest_miss(confidence, near_miss):
    validate_confidence(confidence)
    with raises("learning confidence must be between 0 and 100", "confidence"):
        validate_confidence(near_miss)


@pytest.mark.parametrize("confidence", [-1, 101, 255, True, 50.0, "80", None])
def test_confidence_out_of_range_or_wrong_type(confidence):
    with raises("learning confidence must be between 0 and 100", "confidence"):
        validate_confidence(confidence)


def test_api_run_summary_candidates_are_rejected():
    with raises("run_summary candidates are captured by the service only", "kind"):
        validate_candidate_kind_origin("run_summary", "api")
    validate_candidate_kind_origin("run_summary", "daemon")
    validate_candidate_kind_origin("fact", "api")


def test_unknown_kind_and_origin_are_rejected():
    with raises("unknown learning kind `note`", "kind"):
        validate_candidate_kind_origin("note", "api")
    with raises("unknown learning candidate origin `cli`", "origin"):
        validate_candidate_kind_origin("fact", "cli")


# --- secret guard ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fact", "preference", "decision"])
def test_secret_material_rejected_for_semantic_kinds(kind):
    with raises("semantic learning content appears to contain secret material", "content"):
        validate_secret_guard(kind, "The API key is sk-proj-secret.")
    validate_secret_guard(kind, "Token budget is 1000.")


@pytest.mark.parametrize("kind", ["run_summary", "procedure"])
def test_secret_guard_skips_run_summary_and_procedure(kind):
    validate_secret_guard(kind, "Request mentioned <redacted>.")
    with raises("semantic learning content appears to contain secret material", "content"):
        validate_secret_guard("fact", "Request mentioned <redacted>.")  # the same text as a semantic kind


def test_secret_guard_consults_memory_redaction(monkeypatch):
    module = types.ModuleType("memory.scrubbing")
    module.looks_like_secret = lambda text: "banana" in text
    monkeypatch.setitem(sys.modules, "memory.scrubbing", module)
    assert content_has_secret_material("a banana")
    assert not content_has_secret_material("The API key is sk-proj-secret.")


SECRET_CORPUS = [
    "The API key is sk-proj-corpus-secret.",
    "api-key: abc123456789",
    "x-api-key: abc123456789",
    "clientSecret: hunter2hunter2",
    "personal access token = ghp_1234567890",
    "PRIVATE_KEY: -----BEGIN PRIVATE KEY-----",
    "secret_token=abc123456789",
    "pat: ghp_1234567890",
    '{"clientSecret":"hunter2hunter2"}',
    "My password is correcthorsebatterystaple.",  # issue 20: a secret stated in prose
]
BENIGN_CORPUS = [
    "Token budget is 1000.",
    "The client secretariat prefers written updates.",
    "Pat prefers concise reports.",
    "Authentication strategy is still undecided.",
    "The private roadmap is still draft.",
    "Remember the demo token.",
    "Access token is <redacted>.",  # issue 20: already redacted - a marker is not a secret
]


@pytest.mark.parametrize("content", SECRET_CORPUS)
def test_real_classifier_rejects_key_shapes(real_secret_classifier, content):
    with raises("semantic learning content appears to contain secret material"):
        validate_secret_guard("fact", content)


@pytest.mark.parametrize("content", BENIGN_CORPUS)
def test_real_classifier_accepts_benign_content(real_secret_classifier, content):
    validate_secret_guard("fact", content)
    with raises("semantic learning content appears to contain secret material", "content"):
        validate_secret_guard("fact", f"{content} The API key is sk-proj-corpus-secret.")


def test_real_classifier_precision_and_recall_on_reference_corpus(real_secret_classifier):
    cases = [
        ("The API key is sk-proj-corpus-secret.", True),
        ("clientSecret: corpus-secret-value", True),
        ("personal access token = ghp_corpus_secret", True),
        ("The project token budget is 1000.", False),
        ("Pat prefers compact status reports.", False),
        ("The private roadmap is still draft.", False),
    ]
    outcomes = [(content_has_secret_material(content), expected) for content, expected in cases]
    true_positive = sum(1 for actual, expected in outcomes if actual and expected)
    false_positive = sum(1 for actual, expected in outcomes if actual and not expected)
    false_negative = sum(1 for actual, expected in outcomes if not actual and expected)
    assert true_positive / max(true_positive + false_positive, 1) >= 0.99
    assert true_positive / max(true_positive + false_negative, 1) >= 0.99


def test_real_classifier_allows_redacted_run_summaries(real_secret_classifier):
    validate_secret_guard("run_summary", "Request: deploy with <redacted>")
    with raises("semantic learning content appears to contain secret material", "content"):
        validate_secret_guard("fact", "Request: deploy with api-key: abc123456789")


# --- review, consistency ------------------------------------------------------------------------------


@pytest.mark.parametrize("reason", ["", "  ", None])
def test_review_reason_required(reason):
    with raises("learning automation review reason is required", "automation_review.reason"):
        validate_review_reason(reason)


def consistency(**overrides):
    values = {
        "status": "active",
        "publish_tier": "active",
        "verification_status": "unverified",
        "policy_decision": "manual",
        "policy_actor": "operator",
    }
    values.update(overrides)
    validate_learning_consistency(**values)


def test_consistent_learnings_pass():
    consistency()
    consistency(status="provisional", publish_tier="provisional")
    consistency(policy_decision=None, policy_actor=None)
    consistency(policy_decision="automatic", policy_actor="daemon", verification_status="verified")
    for status in ("superseded", "revoked"):
        for tier in ("active", "provisional"):
            consistency(status=status, publish_tier=tier, verification_status="failed")
    # the near misses of those cases
    with raises("provisional learnings must use the provisional publish tier", "publish_tier"):
        consistency(status="provisional", publish_tier="active")
    with raises("learning policy_actor is required when policy_decision is set", "policy_actor"):
        consistency(policy_decision="automatic", policy_actor=None, verification_status="verified")
    with raises("active learnings cannot use failed verification status", "verification_status"):
        consistency(verification_status="failed")


@pytest.mark.parametrize("actor", [None, "", "  "])
def test_policy_actor_required_with_decision(actor):
    with raises("learning policy_actor is required when policy_decision is set", "policy_actor"):
        consistency(policy_actor=actor)


def test_tier_must_follow_status():
    with raises("provisional learnings must use the provisional publish tier", "publish_tier"):
        consistency(status="provisional", publish_tier="active")
    with raises("active learnings must use the active publish tier", "publish_tier"):
        consistency(status="active", publish_tier="provisional")


def test_active_learning_cannot_have_failed_verification():
    with raises("active learnings cannot use failed verification status", "verification_status"):
        consistency(verification_status="failed")
    consistency(status="provisional", publish_tier="provisional", verification_status="failed")


# --- whole records ------------------------------------------------------------------------------------


@dataclass
class Candidate:
    scope_kind: str = "session"
    scope_id: str = "demo"
    kind: str = "fact"
    origin: str = "api"
    content: str = "The workspace prefers concise JSON snapshots."
    confidence: int = 80
    automation_review: dict | None = None


@dataclass
class Learning:
    scope_kind: str = "session"
    scope_id: str = "demo"
    kind: str = "fact"
    content: str = "The workspace prefers concise JSON snapshots."
    confidence: int = 90
    status: str = "active"
    publish_tier: str = "active"
    verification_status: str = "unverified"
    policy_decision: str | None = "manual"
    policy_actor: str | None = "operator"


def test_valid_candidate_and_learning():
    validate_candidate(Candidate())
    validate_candidate(Candidate(automation_review={"reason": "matched rule"}))
    validate_candidate(Candidate(kind="run_summary", origin="daemon", content="Request mentioned <redacted>."))
    validate_candidate(vars(Candidate()))
    validate_learning(Learning())
    validate_learning(vars(Learning()))
    # one field off, refused with its message
    with raises("run_summary candidates are captured by the service only", "kind"):
        validate_candidate(Candidate(kind="run_summary", origin="api", content="Request mentioned <redacted>."))
    with raises("learning confidence must be between 0 and 100", "confidence"):
        validate_candidate(vars(Candidate(confidence=101)))
    with raises("active learnings must use the active publish tier", "publish_tier"):
        validate_learning(Learning(publish_tier="provisional"))


def test_candidate_validation_order_scope_first():
    with raises("learning scope id must not contain leading or trailing whitespace"):
        validate_candidate(Candidate(scope_id=" demo ", content="", confidence=300))
    with raises("workspace learning scope id must be `default`"):
        validate_candidate(Candidate(scope_kind="workspace", scope_id="custom"))


def test_candidate_validation_messages():
    with raises("learning content is required"):
        validate_candidate(Candidate(content=" ", kind="run_summary"))
    with raises("run_summary candidates are captured by the service only"):
        validate_candidate(Candidate(kind="run_summary", content="Request mentioned <redacted>."))
    with raises("semantic learning content appears to contain secret material"):
        validate_candidate(Candidate(content="The API key is sk-proj-secret."))
    with raises("learning automation review reason is required"):
        validate_candidate(Candidate(automation_review={"reason": "   "}))
    with raises("learning confidence must be between 0 and 100"):
        validate_candidate(Candidate(confidence=101))


def test_learning_validation_messages():
    with raises("learning scope id is required"):
        validate_learning(Learning(scope_id=""))
    with raises("learning content exceeds the 1600 character limit"):
        validate_learning(Learning(content="x" * 1601))
    with raises("semantic learning content appears to contain secret material"):
        validate_learning(Learning(content="Access token is <redacted>."))
    with raises("active learnings must use the active publish tier"):
        validate_learning(Learning(publish_tier="provisional"))
    with raises("learning policy_actor is required when policy_decision is set"):
        validate_learning(Learning(policy_actor=None))
    with raises("learning confidence must be between 0 and 100"):
        validate_learning(Learning(confidence=-5))
    validate_learning(Learning(kind="run_summary", content="Request mentioned <redacted>."))
