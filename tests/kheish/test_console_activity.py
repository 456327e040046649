"""The review queue worth reading (issue 24.4): run summaries apart from the work, repeated activity rows
collapsed, and why automation did or did not act in plain words."""

from __future__ import annotations

import pytest
from django.urls import reverse

from kheish.console import activity
from learnings import services as learning_services
from learnings.models import LearningCandidate
from tests.support.console_data import staff_user
from tests.support.learnings import candidate, set_policy

pytestmark = pytest.mark.django_db

FALLBACK = "no publication rule matched; falling back to ManualReview"


@pytest.fixture
def ops(client):
    client.force_login(staff_user())
    return client


def _review(cand, reason=FALLBACK, mode="shadow", action="manual_review"):
    review = {"mode": mode, "action": action, "reviewed_at_ms": 1, "matched_rule_name": None, "reason": reason}
    learning_services.candidate_record_review(candidate=cand, review=review, revision=1)


def test_repeated_feed_rows_collapse_with_a_count_and_plain_words(ops):
    set_policy({"mode": "shadow"})
    cands = [candidate(f"The build host number {n} is called host{n}.") for n in range(12)]
    for cand in cands:
        _review(cand)
    html = ops.get(reverse("console:dashboard")).content.decode()
    feed = html.split('id="activity-title"')[1]
    assert "12 ×" in feed and "and 9 more" in feed
    assert feed.count('class="feed-row"') < 12  # old code: 12 identical rows
    assert "ManualReview" not in feed and "shadow" not in feed and "daemon" not in feed
    assert "Automation is set to propose only, so it changed nothing" in feed
    assert "wait for a person to review it" in feed


def test_different_events_stay_apart_and_order_is_kept():
    first, second = candidate("The wiki is at wiki.example.org."), candidate("The VPN gateway is vpn1.")
    _review(first)
    _review(second, reason="matched publication rule `facts`", action="publish_provisional")
    _review(first)
    rows = activity.recent(["learning_candidate"], limit=10)
    reviews = [row for row in rows if row.event.action == "review"]
    assert [row.count for row in reviews] == [1, 1, 1]
    assert "Publication rule “facts” matched" in reviews[1].why


@pytest.mark.parametrize(
    ("reason", "words"),
    [
        (FALLBACK, "No publication rule matched, so the default applies: wait for a person to review it."),
        (
            "no publication rule matched; falling back to Reject",
            "No publication rule matched, so the default applies: reject it.",
        ),
        (
            "matched publication rule `prefs`; escalated because candidate conflicts with active learning learning-7",
            "Publication rule “prefs” matched; it contradicts active learning learning-7, so a person decides.",
        ),
        (
            "candidate content matched the anti-secret learning classifier",
            "It looks like it holds a secret, so it is rejected.",
        ),
        (
            "matched publication rule `prefs`; retained as provisional because no daemon-owned evidence matched the "
            "candidate content",
            "Publication rule “prefs” matched; its source run did not back it up, so it stays out of prompts "
            "(provisional).",
        ),
    ],
)
def test_reasons_in_plain_words(reason, words):
    assert activity.reason_words(reason) == words
    assert "daemon" not in words and "ManualReview" not in words


def test_run_summaries_are_apart_from_awaiting_review(ops, admin_client, llm_unconfigured):
    set_policy({"mode": "shadow", "capture": {"run_summary_candidates": True}})
    from learnings import capture
    from tests.factories import SessionFactory
    from tests.support.learnings import terminal_run

    run = terminal_run(SessionFactory(), "Tidy the logs.")
    capture.capture_run(run.pk)
    summary = LearningCandidate.objects.get(kind="run_summary")
    work = candidate("The log directory is /var/log.")
    assert list(LearningCandidate.objects.awaiting_review()) == [work]
    html = ops.get(reverse("console:dashboard")).content.decode()
    assert '<span class="value">1</span>\n      <span class="label">Awaiting review' in html
    queue = ops.get(reverse("console:review")).content.decode()
    assert work.public_id in queue and summary.public_id not in queue and 'id="summaries-apart"' in queue
    summaries = ops.get(reverse("console:review") + "?kind=run_summary").content.decode()
    assert summary.public_id in summaries and work.public_id not in summaries and 'id="summaries-note"' in summaries
    admin = admin_client.get(reverse("admin:learnings_learningcandidate_changelist")).content.decode()
    assert work.public_id in admin and summary.public_id not in admin
