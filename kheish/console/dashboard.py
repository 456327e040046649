"""The console's overview page (``/admin/memory/``): stat cards linking to the filtered lists, the automation
status line, the capture panel (which capture paths are on, and a button that turns semantic capture on or off
through ``learnings.services.set_policy``: a new audited revision, every other field kept), run-memory status
and health, the skill ladder counts, recent governance activity and recent sessions (each linking to its
session page and to search)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from kheish import composition
from kheish.console import activity
from kheish.console.common import Stamp, capture_paths, learning_status_line, render
from learnings import policy_in_force
from learnings import services as learning_services
from learnings.models import Learning, LearningCandidate, LearningKind, LearningStatus
from learnings.vocabulary import CAPTURED_ONLY_KINDS, PROPOSABLE_KINDS, REVIEW_STATES, kind_plural, listing
from memory.errors import AppError
from memory.models import Session
from skills.models import LearningSkill, SkillStatus

GOVERNED_SUBJECTS = ("learning_candidate", "learning", "learning_skill", "policy")

SEMANTIC_ACTIONS = {"semantic_on": True, "semantic_off": False}


def set_semantic_capture(request: HttpRequest) -> None:
    """Turn semantic capture on or off: the policy in force with only ``capture.semantic_candidates.enabled``
    changed, saved as a new revision by ``learnings.services.set_policy`` (validated, audited, pending
    candidates re-queued) against the revision the page showed (a stale page gets the service's 409 detail)."""
    enabled = SEMANTIC_ACTIONS[request.POST["action"]]
    try:
        expected = int(request.POST.get("expected_revision", ""))
    except ValueError:
        messages.error(request, "The form lost its policy revision: reload the page and try again.")
        return
    current = policy_in_force.current_policy().to_dict()
    capture = current["capture"]
    body = {
        "policy": {
            **current,
            "capture": {**capture, "semantic_candidates": {**capture["semantic_candidates"], "enabled": enabled}},
        },
        "expected_revision": expected,
    }
    try:
        _, revision = learning_services.set_policy(body, actor=request.user)
    except AppError as exc:
        messages.error(request, exc.detail)
        return
    if enabled:
        messages.success(
            request,
            f"Semantic capture is on (learning policy revision {revision}). Completed runs "
            "with labelled statements become candidates; runs that finished while it was off "
            "are captured by the next replay.",
        )
    else:
        messages.success(request, f"Semantic capture is off (learning policy revision {revision}).")


@require_http_methods(["GET", "POST"])
def dashboard(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        if request.POST.get("action") in SEMANTIC_ACTIONS:
            set_semantic_capture(request)
        return HttpResponseRedirect(reverse("console:dashboard"))
    learnings_url = reverse("console:learnings")
    active = Learning.objects.filter(status=LearningStatus.ACTIVE)
    counts = active.aggregate(
        total=Count("id"),
        facts=Count("id", filter=Q(kind=LearningKind.FACT)),
        prefs=Count("id", filter=Q(kind__in=(LearningKind.PREFERENCE, LearningKind.DECISION))),
    )
    stats = [
        {
            "label": "Awaiting review",
            "value": LearningCandidate.objects.awaiting_review().count(),
            "url": reverse("console:review"),
            "hint": f"{listing(REVIEW_STATES, sep=' and ')} "
            + listing([kind_plural(k) for k in PROPOSABLE_KINDS], sep=", ", last=" and ")
            + f" ({listing([kind_plural(k) for k in CAPTURED_ONLY_KINDS], sep=', ')} apart)",
        },
        {
            "label": "Active learnings",
            "value": counts["total"],
            "url": f"{learnings_url}?status=active",
            "hint": "published, active tier",
        },
        {
            "label": "Facts",
            "value": counts["facts"],
            "url": f"{learnings_url}?status=active&kind=fact",
            "hint": "active fact learnings",
        },
        {
            "label": "Preferences & decisions",
            "value": counts["prefs"],
            "url": f"{learnings_url}?status=active&kind=preference&kind=decision",
            "hint": "active preference and decision learnings",
        },
    ]
    status = composition.status_view()
    skills = dict(LearningSkill.objects.values_list("status").annotate(n=Count("id")))
    events = activity.recent(GOVERNED_SUBJECTS, limit=12)
    sessions = [
        {
            "session": session,
            "when": Stamp(session.updated_at_ms),
            "url": reverse("admin:memory_session_change", args=[session.pk]),
            "search": f"{reverse('console:search')}?session={session.public_id}",
        }
        for session in Session.objects.select_related("owner", "persona").order_by("-updated_at_ms")[:8]
    ]
    context = admin.site.each_context(request)
    records: list[dict[str, Any]] = next(
        (app["models"] for app in context["available_apps"] if app["app_label"] == "memory"), []
    )
    return render(
        request,
        "dashboard.html",
        "Memory",
        tab="dashboard",
        base=context,
        records=records,
        subtitle="What your agents learn, remember, and are allowed to keep.",
        stats=stats,
        automation=learning_status_line(),
        capture=capture_paths(),
        run_memory_status=status["run_memory"],
        health=status["health"],
        skill_counts=[(step, skills.get(step, 0)) for step in SkillStatus.values],
        events=events,
        sessions=sessions,
    )
