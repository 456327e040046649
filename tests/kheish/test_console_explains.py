"""Issue 13.3: every screen explains its state. The dashboard says which capture paths are on and turns
semantic capture on through the audited policy service; the publish form promises prompt eligibility only to a
candidate that can have it; the session's Memory card says why a learning or candidate is not in the next
prompt; admin pages show dates, not epoch milliseconds, and readable JSON; counts are pluralised."""

from __future__ import annotations

import html as html_lib
import itertools
import re

import pytest
from django.urls import reverse

from kheish.console.explain import learning_exclusion
from learnings import policy_in_force
from learnings.models import (
    Learning,
    LearningKind,
    PolicyDecision,
    PublishTier,
    Sensitivity,
    VerificationStatus,
)
from memory.models import AuditEvent, PolicyKind, PolicyRevision
from tests.support.console_data import (
    PREFERENCE,
    PREFERENCE_STATEMENT,
    api_candidate,
    capture,
    completed_run,
    new_session,
    published,
    set_learning_policy,
    staff_user,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def ops(client):
    client.force_login(staff_user(superuser=True))
    return client


def text_of(html: str) -> str:
    """The page's visible text, whitespace collapsed (assertions read what an operator reads)."""
    html = re.sub(r"<(script|style)\b.*?</\1>", " ", html, flags=re.S)
    return " ".join(html_lib.unescape(re.sub(r"<[^>]+>", " ", html)).split())


def section(html: str, element_id: str) -> str:
    match = re.search(rf'<(\w+)[^>]*id="{element_id}".*?</\1>', html, flags=re.S)
    assert match, element_id
    return text_of(match.group(0))


# ---- dashboard: capture paths -----------------------------------------------------------------------------


def test_dashboard_defaults_say_run_summaries_on_semantic_off(ops, llm_unconfigured):
    html = ops.get(reverse("console:dashboard")).content.decode()
    status = section(html, "automation-status")
    assert "capture: run summaries on, semantic off" in status
    assert "capture off" not in status
    panel = section(html, "capture-panel")
    assert "Run summaries: on" in panel and "never reach a prompt" in panel
    assert "Semantic capture: off" in panel
    assert "Labelled statements ( Preference: , Fact: , Decision: )" in panel
    assert "become candidates only when it is on" in panel and "needs no model" in panel
    assert "KHEISH_LLM_*" in panel
    assert 'value="semantic_on"' in html and "csrfmiddlewaretoken" in section_html(html, "semantic-capture-form")


def section_html(html: str, element_id: str) -> str:
    match = re.search(rf'<(\w+)[^>]*id="{element_id}".*?</\1>', html, flags=re.S)
    assert match, element_id
    return match.group(0)


def test_dashboard_turns_semantic_capture_on_through_the_policy_service(ops, llm_unconfigured):
    set_learning_policy(
        {
            "mode": "enabled",
            "judge": {"enabled": False},
            "publication": {"rules": [{"name": "prefs", "kind": "preference", "action": "publish_active"}]},
        }
    )
    before, revision = policy_in_force.current_policy_and_revision()
    response = ops.post(
        reverse("console:dashboard"), {"action": "semantic_on", "expected_revision": revision}, follow=True
    )
    after, new_revision = policy_in_force.current_policy_and_revision()
    assert new_revision == revision + 1 and after.capture.semantic_candidates.enabled
    expected = before.to_dict()
    expected["capture"]["semantic_candidates"]["enabled"] = True
    assert after.to_dict() == expected  # every other field kept
    audit = AuditEvent.objects.filter(subject_type="policy").order_by("-id").first()
    assert audit.actor == "operator-console"
    html = response.content.decode()
    assert "Semantic capture is on (learning policy revision" in text_of(html)
    panel = section(html, "capture-panel")
    assert "Semantic capture: on" in panel
    assert "heuristic: on" in panel and "No model needed" in panel
    assert "model extractor: off, no model configured" in panel and "heuristic only" in panel
    assert ("automated review on (rules publish) · capture: run summaries on, semantic on") in section(
        html, "automation-status"
    )


def test_dashboard_refuses_a_stale_revision_and_keeps_the_policy(ops):
    set_learning_policy({"mode": "shadow"})
    revision = policy_in_force.policy_revision()
    set_learning_policy({"mode": "shadow", "judge": {"enabled": False}})
    response = ops.post(
        reverse("console:dashboard"), {"action": "semantic_on", "expected_revision": revision}, follow=True
    )
    page = text_of(response.content.decode())
    assert "Runtime config revision conflict: expected 1, current 2" in page
    assert not policy_in_force.current_policy().capture.semantic_candidates.enabled
    assert PolicyRevision.objects.filter(kind=PolicyKind.LEARNING).count() == 2


def test_dashboard_post_needs_csrf(client):
    from django.test import Client

    csrf_client = Client(enforce_csrf_checks=True)
    csrf_client.force_login(staff_user())
    response = csrf_client.post(reverse("console:dashboard"), {"action": "semantic_on", "expected_revision": 0})
    assert response.status_code == 403
    assert not policy_in_force.current_policy().capture.semantic_candidates.enabled


def test_dashboard_names_the_configured_model(ops, llm_settings):
    llm_settings(KHEISH_LLM_BASE_URL="http://127.0.0.1:9/v1", KHEISH_LLM_MODEL="tiny-model")
    set_learning_policy({"mode": "shadow", "capture": {"semantic_candidates": {"enabled": True}}})
    panel = section(ops.get(reverse("console:dashboard")).content.decode(), "capture-panel")
    assert "model extractor: on (tiny-model)" in panel
    assert "only when a run has no labelled or first-person statement" in panel


# ---- publish form: no false promise -----------------------------------------------------------------------


def publish_page(ops, candidate) -> str:
    response = ops.get(reverse("console:candidate-publish", args=[candidate.pk]))
    assert response.status_code == 200
    return response.content.decode()


def options(html: str) -> dict[str, str]:
    select = section_html(html, "id_publish_tier")
    return {
        value: " ".join(label.split())
        for value, label in re.findall(r'<option value="(\w+)"[^>]*>(.*?)</option>', select, flags=re.S)
    }


def test_publish_form_never_promises_a_prompt_to_a_run_summary(ops, llm_unconfigured):
    set_learning_policy({"mode": "shadow"})
    run = completed_run(new_session(), PREFERENCE_STATEMENT)
    [summary] = capture(run)
    assert summary.kind == LearningKind.RUN_SUMMARY
    html = publish_page(ops, summary)
    labels = options(html)
    assert "eligible for prompts" not in html
    assert labels["active"].startswith("active: never injected: run summaries never reach a prompt")
    assert "Neither tier puts this run summary in a prompt" in text_of(html)
    assert "Never reaches a prompt, whatever the tier" in section(html, f"prompt-note-{summary.pk}")


@pytest.mark.parametrize(
    ("kind", "sensitivity", "expected"),
    [
        ("procedure", "scoped", "procedures never reach a prompt"),
        ("fact", "sensitive", "sensitive: never injected"),
    ],
)
def test_publish_form_names_why_a_candidate_cannot_reach_a_prompt(ops, kind, sensitivity, expected):
    candidate = api_candidate(
        "To release, run the checklist." if kind == "procedure" else "The vault code is 7.", kind=kind
    )
    type(candidate).objects.filter(pk=candidate.pk).update(sensitivity=sensitivity)
    candidate.refresh_from_db()
    html = publish_page(ops, candidate)
    labels = options(html)
    assert "eligible for prompts" not in html
    assert expected in labels["active"] and expected in labels["provisional"]


def test_publish_form_promises_a_prompt_only_at_the_active_tier(ops):
    candidate = api_candidate("The staging cluster is called Borealis.", kind="fact")
    labels = options(publish_page(ops, candidate))
    assert labels == {
        "active": "active: eligible for prompts (when the input matches)",
        "provisional": "provisional: kept, never injected",
    }


# ---- why not in the prompt: reasons agree with the predicate ----------------------------------------------


def test_exclusion_reasons_agree_with_is_prompt_eligible():
    """For every combination of the gates, ``learning_exclusion`` is empty exactly when the model's predicate
    passes (so the card can never explain a rule the code does not apply)."""
    combos = itertools.product(
        LearningKind.values,
        ["active", "provisional", "superseded", "revoked"],
        PublishTier.values,
        Sensitivity.values,
        VerificationStatus.values,
        [None, *PolicyDecision.values],
        [None, 1, 10**15],
    )
    checked = 0
    for kind, status, tier, sensitivity, verification, decision, expires in combos:
        learning = Learning(
            kind=kind,
            status=status,
            publish_tier=tier,
            sensitivity=sensitivity,
            verification_status=verification,
            policy_decision=decision,
            expires_at_ms=expires,
        )
        assert (learning_exclusion(learning) == []) == learning.is_prompt_eligible, learning.__dict__
        checked += 1
    assert checked > 1000


# ---- the session Memory card ------------------------------------------------------------------------------


def session_page(ops, session, query: str = "") -> str:
    response = ops.get(reverse("admin:memory_session_change", args=[session.pk]) + query)
    assert response.status_code == 200
    return response.content.decode()


def test_memory_card_explains_an_empty_prompt_after_the_worked_scenario(ops, llm_unconfigured):
    session = new_session()
    capture(completed_run(session, PREFERENCE_STATEMENT))  # defaults: run summaries only
    card = section(session_page(ops, session), "memory-card")
    assert "0 learnings" in card
    assert "Only 1 run_summary candidate exists: run summaries never reach a prompt." in card
    assert (
        "Labelled statements (Preference: / Fact: / Decision:) in a run's input become candidates only with "
        "semantic capture, off"
    ) in card
    table = section(session_page(ops, session), "memory-left-out")
    assert "candidate pending, not published" in table and "run summaries never reach a prompt" in table


def test_memory_card_gives_a_reason_for_each_learning_left_out(ops, llm_unconfigured):
    session = new_session()
    scope = ("session", session.public_id)
    shown = published("Deploys happen on Tuesdays.", kind="fact", scope=scope)  # a fact: query-ranked
    provisional = published("The on-call rota rotates weekly.", tier="provisional", scope=scope)
    procedure = published("To release, run the release checklist.", kind="procedure", scope=scope)
    sensitive_candidate = api_candidate("The vault code is 7.", scope=scope)
    type(sensitive_candidate).objects.filter(pk=sensitive_candidate.pk).update(sensitivity="sensitive")
    from learnings import services as learning_services

    sensitive = learning_services.candidate_publish(candidate=sensitive_candidate.pk, actor="tests")
    revoked = learning_services.learning_revoke(
        learning=published("Old fact here.", scope=scope), actor="tests", reason="wrong"
    )
    html = session_page(ops, session)
    card = section(html, "memory-card")
    assert "1 learning ·" in card  # singular
    rows = {
        row_id: text_of(row)
        for row_id, row in re.findall(
            r'<tr class="left-out-learning"><td><a href="[^"]+"><code>([\w-]+)</code>(.*?)</tr>', html, flags=re.S
        )
    }
    assert shown.public_id not in rows
    assert "provisional tier: kept, never injected" in rows[provisional.public_id]
    assert "procedures never reach a prompt" in rows[procedure.public_id]
    assert "sensitive: never injected" in rows[sensitive.public_id]
    assert "revoked: wrong" in rows[revoked.public_id]
    assert "memory-why-empty" not in html

    html = session_page(ops, session, "?memory_input=which+colour+is+the+logo")
    card = section(html, "memory-card")
    assert "0 learnings" in card and "for “which colour is the logo”" in card
    assert "no match for the input (hybrid ranker)" in section(html, "memory-left-out")
    assert "None of the 5 learnings in this session's scopes would be in the next prompt for this input" in card


def test_memory_card_after_semantic_capture_shows_the_preference(ops, llm_unconfigured):
    set_learning_policy(
        {
            "mode": "enabled",
            "judge": {"enabled": False},
            "capture": {"semantic_candidates": {"enabled": True}},
            "publication": {"rules": [{"name": "prefs", "kind": "preference", "action": "publish_active"}]},
        }
    )
    session = new_session()
    from learnings.review import review_candidate

    for candidate in capture(completed_run(session, PREFERENCE_STATEMENT)):
        review_candidate(candidate.pk)
    card = section(session_page(ops, session, "?memory_input=report+sizes"), "memory-card")
    assert "1 learning ·" in card and PREFERENCE in card


# ---- admin pages: dates, readable JSON, plurals -----------------------------------------------------------

EPOCH_MS = re.compile(r"\b1\d{12}\b")  # a 13-digit epoch-ms value (2001-2286)


@pytest.mark.parametrize(
    "changelist",
    [
        "admin:memory_session_changelist",
        "admin:memory_run_changelist",
        "admin:memory_auditevent_changelist",
        "admin:memory_runmemoryrecord_changelist",
        "admin:memory_policyrevision_changelist",
        "admin:learnings_learningcandidate_changelist",
        "admin:learnings_learning_changelist",
    ],
)
def test_changelists_show_dates_not_epoch_ms(ops, changelist, llm_unconfigured):
    set_learning_policy({"mode": "shadow"})
    session = new_session()
    capture(completed_run(session, PREFERENCE_STATEMENT))
    published("Deploys happen on Tuesdays.", kind="decision")
    query = "?state=all" if "candidate" in changelist else ""
    html = ops.get(reverse(changelist) + query).content.decode()
    table = text_of(section_html(html, "result_list"))
    assert " UTC" in table, table[:500]
    assert not EPOCH_MS.search(table), EPOCH_MS.search(table)


def test_record_pages_show_dates_and_pretty_json(ops, llm_unconfigured):
    session = new_session()
    run = completed_run(session, PREFERENCE_STATEMENT)
    [summary] = capture(run)
    for name, pk in (
        ("admin:memory_run_change", run.pk),
        ("admin:memory_session_change", session.pk),
        ("admin:learnings_learningcandidate_change", summary.pk),
        ("admin:memory_auditevent_change", AuditEvent.objects.order_by("id").first().pk),
    ):
        html = ops.get(reverse(name, args=[pk])).content.decode()
        fields = text_of(html[html.index('id="content-main"') :])
        assert " UTC" in fields, name
        assert not EPOCH_MS.search(fields), (name, EPOCH_MS.search(fields))
    html = ops.get(reverse("admin:memory_run_change", args=[run.pk])).content.decode()
    assert '<pre class="json"' in html
    assert re.search(r'<pre class="json"[^>]*>\{\n  &quot;content&quot;', html)  # the input, indented


def test_skill_counters_are_pluralised():
    from skills.admin import LearningSkillAdmin
    from skills.models import LearningSkill

    one = LearningSkill(
        successful_run_count=1, distinct_session_count=1, canary_success_count=0, canary_failure_count=0
    )
    two = LearningSkill(
        successful_run_count=2, distinct_session_count=0, canary_success_count=0, canary_failure_count=0
    )
    assert LearningSkillAdmin.counters(None, one).startswith("1 run · 1 session · ")
    assert LearningSkillAdmin.counters(None, two).startswith("2 runs · 0 sessions · ")
