"""/v1/runtime/learning-policy (spec §2.1, §3.2): shape, defaults, validation, revisions, operators only."""

from __future__ import annotations

import pytest

from learnings import policy_in_force
from memory.models import AuditEvent, PolicyRevision
from tests.conftest import assert_problem
from tests.support.learnings import candidate

pytestmark = pytest.mark.django_db

URL = "/v1/runtime/learning-policy"
DEFAULT = {
    "mode": "shadow",
    "capture": {
        "run_summary_candidates": True,
        "semantic_candidates": {"enabled": False, "model": None, "timeout_ms": None, "max_candidates_per_run": 2},
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


def test_get_defaults(operator_client):
    assert operator_client.get(URL).json() == DEFAULT


def test_operators_only(api_client, anon_client):
    assert_problem(api_client.get(URL), 403, "auth/forbidden")
    assert_problem(api_client.post(URL, {"policy": {"mode": "enabled"}}, format="json"), 403)
    assert_problem(anon_client.get(URL), 401)
    assert not PolicyRevision.objects.exists()


def test_post_replaces_the_whole_policy(operator_client):
    rule = {"name": "prefs", "kind": "preference", "action": "publish_active"}
    response = operator_client.post(
        URL, {"policy": {"mode": "enabled", "publication": {"rules": [rule]}}}, format="json"
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"run_memory_policy", "learning_policy", "revision"}
    assert body["revision"] == 1 and body["run_memory_policy"]["enabled"] is True
    assert body["learning_policy"]["mode"] == "enabled"
    assert body["learning_policy"]["publication"]["rules"][0]["name"] == "prefs"
    assert operator_client.get(URL).json() == body["learning_policy"]
    # an omitted mode is manual_only (the submitted-enum default), not shadow
    body = operator_client.post(URL, {"policy": {}, "expected_revision": 1}, format="json").json()
    assert body["learning_policy"]["mode"] == "manual_only" and body["revision"] == 2
    assert body["learning_policy"]["publication"]["rules"] == []
    audit = AuditEvent.objects.filter(subject_type="policy", subject_id="learning").first()
    assert (audit.from_state, audit.to_state, audit.actor) == ("r1", "r2", "ops")


def test_legacy_flat_policy_is_accepted(operator_client):
    body = operator_client.post(URL, {"mode": "enabled", "judge": {"enabled": True}}, format="json").json()
    assert body["learning_policy"]["mode"] == "enabled" and body["learning_policy"]["judge"]["enabled"] is True


@pytest.mark.parametrize(
    "body,message",
    [
        (
            {"policy": {"mode": "enabled", "publication": {"default_action": "publish_active"}}},
            "learning publication default_action cannot be publish_active",
        ),
        (
            {"policy": {"publication": {"quarantined_rule_names": [" "]}}},
            "learning publication quarantine names must not be empty",
        ),
        (
            {"policy": {"publication": {"quarantined_rule_names": ["A", " a "]}}},
            "learning publication quarantine names must be unique",
        ),
        (
            {"policy": {"judge": {"enabled": True, "timeout_ms": 0}}},
            "learning judge timeout_ms must be greater than zero",
        ),
        (
            {"policy": {"capture": {"semantic_candidates": {"enabled": True, "timeout_ms": 0}}}},
            "semantic capture timeout_ms must be greater than zero",
        ),
        (
            {"policy": {"capture": {"semantic_candidates": {"enabled": True, "max_candidates_per_run": 0}}}},
            "semantic capture max_candidates_per_run must be greater than zero",
        ),
        (
            {"policy": {"capture": {"semantic_candidates": {"enabled": True, "max_candidates_per_run": 9}}}},
            "semantic capture max_candidates_per_run must be 8 or lower",
        ),
        (
            {"policy": {"publication": {"rules": [{"action": "reject"}, {"scope_id": " ", "action": "reject"}]}}},
            "learning publication rule #1 uses an empty scope_id",
        ),
        (
            {"policy": {"publication": {"rules": [{"min_confidence": 101, "action": "reject"}]}}},
            "learning publication rule #0 min_confidence must be between 0 and 100",
        ),
        (
            {"policy": {"publication": {"rules": [{"kind": "procedure", "action": "publish_active"}]}}},
            "automatic active publication is not supported for procedure learnings",
        ),
        (
            {"policy": {"publication": {"rules": [{"action": "publish_active"}]}}},
            "learning publication rule #0 cannot use publish_active without an explicit kind filter",
        ),
    ],
)
def test_validation_messages(operator_client, body, message):
    problem = assert_problem(operator_client.post(URL, body, format="json"), 400, "runtime/invalid_learning_policy")
    assert problem["detail"] == message
    assert not PolicyRevision.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        {"expected_revision": 0},
        {},
        {"policy": {"mode": "turbo"}},
        {"policy": {"bogus": 1}},
        {"policy": {"mode": "enabled"}, "extra": 1},
        {"policy": "enabled"},
        {"policy": {"judge": {"enabled": "yes"}}},
        {"policy": {"publication": {"rules": [{"name": "x"}]}}},
        {"policy": {"mode": "enabled"}, "expected_revision": "1"},
        [1, 2],
    ],
)
def test_malformed_policies_are_rejected(operator_client, body):
    assert_problem(operator_client.post(URL, body, format="json"), 400, "runtime/invalid_learning_policy")
    assert not PolicyRevision.objects.exists()


def test_malformed_json(operator_client):
    assert_problem(operator_client.post(URL, data="{", content_type="application/json"), 400)


def test_stale_expected_revision_is_409(operator_client):
    operator_client.post(URL, {"policy": {"mode": "enabled"}}, format="json")
    problem = assert_problem(
        operator_client.post(URL, {"policy": {"mode": "shadow"}, "expected_revision": 0}, format="json"),
        409,
        "runtime/runtime_revision_conflict",
    )
    assert problem["field"] == "expected_revision"
    assert policy_in_force.current_policy().mode == "enabled"


def test_change_requeues_pending_candidates(operator_client, django_capture_on_commit_callbacks):
    pending = candidate()
    with django_capture_on_commit_callbacks(execute=True):
        operator_client.post(
            URL,
            {
                "policy": {
                    "mode": "shadow",
                    "publication": {"rules": [{"name": "facts", "kind": "fact", "action": "reject"}]},
                }
            },
            format="json",
        )
    pending.refresh_from_db()
    assert pending.state == "pending" and pending.automation_review["action"] == "reject"
    assert pending.automation_review["matched_rule_name"] == "facts"


def test_run_memory_policy_view_reports_the_learning_policy(operator_client):
    operator_client.post(URL, {"policy": {"mode": "enabled"}}, format="json")
    body = operator_client.post("/v1/runtime/run-memory-policy", {"policy": {}}, format="json").json()
    assert body["learning_policy"]["mode"] == "enabled"
