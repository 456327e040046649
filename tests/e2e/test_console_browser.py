"""The Memory console in a real browser: Debian's Chromium (``/usr/bin/chromium``) driven by Playwright's sync
API against pytest-django's live server. Never a downloaded browser (no ``playwright install``).

The main test walks the worked scenario of the design document entirely through the console: an operator logs
in; a completed run that said "Preference: always report sizes in gigabytes, not gibibytes." has produced a
candidate; the operator publishes it from the review queue, sees it on that session's Memory card, supersedes it
with the gibibytes value, revokes the replacement (through the confirmation step), then promotes a workspace
procedure to a skill and records rollout evidence up to active. Each page is saved as a screenshot under
``test-artifacts/screenshots/``.

Skipped when ``/usr/bin/chromium`` is missing or ``KHEISH_SKIP_E2E=1``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"

if os.environ.get("KHEISH_SKIP_E2E") == "1":
    pytest.skip("browser tests disabled by KHEISH_SKIP_E2E=1", allow_module_level=True)
if not CHROMIUM.exists():
    pytest.skip(
        f"{CHROMIUM} is missing (apt-get install chromium); browser tests need Debian's Chromium",
        allow_module_level=True,
    )
sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")

from tests.support.console_data import (  # noqa: E402
    CORRECTED_PREFERENCE,
    MARKER,
    PASSWORD,
    PREFERENCE,
    PREFERENCE_STATEMENT,
    PROCEDURE,
    api_candidate,
    completed_run,
    new_session,
    set_learning_policy,
    staff_user,
    use_tmp_skill_dirs,
)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def browser():
    # Playwright's sync API keeps an event loop in this thread; the test's own ORM calls (setup, checks) are
    # plain synchronous code that never runs concurrently with it.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
            try:
                yield browser
            finally:
                browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def page(browser, live_server, settings, tmp_path):
    use_tmp_skill_dirs(settings, tmp_path)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": 1366, "height": 800}, base_url=live_server.url)
    context.set_default_timeout(15_000)
    page = context.new_page()
    yield page
    context.close()


def shot(page, name: str) -> None:
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def login(page, username: str) -> None:
    page.goto("/admin/login/?next=/admin/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    shot(page, "01-login")
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile(r"/admin/$"))


def expect(locator):
    return sync_api.expect(locator)


def article(page, text: str):
    """The queue/list item whose text contains ``text``."""
    return page.locator("article").filter(has_text=text)


def candidate(page, kind_label: str):
    """The review-queue item of the one candidate of this kind (run summaries repeat the run's words)."""
    return page.locator("article").filter(has=page.locator(".chip.kind", has_text=re.compile(f"^{kind_label}$")))


def test_worked_scenario_through_the_console(page):
    # --- setup through the services, as agents and automation would ---------------------------------------
    operator = staff_user(superuser=True)
    set_learning_policy(
        {
            "mode": "shadow",
            "capture": {"run_summary_candidates": True, "semantic_candidates": {"enabled": True}},
            "publication": {"rules": [{"name": "prefs", "kind": "preference", "action": "publish_active"}]},
        }
    )
    session = new_session()
    statement_run = completed_run(session, PREFERENCE_STATEMENT)  # on commit: capture, then shadow review
    api_candidate(PROCEDURE, kind="procedure")
    verification_run = completed_run(new_session(), "Use the release skill.", output=f"Checklist done. {MARKER}")
    canary_run = completed_run(new_session(), "Use the release skill.", output=f"Canary passed. {MARKER}")

    # --- log in, open the console --------------------------------------------------------------------------
    login(page, operator.username)
    link = page.get_by_role("link", name="Memory console →")
    expect(link).to_be_visible()
    shot(page, "02-admin-index")
    link.click()
    subtitle = "What your agents learn, remember, and are allowed to keep."
    expect(page.get_by_role("heading", name=subtitle)).to_be_visible()
    expect(page.locator("#automation-status")).to_contain_text(
        "automated review dry run (rules propose, people decide) · capture: run summaries on, semantic on · judge off"
    )
    # the preference and the procedure: run summaries are review material, apart from the work (issue 24.4)
    expect(page.locator("#stat-1 .value")).to_have_text("2")
    shot(page, "03-dashboard")

    # --- the review queue: the captured preference, its rule reason, its source run --------------------------
    page.locator("#stat-1").click()
    expect(page).to_have_url(re.compile(r"/admin/memory/review/$"))
    preference = candidate(page, "Preference")
    expect(preference).to_contain_text(PREFERENCE)
    expect(preference).to_contain_text("Publication rule “prefs” matched")
    expect(preference).to_contain_text("confidence 98")
    expect(preference.get_by_role("link", name=statement_run.public_id)).to_be_visible()
    shot(page, "04-review-queue")
    page.get_by_role("link", name="preference", exact=True).click()
    expect(page.locator("article")).to_have_count(1)
    shot(page, "05-review-filtered")
    preference = candidate(page, "Preference")
    preference.get_by_label("Tier").select_option("active")
    preference.get_by_role("button", name="Publish").click()
    expect(page.locator(".messagelist")).to_contain_text("Published learning-candidate-")
    expect(page.locator("#queue-empty")).to_be_visible()

    # --- the session's Memory card shows it -------------------------------------------------------------------
    page.get_by_role("link", name="Overview").click()
    page.locator("tr", has_text=session.public_id).get_by_role("link", name="Memory card").click()
    card = page.locator("#memory-card")
    expect(card).to_contain_text("1 learning · 1 recovered run eligible for the next prompt")
    expect(card).to_contain_text(PREFERENCE)
    shot(page, "06-session-memory-card")

    # --- supersede it with the gibibytes value ----------------------------------------------------------------
    page.goto("/admin/memory/")
    page.get_by_role("link", name="Learnings", exact=True).click()
    learned = article(page, PREFERENCE)
    expect(learned).to_contain_text("published manually")
    shot(page, "07-learnings")
    learned.get_by_role("link", name="Supersede…").click()
    page.get_by_label("Corrected content").fill(CORRECTED_PREFERENCE)
    shot(page, "08-supersede-form")
    page.get_by_role("button", name=re.compile(r"^Supersede learning-")).click()
    expect(page.locator(".messagelist")).to_contain_text("Superseded learning-")
    expect(article(page, CORRECTED_PREFERENCE)).to_be_visible()
    expect(page.locator("article", has_text=PREFERENCE)).to_have_count(0)

    # --- revoke the replacement, through the confirmation step -------------------------------------------------
    article(page, CORRECTED_PREFERENCE).get_by_role("link", name="Revoke…").click()
    expect(page.locator("#confirm-warning")).to_contain_text("Are you sure?")
    page.get_by_label("Reason (optional, kept in the audit trail)").fill("the team has not decided yet")
    shot(page, "09-revoke-confirmation")
    page.get_by_role("button", name="Yes, revoke").click()
    expect(page.locator(".messagelist")).to_contain_text("Revoked learning-")
    page.get_by_role("link", name="revoked", exact=True).click()
    revoked = article(page, CORRECTED_PREFERENCE)
    expect(revoked).to_contain_text("Revoked: the team has not decided yet")
    page.get_by_role("link", name="superseded", exact=True).click()
    article(page, PREFERENCE).get_by_role("link", name="Provenance").click()
    expect(page.locator("#p-run")).to_be_visible()
    expect(page.locator("body")).to_contain_text(statement_run.public_id)
    expect(page.locator("body")).to_contain_text("input_received")
    shot(page, "10-provenance")

    # --- publish the workspace procedure, promote it, drive it up the ladder ---------------------------------
    page.get_by_role("link", name="Review", exact=True).click()
    candidate(page, "Procedure").get_by_role("button", name="Publish").click()
    expect(page.locator(".messagelist")).to_contain_text("Published")
    page.get_by_role("link", name="Learnings", exact=True).click()
    article(page, PROCEDURE).get_by_role("link", name="Promote to skill…").click()
    page.get_by_label("Skill name").fill("release:checklist")
    page.get_by_label("Description").fill("Run the release checklist in a child agent.")
    page.get_by_label("Version").fill("1")
    shot(page, "11-promote-form")
    page.get_by_role("button", name="Promote as a draft skill").click()
    skill = page.locator("article", has_text="release:checklist")
    expect(skill.locator('[aria-current="step"]')).to_have_text("draft")
    shot(page, "12-skills-draft")

    skill.get_by_role("link", name="Record verification/canary check…").click()
    expect(page.get_by_label("Definition fingerprint")).not_to_have_value("")
    page.get_by_label("Kind of check").select_option("verification")
    page.get_by_label("Run id").fill(verification_run.public_id)
    page.get_by_label("Expected output marker").fill(MARKER)
    shot(page, "13-rollout-form")
    page.get_by_role("button", name="Record check").click()
    expect(page.locator(".messagelist")).to_contain_text("Recorded verification evidence")
    skill = page.locator("article", has_text="release:checklist")
    skill.get_by_role("button", name="Move to verified").click()
    skill = page.locator("article", has_text="release:checklist")
    expect(skill.locator('[aria-current="step"]')).to_have_text("verified")
    skill.get_by_role("button", name="Move to canary").click()
    skill = page.locator("article", has_text="release:checklist")
    expect(skill.locator('[aria-current="step"]')).to_have_text("canary")
    skill.get_by_role("link", name="Record verification/canary check…").click()
    expect(page.get_by_label("Kind of check")).to_have_value("canary")
    page.get_by_label("Run id").fill(canary_run.public_id)
    page.get_by_label("Expected output marker").fill(MARKER)
    page.get_by_role("button", name="Record check").click()
    expect(page.locator(".messagelist")).to_contain_text("Recorded canary evidence")
    skill = page.locator("article", has_text="release:checklist")
    skill.get_by_role("button", name="Move to active").click()
    skill = page.locator("article", has_text="release:checklist")
    expect(skill.locator('[aria-current="step"]')).to_have_text("active")
    expect(skill).to_contain_text("2 successful runs · 2 sessions · canary 1 ✓ / 0 ✗")
    shot(page, "14-skills-active")

    # --- search across the planes -------------------------------------------------------------------------------
    page.get_by_role("link", name="Search", exact=True).click()
    page.get_by_label("Session").select_option(session.public_id)
    page.get_by_label("Query").fill("gigabytes")
    page.get_by_role("button", name="Search").click()
    hit = page.locator("article.hit").first
    expect(hit.locator(".pill")).to_have_text("recovered run")
    expect(hit).to_contain_text("prompt-eligible")
    shot(page, "15-search-recovered-run")
    page.get_by_label("Query").fill("release checklist")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("article.hit .pill.learning")).to_have_count(1)  # the workspace procedure
    expect(page.locator("article.hit .pill.skill")).to_have_count(1)  # the skill, now active
    shot(page, "16-search-learning-and-skill")

    from learnings.models import Learning
    from skills.models import LearningSkill

    statuses = dict(
        Learning.objects.filter(content__in=[PREFERENCE, CORRECTED_PREFERENCE]).values_list("content", "status")
    )
    assert statuses == {PREFERENCE: "superseded", CORRECTED_PREFERENCE: "revoked"}
    assert LearningSkill.objects.get(skill_name="release:checklist").status == "active"


def test_policy_editors_dry_run_before_saving(page):
    operator = staff_user(superuser=True)
    set_learning_policy({"mode": "shadow", "capture": {"semantic_candidates": {"enabled": True}}})
    completed_run(new_session(), PREFERENCE_STATEMENT)
    login(page, operator.username)
    page.goto("/admin/memory/")
    page.get_by_role("link", name="Policy", exact=True).click()
    expect(page).to_have_url(re.compile(r"/admin/memory/policy/$"))
    expect(page.locator("#save-button")).to_have_count(0)
    rule = page.locator("#rule-0")
    rule.get_by_label("Name", exact=True).fill("noise")
    rule.get_by_label("Kind", exact=True).select_option("run_summary")
    rule.get_by_label("Action", exact=True).select_option("reject")
    page.get_by_role("button", name="+ Add a rule").click()
    expect(page.locator("#rule-1")).to_be_visible()
    page.locator("#rule-1").get_by_label("Name", exact=True).fill("prefs")
    page.locator("#rule-1").get_by_label("Kind", exact=True).select_option("preference")
    page.locator("#rule-1").get_by_label("Action", exact=True).select_option("publish_active")
    page.get_by_role("button", name="Move rule #1 up").click()
    expect(page.locator("#rule-0").get_by_label("Name", exact=True)).to_have_value("prefs")
    page.get_by_label("Max candidates per run").fill("9")
    page.get_by_role("button", name="Dry run", exact=True).click()
    expect(page.locator("#policy-errors")).to_contain_text("semantic capture max_candidates_per_run must be 8 or lower")
    shot(page, "17-policy-validation")
    page.get_by_label("Max candidates per run").fill("2")
    page.get_by_role("button", name="Dry run", exact=True).click()
    dry = page.locator("#dry-run")
    expect(dry).to_contain_text("matched publication rule `noise`")
    expect(dry).to_contain_text("matched publication rule `prefs`")
    shot(page, "18-policy-dry-run")
    page.get_by_role("button", name="Save policy").click()
    expect(page.locator(".messagelist")).to_contain_text("Learning policy saved as revision 2")
    expect(page.locator("#history")).to_contain_text("in force")

    page.get_by_role("link", name="Run-memory policy").click()
    page.get_by_label("Entries per prompt").fill("40")
    page.get_by_role("button", name="Dry run", exact=True).click()
    expect(page.locator("#policy-errors")).to_contain_text(
        "run memory max_prompt_entries must be lower than or equal to max_tracked_per_session"
    )
    page.get_by_label("Entries per prompt").fill("2")
    page.get_by_role("button", name="Dry run", exact=True).click()
    expect(page.locator("#dry-run-summary")).to_contain_text("would be deleted")
    shot(page, "19-run-memory-policy")
    page.get_by_role("button", name="Save policy").click()
    expect(page.locator(".messagelist")).to_contain_text("Run-memory policy saved as revision 1")


def test_keyboard_reaches_the_tabs_with_a_visible_focus(page):
    operator = staff_user(superuser=True)
    login(page, operator.username)
    page.goto("/admin/memory/")
    for _ in range(40):
        page.keyboard.press("Tab")
        focused = page.evaluate("document.activeElement.textContent.trim()")
        if focused == "Review":
            break
    else:
        pytest.fail("Tab never reached the Review tab")
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline not in ("", "none")
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"/admin/memory/review/$"))
    expect(page.get_by_role("link", name="Review", exact=True)).to_have_attribute("aria-current", "page")
