"""The console's overview page (``/admin/memory/``): stat cards linking to the filtered lists, the automation
status line, run-memory status and health, the skill ladder counts, recent governance activity and recent
sessions (each linking to its session page and to search)."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from kheish import composition
from kheish.console.common import Stamp, learning_status_line, render
from learnings.models import Learning, LearningCandidate, LearningKind, LearningStatus
from memory.models import AuditEvent, Session
from skills.models import LearningSkill, SkillStatus

GOVERNED_SUBJECTS = ("learning_candidate", "learning", "learning_skill", "policy")

def dashboard(request: HttpRequest) -> HttpResponse:
    learnings_url = reverse("console:learnings")
    active = Learning.objects.filter(status=LearningStatus.ACTIVE)
    counts = active.aggregate(
        total=Count("id"),
        facts=Count("id", filter=Q(kind=LearningKind.FACT)),
        prefs=Count("id", filter=Q(kind__in=(LearningKind.PREFERENCE, LearningKind.DECISION))),
    )
    stats = [
        {"label": "Awaiting review", "value": LearningCandidate.objects.pending_review().count(),
         "url": reverse("console:review"), "hint": "pending and escalated candidates"},
        {"label": "Active learnings", "value": counts["total"], "url": f"{learnings_url}?status=active",
         "hint": "published, active tier"},
        {"label": "Facts", "value": counts["facts"], "url": f"{learnings_url}?status=active&kind=fact",
         "hint": "active fact learnings"},
        {"label": "Preferences & decisions", "value": counts["prefs"],
         "url": f"{learnings_url}?status=active&kind=preference&kind=decision",
         "hint": "active preference and decision learnings"},
    ]
    status = composition.status_view()
    skills = dict(LearningSkill.objects.values_list("status").annotate(n=Count("id")))
    events = [{"event": event, "when": Stamp(event.at_ms)} for event in AuditEvent.objects.filter(
        subject_type__in=GOVERNED_SUBJECTS).order_by("-id")[:12]]
    sessions = [{"session": session, "when": Stamp(session.updated_at_ms),
                 "url": reverse("admin:memory_session_change", args=[session.pk]),
                 "search": f"{reverse('console:search')}?session={session.public_id}"}
                for session in Session.objects.select_related("owner", "persona").order_by("-updated_at_ms")[:8]]
    context = admin.site.each_context(request)
    records = next((app["models"] for app in context["available_apps"] if app["app_label"] == "memory"), [])
    return render(
        request, "dashboard.html", "Memory", tab="dashboard", base=context, records=records,
        subtitle="What your agents learn, remember, and are allowed to keep.",
        stats=stats, automation=learning_status_line(), run_memory_status=status["run_memory"],
        health=status["health"], skill_counts=[(step, skills.get(step, 0)) for step in SkillStatus.values],
        events=events, sessions=sessions,
    )

