"""Automation review (spec §3.3, §4.10–§4.12, §4.20): modes, rules, judge, conflicts, verification."""

from __future__ import annotations

import pytest

from learnings import capture
from learnings.models import CandidateState, Learning, LearningCandidate
from learnings.review import candidate_supported, review_candidate
from learnings.tasks import shadow_review_sweep
from memory.models import AuditEvent
from tests.factories import SessionFactory
from tests.support.learnings import candidate, learning, set_policy, terminal_run

pytestmark = pytest.mark.django_db

PREFS_ACTIVE = {"name": "prefs", "kind": "preference", "action": "publish_active"}


def daemon_candidate(content="Preference: always report sizes in gigabytes, not gibibytes."):
    """A daemon-origin preference captured (heuristically) from a completed run."""
    session = SessionFactory()
    run = terminal_run(session, content)
    capture.capture_run(run.pk)
    return LearningCandidate.objects.exclude(kind="run_summary").get(source_run=run)


@pytest.fixture
def capture_on(llm_unconfigured):
    set_policy({"mode": "shadow", "capture": {"semantic_candidates": {"enabled": True}}})


# ---- modes ------------------------------------------------------------------------------------------------


def test_manual_only_reviews_nothing():
    set_policy({"mode": "manual_only"})
    cand = candidate()
    assert review_candidate(cand.pk) is None
    cand.refresh_from_db()
    assert cand.automation_review is None and cand.state == "pending"


def test_default_mode_is_shadow_and_keeps_pending():
    cand = candidate("Preferred editor is Helix.", kind="preference")
    outcome = review_candidate(cand.pk)
    cand.refresh_from_db()
    assert outcome.mode == "shadow" and cand.state == CandidateState.PENDING
    assert cand.automation_review["mode"] == "shadow"
    assert cand.automation_review["action"] == "manual_review"
    assert cand.automation_review["reason"] == "no publication rule matched; falling back to ManualReview"
    assert cand.automation_review["judge"] is None and cand.automation_review["matched_rule_name"] is None
    assert Learning.objects.count() == 0
    assert AuditEvent.objects.filter(subject_id=cand.public_id, action="review").exists()


def test_shadow_records_the_would_be_publication(capture_on):
    set_policy(
        {
            "mode": "shadow",
            "capture": {"semantic_candidates": {"enabled": True}},
            "publication": {"rules": [PREFS_ACTIVE]},
        }
    )
    cand = daemon_candidate()
    review_candidate(cand.pk)
    cand.refresh_from_db()
    assert cand.state == "pending" and cand.automation_review["action"] == "publish_active"
    assert cand.automation_review["matched_rule_name"] == "prefs" and cand.matched_rule_name == "prefs"
    assert Learning.objects.count() == 0


def test_enabled_escalates_manual_review_and_rejects():
    set_policy(
        {
            "mode": "enabled",
            "publication": {"rules": [{"name": "no-decisions", "kind": "decision", "action": "reject"}]},
        }
    )
    fact = candidate("Project codename is Atlas.")
    decision = candidate("Deploys happen on Fridays.", kind="decision")
    assert review_candidate(fact.pk).state == CandidateState.ESCALATED
    outcome = review_candidate(decision.pk)
    assert outcome.state == CandidateState.REJECTED and outcome.review["matched_rule_name"] == "no-decisions"
    assert review_candidate(fact.pk) is None  # escalated candidates are skipped
    audit = AuditEvent.objects.get(subject_id=decision.public_id, action="reject")
    assert (audit.actor, audit.from_state, audit.to_state) == ("daemon", "pending", "rejected")


def test_matching_rule_publishes_provisional_with_rule_name_and_expiry(monkeypatch):
    set_policy(
        {
            "mode": "enabled",
            "publication": {
                "rules": [
                    {"name": "short-lived", "kind": "fact", "action": "publish_provisional", "expires_after_ms": 100}
                ]
            },
        }
    )
    cand = candidate("Project codename is Atlas.")
    monkeypatch.setattr("learnings.review.now_ms", lambda: 100)
    outcome = review_candidate(cand.pk)
    published = Learning.objects.get(source_candidate=cand)
    assert outcome.learning_id == published.public_id
    assert (published.status, published.publish_tier, published.expires_at_ms) == ("provisional", "provisional", 200)
    assert (published.policy_decision, published.policy_actor, published.verification_status) == (
        "automatic",
        "daemon",
        "unverified",
    )
    cand.refresh_from_db()
    assert cand.state == "published" and cand.automation_review["matched_rule_name"] == "short-lived"
    assert cand.automation_review["reason"] == "matched publication rule `short-lived`"


def test_api_candidates_fail_trusted_input_rules():
    set_policy(
        {
            "mode": "enabled",
            "publication": {
                "rules": [
                    {
                        "name": "trusted",
                        "kind": "fact",
                        "require_evidence": True,
                        "require_source_run": True,
                        "require_source_session": True,
                        "action": "publish_provisional",
                    }
                ]
            },
        }
    )
    forged = candidate(
        "Project codename is Atlas.",
        source={"run_id": "run-1", "session_id": "session-1"},
        evidence_refs=[{"run_id": "run-1", "note": "source run"}],
    )
    assert forged.origin == "api"
    outcome = review_candidate(forged.pk)
    assert outcome.state == "escalated" and outcome.review["matched_rule_name"] is None


def test_api_origin_active_downgraded_unless_opted_in():
    set_policy(
        {"mode": "enabled", "publication": {"rules": [{"name": "facts", "kind": "fact", "action": "publish_active"}]}}
    )
    cand = candidate("Project codename is Atlas.")
    review_candidate(cand.pk)
    published = Learning.objects.get(source_candidate=cand)
    assert published.status == "provisional"
    cand.refresh_from_db()
    assert cand.automation_review["reason"] == (
        "api-origin candidates cannot be auto-published with the active tier; retaining provisional tier"
    )
    set_policy(
        {
            "mode": "enabled",
            "publication": {
                "allow_api_origin_active_publication": True,
                "rules": [{"name": "facts", "kind": "fact", "action": "publish_active"}],
            },
        }
    )
    other = candidate("Release train is weekly.")
    outcome = review_candidate(other.pk)
    # allowed through the gate, but API evidence is never daemon-owned: verification downgrades it
    assert outcome.action == "publish_provisional"
    assert outcome.review["reason"].endswith(
        "; retained as provisional because no evidence the service "
        "recorded for the source run matched the candidate content"
    )


def test_quarantined_rule_is_skipped():
    set_policy(
        {
            "mode": "enabled",
            "publication": {
                "quarantined_rule_names": [" FACTS "],
                "rules": [
                    {"name": "facts", "kind": "fact", "action": "reject"},
                    {"name": "fallback", "action": "publish_provisional"},
                ],
            },
        }
    )
    cand = candidate("Project codename is Atlas.")
    assert review_candidate(cand.pk).review["matched_rule_name"] == "fallback"


def test_secret_candidate_rejected_before_rules_and_benign_passes():
    set_policy({"mode": "enabled", "publication": {"rules": [{"kind": "fact", "action": "publish_provisional"}]}})
    cand = candidate("Project codename is Atlas.")
    LearningCandidate.objects.filter(pk=cand.pk).update(content="api_key=sk-abcdefghijklmnopqrstuvwx")
    outcome = review_candidate(cand.pk)
    assert outcome.state == "rejected"
    assert outcome.review["reason"] == "candidate content matched the anti-secret learning classifier"
    benign = candidate("Token budget is 1000.")
    assert review_candidate(benign.pk).review["reason"] == "matched unnamed publication rule"


def test_published_candidate_without_review_just_records_it():
    set_policy({"mode": "enabled", "publication": {"rules": [{"kind": "fact", "action": "reject"}]}})
    cand = candidate()
    from learnings.services import candidate_publish

    candidate_publish(candidate=cand, actor="ops")
    outcome = review_candidate(cand.pk)
    cand.refresh_from_db()
    assert outcome.state == "published" and cand.automation_review["action"] == "reject"
    assert review_candidate(cand.pk) is None


# ---- verification, conflicts (§4.12) ----------------------------------------------------------------------


def test_daemon_candidate_verified_and_published_active(capture_on):
    set_policy(
        {
            "mode": "enabled",
            "capture": {"semantic_candidates": {"enabled": True}},
            "publication": {"rules": [PREFS_ACTIVE]},
        }
    )
    cand = daemon_candidate()
    assert cand.confidence == 98 and cand.content == "always report sizes in gigabytes, not gibibytes"
    assert candidate_supported(cand)
    outcome = review_candidate(cand.pk)
    published = Learning.objects.get(source_candidate=cand)
    assert outcome.learning_id == published.public_id
    assert (published.status, published.verification_status, published.policy_decision, published.policy_actor) == (
        "active",
        "verified",
        "automatic",
        "daemon",
    )
    trail = {e.action: e for e in AuditEvent.objects.filter(subject_id__in=[cand.public_id, published.public_id])}
    assert (trail["capture"].actor, trail["capture"].to_state) == ("daemon", "pending")
    publish = AuditEvent.objects.get(subject_id=cand.public_id, action="publish")
    assert (publish.actor, publish.from_state, publish.to_state) == ("daemon", "pending", "published")
    assert (
        publish.reason
        == LearningCandidate.objects.get(pk=cand.pk).automation_review["reason"]
        == "matched publication rule `prefs`"
    )
    learned = AuditEvent.objects.get(subject_id=published.public_id, action="publish")
    assert (learned.actor, learned.to_state) == ("daemon", "active")


def test_unsupported_daemon_candidate_is_downgraded(capture_on):
    set_policy(
        {
            "mode": "enabled",
            "capture": {"semantic_candidates": {"enabled": True}},
            "publication": {"rules": [PREFS_ACTIVE]},
        }
    )
    cand = daemon_candidate()
    LearningCandidate.objects.filter(pk=cand.pk).update(content="always report sizes in petabytes")
    cand.refresh_from_db()
    assert not candidate_supported(cand)
    outcome = review_candidate(cand.pk)
    assert outcome.action == "publish_provisional"
    assert Learning.objects.get(source_candidate=cand).status == "provisional"


def test_conflicting_automatic_publication_escalates(capture_on):
    set_policy(
        {
            "mode": "enabled",
            "capture": {"semantic_candidates": {"enabled": True}},
            "publication": {"rules": [PREFS_ACTIVE]},
        }
    )
    cand = daemon_candidate("Preference: report unit is gigabytes.")
    existing = learning("Report unit is gibibytes.", kind="preference", scope=(cand.scope_kind, cand.scope_id))
    outcome = review_candidate(cand.pk)
    assert outcome.state == "escalated"
    assert outcome.review["reason"].endswith(
        f"; escalated because candidate conflicts with active learning {existing.public_id}"
    )
    audit = AuditEvent.objects.get(subject_id=cand.public_id, action="escalate")
    assert (audit.actor, audit.from_state, audit.to_state, audit.reason) == (
        "daemon",
        "pending",
        "escalated",
        outcome.review["reason"],
    )


# ---- judge (§4.11) ----------------------------------------------------------------------------------------


def judge_policy(mode="enabled", baseline="publish_provisional", timeout_ms=None):
    judge = {"enabled": True, "timeout_ms": timeout_ms}
    set_policy(
        {
            "mode": mode,
            "judge": judge,
            "publication": {"rules": [{"name": "facts", "kind": "fact", "action": baseline}]},
        }
    )


def test_judge_confirms(fake_model):
    judge_policy()
    fake_model.reply_json({"action": "publish_provisional", "reason": "  looks   durable "})
    cand = candidate()
    outcome = review_candidate(cand.pk)
    assert outcome.action == "publish_provisional" and outcome.learning_id
    assert outcome.review["judge"]["action"] == "publish_provisional"
    assert outcome.review["judge"]["reason"] == "looks durable"
    assert outcome.review["reason"] == (
        "matched publication rule `facts`; judge confirmed PublishProvisional: looks durable"
    )
    assert fake_model.requests[0]["response_format"]["type"] == "json_schema"


def test_judge_cannot_widen_the_action(fake_model):
    judge_policy()
    fake_model.reply_json({"action": "publish_active", "reason": "trust me"})
    cand = candidate()
    outcome = review_candidate(cand.pk)
    assert outcome.action == "publish_provisional" and outcome.review["judge"]["action"] == "publish_provisional"
    assert Learning.objects.get(source_candidate=cand).status == "provisional"
    judge_policy(baseline="reject")
    fake_model.reply_json({"action": "publish_active", "reason": "publish it"})
    other = candidate("Release train is weekly.")
    outcome = review_candidate(other.pk)
    assert outcome.action == "manual_review" and outcome.state == "escalated"
    assert not Learning.objects.filter(source_candidate=other).exists()


def test_judge_can_be_more_conservative(fake_model):
    judge_policy()
    fake_model.reply_json({"action": "reject", "reason": "one-off"})
    outcome = review_candidate(candidate().pk)
    assert outcome.state == "rejected"
    assert outcome.review["reason"].endswith("; judge changed action from PublishProvisional to Reject: one-off")


@pytest.mark.parametrize(
    "script",
    [
        lambda server: server.reply_delay(2.0, {"action": "publish_provisional", "reason": "late"}),
        lambda server: server.reply_text("this is not json"),
        lambda server: server.reply_raw("{broken"),
        lambda server: server.reply_json({"action": "publish_everything", "reason": "x"}),
        lambda server: server.reply_json({"verdict": "yes"}),
        lambda server: server.reply_status(500),
    ],
    ids=["timeout", "prose", "broken-body", "unknown-action", "wrong-shape", "http-500"],
)
def test_judge_failure_fails_closed_in_enabled_mode(fake_model, script):
    judge_policy(timeout_ms=500)
    script(fake_model)
    cand = candidate()
    outcome = review_candidate(cand.pk)
    assert outcome.action == "manual_review" and outcome.state == "escalated"
    assert outcome.review["judge"]["action"] == "manual_review"
    assert outcome.review["judge"]["reason"].startswith("judge execution failed: ")
    assert not Learning.objects.exists()


def test_judge_failure_in_shadow_mode_keeps_the_baseline(fake_model):
    judge_policy(mode="shadow")
    fake_model.reply_text("nope")
    cand = candidate()
    outcome = review_candidate(cand.pk)
    assert outcome.state == "pending" and outcome.action == "publish_provisional"
    assert outcome.review["judge"]["reason"].startswith("judge execution failed")
    assert not Learning.objects.exists()


def test_judge_skipped_for_manual_review_baseline_and_without_a_model(fake_model, llm_settings):
    judge_policy(baseline="manual_review")
    outcome = review_candidate(candidate().pk)
    assert outcome.review["judge"] is None and fake_model.requests == []
    judge_policy()
    llm_settings(KHEISH_LLM_BASE_URL=None)
    outcome = review_candidate(candidate("Release train is weekly.").pk)
    assert outcome.review["judge"] is None and outcome.action == "publish_provisional"


# ---- sweep ------------------------------------------------------------------------------------------------


def test_sweep_reviews_each_pending_candidate_once_per_policy_revision():
    first, second = candidate(), candidate("Release train is weekly.")
    result = shadow_review_sweep()
    assert result == {"reviewed": 2, "failed": 0}
    assert shadow_review_sweep() == {"reviewed": 0, "failed": 0}
    set_policy({"mode": "shadow"})  # a new revision: everything pending is reviewed again
    assert shadow_review_sweep()["reviewed"] == 2
    for cand in (first, second):
        cand.refresh_from_db()
        assert cand.state == "pending" and cand.reviewed_policy_revision == 1
        assert cand.review_lease_until_ms is None


def test_policy_change_requeues_pending_candidates(django_capture_on_commit_callbacks):
    cand = candidate()
    with django_capture_on_commit_callbacks(execute=True):
        set_policy({"mode": "enabled", "publication": {"rules": [{"kind": "fact", "action": "reject"}]}})
    cand.refresh_from_db()
    assert cand.state == "rejected"


def test_a_failed_review_is_queued_again(monkeypatch):
    """§4.20: on an error the review is re-enqueued (after ≤500 ms) rather than left to the next sweep."""
    from learnings import review, tasks

    cand = candidate("Preferred editor is Helix.", kind="preference")
    real = review.review_candidate
    calls = []

    def flaky(pk):
        calls.append(pk)
        if len(calls) == 1:
            raise RuntimeError("database went away")
        return real(pk)

    monkeypatch.setattr(review, "review_candidate", flaky)
    real_retry = tasks.review_candidate.retry
    countdowns = []

    def spy_retry(*args, **kwargs):
        countdowns.append(kwargs.get("countdown"))
        return real_retry(*args, **kwargs)

    monkeypatch.setattr(tasks.review_candidate, "retry", spy_retry)
    result = tasks.review_candidate.apply(args=[cand.pk], throw=False)
    assert result.successful() and calls == [cand.pk, cand.pk]
    assert countdowns == [0.5]  # the countdown the task asked for, not a constant
    assert result.result["mode"] == "shadow" and result.result["state"] == "pending"
    cand.refresh_from_db()
    assert cand.automation_review["action"] == "manual_review"


def test_a_review_that_keeps_failing_stops_retrying(monkeypatch):
    from learnings import review, tasks

    cand = candidate()
    calls = []

    def broken(pk):
        calls.append(pk)
        raise RuntimeError("still broken")

    monkeypatch.setattr(review, "review_candidate", broken)
    monkeypatch.setitem(tasks.review_candidate.app.conf, "task_eager_propagates", False)  # each eager retry too
    result = tasks.review_candidate.apply(args=[cand.pk], throw=False)
    assert result.failed() and len(calls) == tasks.REVIEW_RETRIES + 1
    cand.refresh_from_db()
    assert cand.state == "pending" and cand.automation_review is None  # the sweep reviews it later


def test_worker_start_queues_pending_reviews_and_captures(llm_unconfigured):
    """§4.16/§4.20 boot: a starting worker re-queues what a stopped one may have left - the pending
    candidates' reviews and the pending captures."""
    from learnings import tasks
    from memory.models import RunMemoryRecord

    set_policy({"mode": "shadow", "capture": {"semantic_candidates": {"enabled": True}}})
    waiting = candidate("Preferred editor is Helix.", kind="preference")
    run = terminal_run(SessionFactory(), "Preference: always report sizes in gigabytes, not gibibytes.")
    assert RunMemoryRecord.objects.get(run=run).semantic_capture == "pending" and waiting.automation_review is None
    tasks.queue_on_worker_start()
    waiting.refresh_from_db()
    assert waiting.automation_review["mode"] == "shadow" and waiting.state == "pending"
    assert RunMemoryRecord.objects.get(run=run).semantic_capture == "completed"
    captured = LearningCandidate.objects.filter(source_run=run).exclude(kind="run_summary").get()
    assert captured.content == "always report sizes in gigabytes, not gibibytes"
