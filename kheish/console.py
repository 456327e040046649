"""The Memory console: an operator dashboard over the three planes, inside the Django admin.

Pages (all under ``/admin/memory/``, all wrapped in ``admin.site.admin_view``: staff only, CSRF-protected,
never cached):

* ``""``                      dashboard: stat cards, automation status line, run-memory status, activity;
* ``review/``                 the review queue (pending + escalated candidates) with inline Publish / Reject;
* ``learnings/``              learnings governance: status pills, badges, Revoke, Supersede, Promote to skill;
* ``learnings/<pk>/``         provenance: candidate → source run → run-memory record → journal events;
* ``skills/``                 promoted skills on the draft → verified → canary → active ladder;
* ``search/``                 memory-search for one session, across planes;
* ``policy/``, ``policy/run-memory/``  the two policy editors, each with a dry run shown before saving.

Views read through selectors and querysets and write only through the planes' services
(``learnings.services``, ``learnings.policy_store``, ``skills.services``, ``memory.run_memory``), which
validate, change state with guarded updates and write the audit events. Errors those services raise are shown
to the operator with their literal ``detail``.

Wire it in ``kheish/urls.py`` before the admin: ``path("admin/memory/", include(console_urls()))``.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods

from kheish import composition
from kheish.console_forms import (
    LearningPolicyForm,
    PromoteForm,
    PublishForm,
    ReasonForm,
    RolloutForm,
    RuleForm,
    RuleFormSet,
    RunMemoryPolicyForm,
    SearchForm,
    SkillStatusForm,
    SupersedeForm,
    split_tools,
)
from learnings import policy_store
from learnings import services as learning_services
from learnings.models import (
    CandidateState,
    Learning,
    LearningCandidate,
    LearningKind,
    LearningStatus,
    PolicyDecision,
    PublishTier,
)
from learnings.policy import ACTIONS, LearningPolicy, evaluate_candidate
from memory import run_memory
from memory.clock import now_ms
from memory.errors import AppError
from memory.models import AuditEvent, JournalEvent, PolicyKind, PolicyRevision, Run, RunMemoryRecord, RunStatus, Session
from skills import services as skill_services
from skills.fingerprint import CONTEXT_FORK
from skills.models import LADDER, LearningSkill, LearningSkillSnapshot, RolloutKind, SkillStatus

PAGE_SIZE = 50
KIND_PILLS = (("", "All"), ("fact", "fact"), ("preference", "preference"), ("decision", "decision"),
              ("run_summary", "run summary"))
STATUS_PILLS = ("active", "provisional", "revoked", "superseded", "all")
SKILL_PILLS = ("all", *SkillStatus.values)
TABS = (("dashboard", "Overview"), ("review", "Review"), ("learnings", "Learnings"), ("skills", "Skills"),
        ("search", "Search"))
GOVERNED_SUBJECTS = ("learning_candidate", "learning", "learning_skill", "policy")
MODE_DOT = {"enabled": "on", "shadow": "shadow", "manual_only": "off"}
ENABLED_OUTCOME = {
    "manual_review": "escalated to an operator",
    "reject": "rejected",
    "publish_provisional": "published provisional",
    "publish_active": "published active if verified against its source run, else provisional",
}


# ---- small helpers ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stamp:
    """An epoch-ms timestamp as the console shows it: relative text, full UTC time, ISO for ``<time>``."""

    ms: int | None

    @property
    def iso(self) -> str:
        return "" if not self.ms else datetime.fromtimestamp(self.ms / 1000, UTC).isoformat()

    @property
    def full(self) -> str:
        return "" if not self.ms else datetime.fromtimestamp(self.ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

    @property
    def relative(self) -> str:
        if not self.ms:
            return "—"
        delta = (now_ms() - self.ms) // 1000
        future, delta = delta < 0, abs(delta)
        if delta < 45:
            return "just now"
        if delta >= 30 * 86400:
            return self.full[:10]
        size, unit = next((s, u) for s, u in ((86400, "d"), (3600, "h"), (60, "min"), (1, "min")) if delta >= s)
        amount = f"{max(1, delta // size) if unit == 'min' else delta // size} {unit}"
        return f"in {amount}" if future else f"{amount} ago"

    def __str__(self) -> str:
        return self.relative


def _render(request: HttpRequest, template: str, title: str, *, tab: str | None = None, http_status: int = 200,
            base: dict | None = None, **context) -> TemplateResponse:
    return TemplateResponse(
        request,
        f"admin/console/{template}",
        {
            **(base if base is not None else admin.site.each_context(request)),
            "is_nav_sidebar_enabled": False,
            "title": title,
            "tab": tab,
            "tabs": TABS,
            **context,
        },
        status=http_status,
    )


def _back(request: HttpRequest, default: str) -> str:
    """Where to go after an action: the ``next`` the form carried (same host only), else ``default``."""
    target = request.POST.get("next") or request.GET.get("next")
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()},
                                                  require_https=request.is_secure()):
        return target
    return default


def _page(request: HttpRequest, queryset, size: int = PAGE_SIZE):
    """A simple page of ``queryset`` without a COUNT over the whole table (one extra row tells "more")."""
    try:
        number = max(1, int(request.GET.get("page", "1")))
    except ValueError:
        number = 1
    rows = list(queryset[(number - 1) * size: number * size + 1])
    query = request.GET.copy()
    query.pop("page", None)
    base = query.urlencode()

    def link(number: int) -> str:
        return f"?{base}&page={number}" if base else f"?page={number}"

    return rows[:size], {
        "number": number,
        "previous": link(number - 1) if number > 1 else None,
        "next": link(number + 1) if len(rows) > size else None,
    }


def _digest(policy: dict) -> str:
    return hashlib.sha256(json.dumps(policy, sort_keys=True).encode()).hexdigest()


def _flatten(value, prefix: str = "") -> dict[str, object]:
    """Leaf paths of a policy; each publication rule is one leaf showing only the fields it sets."""
    if isinstance(value, dict):
        out: dict[str, object] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}.{key}" if prefix else key))
        return out
    if prefix.endswith("rules") and isinstance(value, list):
        return {f"{prefix}[{index}]": json.dumps({k: v for k, v in rule.items() if v not in (None, False)})
                for index, rule in enumerate(value)}
    return {prefix: json.dumps(value)}


def policy_diff(before: dict, after: dict) -> list[dict]:
    """Changed settings, one row per leaf path (a rule is one leaf): ``{path, before, after}``."""
    old, new = _flatten(before), _flatten(after)
    return [{"path": key, "before": old.get(key, "—"), "after": new.get(key, "—")}
            for key in sorted(set(old) | set(new), key=lambda k: (k.split("[")[0], k))
            if old.get(key) != new.get(key)]


def policy_history(kind: str) -> list[dict]:
    rows = list(PolicyRevision.objects.filter(kind=kind).order_by("-revision")[:15])
    changed = {
        event.to_state: (event.data or {}).get("changed", [])
        for event in AuditEvent.objects.filter(
            subject_type="policy", subject_id=kind, to_state__in=[f"r{row.revision}" for row in rows])
    }
    return [{"row": row, "when": Stamp(row.created_at_ms), "changed": changed.get(f"r{row.revision}", []),
             "url": reverse("admin:memory_policyrevision_change", args=[row.pk])} for row in rows]


def learning_status_line() -> dict:
    policy, revision = policy_store.current_policy_and_revision()
    return {
        "mode": policy.mode,
        "dot": MODE_DOT.get(policy.mode, "off"),
        "capture": policy.capture.semantic_candidates.enabled,
        "run_summary_capture": policy.capture.run_summary_candidates,
        "judge": policy.judge.enabled,
        "revision": revision,
        "rule_count": len(policy.publication.rules),
        "active_rule_count": len([rule for rule in policy.publication.rules
                                  if (rule.name or "").strip().lower() not in policy.publication.quarantine_set]),
        "default_action": policy.publication.default_action,
    }


def _run_link(run_pk: int | None, fallback: str | None = None) -> dict | None:
    if run_pk:
        return {"label": f"run-{run_pk}", "url": reverse("admin:memory_run_change", args=[run_pk])}
    return {"label": fallback, "url": None} if fallback else None


# ---- dashboard --------------------------------------------------------------------------------------------


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
    return _render(
        request, "dashboard.html", "Memory", tab="dashboard", base=context, records=records,
        subtitle="What your agents learn, remember, and are allowed to keep.",
        stats=stats, automation=learning_status_line(), run_memory_status=status["run_memory"],
        health=status["health"], skill_counts=[(step, skills.get(step, 0)) for step in SkillStatus.values],
        events=events, sessions=sessions,
    )


# ---- review queue -----------------------------------------------------------------------------------------


def _candidate_row(candidate: LearningCandidate) -> dict:
    review = candidate.automation_review or {}
    judge = review.get("judge") or {}
    return {
        "candidate": candidate,
        "created": Stamp(candidate.created_at_ms),
        "run": _run_link(candidate.source_run_id, (candidate.source or {}).get("run_id")),
        "proposal": review.get("action"),
        "review_mode": review.get("mode"),
        "rule": review.get("matched_rule_name"),
        "judge_action": judge.get("action"),
        "judge_reason": judge.get("reason"),
        "rule_reason": review.get("reason"),
    }


def review_queue(request: HttpRequest) -> HttpResponse:
    kind = request.GET.get("kind", "")
    query = request.GET.get("q", "").strip()
    queryset = LearningCandidate.objects.pending_review().order_by("-id")
    if kind in LearningKind.values:
        queryset = queryset.filter(kind=kind)
    if query:
        queryset = queryset.matching_query(query)
    rows, page = _page(request, queryset)
    pills = [{"value": value, "label": label, "current": value == kind,
              "url": "?" + urlencode([(k, v) for k, v in (("kind", value), ("q", query)) if v])}
             for value, label in KIND_PILLS]
    return _render(
        request, "review.html", "Review queue", tab="review",
        rows=[_candidate_row(candidate) for candidate in rows], page=page, pills=pills, kind=kind, query=query,
        tiers=PublishTier.choices, automation=learning_status_line(), here=request.get_full_path(),
    )


@require_http_methods(["GET", "POST"])
def candidate_publish(request: HttpRequest, pk: int) -> HttpResponse:
    candidate = get_object_or_404(LearningCandidate, pk=pk)
    form = PublishForm(request.POST or None, initial={"supersedes": request.GET.get("supersedes", "")})
    conflict = None
    if request.method == "POST" and form.is_valid():
        tier = form.cleaned_data["publish_tier"]
        try:
            learning = learning_services.candidate_publish(
                candidate=candidate.pk, actor=request.user, publish_tier=tier,
                supersedes=form.cleaned_data["supersedes"].strip() or None,
            )
        except learning_services.LearningConflict as exc:
            form.add_error(None, exc.detail)
            conflict = exc.existing
        except AppError as exc:
            form.add_error(None, exc.detail)
        else:
            messages.success(request, f"Published {candidate.public_id} as {learning.public_id} ({learning.status}).")
            return HttpResponseRedirect(_back(request, reverse("console:review")))
    return _render(
        request, "publish.html", f"Publish {candidate.public_id}", tab="review",
        row=_candidate_row(candidate), form=form, conflict=conflict, next=_back(request, reverse("console:review")),
        http_status=400 if form.errors else 200,
    )


@require_http_methods(["GET", "POST"])
def candidate_reject(request: HttpRequest, pk: int) -> HttpResponse:
    candidate = get_object_or_404(LearningCandidate, pk=pk)
    back = _back(request, reverse("console:review"))
    form = ReasonForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            learning_services.candidate_reject(candidate=candidate.pk, actor=request.user,
                                               reason=form.cleaned_data["reason"])
        except AppError as exc:
            form.add_error(None, exc.detail)
        else:
            messages.success(request, f"Rejected {candidate.public_id}.")
            return HttpResponseRedirect(back)
    return _render(
        request, "confirm.html", f"Reject {candidate.public_id}?", tab="review", form=form, next=back,
        verb="Reject", subject=candidate, content=candidate.content,
        facts=[("Kind", candidate.kind), ("State", candidate.state), ("Scope", candidate.scope_key),
               ("Confidence", candidate.confidence), ("Origin", candidate.origin)],
        warning="A rejected candidate is never published. Automation will not review it again.",
        http_status=400 if form.errors else 200,
    )


# ---- learnings governance ---------------------------------------------------------------------------------


def _live_skills(learning_pks) -> dict[int, LearningSkill]:
    return {skill.source_learning_id: skill for skill in LearningSkill.objects.filter(
        source_learning_id__in=list(learning_pks)).exclude(status=SkillStatus.REVOKED)}


def _learning_row(learning: Learning, skill: LearningSkill | None) -> dict:
    live = learning.status in (LearningStatus.ACTIVE, LearningStatus.PROVISIONAL)
    return {
        "learning": learning,
        "published": Stamp(learning.published_at_ms),
        "expires": Stamp(learning.expires_at_ms) if learning.expires_at_ms else None,
        "decision": {PolicyDecision.AUTOMATIC: "auto-published", PolicyDecision.MANUAL: "published manually"}.get(
            learning.policy_decision or "", learning.policy_decision or ""),
        "provisional_tier": learning.publish_tier == PublishTier.PROVISIONAL,
        "prompt_eligible": learning.is_prompt_eligible,
        "can_revoke": learning.status != LearningStatus.REVOKED,
        "can_supersede": live,
        "can_promote": skill is None and skill_services.is_promotable(learning),
        "skill": skill,
    }


def learnings_list(request: HttpRequest) -> HttpResponse:
    status = request.GET.get("status", "active")
    status = status if status in STATUS_PILLS else "active"
    kinds = [kind for kind in request.GET.getlist("kind") if kind in LearningKind.values]
    query = request.GET.get("q", "").strip()
    queryset = Learning.objects.order_by("-id")
    if status != "all":
        queryset = queryset.filter(status=status)
    if kinds:
        queryset = queryset.filter(kind__in=kinds)
    if query:
        queryset = queryset.matching_query(query)
    rows, page = _page(request, queryset)
    skills = _live_skills(learning.pk for learning in rows)
    keep = [*(("kind", k) for k in kinds), *([("q", query)] if query else [])]
    pills = [{"value": value, "current": value == status, "url": "?" + urlencode([("status", value), *keep])}
             for value in STATUS_PILLS]
    return _render(
        request, "learnings.html", "Learnings", tab="learnings",
        rows=[_learning_row(learning, skills.get(learning.pk)) for learning in rows], page=page, pills=pills,
        status_filter=status, kinds=kinds, kind_choices=LearningKind.choices, query=query,
        here=request.get_full_path(),
    )


def learning_provenance(request: HttpRequest, pk: int) -> HttpResponse:
    """Where did this belief come from: candidate → source run → run-memory record → journal events."""
    learning = get_object_or_404(Learning.objects.select_related("source_candidate", "supersedes",
                                                                 "superseded_by", "source_run__session"), pk=pk)
    candidate = learning.source_candidate
    run = learning.source_run or (candidate.source_run if candidate else None)
    record = RunMemoryRecord.objects.filter(run=run).first() if run else None
    events = list(JournalEvent.objects.filter(run=run).order_by("offset")[:200]) if run else []
    lineage = []
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
    audit = [{"event": event, "when": Stamp(event.at_ms)}
             for event in AuditEvent.objects.filter(audit_q).order_by("id")[:200]]
    skill = next((s for s in skills if s.status != SkillStatus.REVOKED), None)
    return _render(
        request, "learning.html", f"Provenance of {learning.public_id}", tab="learnings",
        row=_learning_row(learning, skill), candidate=candidate,
        candidate_review=(candidate.automation_review or {}) if candidate else {},
        candidate_created=Stamp(candidate.created_at_ms) if candidate else None,
        run=run, run_url=reverse("admin:memory_run_change", args=[run.pk]) if run else None,
        session_url=reverse("admin:memory_session_change", args=[run.session_id]) if run else None,
        record=record, record_when=Stamp(record.recorded_at_ms) if record else None,
        journal=[{"event": event, "when": Stamp(event.timestamp_ms),
                  "text": json.dumps(event.event, ensure_ascii=False)[:2000]} for event in events],
        lineage=lineage, superseded_by=learning.superseded_by, skills=skills, audit=audit,
        source_json=json.dumps(learning.source or {}, indent=1),
        evidence_json=json.dumps(learning.evidence_refs or [], indent=1),
    )


@require_http_methods(["GET", "POST"])
def learning_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    learning = get_object_or_404(Learning, pk=pk)
    back = _back(request, reverse("console:learnings"))
    form = ReasonForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            learning_services.learning_revoke(learning=learning.pk, actor=request.user,
                                              reason=form.cleaned_data["reason"] or None)
        except AppError as exc:
            form.add_error(None, exc.detail)
        else:
            messages.success(request, f"Revoked {learning.public_id}.")
            return HttpResponseRedirect(back)
    skill = _live_skills([learning.pk]).get(learning.pk)
    warning = "A revoked learning never reaches a prompt or a search again. It is kept for audit."
    if skill is not None:
        warning += f" The promoted skill {skill.skill_name} ({skill.status}) grew from it and is revoked first."
    return _render(
        request, "confirm.html", f"Revoke {learning.public_id}?", tab="learnings", form=form, next=back,
        verb="Revoke", subject=learning, content=learning.content, warning=warning,
        facts=[("Kind", learning.kind), ("Status", learning.status), ("Scope", learning.scope_key),
               ("Publish tier", learning.publish_tier), ("Verification", learning.verification_status)],
        http_status=400 if form.errors else 200,
    )


@require_http_methods(["GET", "POST"])
def learning_supersede(request: HttpRequest, pk: int) -> HttpResponse:
    learning = get_object_or_404(Learning, pk=pk)
    back = _back(request, reverse("console:learnings"))
    form = SupersedeForm(request.POST or None, initial={"content": learning.content})
    if request.method == "POST" and form.is_valid():
        try:
            new = learning_services.learning_supersede(
                learning=learning.pk, actor=request.user, content=form.cleaned_data["content"],
                confidence=form.cleaned_data["confidence"],
            )
        except AppError as exc:
            form.add_error(None, exc.detail)
        else:
            messages.success(request, f"Superseded {learning.public_id} with {new.public_id}.")
            return HttpResponseRedirect(back)
    return _render(
        request, "supersede.html", f"Supersede {learning.public_id}", tab="learnings", form=form, next=back,
        learning=learning, skill=_live_skills([learning.pk]).get(learning.pk),
        http_status=400 if form.errors else 200,
    )


@require_http_methods(["GET", "POST"])
def learning_promote(request: HttpRequest, pk: int) -> HttpResponse:
    learning = get_object_or_404(Learning, pk=pk)
    existing = _live_skills([learning.pk]).get(learning.pk)
    form = PromoteForm(request.POST or None, initial={"instructions": learning.content})
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            skill = skill_services.skill_promote(
                learning=learning,
                request=skill_services.PromotionRequest(
                    skill_name=data["skill_name"], instructions=data["instructions"],
                    description=data["description"] or None, when_to_use=data["when_to_use"] or None,
                    version=data["version"] or None, allowed_tools=tuple(split_tools(data["allowed_tools"])),
                    blocked_tools=tuple(split_tools(data["blocked_tools"])), context=CONTEXT_FORK,
                ),
                actor=request.user,
            )
        except AppError as exc:
            form.add_error(None, exc.detail)
        else:
            messages.success(request, f"Promoted {learning.public_id} as draft skill {skill.skill_name}.")
            return HttpResponseRedirect(f"{reverse('console:skills')}#skill-{skill.pk}")
    reasons = []
    if learning.kind != LearningKind.PROCEDURE:
        reasons.append("it is not a procedure")
    if learning.status != LearningStatus.ACTIVE:
        reasons.append(f"its status is {learning.status}, not active")
    if learning.publish_tier != PublishTier.ACTIVE:
        reasons.append("it is on the provisional tier")
    if learning.scope_kind != "workspace":
        reasons.append(f"its scope is {learning.scope_key}, not workspace:default")
    if existing is not None:
        reasons.append(f"it is already promoted as {existing.skill_name}")
    return _render(
        request, "promote.html", f"Promote {learning.public_id} to a skill", tab="learnings", form=form,
        learning=learning, reasons=reasons, http_status=400 if form.errors else 200,
    )


# ---- skills rollout ---------------------------------------------------------------------------------------


def _stepper(status: str) -> list[dict]:
    steps = [step.value for step in LADDER]
    position = steps.index(status) if status in steps else -1
    return [{"name": step, "state": "done" if index < position else "current" if index == position else "todo"}
            for index, step in enumerate(steps)]


def _forward(status: str) -> list[str]:
    allowed = skill_services.ALLOWED_TRANSITIONS.get(status, frozenset())
    steps = [step.value for step in LADDER]
    position = steps.index(status) if status in steps else len(steps)
    return [step for step in steps[position + 1:] if step in allowed]


def skills_page(request: HttpRequest) -> HttpResponse:
    status = request.GET.get("status", "all")
    status = status if status in SKILL_PILLS else "all"
    queryset = LearningSkill.objects.select_related("source_learning").order_by("skill_name")
    if status != "all":
        queryset = queryset.filter(status=status)
    skills, page = _page(request, queryset, size=30)
    with_snapshot = set(LearningSkillSnapshot.objects.filter(
        skill__in=skills, status=SkillStatus.ACTIVE).values_list("skill_id", flat=True))
    cards = []
    for skill in skills:
        events = list(skill.lifecycle_events.order_by("-recorded_at_ms", "-id")[:5])
        cards.append({
            "skill": skill,
            "steps": _stepper(skill.status),
            "revoked": skill.status == SkillStatus.REVOKED,
            "forward": _forward(skill.status),
            "can_change": bool(skill_services.ALLOWED_TRANSITIONS.get(skill.status, frozenset()) - {skill.status}),
            "can_rollback": skill.status == SkillStatus.REVOKED and skill.pk in with_snapshot,
            "events": [{"event": event, "when": Stamp(event.recorded_at_ms)} for event in events],
            "promoted": Stamp(skill.promoted_at_ms),
        })
    pills = [{"value": value, "current": value == status, "url": f"?status={value}"} for value in SKILL_PILLS]
    return _render(request, "skills.html", "Skills", tab="skills", cards=cards, pills=pills, page=page,
                   here=request.get_full_path())


def _recent_completed_runs() -> list[dict]:
    runs = Run.objects.filter(status=RunStatus.COMPLETED).select_related("session").order_by("-id")[:10]
    return [{"run": run, "output": skill_services.latest_output(run) or "", "when": Stamp(run.finished_at_ms)}
            for run in runs]


@require_http_methods(["GET", "POST"])
def skill_rollout(request: HttpRequest, pk: int) -> HttpResponse:
    skill = get_object_or_404(LearningSkill.objects.select_related("source_learning"), pk=pk)
    default_kind = RolloutKind.CANARY if skill.status == SkillStatus.CANARY else RolloutKind.VERIFICATION
    form = RolloutForm(request.POST or None, initial={"kind": request.GET.get("kind", default_kind),
                                                      "definition_fingerprint": skill.definition_fingerprint})
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            updated = skill_services.skill_record_rollout(
                skill_name=skill.skill_name, kind=data["kind"], run_id=data["run_id"].strip(),
                expected_output_contains=data["expected_output_contains"],
                definition_fingerprint=data["definition_fingerprint"] or None, actor=request.user,
            )
        except AppError as exc:
            form.add_error(None, exc.detail)
        else:
            last = updated.lifecycle_events.order_by("-recorded_at_ms", "-id").first()
            if last is not None and last.run_id == data["run_id"].strip() and last.success is False:
                messages.warning(request, f"Recorded a failed {data['kind']} check from {last.run_id} for "
                                          f"{skill.skill_name}: its output did not contain the marker.")
            else:
                messages.success(request, f"Recorded {data['kind']} evidence from {data['run_id'].strip()} for "
                                          f"{skill.skill_name}.")
            return HttpResponseRedirect(f"{reverse('console:skills')}#skill-{skill.pk}")
    return _render(
        request, "rollout.html", f"Record a check for {skill.skill_name}", tab="skills", form=form, skill=skill,
        steps=_stepper(skill.status), runs=_recent_completed_runs(), http_status=400 if form.errors else 200,
    )


def _status_request(skill: LearningSkill, status: str) -> skill_services.PromotionRequest:
    """The same definition again with a new status: how a promoted skill moves along the ladder (§4.18)."""
    runtime = skill.definition.runtime
    return skill_services.PromotionRequest(
        skill_name=skill.skill_name, instructions=skill.instructions, description=skill.description,
        when_to_use=skill.when_to_use, version=skill.version, allowed_tools=tuple(runtime.allowed_tools),
        blocked_tools=tuple(runtime.blocked_tools), context=runtime.context, agent_profile=runtime.agent_profile,
        provider=runtime.provider, model=runtime.model, fallback_model=runtime.fallback_model, status=status,
    )


@require_http_methods(["GET", "POST"])
def skill_status(request: HttpRequest, pk: int) -> HttpResponse:
    skill = get_object_or_404(LearningSkill.objects.select_related("source_learning"), pk=pk)
    allowed = sorted(skill_services.ALLOWED_TRANSITIONS.get(skill.status, frozenset()) - {skill.status},
                     key=lambda step: [s.value for s in LADDER].index(step))
    form = SkillStatusForm(request.POST or None, allowed=allowed,
                           initial={"status": (_forward(skill.status) or allowed or [""])[0]})
    if request.method == "POST" and form.is_valid():
        target = form.cleaned_data["status"]
        try:
            skill_services.skill_promote(learning=skill.source_learning_id, request=_status_request(skill, target),
                                         actor=request.user)
        except AppError as exc:
            form.add_error(None, exc.detail)
        else:
            messages.success(request, f"Moved {skill.skill_name} from {skill.status} to {target}.")
            return HttpResponseRedirect(f"{reverse('console:skills')}#skill-{skill.pk}")
    return _render(
        request, "skill_status.html", f"Move {skill.skill_name} along the rollout", tab="skills", form=form,
        skill=skill, steps=_stepper(skill.status), allowed=allowed, http_status=400 if form.errors else 200,
    )


def _skill_confirm(request: HttpRequest, pk: int, *, verb: str, call, done: str, warning: str) -> HttpResponse:
    skill = get_object_or_404(LearningSkill.objects.select_related("source_learning"), pk=pk)
    back = f"{reverse('console:skills')}#skill-{skill.pk}"
    form = ReasonForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            call(skill, form.cleaned_data["reason"] or None)
        except AppError as exc:
            form.add_error(None, exc.detail)
        else:
            messages.success(request, done.format(name=skill.skill_name))
            return HttpResponseRedirect(back)
    return _render(
        request, "confirm.html", f"{verb} {skill.skill_name}?", tab="skills", form=form, next=back, verb=verb,
        subject=skill, content=skill.description, warning=warning,
        facts=[("Status", skill.status), ("Source learning", skill.source_learning_public_id),
               ("Version", skill.version or "—"), ("Fingerprint", skill.definition_fingerprint)],
        http_status=400 if form.errors else 200,
    )


@require_http_methods(["GET", "POST"])
def skill_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    return _skill_confirm(
        request, pk, verb="Revoke",
        call=lambda skill, reason: skill_services.skill_revoke(skill_name=skill.skill_name, reason=reason,
                                                               actor=request.user),
        done="Revoked {name}.",
        warning="A revoked skill leaves the runtime catalog at once and accepts no more rollout evidence. "
                "Its last active state can be restored with Rollback.",
    )


@require_http_methods(["GET", "POST"])
def skill_rollback(request: HttpRequest, pk: int) -> HttpResponse:
    return _skill_confirm(
        request, pk, verb="Roll back",
        call=lambda skill, reason: skill_services.skill_rollback(skill_name=skill.skill_name, reason=reason,
                                                                 actor=request.user),
        done="Rolled back {name} to its newest active snapshot.",
        warning="Rollback restores the newest active snapshot of this skill (definition and evidence) and mounts "
                "it in the runtime catalog again. Its source learning must still be an active procedure.",
    )


# ---- search -----------------------------------------------------------------------------------------------


def search(request: HttpRequest) -> HttpResponse:
    recent = list(Session.objects.select_related("owner", "persona").order_by("-updated_at_ms")[:200])
    wanted = request.GET.get("session", "")
    chosen = None
    if wanted.startswith("session-") and wanted[8:].isdigit():
        chosen = next((s for s in recent if s.public_id == wanted), None) or Session.objects.select_related(
            "owner", "persona").filter(pk=int(wanted[8:])).first()
    if chosen is not None and chosen not in recent:
        recent.insert(0, chosen)
    choices = [(s.public_id, f"{s.public_id} · {s.owner.get_username()}"
                + (f" · {s.persona.persona_id}" if s.persona_id else "")) for s in recent]
    form = SearchForm(request.GET if "session" in request.GET else None, sessions=choices,
                      initial={"limit": 12})
    result = None
    if form.is_bound and form.is_valid() and chosen is not None:
        result = composition.memory_search(chosen, form.cleaned_data["q"], form.cleaned_data["limit"] or 12)
        for hit in result["results"]:
            hit["when"] = Stamp(hit["timestamp_ms"])
            hit["url"] = None
            if hit["kind"] == "learning":
                hit["url"] = reverse("console:learning", args=[int(hit["source_id"].split("-")[-1])])
            elif hit["kind"] == "recovered_run":
                hit["url"] = reverse("admin:memory_run_change", args=[int(hit["source_id"].split("-")[-1])])
    return _render(
        request, "search.html", "Search memory", tab="search", form=form, result=result, chosen=chosen,
        session_url=reverse("admin:memory_session_change", args=[chosen.pk]) if chosen else None,
    )


# ---- learning policy --------------------------------------------------------------------------------------

RULE_INDEX = re.compile(r"publication\.rules\[(\d+)\]")
LEARNING_FIELDS = {
    "mode": "mode",
    "capture.run_summary_candidates": "run_summary_candidates",
    "capture.semantic_candidates.enabled": "semantic_enabled",
    "capture.semantic_candidates.max_candidates_per_run": "max_candidates_per_run",
    "capture.semantic_candidates.timeout_ms": "semantic_timeout_ms",
    "judge.enabled": "judge_enabled",
    "judge.timeout_ms": "judge_timeout_ms",
    "publication.default_action": "default_action",
    "publication.allow_api_origin_active_publication": "allow_api_origin_active_publication",
    "publication.quarantined_rule_names": "quarantined_rule_names",
}


def _field_of(field: str | None, mapping: dict[str, str]) -> str | None:
    name = (field or "").removeprefix("policy.")
    name = re.sub(r"\[\d+\]$", "", name)
    return mapping.get(name)


def _edit_rows(data, action: str) -> None:
    """"Add a rule" and "move up/down" edit the posted rows in place (nothing is validated or saved)."""
    total = int(data.get("rules-TOTAL_FORMS") or 0)
    if action == "add_rule":
        data["rules-TOTAL_FORMS"] = str(total + 1)
        return
    verb, _, index = action.partition(":")
    if not index.isdigit():
        return
    i = int(index)
    j = i - 1 if verb == "up" else i + 1
    if not (0 <= i < total and 0 <= j < total):
        return
    names = list(RuleForm.base_fields) + ["DELETE"]
    for name in names:
        a, b = f"rules-{i}-{name}", f"rules-{j}-{name}"
        va, vb = data.getlist(a), data.getlist(b)
        data.setlist(a, vb)
        data.setlist(b, va)


def dry_run(new: LearningPolicy, old: LearningPolicy, size: int) -> dict:
    """What ``new`` (and the policy in force) would decide for the last ``size`` candidates: the publication
    rules of §4.10 only — the judge and verification need the model and the moment of review. Pure: nothing
    is written."""
    at = now_ms()
    rows = []
    for candidate in LearningCandidate.objects.order_by("-id")[:size]:
        after = evaluate_candidate(new, candidate, now_ms=at)
        before = evaluate_candidate(old, candidate, now_ms=at)
        rows.append({"candidate": candidate, "before": before, "after": after,
                     "changed": (before.action, before.matched_rule_name) != (after.action, after.matched_rule_name),
                     "url": reverse("admin:learnings_learningcandidate_change", args=[candidate.pk])})
    totals = {action: sum(1 for row in rows if row["after"].action == action) for action in ACTIONS}
    pending = sum(1 for row in rows if row["candidate"].state == CandidateState.PENDING)
    return {"rows": rows, "size": size, "totals": totals, "changed": sum(1 for row in rows if row["changed"]),
            "pending": pending, "mode": new.mode, "outcomes": ENABLED_OUTCOME}


@require_http_methods(["GET", "POST"])
def learning_policy(request: HttpRequest) -> HttpResponse:
    current, revision = policy_store.current_policy_and_revision()
    current_dict = current.to_dict()
    errors: list[str] = []
    preview = None
    notice = None
    show_errors = True
    if request.method == "POST":
        action = request.POST.get("action", "dry_run")
        data = request.POST.copy()
        if action not in ("dry_run", "save"):
            _edit_rows(data, action)
            show_errors = False
        form = LearningPolicyForm(data)
        rules = RuleFormSet(data, prefix="rules")
        if action in ("dry_run", "save"):
            rule_forms = [f for f in rules.forms if f.is_valid() and not f.cleaned_data.get("DELETE")
                          and not f.is_blank()]
            if form.is_valid() and rules.is_valid():
                body = {"policy": form.policy([f.rule() for f in rule_forms], current_dict),
                        "expected_revision": form.cleaned_data["expected_revision"]}
                try:
                    parsed, expected = policy_store.parse_request(body)
                except AppError as exc:
                    errors.append(exc.detail)
                    match = RULE_INDEX.search(exc.field or "")
                    if match and int(match.group(1)) < len(rule_forms):
                        rule_forms[int(match.group(1))].add_error(None, exc.detail)
                    elif _field_of(exc.field, LEARNING_FIELDS):
                        form.add_error(_field_of(exc.field, LEARNING_FIELDS), exc.detail)
                else:
                    digest = _digest(parsed.to_dict())
                    if action == "save" and request.POST.get("previewed") == digest:
                        try:
                            saved, new_revision = policy_store.set_policy(body, actor=request.user)
                        except AppError as exc:
                            errors.append(exc.detail)
                        else:
                            messages.success(request, f"Learning policy saved as revision {new_revision} "
                                                      f"(automation {saved.mode}). Pending candidates are "
                                                      "queued for review under it.")
                            return HttpResponseRedirect(reverse("console:learning-policy"))
                    else:
                        if action == "save":
                            notice = "The policy changed since its dry run. Check this dry run, then save."
                        size = form.cleaned_data["dry_run_size"]
                        preview = dry_run(parsed, current, size)
                        preview["digest"] = digest
                        preview["diff"] = policy_diff(current_dict, parsed.to_dict())
                        form = LearningPolicyForm(initial={**LearningPolicyForm.initial_for(parsed.to_dict(), expected),
                                                           "dry_run_size": size})
                        rules = RuleFormSet(initial=[RuleForm.initial_for(rule) for rule in
                                                     parsed.to_dict()["publication"]["rules"]] + [{}],
                                            prefix="rules")
            else:
                errors.append("Correct the highlighted fields.")
    else:
        source = current_dict
        loaded = request.GET.get("revision", "")
        if loaded.isdigit():
            row = PolicyRevision.objects.filter(kind=PolicyKind.LEARNING, revision=int(loaded)).first()
            if row is not None:
                try:
                    source = LearningPolicy.from_dict(row.policy).to_dict()
                    notice = (f"Revision {row.revision} is loaded into the editor. "
                              "Run a dry run, then save to restore it.")
                except Exception:  # noqa: BLE001 - an unreadable old revision is reported, not fatal
                    notice = f"Revision {row.revision} cannot be loaded: it no longer parses."
        form = LearningPolicyForm(initial=LearningPolicyForm.initial_for(source, revision))
        rules = RuleFormSet(initial=[RuleForm.initial_for(rule) for rule in source["publication"]["rules"]] + [{}],
                            prefix="rules")
    return _render(
        request, "learning_policy.html", "Learning policy", tab="policy", form=form, rules=rules,
        errors=errors, preview=preview, notice=notice, show_errors=show_errors, revision=revision,
        status_line=learning_status_line(), history=policy_history(PolicyKind.LEARNING),
        http_status=400 if errors else 200,
    )


# ---- run-memory policy ------------------------------------------------------------------------------------


@require_http_methods(["GET", "POST"])
def run_memory_policy(request: HttpRequest) -> HttpResponse:
    current = run_memory.current_policy()
    revision = run_memory.policy_revision()
    errors: list[str] = []
    preview = None
    notice = None
    if request.method == "POST":
        action = request.POST.get("action", "dry_run")
        form = RunMemoryPolicyForm(request.POST)
        if form.is_valid():
            data = form.policy()
            try:
                parsed = run_memory.parse_policy(data)
            except AppError as exc:
                errors.append(exc.detail)
                name = (exc.field or "").removeprefix("policy.")
                if name in RunMemoryPolicyForm.FIELDS:
                    form.add_error(name, exc.detail)
            else:
                digest = _digest(parsed.to_dict())
                if action == "save" and request.POST.get("previewed") == digest:
                    try:
                        _, new_revision, report = run_memory.set_policy(
                            data=data, expected_revision=form.cleaned_data["expected_revision"], actor=request.user)
                    except AppError as exc:
                        errors.append(exc.detail)
                    else:
                        messages.success(request, f"Run-memory policy saved as revision {new_revision}; "
                                                  f"{report['pruned_ttl_count']} expired and "
                                                  f"{report['pruned_overflow_count']} overflow records pruned.")
                        return HttpResponseRedirect(reverse("console:run-memory-policy"))
                else:
                    if action == "save":
                        notice = "The policy changed since its dry run. Check this dry run, then save."
                    report = run_memory.enforce_policy(policy=parsed, source="console_dry_run", apply=False)
                    preview = {"report": report, "digest": digest,
                               "diff": policy_diff(current.to_dict(), parsed.to_dict())}
        else:
            errors.append("Correct the highlighted fields.")
    else:
        source = current.to_dict()
        loaded = request.GET.get("revision", "")
        if loaded.isdigit():
            row = PolicyRevision.objects.filter(kind=PolicyKind.RUN_MEMORY, revision=int(loaded)).first()
            if row is not None:
                source = {**source, **{k: v for k, v in row.policy.items() if k in RunMemoryPolicyForm.FIELDS}}
                notice = f"Revision {row.revision} is loaded into the editor. Run a dry run, then save to restore it."
        form = RunMemoryPolicyForm(initial={**source, "expected_revision": revision})
    return _render(
        request, "run_memory_policy.html", "Run-memory policy", tab="policy", form=form, errors=errors,
        preview=preview, notice=notice, revision=revision, current=current,
        run_memory_status=run_memory.status_view(), history=policy_history(PolicyKind.RUN_MEMORY),
        http_status=400 if errors else 200,
    )


# ---- wiring -----------------------------------------------------------------------------------------------


def console_urls() -> tuple[list, str]:
    """URL patterns of the console (namespace ``console``), each wrapped in ``admin.site.admin_view``."""
    wrap = admin.site.admin_view
    patterns = [
        path("", wrap(dashboard), name="dashboard"),
        path("review/", wrap(review_queue), name="review"),
        path("review/<int:pk>/publish/", wrap(candidate_publish), name="candidate-publish"),
        path("review/<int:pk>/reject/", wrap(candidate_reject), name="candidate-reject"),
        path("learnings/", wrap(learnings_list), name="learnings"),
        path("learnings/<int:pk>/", wrap(learning_provenance), name="learning"),
        path("learnings/<int:pk>/revoke/", wrap(learning_revoke), name="learning-revoke"),
        path("learnings/<int:pk>/supersede/", wrap(learning_supersede), name="learning-supersede"),
        path("learnings/<int:pk>/promote/", wrap(learning_promote), name="learning-promote"),
        path("skills/", wrap(skills_page), name="skills"),
        path("skills/<int:pk>/rollout/", wrap(skill_rollout), name="skill-rollout"),
        path("skills/<int:pk>/status/", wrap(skill_status), name="skill-status"),
        path("skills/<int:pk>/revoke/", wrap(skill_revoke), name="skill-revoke"),
        path("skills/<int:pk>/rollback/", wrap(skill_rollback), name="skill-rollback"),
        path("search/", wrap(search), name="search"),
        path("policy/", wrap(learning_policy), name="learning-policy"),
        path("policy/run-memory/", wrap(run_memory_policy), name="run-memory-policy"),
    ]
    return patterns, "console"
