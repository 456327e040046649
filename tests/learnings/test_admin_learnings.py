"""The candidate and learning changelists: their filters, read-only records and bulk actions. Every bulk action
posts the real admin forms (intermediate page, then confirmation, as the page sends them) and goes through the
services, leaving audit events. Supersede opens the console's page; the policy editor is the console's."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from learnings.models import Learning, LearningCandidate
from memory.models import AuditEvent, PolicyRevision
from tests.support.learnings import candidate, learning, set_policy

pytestmark = pytest.mark.django_db

CANDIDATES = reverse("admin:learnings_learningcandidate_changelist")
LEARNINGS = reverse("admin:learnings_learning_changelist")
POLICY = reverse("console:learning-policy")


def action(client, url, name, objects, **extra):
    data = {"action": name, "_selected_action": [str(o.pk) for o in objects], **extra}
    return client.post(url, data)


def confirm(client, url, name, objects, **extra):
    """The second step as the intermediate page posts it: ``post=yes`` and (confirmation pages) ``confirm=yes``."""
    return action(client, url, name, objects, post="yes", confirm="yes", **extra)


def messages_of(response) -> list[str]:
    return [str(m) for m in response.wsgi_request._messages]


def shows(page: str, row) -> bool:
    """Whether a changelist page lists this row's public id (``learning-1`` is not ``learning-12``)."""
    return re.search(rf"\b{re.escape(row.public_id)}\b", page) is not None


# ---- candidates -------------------------------------------------------------------------------------------


def test_review_queue_defaults_to_pending_and_escalated(admin_client):
    set_policy(
        {
            "mode": "enabled",
            "publication": {"rules": [{"name": "decisions", "kind": "decision", "action": "manual_review"}]},
        }
    )
    from learnings.review import review_candidate

    pending = candidate("Project codename is Atlas.")
    escalated = candidate("Deploys happen on Fridays.", kind="decision")
    review_candidate(escalated.pk)
    rejected = candidate("Release train is weekly.")
    from learnings.services import candidate_reject

    candidate_reject(candidate=rejected, actor="ops")
    page = admin_client.get(CANDIDATES).content.decode()
    assert pending.public_id in page and escalated.public_id in page and rejected.public_id not in page
    assert "matched publication rule `decisions`" in page  # the rule reason is shown
    assert "automated review on (rules publish)" in page and "Learning policy" in page
    assert f'href="{POLICY}"' in page  # the one policy editor: the console's
    everything = admin_client.get(CANDIDATES + "?state=all").content.decode()
    assert rejected.public_id in everything
    only_rejected = admin_client.get(CANDIDATES + "?state=rejected").content.decode()
    assert rejected.public_id in only_rejected and pending.public_id not in only_rejected
    by_kind = admin_client.get(CANDIDATES + "?kind=decision").content.decode()
    assert escalated.public_id in by_kind and pending.public_id not in by_kind
    by_rule = admin_client.get(CANDIDATES + "?matched_rule=decisions").content.decode()
    assert escalated.public_id in by_rule and pending.public_id not in by_rule
    project = candidate("Project language is Rust.", scope=("project", "atlas"))
    by_scope = admin_client.get(CANDIDATES + "?scope_kind=project").content.decode()
    assert shows(by_scope, project) and not shows(by_scope, pending)
    by_scope = admin_client.get(CANDIDATES + "?scope_kind=workspace").content.decode()
    assert shows(by_scope, pending) and not shows(by_scope, project)
    api_origin = admin_client.get(CANDIDATES + "?origin=api").content.decode()
    assert shows(api_origin, pending) and shows(api_origin, project)
    daemon_origin = admin_client.get(CANDIDATES + "?origin=daemon").content.decode()
    assert not shows(daemon_origin, pending) and not shows(daemon_origin, project)
    no_rule = admin_client.get(CANDIDATES + "?matched_rule=-").content.decode()
    assert shows(no_rule, pending) and not shows(no_rule, escalated)


def test_judge_reason_is_shown(admin_client):
    cand = candidate()
    LearningCandidate.objects.filter(pk=cand.pk).update(
        automation_review={
            "mode": "shadow",
            "action": "manual_review",
            "reviewed_at_ms": 1,
            "matched_rule_name": None,
            "judge": {"action": "manual_review", "judged_at_ms": 1, "reason": "too vague to keep"},
            "reason": "rule reason",
        }
    )
    assert "Judge: too vague to keep" in admin_client.get(CANDIDATES).content.decode()


def test_publish_action_asks_for_a_tier_then_publishes(admin_client):
    first, second = candidate("Project codename is Atlas."), candidate("Release train is weekly.")
    page = action(admin_client, CANDIDATES, "publish_selected", [first, second])
    assert page.status_code == 200
    body = page.content.decode()
    assert "Publish tier" in body and first.public_id in body and 'name="post"' in body
    assert not Learning.objects.exists()
    response = confirm(admin_client, CANDIDATES, "publish_selected", [first, second], publish_tier="provisional")
    assert response.status_code == 302
    assert set(Learning.objects.values_list("status", flat=True)) == {"provisional"}
    audit = AuditEvent.objects.filter(subject_id=first.public_id, action="publish").get()
    assert (audit.actor, audit.from_state, audit.to_state) == ("admin", "pending", "published")
    assert any("Published (provisional) 2" in m for m in messages_of(admin_client.get(CANDIDATES)))


def test_bulk_publish_reports_successes_and_failures(admin_client):
    existing = learning("Project codename is Atlas.")
    conflicting = candidate("Project codename is Borealis.")
    fine = candidate("Release train is weekly.")
    response = confirm(admin_client, CANDIDATES, "publish_selected", [conflicting, fine], publish_tier="active")
    assert response.status_code == 302
    shown = messages_of(admin_client.get(CANDIDATES))
    assert any(f"Published (active) 1: {fine.public_id}" in m for m in shown)
    assert any(
        f"{conflicting.public_id}: learning conflicts with active learning {existing.public_id}" in m for m in shown
    )
    conflicting.refresh_from_db()
    assert conflicting.state == "pending"


def test_reject_action_confirms_then_rejects(admin_client):
    cand = candidate()
    page = action(admin_client, CANDIDATES, "reject_selected", [cand])
    assert page.status_code == 200 and "Yes, reject" in page.content.decode()
    cand.refresh_from_db()
    assert cand.state == "pending"
    confirm(admin_client, CANDIDATES, "reject_selected", [cand], reason="not durable")
    cand.refresh_from_db()
    assert cand.state == "rejected"
    audit = AuditEvent.objects.get(subject_id=cand.public_id, action="reject")
    assert (audit.actor, audit.reason, audit.to_state) == ("admin", "not durable", "rejected")


def test_candidate_detail_is_read_only(admin_client):
    cand = candidate()
    page = admin_client.get(f"{CANDIDATES}{cand.pk}/change/")
    assert page.status_code == 200 and "The project codename is Atlas." in page.content.decode()
    admin_client.post(f"{CANDIDATES}{cand.pk}/change/", {"state": "published"})
    cand.refresh_from_db()
    assert cand.state == "pending"
    assert admin_client.get(f"{CANDIDATES}add/").status_code == 403


# ---- learnings --------------------------------------------------------------------------------------------


def test_learnings_changelist_filters(admin_client):
    active = learning("Project codename is Atlas.")
    provisional = learning("Release train is weekly.", tier="provisional")
    page = admin_client.get(LEARNINGS + "?status=provisional").content.decode()
    assert provisional.public_id in page and active.public_id not in page
    page = admin_client.get(LEARNINGS + "?prompt_visible=yes").content.decode()
    assert active.public_id in page and provisional.public_id not in page
    project = learning("Project language is Rust.", kind="decision", scope=("project", "atlas"))
    for query, shown, hidden in (
        ("?publish_tier=active", [active, project], [provisional]),
        ("?verification_status=unverified", [active, provisional], []),
        ("?policy_decision=manual", [active, provisional], []),
        ("?kind=fact", [active, provisional], [project]),
        ("?kind=decision", [project], [active, provisional]),
        ("?scope_kind=workspace", [active, provisional], [project]),
        ("?scope_kind=project", [project], [active, provisional]),
        ("?prompt_visible=no", [provisional], [active, project]),
    ):
        page = admin_client.get(LEARNINGS + query).content.decode()
        assert all(shows(page, row) for row in shown), query
        assert not any(shows(page, row) for row in hidden), query
    assert "published manually" in admin_client.get(LEARNINGS).content.decode()


def test_revoke_action_confirms_with_reason(admin_client):
    target = learning()
    page = action(admin_client, LEARNINGS, "revoke_selected", [target])
    assert page.status_code == 200 and "Yes, revoke" in page.content.decode()
    target.refresh_from_db()
    assert target.status == "active"
    confirm(admin_client, LEARNINGS, "revoke_selected", [target], reason="wrong value")
    target.refresh_from_db()
    assert target.status == "revoked" and target.revoked_reason == "wrong value"
    audit = AuditEvent.objects.get(subject_id=target.public_id, action="revoke")
    assert (audit.actor, audit.from_state, audit.to_state) == ("admin", "active", "revoked")


def test_revoke_with_a_secret_reason_fails_and_changes_nothing(admin_client):
    target = learning()
    confirm(admin_client, LEARNINGS, "revoke_selected", [target], reason="password: hunter2hunter2")
    target.refresh_from_db()
    assert target.status == "active"
    shown = messages_of(admin_client.get(LEARNINGS))
    assert any("learning revocation reason contains secret-like material" in m for m in shown)


def test_supersede_action_opens_the_console_page_and_comes_back(admin_client):
    old = learning("Reports use gigabytes.", kind="preference")
    opened = action(admin_client, LEARNINGS, "supersede_selected", [old])
    page = reverse("console:learning-supersede", args=[old.pk])
    assert opened.status_code == 302 and opened["Location"].startswith(page)
    form = admin_client.get(opened["Location"]).content.decode()
    assert "Corrected content" in form and "Reports use gigabytes." in form
    assert f'name="next" value="{LEARNINGS}"' in form
    done = admin_client.post(page, {"content": "Reports use gibibytes.", "next": LEARNINGS})
    assert done.status_code == 302 and done["Location"] == LEARNINGS
    old.refresh_from_db()
    new = Learning.objects.get(supersedes=old)
    assert old.status == "superseded" and new.content == "Reports use gibibytes."
    audit = AuditEvent.objects.get(subject_id=old.public_id, action="supersede")
    assert (audit.actor, audit.to_state) == ("admin", "superseded")


def test_supersede_errors_rerender_the_form(admin_client):
    old = learning("Project codename is Atlas.")
    blocker = learning("Release train is weekly.")
    page = reverse("console:learning-supersede", args=[old.pk])
    response = admin_client.post(page, {"content": "Release train is daily.", "next": LEARNINGS})
    assert response.status_code == 400
    assert f"learning conflicts with active learning {blocker.public_id}" in response.content.decode()
    response = admin_client.post(page, {"content": "x" * 1601, "next": LEARNINGS})
    assert "learning content exceeds the 1600 character limit" in response.content.decode()
    assert Learning.objects.count() == 2
    response = action(admin_client, LEARNINGS, "supersede_selected", [old, blocker])
    assert response.status_code == 302
    assert any("Select exactly one learning" in m for m in messages_of(admin_client.get(LEARNINGS)))


# ---- policy editor ----------------------------------------------------------------------------------------
# The policy editor is the console's (tests/kheish/test_console_policy.py: validation messages, dry run, save,
# history); the changelist shows the policy in force and links there.


def test_the_changelist_shows_the_policy_in_force_and_links_to_its_editor(admin_client):
    set_policy({"mode": "enabled", "capture": {"semantic_candidates": {"enabled": True}}, "judge": {"enabled": True}})
    page = admin_client.get(CANDIDATES).content.decode()
    assert (
        "● automated review on (rules publish) · capture: run summaries on, semantic on · judge on · policy revision 1"
    ) in page
    assert f'href="{POLICY}"' in page
    editor = admin_client.get(POLICY)
    assert editor.status_code == 200 and "automated review on (rules publish)" in editor.content.decode()


def test_policy_editor_requires_staff(client, django_user_model):
    user = django_user_model.objects.create_user(username="agent-x", password="pw-123456789")
    client.force_login(user)
    response = client.get(POLICY)
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert client.post(POLICY, {"mode": "enabled", "action": "save"}).status_code == 302
    assert not PolicyRevision.objects.exists()
