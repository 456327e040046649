"""Skill rollout: the board of promoted skills on the draft → verified → canary → active ladder (stepper,
counters, recent lifecycle events) and the one-skill workflows: record a verification or canary check, move
along the ladder, revoke and roll back (both behind a confirmation page). Every write is a
``skills.services`` call, which validates the step and writes the audit event. The skill changelist's bulk
revoke (``kheish.console.bulk``) uses the same form and service; its change page links here."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from kheish.console.common import Stamp, next_url, paginate, render
from kheish.console.forms import ReasonForm, RolloutForm, SkillStatusForm
from memory.errors import AppError
from memory.models import Run, RunStatus
from skills import services as skill_services
from skills.models import LADDER, LearningSkill, LearningSkillSnapshot, RolloutKind, SkillStatus

SKILL_PILLS = ("all", *SkillStatus.values)
REVOKE_WARNING = (
    "A revoked skill leaves the runtime catalog at once (an active one's mounted files are removed) "
    "and accepts no more rollout evidence. Its last active state can be restored with Rollback."
)
ROLLBACK_WARNING = (
    "Rollback restores the newest active snapshot of this skill (definition and evidence) and mounts "
    "it in the runtime catalog again. Its source learning must still be an active procedure."
)


def board_url(skill: LearningSkill) -> str:
    return f"{reverse('console:skills')}#skill-{skill.pk}"


def _stepper(status: str) -> list[dict]:
    steps = [step.value for step in LADDER]
    position = steps.index(status) if status in steps else -1
    return [
        {"name": step, "state": "done" if index < position else "current" if index == position else "todo"}
        for index, step in enumerate(steps)
    ]


def _forward(status: str) -> list[str]:
    allowed = skill_services.ALLOWED_TRANSITIONS.get(status, frozenset())
    steps = [step.value for step in LADDER]
    position = steps.index(status) if status in steps else len(steps)
    return [step for step in steps[position + 1 :] if step in allowed]


def skills_page(request: HttpRequest) -> HttpResponse:
    status = request.GET.get("status", "all")
    status = status if status in SKILL_PILLS else "all"
    queryset = LearningSkill.objects.select_related("source_learning").order_by("skill_name")
    if status != "all":
        queryset = queryset.filter(status=status)
    skills, page = paginate(request, queryset, size=30)
    with_snapshot = set(
        LearningSkillSnapshot.objects.filter(skill__in=skills, status=SkillStatus.ACTIVE).values_list(
            "skill_id", flat=True
        )
    )
    cards = []
    for skill in skills:
        events = list(skill.lifecycle_events.order_by("-recorded_at_ms", "-id")[:5])
        cards.append(
            {
                "skill": skill,
                "steps": _stepper(skill.status),
                "revoked": skill.status == SkillStatus.REVOKED,
                "forward": _forward(skill.status),
                "can_change": bool(skill_services.ALLOWED_TRANSITIONS.get(skill.status, frozenset()) - {skill.status}),
                "can_rollback": skill.status == SkillStatus.REVOKED and skill.pk in with_snapshot,
                "events": [{"event": event, "when": Stamp(event.recorded_at_ms)} for event in events],
                "promoted": Stamp(skill.promoted_at_ms),
            }
        )
    pills = [{"value": value, "current": value == status, "url": f"?status={value}"} for value in SKILL_PILLS]
    return render(
        request,
        "skills.html",
        "Skills",
        tab="skills",
        cards=cards,
        pills=pills,
        page=page,
        here=request.get_full_path(),
    )


def _recent_completed_runs() -> list[dict]:
    runs = Run.objects.filter(status=RunStatus.COMPLETED).select_related("session").order_by("-id")[:10]
    return [
        {"run": run, "output": skill_services.latest_output(run) or "", "when": Stamp(run.finished_at_ms)}
        for run in runs
    ]


@require_http_methods(["GET", "POST"])
def skill_rollout(request: HttpRequest, pk: int) -> HttpResponse:
    skill = get_object_or_404(LearningSkill.objects.select_related("source_learning"), pk=pk)
    default_kind = RolloutKind.CANARY if skill.status == SkillStatus.CANARY else RolloutKind.VERIFICATION
    form = RolloutForm(
        request.POST or None,
        initial={"kind": request.GET.get("kind", default_kind), "definition_fingerprint": skill.definition_fingerprint},
    )
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            updated = skill_services.skill_record_rollout(
                skill_name=skill.skill_name,
                kind=data["kind"],
                run_id=data["run_id"].strip(),
                expected_output_contains=data["expected_output_contains"],
                definition_fingerprint=data["definition_fingerprint"] or None,
                actor=request.user,
            )
        except AppError as exc:
            form.add_error(None, exc.detail)
        else:
            last = updated.lifecycle_events.order_by("-recorded_at_ms", "-id").first()
            if last is not None and last.run_id == data["run_id"].strip() and last.success is False:
                messages.warning(
                    request,
                    f"Recorded a failed {data['kind']} check from {last.run_id} for "
                    f"{skill.skill_name}: its output did not contain the marker.",
                )
            else:
                messages.success(
                    request, f"Recorded {data['kind']} evidence from {data['run_id'].strip()} for {skill.skill_name}."
                )
            return HttpResponseRedirect(next_url(request, board_url(skill)))
    return render(
        request,
        "rollout.html",
        f"Record a check for {skill.skill_name}",
        tab="skills",
        form=form,
        skill=skill,
        steps=_stepper(skill.status),
        runs=_recent_completed_runs(),
        next=next_url(request, board_url(skill)),
        http_status=400 if form.errors else 200,
    )


def _status_request(skill: LearningSkill, status: str) -> skill_services.PromotionRequest:
    """The same definition again with a new status: how a promoted skill moves along the ladder (§4.18)."""
    runtime = skill.definition.runtime
    return skill_services.PromotionRequest(
        skill_name=skill.skill_name,
        instructions=skill.instructions,
        description=skill.description,
        when_to_use=skill.when_to_use,
        version=skill.version,
        allowed_tools=tuple(runtime.allowed_tools),
        blocked_tools=tuple(runtime.blocked_tools),
        context=runtime.context,
        agent_profile=runtime.agent_profile,
        provider=runtime.provider,
        model=runtime.model,
        fallback_model=runtime.fallback_model,
        status=status,
    )


@require_http_methods(["GET", "POST"])
def skill_status(request: HttpRequest, pk: int) -> HttpResponse:
    skill = get_object_or_404(LearningSkill.objects.select_related("source_learning"), pk=pk)
    allowed = sorted(
        skill_services.ALLOWED_TRANSITIONS.get(skill.status, frozenset()) - {skill.status},
        key=lambda step: [s.value for s in LADDER].index(step),
    )
    form = SkillStatusForm(
        request.POST or None, allowed=allowed, initial={"status": (_forward(skill.status) or allowed or [""])[0]}
    )
    if request.method == "POST" and form.is_valid():
        target = form.cleaned_data["status"]
        try:
            skill_services.skill_promote(
                learning=skill.source_learning_id, request=_status_request(skill, target), actor=request.user
            )
        except AppError as exc:
            form.add_error(None, exc.detail)
        else:
            messages.success(request, f"Moved {skill.skill_name} from {skill.status} to {target}.")
            return HttpResponseRedirect(next_url(request, board_url(skill)))
    return render(
        request,
        "skill_status.html",
        f"Move {skill.skill_name} along the rollout",
        tab="skills",
        form=form,
        skill=skill,
        steps=_stepper(skill.status),
        allowed=allowed,
        next=next_url(request, board_url(skill)),
        http_status=400 if form.errors else 200,
    )


def _skill_confirm(request: HttpRequest, pk: int, *, verb: str, call, done: str, warning: str) -> HttpResponse:
    skill = get_object_or_404(LearningSkill.objects.select_related("source_learning"), pk=pk)
    back = next_url(request, board_url(skill))
    form = ReasonForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            call(skill, form.cleaned_data["reason"] or None)
        except AppError as exc:
            form.add_error(None, exc.detail)
        else:
            messages.success(request, done.format(name=skill.skill_name))
            return HttpResponseRedirect(back)
    return render(
        request,
        "confirm.html",
        f"{verb} {skill.skill_name}?",
        tab="skills",
        form=form,
        next=back,
        verb=verb,
        subject=skill,
        content=skill.description,
        warning=warning,
        facts=[
            ("Status", skill.status),
            ("Source learning", skill.source_learning_public_id),
            ("Version", skill.version or "—"),
            ("Fingerprint", skill.definition_fingerprint),
        ],
        http_status=400 if form.errors else 200,
    )


@require_http_methods(["GET", "POST"])
def skill_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    return _skill_confirm(
        request,
        pk,
        verb="Revoke",
        call=lambda skill, reason: skill_services.skill_revoke(
            skill_name=skill.skill_name, reason=reason, actor=request.user
        ),
        done="Revoked {name}.",
        warning=REVOKE_WARNING,
    )


@require_http_methods(["GET", "POST"])
def skill_rollback(request: HttpRequest, pk: int) -> HttpResponse:
    return _skill_confirm(
        request,
        pk,
        verb="Roll back",
        call=lambda skill, reason: skill_services.skill_rollback(
            skill_name=skill.skill_name, reason=reason, actor=request.user
        ),
        done="Rolled back {name} to its newest active snapshot.",
        warning=ROLLBACK_WARNING,
    )
