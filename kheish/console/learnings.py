"""Learnings governance: the list (status pills, kind and text filters, badges), the provenance page
(candidate → source run → run-memory record → journal events, lineage, audit trail) and the one-learning
workflows revoke (confirmation page; a skill promoted from it is revoked with it), supersede and promote to a
skill. Writes go through ``learnings.services`` and ``skills.services``; whether a learning can be promoted is
``skills.services.is_promotable`` plus "no live skill yet", never re-derived here. The changelist's bulk revoke
(``kheish.console.bulk``) uses the same form and service."""

from __future__ import annotations

import json
from typing import cast
from urllib.parse import urlencode

from django.contrib import messages
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from kheish.console.common import Stamp, next_url, paginate, render
from kheish.console.forms import PromoteForm, ReasonForm, SupersedeForm, split_tools
from learnings import services as learning_services
from learnings.models import LIVE_STATUSES, Learning, LearningKind, LearningStatus, PolicyDecision, PublishTier
from learnings.querysets import LearningQuerySet
from memory.admin_display import readable_json
from memory.errors import AppError
from memory.models import AuditEvent, JournalEvent, RunMemoryRecord
from skills import services as skill_services
from skills.fingerprint import CONTEXT_FORK
from skills.models import LearningSkill, SkillStatus

STATUS_PILLS = (
    LearningStatus.ACTIVE,
    *(status for status in LearningStatus.values if status != LearningStatus.ACTIVE),
    "all",
)
"""The list's status filter: the default (active) first, every status, then all."""
PROMOTABLE = "an active procedure on the active tier at workspace scope"


def live_skills(learning_pks) -> dict[int, LearningSkill]:
    """The live (not revoked) promoted skill of each of these learnings, by learning pk."""
    return {
        skill.source_learning_id: skill
        for skill in LearningSkill.objects.filter(source_learning_id__in=list(learning_pks)).exclude(
            status=SkillStatus.REVOKED
        )
    }


def promotion_refusals(learning: Learning, existing: LearningSkill | None) -> list[str]:
    """Why "Promote to skill" is not offered: the skills service's rule (``is_promotable``) and one live skill
    per learning. Empty when the learning can be promoted."""
    reasons = []
    if not skill_services.is_promotable(learning):
        reasons.append(
            f"it is a {learning.kind} learning ({learning.status}, {learning.publish_tier} tier, "
            f"{learning.scope_key}), not {PROMOTABLE}"
        )
    if existing is not None:
        reasons.append(f"it is already promoted as {existing.skill_name}")
    return reasons


DECISION_LABELS: dict[str, str] = {
    PolicyDecision.AUTOMATIC: "auto-published",
    PolicyDecision.MANUAL: "published manually",
}


def _learning_row(learning: Learning, skill: LearningSkill | None) -> dict:
    live = learning.status in LIVE_STATUSES
    return {
        "learning": learning,
        "published": Stamp(learning.published_at_ms),
        "expires": Stamp(learning.expires_at_ms) if learning.expires_at_ms else None,
        "decision": DECISION_LABELS.get(learning.policy_decision or "", learning.policy_decision or ""),
        "provisional_tier": learning.publish_tier == PublishTier.PROVISIONAL,
        "prompt_eligible": learning.is_prompt_eligible,
        "can_revoke": learning.status != LearningStatus.REVOKED,
        "can_supersede": live,
        "can_promote": not promotion_refusals(learning, skill),
        "skill": skill,
    }


def learnings_list(request: HttpRequest) -> HttpResponse:
    status = request.GET.get("status", LearningStatus.ACTIVE)
    status = status if status in STATUS_PILLS else LearningStatus.ACTIVE
    kinds = [kind for kind in request.GET.getlist("kind") if kind in LearningKind.values]
    query = request.GET.get("q", "").strip()
    queryset: QuerySet[Learning] = Learning.objects.order_by("-id")
    if status != "all":
        queryset = queryset.filter(status=status)
    if kinds:
        queryset = queryset.filter(kind__in=kinds)
    if query:
        # its methods are typed as returning a plain QuerySet
        queryset = cast(LearningQuerySet, queryset).matching_query(query)
    rows, page = paginate(request, queryset)
    skills = live_skills(learning.pk for learning in rows)
    keep = [*(("kind", k) for k in kinds), *([("q", query)] if query else [])]
    pills = [
        {"value": value, "current": value == status, "url": "?" + urlencode([("status", value), *keep])}
        for value in STATUS_PILLS
    ]
    return render(
        request,
        "learnings.html",
        "Learnings",
        tab="learnings",
        rows=[_learning_row(learning, skills.get(learning.pk)) for learning in rows],
        page=page,
        pills=pills,
        status_filter=status,
        kinds=kinds,
        kind_choices=LearningKind.choices,
        query=query,
        here=request.get_full_path(),
    )


def learning_provenance(request: HttpRequest, pk: int) -> HttpResponse:
    """Where did this belief come from: candidate → source run → run-memory record → journal events."""
    learning = get_object_or_404(
        Learning.objects.select_related("source_candidate", "supersedes", "superseded_by", "source_run__session"), pk=pk
    )
    candidate = learning.source_candidate
    run = learning.source_run or (candidate.source_run if candidate else None)
    record = RunMemoryRecord.objects.filter(run=run).first() if run else None
    events = list(JournalEvent.objects.filter(run=run).order_by("offset")[:200]) if run else []
    lineage: list[Learning] = []
    cursor = learning.supersedes
    while cursor is not None and len(lineage) < 20:
        lineage.append(cursor)
        cursor = cursor.supersedes
    subjects = [("learning", learning.public_id)]
    if candidate:
        subjects.append(("learning_candidate", candidate.public_id))
    skills = list(LearningSkill.objects.filter(source_learning=learning).order_by("skill_name"))
    subjects += [("learning_skill", skill.skill_name) for skill in skills]
    audit_q = Q()
    for subject_type, subject_id in subjects:
        audit_q |= Q(subject_type=subject_type, subject_id=subject_id)
    audit = [
        {"event": event, "when": Stamp(event.at_ms)}
        for event in AuditEvent.objects.filter(audit_q).order_by("id")[:200]
    ]
    skill = next((s for s in skills if s.status != SkillStatus.REVOKED), None)
    return render(
        request,
        "learning.html",
        f"Provenance of {learning.public_id}",
        tab="learnings",
        row=_learning_row(learning, skill),
        candidate=candidate,
        candidate_review=(candidate.automation_review or {}) if candidate else {},
        candidate_created=Stamp(candidate.created_at_ms) if candidate else None,
        run=run,
        run_url=reverse("admin:memory_run_change", args=[run.pk]) if run else None,
        session_url=reverse("admin:memory_session_change", args=[run.session_id]) if run else None,
        record=record,
        record_when=Stamp(record.recorded_at_ms) if record else None,
        journal=[
            {
                "event": event,
                "when": Stamp(event.timestamp_ms),
                "text": json.dumps(readable_json(event.event), ensure_ascii=False)[:2000],
            }
            for event in events
        ],
        lineage=lineage,
        superseded_by=learning.superseded_by,
        skills=skills,
        audit=audit,
        source_json=json.dumps(readable_json(learning.source or {}), indent=1, ensure_ascii=False),
        evidence_json=json.dumps(readable_json(learning.evidence_refs or []), indent=1, ensure_ascii=False),
    )


@require_http_methods(["GET", "POST"])
def learning_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    learning = get_object_or_404(Learning, pk=pk)
    back = next_url(request, reverse("console:learnings"))
    form = ReasonForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            learning_services.learning_revoke(
                learning=learning.pk, actor=request.user, reason=form.cleaned_data["reason"] or None
            )
        except AppError as exc:
            form.add_error(None, exc.detail)
        else:
            messages.success(request, f"Revoked {learning.public_id}.")
            return HttpResponseRedirect(back)
    skill = live_skills([learning.pk]).get(learning.pk)
    warning = "A revoked learning never reaches a prompt or a search again. It is kept for audit."
    if skill is not None:
        warning += f" The promoted skill {skill.skill_name} ({skill.status}) grew from it and is revoked first."
    return render(
        request,
        "confirm.html",
        f"Revoke {learning.public_id}?",
        tab="learnings",
        form=form,
        next=back,
        verb="Revoke",
        subject=learning,
        content=learning.content,
        warning=warning,
        facts=[
            ("Kind", learning.kind),
            ("Status", learning.status),
            ("Scope", learning.scope_key),
            ("Publish tier", learning.publish_tier),
            ("Verification", learning.verification_status),
        ],
        http_status=400 if form.errors else 200,
    )


@require_http_methods(["GET", "POST"])
def learning_supersede(request: HttpRequest, pk: int) -> HttpResponse:
    learning = get_object_or_404(Learning, pk=pk)
    back = next_url(request, reverse("console:learnings"))
    form = SupersedeForm(request.POST or None, initial={"content": learning.content})
    if request.method == "POST" and form.is_valid():
        try:
            new = learning_services.learning_supersede(
                learning=learning.pk,
                actor=request.user,
                content=form.cleaned_data["content"],
                confidence=form.cleaned_data["confidence"],
            )
        except AppError as exc:
            form.add_error(None, exc.detail)
        else:
            messages.success(request, f"Superseded {learning.public_id} with {new.public_id}.")
            return HttpResponseRedirect(back)
    return render(
        request,
        "supersede.html",
        f"Supersede {learning.public_id}",
        tab="learnings",
        form=form,
        next=back,
        learning=learning,
        skill=live_skills([learning.pk]).get(learning.pk),
        http_status=400 if form.errors else 200,
    )


@require_http_methods(["GET", "POST"])
def learning_promote(request: HttpRequest, pk: int) -> HttpResponse:
    learning = get_object_or_404(Learning, pk=pk)
    form = PromoteForm(request.POST or None, initial={"instructions": learning.content})
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            skill = skill_services.skill_promote(
                learning=learning,
                request=skill_services.PromotionRequest(
                    skill_name=data["skill_name"],
                    instructions=data["instructions"],
                    description=data["description"] or None,
                    when_to_use=data["when_to_use"] or None,
                    version=data["version"] or None,
                    allowed_tools=tuple(split_tools(data["allowed_tools"])),
                    blocked_tools=tuple(split_tools(data["blocked_tools"])),
                    context=CONTEXT_FORK,
                ),
                actor=request.user,
            )
        except AppError as exc:
            form.add_error(None, exc.detail)
        else:
            messages.success(request, f"Promoted {learning.public_id} as draft skill {skill.skill_name}.")
            return HttpResponseRedirect(f"{reverse('console:skills')}#skill-{skill.pk}")
    return render(
        request,
        "promote.html",
        f"Promote {learning.public_id} to a skill",
        tab="learnings",
        form=form,
        learning=learning,
        reasons=promotion_refusals(learning, live_skills([learning.pk]).get(learning.pk)),
        http_status=400 if form.errors else 200,
    )
