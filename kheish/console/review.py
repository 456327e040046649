"""Review: the queue of pending and escalated candidates (with the automation's proposal, rule and judge
reasons) and the one-candidate workflows, publish (tier, optional supersedes; a conflict offers supersede) and
reject (confirmation page). Both call ``learnings.services``, which guards the transition and writes the audit
event. The changelist's bulk publish / reject (``kheish.console.bulk``) use the same forms and services."""

from __future__ import annotations

from typing import cast
from urllib.parse import urlencode

from django.contrib import messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from kheish.console import activity, explain
from kheish.console.common import Stamp, learning_status_line, next_url, paginate, render, run_link
from kheish.console.forms import PublishForm, ReasonForm
from learnings import screening
from learnings import services as learning_services
from learnings.models import LearningCandidate, LearningKind, PublishTier
from learnings.querysets import LearningCandidateQuerySet
from learnings.vocabulary import CAPTURED_ONLY_KINDS, kind_plural
from memory.errors import AppError

KIND_PILLS = (
    ("", "To review"),
    *((kind, kind) for kind in LearningKind.values if kind not in CAPTURED_ONLY_KINDS),
    *((kind, f"{kind_plural(kind)} (review material)") for kind in CAPTURED_ONLY_KINDS),
)
"""The default tab is the work: every kind but run summaries, which never reach a prompt and are read, not
decided on, under their own filter."""
REJECT_WARNING = "A rejected candidate is never published. Automation will not review it again."


def _candidate_row(candidate: LearningCandidate) -> dict:
    review = candidate.automation_review or {}
    judge = review.get("judge") or {}
    return {
        "candidate": candidate,
        "created": Stamp(candidate.created_at_ms),
        "run": run_link(candidate.source_run_id, (candidate.source or {}).get("run_id")),
        "proposal": review.get("action"),
        "review_mode": review.get("mode"),
        "rule": review.get("matched_rule_name"),
        "judge_action": judge.get("action"),
        "judge_reason": judge.get("reason"),
        "rule_reason": review.get("reason"),
        "prompt_note": _prompt_note(candidate),
        "automation_words": activity.review_words(review),
        "screen": _screen(candidate),
    }


def _screen(candidate: LearningCandidate) -> dict | None:
    """The poisoning screen's findings to show (issue 19.5), or None when it found nothing."""
    if not candidate.screen_flagged:
        return None
    found = candidate.screening or {}
    return {"summary": screening.summary(found), "findings": found.get("findings", [])}


def _prompt_note(candidate: LearningCandidate) -> str:
    """Whether publishing this candidate can put it in a prompt (``explain.publish_outcome``)."""
    eligible, reasons = explain.publish_outcome(candidate, PublishTier.ACTIVE)
    if eligible:
        return "Published at the active tier, it enters a prompt when the input matches it."
    return "Never reaches a prompt, whatever the tier: " + "; ".join(reasons) + "."


def review_queue(request: HttpRequest) -> HttpResponse:
    kind = request.GET.get("kind", "")
    query = request.GET.get("q", "").strip()
    queryset: QuerySet[LearningCandidate] = LearningCandidate.objects.pending_review().order_by("-id")
    if kind in LearningKind.values:
        queryset = queryset.filter(kind=kind)
    else:
        queryset = queryset.exclude(kind__in=CAPTURED_ONLY_KINDS)
    if query:
        # its methods are typed as returning a plain QuerySet
        queryset = cast(LearningCandidateQuerySet, queryset).matching_query(query)
    rows, page = paginate(request, queryset)
    pills = [
        {
            "value": value,
            "label": label,
            "current": value == kind,
            "url": "?" + urlencode([(k, v) for k, v in (("kind", value), ("q", query)) if v]),
        }
        for value, label in KIND_PILLS
    ]
    return render(
        request,
        "review.html",
        "Review queue",
        tab="review",
        rows=[_candidate_row(candidate) for candidate in rows],
        page=page,
        pills=pills,
        kind=kind,
        query=query,
        tiers=PublishTier.choices,
        automation=learning_status_line(),
        here=request.get_full_path(),
        summaries=kind == LearningKind.RUN_SUMMARY,
        summaries_waiting=LearningCandidate.objects.pending_review().filter(kind=LearningKind.RUN_SUMMARY).count(),
    )


@require_http_methods(["GET", "POST"])
def candidate_publish(request: HttpRequest, pk: int) -> HttpResponse:
    candidate = get_object_or_404(LearningCandidate, pk=pk)
    form = PublishForm(
        request.POST or None, initial={"supersedes": request.GET.get("supersedes", "")}, candidate=candidate
    )
    conflict = None
    if request.method == "POST" and form.is_valid():
        tier = form.cleaned_data["publish_tier"]
        try:
            learning = learning_services.candidate_publish(
                candidate=candidate.pk,
                actor=request.user,
                options=learning_services.PublishOptions.manual(
                    publish_tier=tier, supersedes=form.cleaned_data["supersedes"].strip() or None
                ),
            )
        except learning_services.LearningConflict as exc:
            form.add_error(None, exc.detail)
            conflict = exc.existing
        except AppError as exc:
            form.add_error(None, exc.detail)
        else:
            messages.success(request, f"Published {candidate.public_id} as {learning.public_id} ({learning.status}).")
            return HttpResponseRedirect(next_url(request, reverse("console:review")))
    return render(
        request,
        "publish.html",
        f"Publish {candidate.public_id}",
        tab="review",
        row=_candidate_row(candidate),
        form=form,
        conflict=conflict,
        next=next_url(request, reverse("console:review")),
        http_status=400 if form.errors else 200,
    )


@require_http_methods(["GET", "POST"])
def candidate_reject(request: HttpRequest, pk: int) -> HttpResponse:
    candidate = get_object_or_404(LearningCandidate, pk=pk)
    back = next_url(request, reverse("console:review"))
    form = ReasonForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            learning_services.candidate_reject(
                candidate=candidate.pk, actor=request.user, reason=form.cleaned_data["reason"]
            )
        except AppError as exc:
            form.add_error(None, exc.detail)
        else:
            messages.success(request, f"Rejected {candidate.public_id}.")
            return HttpResponseRedirect(back)
    return render(
        request,
        "confirm.html",
        f"Reject {candidate.public_id}?",
        tab="review",
        form=form,
        next=back,
        verb="Reject",
        subject=candidate,
        content=candidate.content,
        facts=[
            ("Kind", candidate.kind),
            ("State", candidate.state),
            ("Scope", candidate.scope_key),
            ("Confidence", candidate.confidence),
            ("Origin", candidate.origin),
        ],
        warning=REJECT_WARNING,
        http_status=400 if form.errors else 200,
    )
