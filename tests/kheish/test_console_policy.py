"""The two policy editors: validation by the same code as the API (same literal messages), the dry run that
writes nothing and must be seen before saving, the ordered rule list (add, move, remove), the revision history."""

from __future__ import annotations

import pytest
from django.urls import reverse

from learnings import policy_in_force
from memory import run_memory
from memory.models import AuditEvent, PolicyRevision, RunMemoryRecord
from tests.support.console_data import (
    PREFERENCE_STATEMENT,
    api_candidate,
    capture,
    completed_run,
    new_session,
    set_learning_policy,
    staff_user,
)

pytestmark = pytest.mark.django_db

LEARNING = reverse("console:learning-policy")
RUN_MEMORY = reverse("console:run-memory-policy")
RULE_FIELDS = (
    "name",
    "scope_kind",
    "scope_id",
    "kind",
    "sensitivity",
    "min_confidence",
    "require_evidence",
    "require_source_run",
    "require_source_session",
    "action",
    "expires_after_ms",
)


@pytest.fixture
def operator_user():
    return staff_user()


@pytest.fixture
def ops(client, operator_user):
    client.force_login(operator_user)
    return client


def _value(value) -> str | None:
    if value is None or value is False:
        return None
    return "on" if value is True else str(value)


def learning_form(
    policy: dict,
    *,
    action: str = "dry_run",
    expected_revision: int = 0,
    previewed: str = "",
    extra_rows: int = 0,
    size: int = 20,
) -> dict:
    """The form data the console posts for ``policy`` (the API's JSON shape)."""
    capture_ = policy.get("capture", {})
    semantic = capture_.get("semantic_candidates", {})
    publication = policy.get("publication", {})
    judge = policy.get("judge", {})
    retrieval = policy.get("retrieval", {})
    fields = {
        "mode": policy.get("mode", "shadow"),
        "run_summary_candidates": capture_.get("run_summary_candidates", True),
        "semantic_enabled": semantic.get("enabled", False),
        "max_candidates_per_run": semantic.get("max_candidates_per_run", 2),
        "semantic_timeout_ms": semantic.get("timeout_ms"),
        "judge_enabled": judge.get("enabled", False),
        "judge_timeout_ms": judge.get("timeout_ms"),
        "default_action": publication.get("default_action", "manual_review"),
        "allow_api_origin_active_publication": publication.get("allow_api_origin_active_publication", False),
        "quarantined_rule_names": "\n".join(publication.get("quarantined_rule_names", [])) or None,
        "retrieval_ranker": retrieval.get("ranker", "hybrid"),
        "retrieval_max_tokens": retrieval.get("max_tokens", 2000),
        "retrieval_max_entries": retrieval.get("max_entries", 24),
        "retrieval_standing_tokens": retrieval.get("standing_tokens", 400),
        "expected_revision": expected_revision,
        "dry_run_size": size,
        "action": action,
        "previewed": previewed or None,
    }
    rules = publication.get("rules", [])
    fields.update(
        {
            "rules-TOTAL_FORMS": len(rules) + extra_rows,
            "rules-INITIAL_FORMS": 0,
            "rules-MIN_NUM_FORMS": 0,
            "rules-MAX_NUM_FORMS": 1000,
        }
    )
    for index, rule in enumerate(rules):
        for name in RULE_FIELDS:
            fields[f"rules-{index}-{name}"] = rule.get(name)
    return {key: text for key, value in fields.items() if (text := _value(value)) is not None}


def preview_digest(html: str) -> str:
    marker = 'name="previewed" value="'
    assert marker in html, "no dry run on the page"
    return html.split(marker, 1)[1].split('"', 1)[0]


# ---- same validation, same literal messages as the API ----------------------------------------------------

LEARNING_CASES = [
    (
        {"mode": "shadow", "publication": {"default_action": "publish_active"}},
        "learning publication default_action cannot be publish_active",
    ),
    (
        {"mode": "shadow", "capture": {"semantic_candidates": {"enabled": True, "max_candidates_per_run": 9}}},
        "semantic capture max_candidates_per_run must be 8 or lower",
    ),
    (
        {"mode": "shadow", "capture": {"semantic_candidates": {"enabled": True, "max_candidates_per_run": 0}}},
        "semantic capture max_candidates_per_run must be greater than zero",
    ),
    (
        {"mode": "shadow", "judge": {"enabled": True, "timeout_ms": 0}},
        "learning judge timeout_ms must be greater than zero",
    ),
    (
        {"mode": "shadow", "publication": {"quarantined_rule_names": ["prefs", "PREFS"]}},
        "learning publication quarantine names must be unique",
    ),
    (
        {
            "mode": "shadow",
            "publication": {
                "rules": [{"kind": "fact", "action": "reject"}, {"min_confidence": 150, "action": "reject"}]
            },
        },
        "learning publication rule #1 min_confidence must be between 0 and 100",
    ),
    (
        {"mode": "shadow", "publication": {"rules": [{"action": "publish_active"}]}},
        "learning publication rule #0 cannot use publish_active without an explicit kind filter",
    ),
    (
        {"mode": "shadow", "publication": {"rules": [{"kind": "procedure", "action": "publish_active"}]}},
        "automatic active publication is not supported for procedure learnings",
    ),
    (
        {
            "mode": "shadow",
            "publication": {"rules": [{"scope_kind": "project", "scope_id": "   ", "action": "reject"}]},
        },
        "learning publication rule #0 uses an empty scope_id",
    ),
    (
        {"mode": "shadow", "publication": {"rules": [{"name": "orphan", "kind": "fact"}]}},
        "publication.rules[0].action is required",
    ),
    (
        {"mode": "shadow", "retrieval": {"max_tokens": 150_001}},
        "learning retrieval max_tokens must be between 0 and 150000",
    ),
    ({"mode": "shadow", "retrieval": {"max_entries": 0}}, "learning retrieval max_entries must be between 1 and 500"),
    (
        {"mode": "shadow", "retrieval": {"standing_tokens": 150_001}},
        "learning retrieval standing_tokens must be between 0 and 150000",
    ),
]


@pytest.mark.parametrize(("policy", "message"), LEARNING_CASES, ids=[m for _, m in LEARNING_CASES])
def test_learning_policy_messages_match_the_api(ops, operator_client, policy, message):
    api = operator_client.post("/v1/runtime/learning-policy", {"policy": policy}, format="json")
    assert api.status_code == 400 and api.json()["detail"] == message
    response = ops.post(LEARNING, learning_form(policy))
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not PolicyRevision.objects.exists()


RUN_MEMORY_CASES = [
    ({"retention_ms": 0}, "run memory retention_ms must be greater than zero when enabled"),
    (
        {"max_tracked_per_session": 0, "max_prompt_entries": 0},
        "run memory max_tracked_per_session must be greater than zero when enabled",
    ),
    ({"max_prompt_entries": 0}, "run memory max_prompt_entries must be greater than zero when enabled"),
    (
        {"max_prompt_entries": 40},
        "run memory max_prompt_entries must be lower than or equal to max_tracked_per_session",
    ),
]


def run_memory_form(overrides: dict, *, action: str = "dry_run", previewed: str = "", expected_revision: int = 0):
    policy = {**run_memory.current_policy().to_dict(), **overrides}
    data = {key: ("on" if value is True else str(value)) for key, value in policy.items() if value is not False}
    data.update(action=action, expected_revision=str(expected_revision))
    if previewed:
        data["previewed"] = previewed
    return data


@pytest.mark.parametrize(("overrides", "message"), RUN_MEMORY_CASES, ids=[m for _, m in RUN_MEMORY_CASES])
def test_run_memory_policy_messages_match_the_api(ops, operator_client, overrides, message):
    policy = {**run_memory.current_policy().to_dict(), **overrides}
    api = operator_client.post("/v1/runtime/run-memory-policy", {"policy": policy}, format="json")
    assert api.status_code == 400 and api.json()["detail"] == message
    response = ops.post(RUN_MEMORY, run_memory_form(overrides))
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not PolicyRevision.objects.exists()


def test_a_run_memory_policy_with_zeros_is_valid_only_when_disabled(ops):
    zeros = {"retention_ms": 0, "max_tracked_per_session": 0, "max_prompt_entries": 0}
    refused = ops.post(RUN_MEMORY, run_memory_form({"enabled": True, **zeros}))
    assert refused.status_code == 400
    assert "run memory retention_ms must be greater than zero when enabled" in refused.content.decode()
    response = ops.post(RUN_MEMORY, run_memory_form({"enabled": False, **zeros}))
    assert response.status_code == 200 and 'id="dry-run"' in response.content.decode()
    assert not PolicyRevision.objects.exists()  # a dry run stores nothing


# ---- dry run, then save -----------------------------------------------------------------------------------


@pytest.fixture
def candidates():
    """A captured daemon preference (98), its run_summary, and an API fact at 70."""
    set_learning_policy({"mode": "shadow", "capture": {"semantic_candidates": {"enabled": True}}})
    run = completed_run(new_session(), PREFERENCE_STATEMENT)
    captured = capture(run)
    fact = api_candidate("The staging cluster is called Borealis.", confidence=70)
    return {
        "preference": next(c for c in captured if c.kind == "preference"),
        "summary": next(c for c in captured if c.kind == "run_summary"),
        "fact": fact,
    }


NEW_POLICY = {
    "mode": "enabled",
    "capture": {"semantic_candidates": {"enabled": True}},
    "publication": {
        "rules": [
            {
                "name": "prefs",
                "kind": "preference",
                "min_confidence": 90,
                "require_source_run": True,
                "action": "publish_active",
            },
            {"name": "noise", "kind": "run_summary", "action": "reject"},
        ]
    },
}


def test_dry_run_shows_decisions_and_writes_nothing(ops, candidates):
    revisions, events = PolicyRevision.objects.count(), AuditEvent.objects.count()
    reviews = {c.pk: c.automation_review for c in candidates.values()}
    response = ops.post(LEARNING, learning_form(NEW_POLICY, expected_revision=1))
    assert response.status_code == 200
    html = response.content.decode()
    assert "Dry run: what this policy would have done to the last 3 candidates" in html
    assert "matched publication rule `prefs`" in html and "matched publication rule `noise`" in html
    assert "no publication rule matched; falling back to manual review" in html
    assert "<strong>2</strong> decisions differ from the policy in force" in html
    assert "publish_active 1" in html and "reject 1" in html and "manual_review 1" in html
    assert "In <strong>enabled</strong> mode" in html
    assert "publication.rules[0]" in html and "mode" in html  # the diff against the policy in force
    assert 'id="save-button"' in html
    assert (PolicyRevision.objects.count(), AuditEvent.objects.count()) == (revisions, events)
    for candidate in candidates.values():
        candidate.refresh_from_db()
        assert candidate.automation_review == reviews[candidate.pk]
    assert policy_in_force.current_policy().mode == "shadow"


def test_save_requires_the_dry_run_of_the_same_policy(ops, operator_user, candidates):
    unseen = ops.post(LEARNING, learning_form(NEW_POLICY, action="save", expected_revision=1))
    assert unseen.status_code == 200
    assert "The policy changed since its dry run" in unseen.content.decode()
    assert PolicyRevision.objects.filter(kind="learning").count() == 1  # only the fixture's revision
    digest = preview_digest(unseen.content.decode())
    changed = {**NEW_POLICY, "mode": "shadow"}
    stale = ops.post(LEARNING, learning_form(changed, action="save", expected_revision=1, previewed=digest))
    assert "The policy changed since its dry run" in stale.content.decode()
    assert policy_in_force.current_policy().mode == "shadow"
    response = ops.post(LEARNING, learning_form(NEW_POLICY, action="save", expected_revision=1, previewed=digest))
    assert response.status_code == 302
    policy, revision = policy_in_force.current_policy_and_revision()
    assert (policy.mode, revision, [r.name for r in policy.publication.rules]) == ("enabled", 2, ["prefs", "noise"])
    event = AuditEvent.objects.filter(subject_type="policy", subject_id="learning", action="update").latest("id")
    assert (event.actor, event.from_state, event.to_state) == (operator_user.username, "r1", "r2")
    assert "mode" in event.data["changed"]


def test_a_stale_revision_is_refused_with_the_conflict_message(ops, candidates):
    digest = preview_digest(ops.post(LEARNING, learning_form(NEW_POLICY, expected_revision=0)).content.decode())
    response = ops.post(LEARNING, learning_form(NEW_POLICY, action="save", expected_revision=0, previewed=digest))
    assert response.status_code == 400
    assert "runtime config revision conflict: expected 0, current 1" in response.content.decode()


def test_rules_can_be_added_moved_and_removed(ops):
    rules = [
        {"name": "first", "kind": "fact", "action": "reject"},
        {"name": "second", "kind": "decision", "action": "manual_review"},
    ]
    policy = {"mode": "shadow", "publication": {"rules": rules}}
    added = ops.post(LEARNING, learning_form(policy, action="add_rule")).content.decode()
    assert 'name="rules-2-name"' in added and 'id="policy-errors"' not in added
    moved = ops.post(LEARNING, learning_form(policy, action="down:0")).content.decode()
    assert moved.index('value="second"') < moved.index('value="first"')
    data = learning_form(policy)
    data["rules-0-DELETE"] = "on"
    data["rules-TOTAL_FORMS"] = "3"  # and a blank third row, ignored
    html = ops.post(LEARNING, data).content.decode()
    assert 'value="first"' not in html and 'value="second"' in html
    assert "publication.rules[0]" in html  # the diff: rule #0 is now "second"
    digest = preview_digest(html)
    data.update(action="save", previewed=digest)
    assert ops.post(LEARNING, data).status_code == 302
    assert [r.name for r in policy_in_force.current_policy().publication.rules] == ["second"]


def test_model_overrides_are_kept(ops):
    model = {
        "provider": "local",
        "generation": {"model": "judge-1", "fallback_model": None, "max_output_tokens": None, "temperature": None},
    }
    set_learning_policy({"mode": "shadow", "judge": {"enabled": False, "model": model}})
    policy = {"mode": "enabled", "judge": {"enabled": True}}
    digest = preview_digest(ops.post(LEARNING, learning_form(policy, expected_revision=1)).content.decode())
    ops.post(LEARNING, learning_form(policy, action="save", expected_revision=1, previewed=digest))
    saved = policy_in_force.current_policy()
    assert saved.judge.enabled and saved.judge.model.to_dict() == model


def test_history_lists_revisions_and_loads_one_into_the_editor(ops):
    set_learning_policy({"mode": "manual_only"})
    set_learning_policy({"mode": "enabled"}, actor="someone")
    html = ops.get(LEARNING).content.decode()
    assert "r2" in html and "in force" in html and "someone" in html and "?revision=1" in html
    loaded = ops.get(LEARNING + "?revision=1").content.decode()
    assert "Revision 1 is loaded into the editor" in loaded
    assert '<option value="manual_only" selected>' in loaded


# ---- run-memory policy ------------------------------------------------------------------------------------


def test_run_memory_dry_run_then_save(ops, operator_user):
    session = new_session()
    for index in range(4):
        completed_run(session, f"Task number {index}: tidy the logs.")
    assert RunMemoryRecord.objects.count() == 4
    events = AuditEvent.objects.count()
    response = ops.post(RUN_MEMORY, run_memory_form({"max_tracked_per_session": 3, "max_prompt_entries": 2}))
    html = response.content.decode()
    assert response.status_code == 200
    assert "<strong>0</strong> expired and <strong>1</strong> overflow record would be deleted" in html
    assert "session_overflow" in html
    assert RunMemoryRecord.objects.count() == 4 and AuditEvent.objects.count() == events  # nothing written
    digest = preview_digest(html)
    response = ops.post(
        RUN_MEMORY,
        run_memory_form({"max_tracked_per_session": 3, "max_prompt_entries": 2}, action="save", previewed=digest),
    )
    assert response.status_code == 302
    assert RunMemoryRecord.objects.count() == 3
    assert run_memory.current_policy().max_tracked_per_session == 3
    event = AuditEvent.objects.filter(subject_type="policy", subject_id="run_memory", action="update").latest("id")
    assert (event.actor, event.to_state) == (operator_user.username, "r1")
    assert "r1" in ops.get(RUN_MEMORY).content.decode()


def test_saved_policy_is_the_policy_in_force(ops, operator_user):
    """Formerly the changelist's JSON policy dialog: the console's editor saves capture, judge and rules through
    the policy code, as revision 1 by the operator, and the status line shows it."""
    html = ops.get(LEARNING).content.decode()
    assert "automated review dry run (rules propose, people decide)" in html
    policy = {
        "mode": "enabled",
        "capture": {
            "run_summary_candidates": True,
            "semantic_candidates": {"enabled": True, "max_candidates_per_run": 3},
        },
        "publication": {"rules": [{"name": "prefs", "kind": "preference", "action": "publish_active"}]},
    }
    digest = preview_digest(ops.post(LEARNING, learning_form(policy)).content.decode())
    response = ops.post(LEARNING, learning_form(policy, action="save", previewed=digest))
    assert response.status_code == 302
    saved, revision = policy_in_force.current_policy_and_revision()
    assert revision == 1 and saved.mode == "enabled" and saved.capture.semantic_candidates.enabled
    assert saved.capture.semantic_candidates.max_candidates_per_run == 3
    assert saved.publication.rules[0].name == "prefs" and saved.judge.enabled is False
    assert PolicyRevision.objects.get().actor == operator_user.username
    assert "policy revision 1 · 1 active rule ·" in ops.get(LEARNING).content.decode()


def test_retrieval_settings_are_edited_dry_run_and_saved(ops):
    """The retrieval block (ranker and learned-context bounds) is edited in the console like the rest: the
    dry run shows the change, save writes a revision, and the policy in force then carries it."""
    policy = {
        "mode": "shadow",
        "retrieval": {"ranker": "lexical", "max_tokens": 900, "max_entries": 6, "standing_tokens": 150},
    }
    response = ops.post(LEARNING, learning_form(policy))
    assert response.status_code == 200
    html = response.content.decode()
    assert "retrieval.ranker" in html and "retrieval.max_tokens" in html  # the diff of the dry run
    assert "retrieval.standing_tokens" in html
    response = ops.post(LEARNING, learning_form(policy, action="save", previewed=preview_digest(html)))
    assert response.status_code == 302
    assert policy_in_force.current_policy().retrieval.to_dict() == policy["retrieval"]
