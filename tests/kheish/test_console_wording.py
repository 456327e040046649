"""Issue 25.3 and 25.5: the words a person reads in the console and in error details are the operator's, never
the code's or a spec the reader does not have; and the console details of the first hour.

Every page below is rendered with real data (a captured candidate reviewed in a dry run, a published learning,
grants, policy changes, audit events) and its visible text (tags, attributes, scripts and styles removed) is
scanned for the jargon list, the review queue (every tab) and the dashboard's activity feed included.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from django.urls import reverse

from learnings import review as learning_review
from learnings.models import LearningCandidate
from memory.models import AuditEvent, Session
from tests.conftest import assert_problem
from tests.support.console_data import (
    PREFERENCE_STATEMENT,
    capture,
    completed_run,
    new_session,
    published,
    set_learning_policy,
    staff_user,
)

pytestmark = pytest.mark.django_db

JARGON = [
    (re.compile(r"\bdaemon\b", re.I), "daemon"),
    (re.compile(r"ManualReview|PublishActive|PublishProvisional"), "the reference's action spelling"),
    (re.compile(r"automation shadow", re.I), "automation shadow"),
    (re.compile(r"\bthe reference\b", re.I), "the reference"),
    (re.compile(r"§\s*\d|\bspec\b", re.I), "a spec reference"),
    (re.compile(r"\baxes\b", re.I), "AXES"),
    (re.compile(r"null: any", re.I), "null: any"),
    (re.compile(r"last[ _]offset", re.I), "LAST OFFSET"),
]


class _VisibleText(HTMLParser):
    """The text a person sees: no tags or attributes, no <script>/<style>, and nothing inside an element whose
    id (or aria-labelledby) is in ``skip`` (with its descendants)."""

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

    def __init__(self, skip: set[str]):
        super().__init__()
        self.skip, self.stack, self.parts = skip, [], []

    def handle_starttag(self, tag, attrs):
        if tag in self.VOID:
            return
        named = dict(attrs)
        hidden = (
            tag in ("script", "style", "template")
            or named.get("id") in self.skip
            or named.get("aria-labelledby") in self.skip
        )
        self.stack.append(hidden or bool(self.stack and self.stack[-1]))

    def handle_endtag(self, tag):
        if tag not in self.VOID and self.stack:
            self.stack.pop()

    def handle_data(self, data):
        if not (self.stack and self.stack[-1]):
            self.parts.append(data)


def visible_text(html: str, skip: set[str] = frozenset()) -> str:
    parser = _VisibleText(set(skip))
    parser.feed(html)
    return " ".join(" ".join(parser.parts).split())


def jargon_in(text: str) -> list[str]:
    found = []
    for pattern, name in JARGON:
        for match in pattern.finditer(text):
            found.append(f"{name}: …{text[max(match.start() - 60, 0) : match.end() + 60]}…")
    return found


@pytest.fixture
def world(agent_key):
    """A dry-run review of a captured preference, a published learning, a policy change, grants, audit events."""
    set_learning_policy(
        {"mode": "shadow", "capture": {"run_summary_candidates": True, "semantic_candidates": {"enabled": True}}}
    )
    session = new_session(agent_key.api_key.user)
    run = completed_run(session, PREFERENCE_STATEMENT)
    candidates = capture(run)
    for candidate in candidates:
        learning_review.review_candidate(candidate.pk)
    preference = next(c for c in LearningCandidate.objects.filter(source_run=run) if c.kind == "preference")
    assert "ManualReview" in preference.automation_review["reason"]  # what the page must put in words
    learning = published("The log directory is /var/log.")
    return {"session": session, "run": run, "candidate": preference, "learning": learning}


@pytest.fixture
def ops(client):
    client.force_login(staff_user(superuser=True))
    return client


def _pages(world) -> dict[str, str]:
    session, candidate, learning = world["session"], world["candidate"], world["learning"]
    audit = AuditEvent.objects.order_by("-id").first()
    return {
        "admin index": reverse("admin:index"),
        "dashboard": reverse("console:dashboard"),
        "review queue": reverse("console:review"),
        "review queue, run summaries": reverse("console:review") + "?kind=run_summary",
        "review queue, preferences": reverse("console:review") + "?kind=preference",
        "learning policy": reverse("console:learning-policy"),
        "run-memory policy": reverse("console:run-memory-policy"),
        "search": reverse("console:search") + f"?session={session.public_id}&q=gigabytes&limit=12",
        "candidate page": reverse("console:learning", args=[learning.pk]),
        "session page": reverse("admin:memory_session_change", args=[session.pk]),
        "sessions list": reverse("admin:memory_session_changelist"),
        "candidates list": reverse("admin:learnings_learningcandidate_changelist"),
        "candidate record": reverse("admin:learnings_learningcandidate_change", args=[candidate.pk]),
        "learnings list": reverse("admin:learnings_learning_changelist"),
        "audit list": reverse("admin:memory_auditevent_changelist"),
        "audit record": reverse("admin:memory_auditevent_change", args=[audit.pk]),
        "agent grants": reverse("admin:memory_agentgrant_changelist"),
        "agent grant add": reverse("admin:memory_agentgrant_add"),
        "personas": reverse("admin:memory_persona_changelist"),
        "runs list": reverse("admin:memory_run_changelist"),
        "learnings page": reverse("console:learnings"),
        "skills page": reverse("console:skills"),
    }


def test_console_pages_speak_the_operators_language(ops, world):
    problems = {}
    for name, url in _pages(world).items():
        response = ops.get(url)
        assert response.status_code == 200, (name, url, response.status_code)
        text = visible_text(response.content.decode())
        found = jargon_in(text)
        if found:
            problems[name] = found
    assert problems == {}, "\n".join(f"{page}: {hit}" for page, hits in problems.items() for hit in hits)


def test_the_candidate_page_puts_the_review_reason_and_mode_in_words(ops, world):
    learning = published("Prefer short answers.")
    candidate = world["candidate"]
    html = ops.get(reverse("admin:learnings_learningcandidate_change", args=[candidate.pk])).content.decode()
    text = visible_text(html)
    assert "manual review" in text and "ManualReview" not in text
    assert "Captured from a run" in text
    page = visible_text(ops.get(reverse("console:learning", args=[learning.pk])).content.decode())
    assert "posted through the API" in page


def test_error_details_never_say_daemon_or_cite_the_spec(api_client, session_id):
    details = [
        assert_problem(api_client.get("/v1/nope/never"), 404)["detail"],
        assert_problem(
            api_client.post(
                "/v1/learning-candidates",
                {"scope": {"kind": "session", "id": session_id}, "kind": "run_summary", "content": "x"},
                format="json",
            ),
            400,
        )["detail"],
        assert_problem(api_client.post("/v1/sessions", {"project_ids": ["nope"]}, format="json"), 403)["detail"],
    ]
    assert details[0] == "unknown API route /v1/nope/never"
    assert details[1] == "run_summary candidates are captured by the service only"
    assert [hit for detail in details for hit in jargon_in(detail)] == []


def test_prompt_sections_say_who_recovered_and_published_the_notes(api_client, session_id):
    from tests.support.api import finish

    finish(api_client, session_id, "Deploy the quarterly report", output="Deployed.")
    published("Quarterly reports are deployed on Mondays.", scope=("session", session_id))
    run = api_client.post(
        f"/v1/sessions/{session_id}/runs", {"input": {"content": "the quarterly report"}}, format="json"
    ).json()
    sections = {s["name"]: s["content"] for s in run["prompt"]["sections"]}
    assert "Kheish Memory recovered the following compact notes" in sections["recovered_memory"]
    assert "Kheish Memory published the following durable notes" in sections["learned_context"]
    assert not [hit for text in sections.values() for hit in jargon_in(text)]


# ------------------------------------------------------------------------------------------------ 25.5 details


def test_sessions_list_is_sorted_by_last_update(ops, agent_key):
    from memory import sql

    first, second, third = (new_session(agent_key.api_key.user) for _ in range(3))
    sql.update(Session, first.pk, updated_at_ms=3_000_000_000_000)
    sql.update(Session, third.pk, updated_at_ms=1_000_000_000_000)
    html = ops.get(reverse("admin:memory_session_changelist")).content.decode()
    order = [int(pk) for pk in re.findall(r"/admin/memory/session/(\d+)/change/", html)]
    order = list(dict.fromkeys(order))
    assert order.index(first.pk) < order.index(second.pk) < order.index(third.pk), order
    assert "Journal events" in html and "LAST OFFSET" not in html.upper().replace("JOURNAL EVENTS", "")


def test_the_session_page_has_no_empty_journal_row(ops, world):
    html = ops.get(reverse("admin:memory_session_change", args=[world["session"].pk])).content.decode()
    assert "Journal (newest first):" not in html and "Journal (newest first)</label>" not in html
    assert 'id="journal"' in html  # the journal itself is still there, below the cards


def test_every_page_has_an_icon(ops, client):
    for url in ("/", reverse("admin:index"), reverse("console:dashboard")):
        html = ops.get(url).content.decode()
        assert re.search(r'<link rel="icon" href="/favicon.svg" type="image/svg\+xml">', html), url
    for url in ("/favicon.ico", "/favicon.svg"):
        icon = client.get(url)
        assert icon.status_code == 200 and icon["Content-Type"] == "image/svg+xml"
        assert icon.content.startswith(b"<svg")


def test_retention_is_shown_and_accepted_in_human_units(ops):
    from memory import run_memory

    url = reverse("console:run-memory-policy")
    html = ops.get(url).content.decode()
    assert 'value="30 days"' in html, "the default retention (2,592,000,000 ms) is shown as 30 days"
    policy = run_memory.current_policy().to_dict()
    form = {key: ("on" if value is True else str(value)) for key, value in policy.items() if value is not False}

    def save(retention: str, revision: int):
        dry_run = ops.post(url, dict(form, retention_ms=retention, action="dry_run", expected_revision=str(revision)))
        previewed = re.search(r'name="previewed" value="([0-9a-f]+)"', dry_run.content.decode())
        assert previewed, dry_run.content.decode()[-3000:]
        return ops.post(
            url,
            dict(
                form,
                retention_ms=retention,
                action="save",
                expected_revision=str(revision),
                previewed=previewed.group(1),
            ),
        )

    assert save("12h", 0).status_code == 302
    assert run_memory.current_policy().retention_ms == 12 * 3_600_000
    assert save("7 days", 1).status_code == 302
    assert run_memory.current_policy().retention_ms == 7 * 86_400_000
    assert 'value="7 days"' in ops.get(url).content.decode()
    refused = ops.post(url, dict(form, retention_ms="a while", action="dry_run", expected_revision="2"))
    assert "is not a duration: write e.g. 30 days, 12h or 90 minutes" in refused.content.decode()
    assert run_memory.current_policy().retention_ms == 7 * 86_400_000


def test_audit_list_shows_reason_and_before_after(ops, world, operator):
    from memory import grants
    from memory.models import Project

    Project.objects.create(project_id="atlas", name="Atlas")
    grants.grants_set(agent=world["session"].owner, project_ids=["atlas"], persona_ids=[], actor=operator)
    from learnings import services

    services.learning_revoke(learning=world["learning"], actor=operator, reason="wrong directory")
    html = ops.get(reverse("admin:memory_auditevent_changelist")).content.decode()
    text = visible_text(html)
    assert "Reason" in text and "wrong directory" in text
    assert "State (before → after)" in text
    grant_event = AuditEvent.objects.filter(subject_type="agent_grant").latest("id")
    record = visible_text(ops.get(reverse("admin:memory_auditevent_change", args=[grant_event.pk])).content.decode())
    assert "Change (before → after)" in record and "project_ids" in record and "atlas" in record
    policy_event = AuditEvent.objects.filter(subject_type="policy").latest("id")
    assert "after" in policy_event.data and policy_event.data["after"]["mode"] == "shadow"


def test_agent_grants_page_explains_itself_and_offers_only_agents(ops, agent_key, operator_key):
    html = ops.get(reverse("admin:memory_agentgrant_changelist")).content.decode()
    assert 'id="grants-empty"' in html and "No agent has grants yet." in html
    add = ops.get(reverse("admin:memory_agentgrant_add")).content.decode()
    options = re.findall(r'<option value="\d+"[^>]*>([^<]+)</option>', add)
    assert agent_key.api_key.user.username in options
    assert operator_key.api_key.user.username not in options and "operator-console" not in options
