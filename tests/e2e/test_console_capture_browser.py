"""The dashboard's capture panel in Debian's Chromium (issue 13.3): a fresh install says run summaries are on and
semantic capture is off, explains that labelled statements need it and that its heuristic needs no model, and the
button turns it on (a new policy revision). Screenshots: ``test-artifacts/screenshots/capture-*.png``.

Skipped when ``/usr/bin/chromium`` is missing or ``KHEISH_SKIP_E2E=1`` (the browser fixtures are
``tests/e2e/test_console_browser.py``'s)."""

from __future__ import annotations

import pytest

from tests.e2e.test_console_browser import browser, expect, login, page, shot  # noqa: F401 - fixtures
from tests.support.console_data import staff_user

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_dashboard_capture_panel_and_switch(page, llm_unconfigured):  # noqa: F811
    from learnings import policy_in_force

    operator = staff_user(superuser=True)
    login(page, operator.username)
    page.goto("/admin/memory/")
    panel = page.locator("#capture-panel")
    expect(panel).to_contain_text("Run summaries: on")
    expect(panel).to_contain_text("Semantic capture: off")
    expect(panel).to_contain_text("become candidates only when it is on")
    expect(panel).to_contain_text("needs no model")
    expect(page.locator("#automation-status")).to_contain_text("capture: run summaries on, semantic off")
    panel.scroll_into_view_if_needed()
    shot(page, "capture-01-off")

    page.get_by_role("button", name="Turn semantic capture on").click()
    expect(page.locator(".messagelist")).to_contain_text("Semantic capture is on (learning policy revision 1)")
    expect(panel).to_contain_text("Semantic capture: on")
    expect(panel).to_contain_text("heuristic: on")
    expect(panel).to_contain_text("model extractor: off, no model configured")
    expect(page.get_by_role("button", name="Turn semantic capture off")).to_be_visible()
    shot(page, "capture-02-on")
    assert policy_in_force.current_policy().capture.semantic_candidates.enabled
