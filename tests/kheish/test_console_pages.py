"""The Memory console renders every page for a staff operator, with what each page promises: the dashboard's
cards, status line and links, the review queue's chips, callouts and filters, the governance badges, the
provenance chain, the rollout stepper and the search hits."""

from __future__ import annotations

import pytest
from django.urls import reverse

from learnings import services as learning_services
from learnings.models import LearningCandidate
from memory.models import AuditEvent
from skills import services as skill_services
from tests.support.console_data import (
    PREFERENCE,
    PREFERENCE_STATEMENT,
    api_candidate,
    capture,
    completed_run,
    new_session,
    procedure_learning,
    published,
    set_learning_policy,
    staff_user,
    use_tmp_skill_dirs,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _skill_dirs(settings, tmp_path):
    use_tmp_skill_dirs(settings, tmp_path)


@pytest.fixture
def ops(client):
    user = staff_user()
    client.force_login(user)
    return client


def page(client, name, *args, query: str = "") -> str:
    response = client.get(reverse(f"console:{name}", args=args) + query)
    assert response.status_code == 200, (name, response.status_code)
    return response.content.decode()


@pytest.fixture
def world():
    """A shadow-mode policy with semantic capture, a run that states a preference (captured: a daemon
    preference candidate and a run_summary candidate), an API fact, a published procedure promoted to a draft
    skill, and a few published learnings in every status."""
    set_learning_policy(
        {
            "mode": "shadow",
            "capture": {"run_summary_candidates": True, "semantic_candidates": {"enabled": True}},
            "publication": {"rules": [{"name": "prefs", "kind": "preference", "action": "publish_active"}]},
        }
    )
    session = new_session()
    run = completed_run(session, PREFERENCE_STATEMENT)
    captured = capture(run)
    from learnings.review import review_candidate

    for candidate in captured:
        review_candidate(candidate.pk)
    fact = api_candidate("The staging cluster is called Borealis.", scope=("session", session.public_id))
    active = published("Deploys happen on Tuesdays.", kind="decision")
    provisional = published("The on-call rota rotates weekly.", tier="provisional")
    revoked = learning_services.learning_revoke(learning=published("Old fact is here."), actor="tests", reason="wrong")
    old = published("The project codename is Atlas.")
    new = learning_services.learning_supersede(learning=old, actor="tests", content="The project codename is Nova.")
    procedure = procedure_learning()
    skill = skill_services.skill_promote(
        learning=procedure,
        actor="tests",
        request=skill_services.PromotionRequest(skill_name="release:checklist", instructions=procedure.content),
    )
    return {
        "session": session,
        "run": run,
        "captured": captured,
        "fact": fact,
        "active": active,
        "provisional": provisional,
        "revoked": revoked,
        "old": old,
        "new": new,
        "procedure": procedure,
        "skill": skill,
    }


def test_dashboard(ops, world):
    html = page(ops, "dashboard")
    assert "What your agents learn, remember, and are allowed to keep." in html
    for label in ("Awaiting review", "Active learnings", "Facts", "Preferences &amp; decisions"):
        assert label in html
    assert (
        "automated review dry run (rules propose, people decide) · capture: run summaries on, semantic on · judge off"
    ) in html
    assert 'class="dot shadow"' in html
    assert reverse("console:learning-policy") in html and ">Policy<" in html
    review = reverse("console:review")
    learnings = reverse("console:learnings")
    assert f'href="{review}"' in html
    assert f'href="{learnings}?status=active"' in html
    assert f'href="{learnings}?status=active&amp;kind=fact"' in html
    assert f'href="{learnings}?status=active&amp;kind=preference&amp;kind=decision"' in html
    # the session's Memory card (the session page) and search are one click away
    assert reverse("admin:memory_session_change", args=[world["session"].pk]) in html
    assert f"?session={world['session'].public_id}" in html


def test_dashboard_counts_link_to_the_filtered_lists(ops, world):
    html = page(ops, "learnings", query="?status=active&kind=preference&kind=decision")
    assert world["active"].public_id in html and world["procedure"].public_id not in html
    html = page(ops, "learnings", query="?status=active&kind=fact")
    assert world["new"].public_id in html and world["active"].public_id not in html


def test_admin_index_links_to_the_console(ops):
    response = ops.get(reverse("admin:index"))
    assert response.status_code == 200
    assert f'href="{reverse("console:dashboard")}"' in response.content.decode()
    assert reverse("console:dashboard") == "/admin/memory/"


def test_review_queue(ops, world):
    html = page(ops, "review")
    preference = next(c for c in world["captured"] if c.kind == "preference")
    summary = next(c for c in world["captured"] if c.kind == "run_summary")
    assert PREFERENCE in html
    for candidate in (preference, world["fact"]):
        assert candidate.public_id in html
    # Run summaries are review material, not work: apart from the default tab, one filter away (issue 24.4).
    assert summary.public_id not in html and 'href="?kind=run_summary"' in html
    assert "Publication rule “prefs” matched" in html  # the rule reason in plain words (no judge ran)
    assert "ManualReview" not in html and "shadow" not in html.split('id="candidate-')[1]
    assert f"session:{world['session'].public_id}" in html  # scope chip
    assert "confidence 98" in html
    assert reverse("admin:memory_run_change", args=[world["run"].pk]) in html  # source run link
    assert "just now" in html  # relative time
    assert 'aria-current="true">To review<' in html
    only_facts = page(ops, "review", query="?kind=fact")
    assert world["fact"].public_id in only_facts and preference.public_id not in only_facts
    summaries = page(ops, "review", query="?kind=run_summary")
    assert summary.public_id in summaries and preference.public_id not in summaries
    searched = page(ops, "review", query="?q=borealis")
    assert world["fact"].public_id in searched and preference.public_id not in searched


def test_review_queue_shows_the_judge_callout(ops, world):
    candidate = world["fact"]
    review = {
        "mode": "shadow",
        "action": "manual_review",
        "reviewed_at_ms": 1,
        "matched_rule_name": None,
        "judge": {"action": "manual_review", "judged_at_ms": 1, "reason": "names a cluster, not a fact"},
        "reason": "no publication rule matched; falling back to ManualReview",
    }
    learning_services.candidate_record_review(candidate=candidate, review=review, revision=1)
    assert "Judge: names a cluster, not a fact" in page(ops, "review")


def test_publish_and_reject_pages(ops, world):
    html = page(ops, "candidate-publish", world["fact"].pk)
    assert "Publish tier" in html and "Supersedes" in html
    html = page(ops, "candidate-reject", world["fact"].pk)
    assert "Are you sure?" in html and "Yes, reject" in html
    assert LearningCandidate.objects.get(pk=world["fact"].pk).state == "pending"  # GET changes nothing


def test_learnings_governance(ops, world):
    html = page(ops, "learnings")  # active by default
    assert world["active"].public_id in html and world["provisional"].public_id not in html
    assert "published manually" in html
    for value in ("active", "provisional", "revoked", "superseded", "all"):
        assert f'href="?status={value}"' in html
    html = page(ops, "learnings", query="?status=provisional")
    assert world["provisional"].public_id in html and "provisional tier" in html
    html = page(ops, "learnings", query="?status=revoked")
    assert world["revoked"].public_id in html and "Revoked: wrong" in html and "Revoke…" not in html
    html = page(ops, "learnings", query="?status=superseded")
    assert world["old"].public_id in html and "Superseded by" in html
    html = page(ops, "learnings", query="?status=all&q=codename")
    assert world["old"].public_id in html and world["new"].public_id in html
    assert world["active"].public_id not in html


def test_promote_is_offered_only_where_eligible(ops, world):
    other = procedure_learning("To rotate keys, run the rotation script and reply with exactly ROTATED.")
    html = page(ops, "learnings", query="?status=active&kind=procedure")
    promote = reverse("console:learning-promote", args=[other.pk])
    assert promote in html  # eligible, not yet promoted
    assert reverse("console:learning-promote", args=[world["procedure"].pk]) not in html  # already a skill
    assert reverse("console:learning-promote", args=[world["active"].pk]) not in page(ops, "learnings")
    html = page(ops, "learning-promote", world["active"].pk)
    assert "cannot be promoted" in html and "it is a decision learning" in html and 'id="promote-form"' not in html
    assert 'id="promote-form"' in page(ops, "learning-promote", other.pk)


def test_provenance(ops, world):
    preference = next(c for c in world["captured"] if c.kind == "preference")
    learning = learning_services.candidate_publish(candidate=preference, actor="tests")
    html = page(ops, "learning", learning.pk)
    assert PREFERENCE in html
    assert preference.public_id in html and "captured from a run" in html
    assert world["run"].public_id in html
    assert "Request: Preference: always report sizes in gigabytes" in html  # the run-memory record summary
    assert "input_received" in html  # journal events of the run
    assert "prefs" in html  # the automation review
    assert AuditEvent.objects.filter(subject_id=learning.public_id).exists()
    assert "published by an operator" in html  # audit trail
    superseded = page(ops, "learning", world["new"].pk)
    assert world["old"].public_id in superseded and "Replaces" in superseded


def test_skills_board(ops, world):
    html = page(ops, "skills")
    assert "release:checklist" in html
    assert 'aria-current="step">draft' in html
    assert "Record verification/canary check" in html
    assert "Move to verified" in html
    assert world["procedure"].public_id in html
    assert "0 successful runs · 0 sessions · canary 0 ✓ / 0 ✗" in html
    assert "promote" in html  # recent lifecycle events
    skill_services.skill_revoke(skill_name="release:checklist", actor="tests", reason="not needed")
    html = page(ops, "skills")
    assert 'class="badge revoked stepper-revoked"' in html and 'aria-current="step"' not in html
    assert "Revoked before it was ever active" in html
    rollout = page(ops, "skill-rollout", world["skill"].pk)
    assert world["skill"].definition_fingerprint in rollout


def test_rollout_and_status_pages(ops, world):
    html = page(ops, "skill-rollout", world["skill"].pk)
    assert 'id="rollout-form"' in html and world["skill"].definition_fingerprint in html
    assert world["run"].public_id in html  # recent completed runs to pick from
    html = page(ops, "skill-status", world["skill"].pk)
    assert "Change status" in html and '<option value="verified"' in html


def test_session_page_has_the_memory_card(admin_client, world):
    """The card kheish/admin.py adds to the session page: what the next prompt would be given, the capability
    scopes, and links to the console; the memory app's own parts (injection ledger, journal) stay."""
    preference = next(c for c in world["captured"] if c.kind == "preference")
    learning_services.candidate_publish(candidate=preference, actor="tests")
    session = world["session"]
    response = admin_client.get(reverse("admin:memory_session_change", args=[session.pk]))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="memory-card"' in html and 'id="capabilities-card"' in html
    # the preference, the active decision and the superseding codename; the one recorded run
    assert "3 learnings · 1 recovered run eligible for the next prompt" in html
    assert PREFERENCE in html
    assert f"{reverse('console:search')}?session={session.public_id}" in html
    assert 'id="injection-ledger"' in html and 'id="journal"' in html


def test_search(ops, world):
    preference = next(c for c in world["captured"] if c.kind == "preference")
    learning_services.candidate_publish(candidate=preference, actor="tests")
    session = world["session"]
    html = page(ops, "search")
    assert session.public_id in html  # the session picker
    html = page(ops, "search", query=f"?session={session.public_id}&q=gigabytes")
    assert 'class="pill learning"' in html and 'class="pill recovered_run"' in html
    assert "prompt-eligible" in html
    assert PREFERENCE in html
    assert reverse("admin:memory_session_change", args=[session.pk]) in html
    browse = page(ops, "search", query=f"?session={session.public_id}&q=")
    assert "recent" in browse and 'class="pill learning"' in browse


def test_policy_pages(ops, world):
    html = page(ops, "learning-policy")
    assert 'name="rules-0-name" value="prefs"' in html
    assert "Revision history" in html and "Dry run" in html and 'id="save-button"' not in html
    html = page(ops, "run-memory-policy")
    assert "Search visibility" in html and "Revision history" in html
