"""Issue 25.5 in Debian's Chromium: the console details a newcomer meets in the first hour. No page asks for an
icon that is missing; the session page starts with its fields (no empty journal row); search hits say what
their number is; the candidate page shows dates, not epoch numbers; retention reads and takes "7 days"/"12h";
sessions are listed by last update; the agent-grants page explains itself and offers agents only; the audit
list shows the reason and before → after. Screenshots: ``test-artifacts/screenshots/first-hour-*.png``.

Skipped when ``/usr/bin/chromium`` is missing or ``KHEISH_SKIP_E2E=1`` (the browser fixtures are
``tests/e2e/test_console_browser.py``'s)."""

from __future__ import annotations

import re

import pytest

from tests.e2e.test_console_browser import browser, expect, login, page, shot  # noqa: F401 - fixtures
from tests.support.console_data import (
    PREFERENCE_STATEMENT,
    agent_user,
    capture,
    completed_run,
    new_session,
    published,
    set_learning_policy,
    staff_user,
)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_first_hour_console_details(page, llm_unconfigured):  # noqa: F811
    from learnings import review as learning_review
    from learnings.models import LearningCandidate
    from memory import grants, identity, sql
    from memory.models import Session

    operator = staff_user(superuser=True)
    identity.api_key_create(name="ops-key", role="operator", actor="tests")  # an operator principal
    agent = agent_user("agent-first-hour")
    identity.api_key_create(name=agent.username, role="agent", actor="tests")
    set_learning_policy({"mode": "shadow", "capture": {"semantic_candidates": {"enabled": True}}})
    older, newer = new_session(agent), new_session(agent)
    run = completed_run(newer, PREFERENCE_STATEMENT)
    for candidate in capture(run):
        learning_review.review_candidate(candidate.pk)
    preference = LearningCandidate.objects.get(source_run=run, kind="preference")
    published("Sizes are reported in gigabytes.", kind="preference", scope=("session", newer.public_id))
    sql.update(Session, older.pk, updated_at_ms=4_000_000_000_000)  # the older id was active last

    missing: list[str] = []
    page.on("response", lambda response: missing.append(response.url) if response.status == 404 else None)
    login(page, operator.username)

    # --- sessions list: the last updated first; a journal-events column, not "LAST OFFSET" --------------------
    page.goto("/admin/memory/session/")
    rows = page.locator("#result_list tbody tr")
    expect(rows.first).to_contain_text(older.public_id)
    expect(page.locator("#result_list thead")).to_contain_text(re.compile("journal events", re.I))
    expect(page.locator("#result_list thead")).not_to_contain_text(re.compile("last offset", re.I))
    shot(page, "first-hour-01-sessions")

    # --- the session page: fields first, no empty "Journal (newest first):" row above the fold ------------------
    page.goto(f"/admin/memory/session/{newer.pk}/change/")
    expect(page.locator(".field-journal")).to_have_count(0)
    expect(page.locator("form fieldset").first).not_to_contain_text("Journal (newest first)")
    expect(page.locator("#journal")).to_be_visible()
    expect(page.locator("body")).to_contain_text("any capability (not restricted)")
    shot(page, "first-hour-02-session")

    # --- search: the number is labelled -------------------------------------------------------------------------
    page.goto(f"/admin/memory/search/?session={newer.public_id}&q=gigabytes&limit=12")
    first = page.locator("article.hit").first
    expect(first.locator(".score")).to_contain_text(re.compile(r"^relevance \d"))
    shot(page, "first-hour-03-search")

    # --- the candidate record: its review in words and its dates as dates --------------------------------------
    page.goto(f"/admin/learnings/learningcandidate/{preference.pk}/change/")
    review = page.locator(".field-review_json")
    expect(review).to_contain_text("falling back to manual review")
    expect(review).to_contain_text(re.compile(r'"reviewed_at_ms": "\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(\d+ ms\)"'))
    expect(review).not_to_contain_text(re.compile(r'"reviewed_at_ms": \d'))
    expect(page.locator("body")).to_contain_text("Captured from a run")
    shot(page, "first-hour-04-candidate")

    # --- retention in human units ------------------------------------------------------------------------------
    page.goto("/admin/memory/policy/run-memory/")
    retention = page.get_by_label("Retention")
    expect(retention).to_have_value("30 days")
    retention.fill("12h")
    page.locator("#dry-run-button").click()
    expect(page.locator("#policy-diff")).to_contain_text("12 hours (43200000 ms)")
    shot(page, "first-hour-05-retention-dry-run")
    page.locator("#save-button").click()
    expect(page.locator(".messagelist")).to_contain_text("Run-memory policy saved")
    expect(page.get_by_label("Retention")).to_have_value("12 hours")

    # --- agent grants: the empty state says what to do, and only agents are offered ---------------------------
    page.goto("/admin/memory/agentgrant/")
    expect(page.locator("#grants-empty")).to_contain_text("No agent has grants yet.")
    shot(page, "first-hour-06-grants-empty")
    page.goto("/admin/memory/agentgrant/add/")
    options = page.locator("select#id_user option").all_inner_texts()
    assert agent.username in options and "ops-key" not in options and operator.username not in options, options
    shot(page, "first-hour-07-grants-add")

    from memory.models import Project

    Project.objects.create(project_id="atlas", name="Atlas")
    grants.grants_set(agent=agent, project_ids=["atlas"], persona_ids=[], actor=operator)

    # --- the audit list: reason and before → after ------------------------------------------------------------
    page.goto("/admin/memory/auditevent/")
    head = page.locator("#result_list thead")
    expect(head).to_contain_text(re.compile("reason", re.I))
    expect(head).to_contain_text(re.compile(r"before → after", re.I))
    expect(page.locator("#result_list")).to_contain_text("pending → pending")
    shot(page, "first-hour-08-audit")
    page.locator("#result_list tbody tr", has_text="agent grant").first.locator("th a, td a").first.click()
    expect(page.locator(".field-change")).to_contain_text("project_ids")
    expect(page.locator(".field-change")).to_contain_text("atlas")
    shot(page, "first-hour-09-audit-record")

    # --- no page asked for an icon (or anything else) that is not there ----------------------------------------
    assert missing == [], missing
