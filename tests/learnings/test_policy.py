"""Learning automation policy (§3.2, §3.3) and publication-rule evaluation (§4.10)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace

import pytest
from jsonschema import Draft202012Validator

from learnings import learning_policy as policy_module
from learnings.learning_policy import (
    CaptureConfig,
    Evaluation,
    JudgeConfig,
    LearningPolicy,
    LearningPolicyError,
    ModelGeneration,
    ModelOverride,
    PublicationConfig,
    PublicationRule,
    RetrievalConfig,
    SemanticCaptureConfig,
    automatic_learning_fields,
    evaluate_candidate,
    policy_actor_for,
    publish_tier_for_action,
    status_for_tier,
)
from tests.support.secret_stub import secret_classifier_fixtures

# Deterministic stand-in for memory.redaction.looks_like_secret (see test_validation.py).
_FAKE_SECRET_MARKERS = (
    "<redacted",
    "sk-",
    "api key is",
    "api-key:",
    "x-api-key:",
    "clientsecret:",
    "secret_token=",
    "personal access token:",
)


fake_secret_classifier, real_secret_classifier = secret_classifier_fixtures(_FAKE_SECRET_MARKERS)


DEFAULT_JSON = {
    "mode": "shadow",
    "capture": {
        "run_summary_candidates": True,
        "semantic_candidates": {
            "enabled": False,
            "model": None,
            "timeout_ms": None,
            "max_candidates_per_run": 2,
        },
    },
    "publication": {
        "default_action": "manual_review",
        "allow_api_origin_active_publication": False,
        "quarantined_rule_names": [],
        "rules": [],
    },
    "judge": {"enabled": False, "model": None, "timeout_ms": None},
    "retrieval": {"ranker": "hybrid", "max_tokens": 2000, "max_entries": 24, "standing_tokens": 400},
}


def policy_error(body_or_policy, *, request=True):
    with pytest.raises(LearningPolicyError) as info:
        if request:
            LearningPolicy.from_request(body_or_policy)
        else:
            body_or_policy.validate()
    return info.value


# --- shape and defaults -------------------------------------------------------------------------------


def test_default_policy_json_shape():
    assert LearningPolicy().to_dict() == DEFAULT_JSON
    assert LearningPolicy().mode == "shadow"


def test_submitted_policy_without_mode_is_manual_only():
    assert LearningPolicy.from_request({"policy": {}}).policy.mode == "manual_only"
    flat = LearningPolicy.from_request({"capture": {"run_summary_candidates": False}})
    assert flat.policy.mode == "manual_only"
    assert flat.policy.capture.run_summary_candidates is False
    assert LearningPolicy.from_dict({}).mode == "manual_only"
    # Everything else takes the documented defaults.
    expected = copy.deepcopy(DEFAULT_JSON)
    expected["mode"] = "manual_only"
    assert LearningPolicy.from_dict({}).to_dict() == expected


def test_wrapped_request_with_expected_revision():
    request = LearningPolicy.from_request({"policy": {"mode": "enabled"}, "expected_revision": 4})
    assert request.policy.mode == "enabled"
    assert request.expected_revision == 4
    assert LearningPolicy.from_request({"policy": {"mode": "shadow"}}).expected_revision is None
    assert (
        LearningPolicy.from_request({"policy": {"mode": "shadow"}, "expected_revision": None}).expected_revision is None
    )


def test_legacy_flat_request_with_expected_revision():
    request = LearningPolicy.from_request({"mode": "shadow", "judge": {"enabled": True}, "expected_revision": 2})
    assert request.policy.mode == "shadow"
    assert request.policy.judge.enabled is True
    assert request.expected_revision == 2


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"expected_revision": 3}, "learning-policy request must include policy or legacy policy fields"),
        ({}, "learning-policy request must include policy or legacy policy fields"),
        ([], "learning-policy request must be an object"),
        ("shadow", "learning-policy request must be an object"),
        (None, "learning-policy request must be an object"),
    ],
)
def test_bodies_without_a_policy_are_rejected(body, message):
    error = policy_error(body)
    assert error.message == message
    assert error.field == "policy"


def test_full_round_trip():
    body = {
        "mode": "enabled",
        "capture": {
            "run_summary_candidates": False,
            "semantic_candidates": {
                "enabled": True,
                "model": {
                    "provider": "openai",
                    "generation": {
                        "model": "gpt-x",
                        "fallback_model": None,
                        "max_output_tokens": 512,
                        "temperature": 0.2,
                    },
                },
                "timeout_ms": 20000,
                "max_candidates_per_run": 4,
            },
        },
        "publication": {
            "default_action": "reject",
            "allow_api_origin_active_publication": True,
            "quarantined_rule_names": ["noisy"],
            "rules": [
                {
                    "name": "session-fact",
                    "scope_kind": "session",
                    "scope_id": None,
                    "kind": "fact",
                    "sensitivity": "scoped",
                    "min_confidence": 95,
                    "require_evidence": True,
                    "require_source_run": True,
                    "require_source_session": True,
                    "action": "publish_active",
                    "expires_after_ms": 100,
                }
            ],
        },
        "judge": {"enabled": True, "model": {"provider": None, "generation": None}, "timeout_ms": 0},
        "retrieval": {"ranker": "lexical", "max_tokens": 900, "max_entries": 7, "standing_tokens": 120},
    }
    # judge timeout 0 is invalid when enabled; use the parser alone for the round trip.
    policy = LearningPolicy.from_dict(body)
    assert policy.to_dict() == body
    assert LearningPolicy.from_dict(policy.to_dict()) == policy
    assert policy.capture.semantic_candidates.model == ModelOverride(
        provider="openai",
        generation=ModelGeneration(model="gpt-x", max_output_tokens=512, temperature=0.2),
    )
    assert policy.publication.rules[0] == PublicationRule(
        name="session-fact",
        scope_kind="session",
        kind="fact",
        sensitivity="scoped",
        min_confidence=95,
        require_evidence=True,
        require_source_run=True,
        require_source_session=True,
        action="publish_active",
        expires_after_ms=100,
    )


def test_rule_defaults():
    policy = LearningPolicy.from_dict({"publication": {"rules": [{"action": "reject"}]}})
    assert policy.publication.rules[0].to_dict() == {
        "name": None,
        "scope_kind": None,
        "scope_id": None,
        "kind": None,
        "sensitivity": None,
        "min_confidence": None,
        "require_evidence": False,
        "require_source_run": False,
        "require_source_session": False,
        "action": "reject",
        "expires_after_ms": None,
    }


def test_effective_timeouts_default_to_15000():
    assert SemanticCaptureConfig().effective_timeout_ms == 15000
    assert JudgeConfig().effective_timeout_ms == 15000
    assert SemanticCaptureConfig(timeout_ms=2500).effective_timeout_ms == 2500
    assert JudgeConfig(timeout_ms=900).effective_timeout_ms == 900


def test_reviews_candidates_depends_on_mode():
    assert not LearningPolicy(mode="manual_only").reviews_candidates
    assert LearningPolicy(mode="shadow").reviews_candidates
    assert LearningPolicy(mode="enabled").reviews_candidates


def test_policy_objects_are_frozen():
    with pytest.raises(AttributeError):
        LearningPolicy().mode = "enabled"


# --- strict parsing -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"policy": {}, "extra": 1}, "extra"),
        ({"mode": "shadow", "extra": 1}, "extra"),
        ({"policy": {"modes": "shadow"}}, "modes"),
        ({"policy": {"capture": {"summary": True}}}, "capture.summary"),
        ({"policy": {"capture": {"semantic_candidates": {"limit": 2}}}}, "capture.semantic_candidates.limit"),
        (
            {"policy": {"publication": {"rules": [{"action": "reject", "when": 1}]}}},
            "publication.rules[0].when",
        ),
        ({"policy": {"judge": {"model": {"name": "x"}}}}, "judge.model.name"),
        ({"policy": {"judge": {"model": {"generation": {"top_p": 1}}}}}, "judge.model.generation.top_p"),
    ],
)
def test_unknown_fields_are_rejected(body, field):
    error = policy_error(body)
    assert error.field == field
    assert error.message == f"unknown field `{field}`"


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        ({"mode": 3}, "mode"),
        ({"mode": "auto"}, "mode"),
        ({"mode": None}, "mode"),
        ({"capture": None}, "capture"),
        ({"capture": []}, "capture"),
        ({"capture": {"run_summary_candidates": "yes"}}, "capture.run_summary_candidates"),
        ({"capture": {"semantic_candidates": {"enabled": 1}}}, "capture.semantic_candidates.enabled"),
        ({"capture": {"semantic_candidates": {"timeout_ms": -1}}}, "capture.semantic_candidates.timeout_ms"),
        ({"capture": {"semantic_candidates": {"timeout_ms": 1.5}}}, "capture.semantic_candidates.timeout_ms"),
        (
            {"capture": {"semantic_candidates": {"timeout_ms": "100"}}},
            "capture.semantic_candidates.timeout_ms",
        ),
        (
            {"capture": {"semantic_candidates": {"max_candidates_per_run": None}}},
            "capture.semantic_candidates.max_candidates_per_run",
        ),
        ({"capture": {"semantic_candidates": {"model": "gpt"}}}, "capture.semantic_candidates.model"),
        ({"judge": {"enabled": "true"}}, "judge.enabled"),
        ({"judge": {"timeout_ms": True}}, "judge.timeout_ms"),
        ({"judge": {"model": {"provider": 1}}}, "judge.model.provider"),
        ({"judge": {"model": {"generation": {"temperature": "hot"}}}}, "judge.model.generation.temperature"),
        ({"publication": {"default_action": "publish"}}, "publication.default_action"),
        (
            {"publication": {"allow_api_origin_active_publication": None}},
            "publication.allow_api_origin_active_publication",
        ),
        ({"publication": {"quarantined_rule_names": "noisy"}}, "publication.quarantined_rule_names"),
        ({"publication": {"quarantined_rule_names": ["ok", 3]}}, "publication.quarantined_rule_names[1]"),
        ({"publication": {"rules": {"action": "reject"}}}, "publication.rules"),
        ({"publication": {"rules": ["reject"]}}, "publication.rules[0]"),
        ({"publication": {"rules": [{"kind": "fact"}]}}, "publication.rules[0].action"),
        ({"publication": {"rules": [{"action": None}]}}, "publication.rules[0].action"),
        ({"publication": {"rules": [{"action": "publish"}]}}, "publication.rules[0].action"),
        ({"publication": {"rules": [{"action": "reject", "kind": "memo"}]}}, "publication.rules[0].kind"),
        (
            {"publication": {"rules": [{"action": "reject", "scope_kind": "team"}]}},
            "publication.rules[0].scope_kind",
        ),
        (
            {"publication": {"rules": [{"action": "reject", "sensitivity": "secret"}]}},
            "publication.rules[0].sensitivity",
        ),
        ({"publication": {"rules": [{"action": "reject", "scope_id": 7}]}}, "publication.rules[0].scope_id"),
        ({"publication": {"rules": [{"action": "reject", "name": ["x"]}]}}, "publication.rules[0].name"),
        (
            {"publication": {"rules": [{"action": "reject", "min_confidence": 9.5}]}},
            "publication.rules[0].min_confidence",
        ),
        (
            {"publication": {"rules": [{"action": "reject", "require_evidence": "yes"}]}},
            "publication.rules[0].require_evidence",
        ),
        (
            {"publication": {"rules": [{"action": "reject", "expires_after_ms": -5}]}},
            "publication.rules[0].expires_after_ms",
        ),
    ],
)
def test_wrong_types_are_rejected(policy, field):
    error = policy_error({"policy": policy})
    assert error.field == field
    assert error.message.startswith(field)


def test_policy_must_be_an_object():
    error = policy_error({"policy": None})
    assert (error.field, error.message) == ("policy", "policy must be an object")
    assert policy_error({"policy": ["shadow"]}).field == "policy"


@pytest.mark.parametrize("revision", ["3", -1, 2.0, True])
def test_expected_revision_must_be_a_non_negative_integer(revision):
    error = policy_error({"policy": {}, "expected_revision": revision})
    assert error.field == "expected_revision"


def test_enum_errors_list_the_choices():
    error = policy_error({"policy": {"mode": "auto"}})
    assert error.message == "mode must be one of `manual_only`, `shadow`, `enabled`"


# --- validation ---------------------------------------------------------------------------------------


def rules(*items):
    return {"publication": {"rules": list(items)}}


@pytest.mark.parametrize(
    ("policy", "field", "message"),
    [
        (
            {"publication": {"default_action": "publish_active"}},
            "publication.default_action",
            "learning publication default_action cannot be publish_active",
        ),
        (
            {"publication": {"quarantined_rule_names": ["ok", "  "]}},
            "publication.quarantined_rule_names[1]",
            "learning publication quarantine names must not be empty",
        ),
        (
            {"publication": {"quarantined_rule_names": ["Noisy", " noisy "]}},
            "publication.quarantined_rule_names[1]",
            "learning publication quarantine names must be unique",
        ),
        (
            {"judge": {"enabled": True, "timeout_ms": 0}},
            "judge.timeout_ms",
            "learning judge timeout_ms must be greater than zero",
        ),
        (
            {"capture": {"semantic_candidates": {"enabled": True, "timeout_ms": 0}}},
            "capture.semantic_candidates.timeout_ms",
            "semantic capture timeout_ms must be greater than zero",
        ),
        (
            {"capture": {"semantic_candidates": {"enabled": True, "max_candidates_per_run": 0}}},
            "capture.semantic_candidates.max_candidates_per_run",
            "semantic capture max_candidates_per_run must be greater than zero",
        ),
        (
            {"capture": {"semantic_candidates": {"enabled": True, "max_candidates_per_run": 9}}},
            "capture.semantic_candidates.max_candidates_per_run",
            "semantic capture max_candidates_per_run must be 8 or lower",
        ),
        (
            rules({"action": "reject"}, {"action": "reject", "scope_id": "  "}),
            "publication.rules[1].scope_id",
            "learning publication rule #1 uses an empty scope_id",
        ),
        (
            rules({"action": "reject", "min_confidence": 101}),
            "publication.rules[0].min_confidence",
            "learning publication rule #0 min_confidence must be between 0 and 100",
        ),
        (
            rules({"action": "reject", "min_confidence": -1}),
            "publication.rules[0].min_confidence",
            "learning publication rule #0 min_confidence must be between 0 and 100",
        ),
        (
            rules({"action": "publish_active", "kind": "procedure"}),
            "publication.rules[0].action",
            "automatic active publication is not supported for procedure learnings",
        ),
        (
            rules({"action": "reject"}, {"action": "reject"}, {"action": "publish_active"}),
            "publication.rules[2].kind",
            "learning publication rule #2 cannot use publish_active without an explicit kind filter",
        ),
    ],
)
def test_validation_messages(policy, field, message):
    error = policy_error({"policy": policy})
    assert (error.field, error.message) == (field, message)
    assert str(error) == message


def test_valid_edge_policies_and_their_near_misses():
    # Disabled capture/judge may carry zeros and large values.
    LearningPolicy.from_request(
        {
            "policy": {
                "mode": "shadow",
                "capture": {"semantic_candidates": {"enabled": False, "timeout_ms": 0, "max_candidates_per_run": 0}},
                "judge": {"enabled": False, "timeout_ms": 0},
            }
        }
    )
    LearningPolicy.from_request(
        {
            "policy": {
                "capture": {"semantic_candidates": {"enabled": True, "max_candidates_per_run": 8}},
                "publication": {
                    "default_action": "publish_provisional",
                    "quarantined_rule_names": ["a", "b"],
                    "rules": [
                        {"action": "publish_active", "kind": "fact", "min_confidence": 0},
                        {"action": "publish_provisional", "kind": "procedure", "min_confidence": 100},
                        {"action": "manual_review", "scope_id": "default"},
                    ],
                },
            }
        }
    )
    # The near misses of those edges are refused, naming the field.
    near_misses = [
        (
            {"judge": {"enabled": True, "timeout_ms": 0}},
            "judge.timeout_ms",
            "learning judge timeout_ms must be greater than zero",
        ),
        (
            {"capture": {"semantic_candidates": {"enabled": True, "max_candidates_per_run": 0}}},
            "capture.semantic_candidates.max_candidates_per_run",
            "semantic capture max_candidates_per_run must be greater than zero",
        ),
        (
            {"capture": {"semantic_candidates": {"enabled": True, "max_candidates_per_run": 9}}},
            "capture.semantic_candidates.max_candidates_per_run",
            "semantic capture max_candidates_per_run must be 8 or lower",
        ),
        (
            {"publication": {"rules": [{"action": "publish_provisional", "kind": "procedure", "min_confidence": 101}]}},
            "publication.rules[0].min_confidence",
            "learning publication rule #0 min_confidence must be between 0 and 100",
        ),
        (
            {"publication": {"quarantined_rule_names": ["a", "A"]}},
            "publication.quarantined_rule_names[1]",
            "learning publication quarantine names must be unique",
        ),
    ]
    for policy, field_name, message in near_misses:
        error = policy_error({"policy": {"mode": "shadow", **policy}})
        assert (error.field, error.message) == (field_name, message)


def test_validate_checks_default_action_before_rules():
    policy = LearningPolicy(
        publication=PublicationConfig(
            default_action="publish_active", rules=(PublicationRule(action="publish_active"),)
        )
    )
    assert policy_error(policy, request=False).field == "publication.default_action"


# --- the schema (JSON Schema 2020-12) ------------------------------------------------------------------


def test_the_schemas_are_valid_draft_2020_12_schemas():
    Draft202012Validator.check_schema(policy_module.POLICY_SCHEMA)
    Draft202012Validator.check_schema(policy_module.REQUEST_SCHEMA)
    assert tuple(policy_module.POLICY_SCHEMA["properties"]) == policy_module.POLICY_FIELDS


def test_every_dataclass_field_is_in_the_schema():
    schema = policy_module.POLICY_SCHEMA["properties"]
    assert tuple(schema["retrieval"]["properties"]) == RetrievalConfig.FIELDS
    assert tuple(schema["judge"]["properties"]) == JudgeConfig.FIELDS
    assert tuple(schema["capture"]["properties"]) == CaptureConfig.FIELDS
    semantic = schema["capture"]["properties"]["semantic_candidates"]["properties"]
    assert tuple(semantic) == SemanticCaptureConfig.FIELDS
    assert tuple(schema["publication"]["properties"]) == PublicationConfig.FIELDS
    assert tuple(schema["publication"]["properties"]["rules"]["items"]["properties"]) == PublicationRule.FIELDS


def test_the_first_error_in_document_order_is_reported():
    assert policy_error({"policy": {"mode": "auto", "judge": {"enabled": "x"}}}).field == "mode"
    # At one level, an unknown field is met before a wrong value (as the reference's parse meets them).
    error = policy_error({"policy": {"capture": {"run_summary_candidates": "x", "bogus": 1}}})
    assert error.field == "capture.bogus"
    error = policy_error({"policy": {"publication": {"rules": [{"action": "reject"}, {"kind": 3}]}}})
    assert (error.field, error.message) == ("publication.rules[1].action", "publication.rules[1].action is required")
    # The envelope's unknown field comes before the policy's errors; expected_revision after them.
    assert policy_error({"policy": {"mode": "auto"}, "extra": 1}).field == "extra"
    assert policy_error({"policy": {"mode": "auto"}, "expected_revision": "x"}).field == "mode"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"mode": 2.0}, "mode must be one of `manual_only`, `shadow`, `enabled`"),
        ({"judge": {"timeout_ms": 2.0}}, "judge.timeout_ms must be a non-negative integer"),
        ({"judge": {"timeout_ms": -1}}, "judge.timeout_ms must be a non-negative integer"),
        ({"judge": {"enabled": 1}}, "judge.enabled must be a boolean"),
        (
            {"judge": {"model": {"generation": {"temperature": True}}}},
            "judge.model.generation.temperature must be a number",
        ),
        (
            {"publication": {"rules": [{"action": "reject", "min_confidence": 9.5}]}},
            "publication.rules[0].min_confidence must be an integer",
        ),
        ({"publication": {"rules": "x"}}, "publication.rules must be a list"),
        ({"publication": {"rules": [3]}}, "publication.rules[0] must be an object"),
        (
            {"publication": {"quarantined_rule_names": [None]}},
            "publication.quarantined_rule_names[0] must be a string",
        ),
        (
            {"publication": {"rules": [{"action": "reject", "kind": None, "scope_kind": "team"}]}},
            "publication.rules[0].scope_kind must be one of `session`, `persona`, `project`, `workspace`",
        ),
    ],
)
def test_schema_messages(body, message):
    # JSON Schema counts 2.0 as an integer; these counts must be written as integers, as in the reference.
    assert policy_error({"policy": body}).message == message


def test_parsing_accepts_tuples_and_other_mappings():
    from types import MappingProxyType

    policy = LearningPolicy.from_dict(
        MappingProxyType({"publication": {"quarantined_rule_names": ("a",), "rules": ({"action": "reject"},)}})
    )
    assert policy.publication.quarantined_rule_names == ("a",)
    assert policy.publication.rules == (PublicationRule(action="reject"),)


# --- retrieval (beyond the reference) ------------------------------------------------------------------


def test_retrieval_defaults_and_round_trip():
    assert LearningPolicy().retrieval == RetrievalConfig(
        ranker="hybrid", max_tokens=2000, max_entries=24, standing_tokens=400
    )
    body = {"ranker": "lexical", "max_tokens": 150_000, "max_entries": 500, "standing_tokens": 150_000}
    policy = LearningPolicy.from_request({"policy": {"retrieval": body}}).policy
    assert policy.retrieval.to_dict() == body
    edges = {"max_tokens": 0, "max_entries": 1, "standing_tokens": 0}
    assert LearningPolicy.from_request({"retrieval": edges}).policy.retrieval.to_dict() == {"ranker": "hybrid", **edges}


@pytest.mark.parametrize(
    ("retrieval", "field", "message"),
    [
        ({"max_tokens": 150_001}, "retrieval.max_tokens", "learning retrieval max_tokens must be between 0 and 150000"),
        ({"max_tokens": -1}, "retrieval.max_tokens", "retrieval.max_tokens must be a non-negative integer"),
        ({"max_tokens": "2000"}, "retrieval.max_tokens", "retrieval.max_tokens must be a non-negative integer"),
        ({"max_entries": 0}, "retrieval.max_entries", "learning retrieval max_entries must be between 1 and 500"),
        ({"max_entries": 501}, "retrieval.max_entries", "learning retrieval max_entries must be between 1 and 500"),
        ({"max_entries": None}, "retrieval.max_entries", "retrieval.max_entries must be an integer"),
        ({"ranker": "bm25"}, "retrieval.ranker", "retrieval.ranker must be one of `hybrid`, `lexical`"),
        ({"rankers": "hybrid"}, "retrieval.rankers", "unknown field `retrieval.rankers`"),
        (
            {"standing_tokens": 150_001},
            "retrieval.standing_tokens",
            "learning retrieval standing_tokens must be between 0 and 150000",
        ),
        (
            {"standing_tokens": -5},
            "retrieval.standing_tokens",
            "retrieval.standing_tokens must be a non-negative integer",
        ),
    ],
)
def test_retrieval_bounds(retrieval, field, message):
    error = policy_error({"policy": {"retrieval": retrieval}})
    assert (error.field, error.message) == (field, message)


def test_validate_checks_the_schema_of_a_policy_built_in_code():
    error = policy_error(LearningPolicy(retrieval=RetrievalConfig(max_entries=0)), request=False)
    assert (error.field, error.message) == (
        "retrieval.max_entries",
        "learning retrieval max_entries must be between 1 and 500",
    )
    # Bounds come before the §3.2 rules, as parsing comes before validation for a submitted body.
    policy = LearningPolicy(
        publication=PublicationConfig(default_action="publish_active"), retrieval=RetrievalConfig(max_tokens=10**6)
    )
    assert policy_error(policy, request=False).field == "retrieval.max_tokens"


def test_a_bound_is_one_schema_keyword():
    """What issue 14's bounds need: ``maximum`` on a field, with the default message or a literal one."""
    schema = copy.deepcopy(policy_module.POLICY_SCHEMA)
    judge = schema["properties"]["judge"]["properties"]
    judge["timeout_ms"]["maximum"] = 60_000
    validator = policy_module._Validator(schema)
    with pytest.raises(LearningPolicyError) as info:
        policy_module._check(validator, {"judge": {"timeout_ms": 60_001}})
    assert (info.value.field, info.value.message) == (
        "judge.timeout_ms",
        "judge.timeout_ms must be between 0 and 60000",
    )
    policy_module._check(validator, {"judge": {"timeout_ms": 60_000}})
    rule = schema["properties"]["publication"]["properties"]["rules"]["items"]["properties"]
    rule["expires_after_ms"] = {
        **rule["expires_after_ms"],
        "maximum": 10,
        "x-messages": {"maximum": "rule #{index} expires after {maximum} ms at most"},
    }
    with pytest.raises(LearningPolicyError) as info:
        policy_module._check(
            policy_module._Validator(schema),
            {"publication": {"rules": [{"action": "reject"}, {"action": "reject", "expires_after_ms": 11}]}},
        )
    assert (info.value.field, info.value.message) == (
        "publication.rules[1].expires_after_ms",
        "rule #1 expires after 10 ms at most",
    )


@pytest.mark.django_db
def test_the_stored_policy_is_parsed_once_per_distinct_object(monkeypatch):
    from learnings import policy_in_force
    from learnings.services.policy_revision import set_policy

    parses = []
    real = LearningPolicy.from_dict.__func__

    def counting(cls, data):
        parses.append(data)
        return real(cls, data)

    monkeypatch.setattr(LearningPolicy, "from_dict", classmethod(counting))
    set_policy({"policy": {"mode": "enabled", "retrieval": {"max_entries": 5}}}, "ops")
    first = policy_in_force.current_policy()
    assert policy_in_force.current_policy() is first and first.retrieval.max_entries == 5
    assert len(parses) <= 1
    set_policy({"policy": {"mode": "enabled", "retrieval": {"max_entries": 6}}}, "ops")
    assert policy_in_force.current_policy().retrieval.max_entries == 6


# --- §4.10 evaluation ---------------------------------------------------------------------------------


@dataclass
class Source:
    run_id: str | None = "run-1"
    session_id: str | None = "demo"


@dataclass
class Candidate:
    origin: str = "daemon"
    kind: str = "fact"
    scope_kind: str = "session"
    scope_id: str = "demo"
    sensitivity: str = "scoped"
    confidence: int = 96
    content: str = "Remember the demo token."
    evidence_refs: list = field(default_factory=lambda: [{"run_id": "run-1", "artifact_id": "provider-request"}])
    source: object = field(default_factory=Source)
    expires_at_ms: int | None = None


def session_fact_rule(**overrides):
    values = {
        "name": "session-fact",
        "scope_kind": "session",
        "kind": "fact",
        "sensitivity": "scoped",
        "min_confidence": 95,
        "require_evidence": True,
        "require_source_run": True,
        "require_source_session": True,
        "action": "publish_provisional",
        "expires_after_ms": 100,
    }
    values.update(overrides)
    return PublicationRule(**values)


def enabled_policy(*rule_list, **publication):
    return LearningPolicy(mode="enabled", publication=PublicationConfig(rules=tuple(rule_list), **publication))


def test_matching_rule_gives_its_action_name_and_expiry():
    evaluation = evaluate_candidate(enabled_policy(session_fact_rule()), Candidate(), now_ms=100)
    assert evaluation == Evaluation(
        action="publish_provisional",
        matched_rule_name="session-fact",
        reason="matched publication rule `session-fact`",
        expires_at_ms=200,
    )


@pytest.mark.parametrize(
    ("candidate_expiry", "expires_after_ms", "expected"),
    [(150, 100, 150), (500, 100, 200), (150, None, 150), (None, None, None), (None, 0, 100)],
)
def test_expiry_is_the_earlier_of_candidate_and_rule(candidate_expiry, expires_after_ms, expected):
    policy = enabled_policy(session_fact_rule(expires_after_ms=expires_after_ms))
    evaluation = evaluate_candidate(policy, Candidate(expires_at_ms=candidate_expiry), now_ms=100)
    assert evaluation.expires_at_ms == expected


def test_no_match_falls_back_to_default_action_with_candidate_expiry():
    evaluation = evaluate_candidate(enabled_policy(), Candidate(expires_at_ms=999), now_ms=100)
    assert evaluation == Evaluation(
        "manual_review", None, "no publication rule matched; falling back to ManualReview", 999
    )
    policy = enabled_policy(default_action="reject")
    assert evaluate_candidate(policy, Candidate(), now_ms=1).reason == (
        "no publication rule matched; falling back to Reject"
    )
    policy = enabled_policy(default_action="publish_provisional")
    assert evaluate_candidate(policy, Candidate(), now_ms=1).reason.endswith("falling back to PublishProvisional")


def test_api_candidates_cannot_satisfy_trusted_input_rules():
    evaluation = evaluate_candidate(enabled_policy(session_fact_rule()), Candidate(origin="api"), now_ms=100)
    assert evaluation.action == "manual_review"
    assert evaluation.matched_rule_name is None


@pytest.mark.parametrize(
    ("gate", "candidate"),
    [
        ("require_evidence", Candidate(evidence_refs=[])),
        ("require_source_run", Candidate(source=Source(run_id=None))),
        ("require_source_run", Candidate(source=Source(run_id="  "))),
        ("require_source_session", Candidate(source=Source(session_id=None))),
        ("require_source_session", Candidate(source={})),
    ],
)
def test_each_trusted_input_gate(gate, candidate):
    gates = {"require_evidence": False, "require_source_run": False, "require_source_session": False}
    rule = session_fact_rule(**{**gates, gate: True})
    assert evaluate_candidate(enabled_policy(rule), candidate, now_ms=1).matched_rule_name is None
    # Without the gate the same candidate matches.
    assert evaluate_candidate(enabled_policy(session_fact_rule(**gates)), candidate, now_ms=1).matched_rule_name


def test_trusted_gates_accept_mapping_sources():
    candidate = Candidate(source={"run_id": "run-1", "session_id": "demo"})
    assert evaluate_candidate(enabled_policy(session_fact_rule()), candidate, now_ms=1).matched_rule_name


def test_api_origin_publish_active_is_downgraded_unless_opted_in():
    rule = session_fact_rule(
        action="publish_active",
        require_evidence=False,
        require_source_run=False,
        require_source_session=False,
    )
    downgraded = evaluate_candidate(enabled_policy(rule), Candidate(origin="api"), now_ms=100)
    assert downgraded.action == "publish_provisional"
    assert downgraded.matched_rule_name == "session-fact"
    assert downgraded.reason == (
        "api-origin candidates cannot be auto-published with the active tier; retaining provisional tier"
    )
    opted_in = enabled_policy(rule, allow_api_origin_active_publication=True)
    assert evaluate_candidate(opted_in, Candidate(origin="api"), now_ms=100).action == "publish_active"
    assert evaluate_candidate(enabled_policy(rule), Candidate(origin="daemon"), now_ms=100).action == "publish_active"


def test_quarantined_rule_is_skipped():
    policy = enabled_policy(session_fact_rule(), quarantined_rule_names=("session-fact",))
    evaluation = evaluate_candidate(policy, Candidate(), now_ms=100)
    assert (evaluation.action, evaluation.matched_rule_name) == ("manual_review", None)


def test_quarantine_is_trimmed_and_case_insensitive_and_falls_through_to_next_rule():
    second = session_fact_rule(name="fallback", action="reject")
    policy = enabled_policy(
        session_fact_rule(name=" Session-Fact "), second, quarantined_rule_names=("  SESSION-fact",)
    )
    evaluation = evaluate_candidate(policy, Candidate(), now_ms=100)
    assert (evaluation.action, evaluation.matched_rule_name) == ("reject", "fallback")


def test_first_matching_rule_wins_and_unnamed_rules_have_a_reason():
    unnamed = PublicationRule(action="reject")
    policy = enabled_policy(unnamed, session_fact_rule())
    evaluation = evaluate_candidate(policy, Candidate(), now_ms=100)
    assert evaluation == Evaluation("reject", None, "matched unnamed publication rule", None)
    blank = PublicationRule(name="  ", action="reject")
    evaluation = evaluate_candidate(enabled_policy(blank), Candidate(), now_ms=100)
    assert (evaluation.matched_rule_name, evaluation.reason) == ("  ", "matched unnamed publication rule")


@pytest.mark.parametrize(
    "candidate",
    [
        Candidate(scope_kind="project"),
        Candidate(kind="preference"),
        Candidate(sensitivity="sensitive"),
        Candidate(confidence=94),
    ],
)
def test_rule_filters(candidate):
    assert evaluate_candidate(enabled_policy(session_fact_rule()), candidate, now_ms=1).matched_rule_name is None


def test_scope_id_filter_and_confidence_boundary():
    rule = session_fact_rule(scope_id="demo")
    assert evaluate_candidate(enabled_policy(rule), Candidate(confidence=95), now_ms=1).matched_rule_name
    assert evaluate_candidate(enabled_policy(rule), Candidate(scope_id="other"), now_ms=1).matched_rule_name is None


def test_secret_candidate_is_rejected_before_rules():
    rule = session_fact_rule(action="publish_active")
    rejected = evaluate_candidate(enabled_policy(rule), Candidate(content="The API key is sk-proj-secret."), now_ms=1)
    assert rejected == Evaluation("reject", None, "candidate content matched the anti-secret learning classifier", None)
    accepted = evaluate_candidate(enabled_policy(rule), Candidate(content="Token budget is 1000."), now_ms=1)
    assert (accepted.action, accepted.matched_rule_name) == ("publish_active", "session-fact")


def test_secret_guard_applies_only_to_semantic_kinds():
    rule = PublicationRule(name="all", action="publish_provisional")
    for kind in ("run_summary", "procedure"):
        candidate = Candidate(kind=kind, content="Request mentioned <redacted>.")
        assert evaluate_candidate(enabled_policy(rule), candidate, now_ms=1).action == "publish_provisional"


def test_secret_rejection_with_real_classifier(real_secret_classifier):
    rule = session_fact_rule(action="publish_active")
    rejected = evaluate_candidate(enabled_policy(rule), Candidate(content="The API key is sk-proj-secret."), now_ms=1)
    assert rejected.action == "reject"
    accepted = evaluate_candidate(enabled_policy(rule), Candidate(content="Token budget is 1000."), now_ms=1)
    assert accepted.action == "publish_active"


def test_procedure_publish_active_becomes_manual_review():
    # validate() forbids this rule; evaluation must still be safe for an unvalidated policy.
    rule = PublicationRule(name="procedures", kind="procedure", action="publish_active")
    evaluation = evaluate_candidate(enabled_policy(rule), Candidate(kind="procedure"), now_ms=1)
    assert evaluation == Evaluation(
        "manual_review",
        "procedures",
        "procedure learnings cannot be auto-published with the active tier",
        None,
    )


def test_candidates_may_be_mappings():
    candidate = {
        "origin": "daemon",
        "kind": "fact",
        "scope_kind": "session",
        "scope_id": "demo",
        "sensitivity": "scoped",
        "confidence": 99,
        "content": "Editor is Helix",
        "evidence_refs": [{"run_id": "run-1"}],
        "source": {"run_id": "run-1", "session_id": "demo"},
        "expires_at_ms": None,
    }
    assert evaluate_candidate(enabled_policy(session_fact_rule()), candidate, now_ms=1).action == "publish_provisional"


def test_evaluation_ignores_mode():
    policy = replace(enabled_policy(session_fact_rule()), mode="manual_only")
    assert evaluate_candidate(policy, Candidate(), now_ms=1).action == "publish_provisional"


# --- publication metadata -----------------------------------------------------------------------------


def test_automatic_learning_metadata():
    active = automatic_learning_fields(Evaluation("publish_active", "session-fact", "matched", 500))
    assert active == {
        "status": "active",
        "publish_tier": "active",
        "policy_decision": "automatic",
        "policy_actor": "daemon",
        "verification_status": "unverified",
        "expires_at_ms": 500,
    }
    provisional = automatic_learning_fields(Evaluation("publish_provisional", None, "matched", None))
    assert (provisional["status"], provisional["publish_tier"]) == ("provisional", "provisional")
    assert automatic_learning_fields(Evaluation("manual_review", None, "x", None)) is None
    assert automatic_learning_fields(Evaluation("reject", None, "x", None)) is None


def test_policy_actor_operator_vs_daemon():
    assert policy_actor_for("manual") == "operator"
    assert policy_actor_for("automatic") == "daemon"


def test_tier_and_status_helpers():
    assert publish_tier_for_action("publish_active") == "active"
    assert publish_tier_for_action("publish_provisional") == "provisional"
    assert publish_tier_for_action("manual_review") is None
    assert status_for_tier("active") == "active"
    assert status_for_tier("provisional") == "provisional"


# --- promoted-skill metadata secret guard -------------------------------------------------------------


def test_default_config_objects():
    assert CaptureConfig() == CaptureConfig(run_summary_candidates=True, semantic_candidates=SemanticCaptureConfig())
    assert PublicationConfig().rules == ()
    assert JudgeConfig().model is None
