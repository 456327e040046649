"""The changelists' bulk actions, mixed into the ModelAdmins by ``kheish/admin.py``: publish and reject
candidates, revoke learnings, revoke promoted skills, and "supersede the selected learning" (which opens the
console's supersede page). They use the console's forms (``PublishForm``, ``ReasonForm``) and call the same
service functions row by row as the console's one-object pages, so every row is guarded and audited; each
reports what succeeded and why each failure failed. Reject and revoke show a server-rendered confirmation page
first, in the manner of ``delete_selected`` (``post=yes`` marks the second step)."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.http import HttpResponseRedirect
from django.template.defaultfilters import pluralize
from django.template.response import TemplateResponse
from django.urls import reverse

from kheish.console.forms import PublishForm, ReasonForm
from kheish.console.review import REJECT_WARNING
from kheish.console.skills import REVOKE_WARNING as SKILL_REVOKE_WARNING
from learnings import services as learning_services
from memory.errors import AppError
from skills import services as skill_services

LEARNING_REVOKE_WARNING = "Revoked learnings never reach prompts again; a skill promoted from one is revoked with it."


def _second_step(request) -> bool:
    return "post" in request.POST


def _page(
    modeladmin, request, queryset, *, action: str, title: str, form, template: str, rows, extra: dict | None = None
) -> TemplateResponse:
    """The intermediate page: what is selected (``rows`` of (label, detail)), the form, the hidden selection."""
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": title,
        "opts": modeladmin.model._meta,
        "action": action,
        "form": form,
        "rows": rows,
        "selected": [obj.pk for obj in queryset],
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        **(extra or {}),
    }
    return TemplateResponse(request, f"admin/console/{template}", context)


def _run_each(
    modeladmin, request, items, verb: str, func, *, label=lambda item: item.public_id, noun: str = ""
) -> None:
    """Call a service per row; report how many succeeded and why each failure failed."""
    done, failed = [], []
    for item in items:
        try:
            func(item)
        except AppError as exc:
            failed.append(f"{label(item)}: {exc.detail}")
        else:
            done.append(label(item))
    if done:
        noun = f"{noun}{pluralize(len(done))}" if noun else ""
        modeladmin.message_user(request, f"{verb} {len(done)}{noun}: {', '.join(done)}.", messages.SUCCESS)
    if failed:
        modeladmin.message_user(request, f"{len(failed)} failed — " + "; ".join(failed), messages.ERROR)


def _changelist_filtered(request) -> bool:
    """Whether the changelist the action came from was narrowed (a search or a list filter; not paging/order)."""
    return any(value.strip() for key, value in request.GET.items() if key not in ("o", "p", "_changelist_filters"))


def _learning_rows(queryset):
    return [(obj.public_id, f"({obj.kind}, {obj.scope_key}): {obj.content[:160]}") for obj in queryset]


class CandidateActions:
    """Bulk publish (asks for a tier) and bulk reject (confirmation page) on the candidate changelist."""

    @admin.action(description="Publish selected candidates…")
    def publish_selected(self, request, queryset):
        form = PublishForm(request.POST if _second_step(request) else None)
        if _second_step(request) and form.is_valid():
            tier = form.cleaned_data["publish_tier"]
            _run_each(
                self,
                request,
                queryset.order_by("id"),
                f"Published ({tier})",
                lambda c: learning_services.candidate_publish(
                    candidate=c, actor=request.user, options=learning_services.PublishOptions.manual(publish_tier=tier)
                ),
            )
            return None
        return _page(
            self,
            request,
            queryset,
            action="publish_selected",
            title="Publish candidates",
            form=form,
            template="bulk_publish.html",
            rows=None,
            extra={"objects": list(queryset.order_by("id"))},
        )

    @admin.action(description="Reject selected candidates…")
    def reject_selected(self, request, queryset):
        form = ReasonForm(request.POST if _second_step(request) else None)
        if _second_step(request) and form.is_valid():
            reason = form.cleaned_data["reason"]
            _run_each(
                self,
                request,
                queryset.order_by("id"),
                "Rejected",
                lambda c: learning_services.candidate_reject(candidate=c, actor=request.user, reason=reason),
            )
            return None
        return _page(
            self,
            request,
            queryset,
            action="reject_selected",
            title="Reject candidates",
            form=form,
            template="bulk_confirm.html",
            rows=_learning_rows(queryset.order_by("id")),
            extra={"verb": "Reject", "warning": REJECT_WARNING},
        )


class LearningActions:
    """Bulk revoke (confirmation page) and "supersede the selected learning" on the learning changelist."""

    @admin.action(description="Revoke selected learnings…")
    def revoke_selected(self, request, queryset):
        if request.POST.get("select_across") == "1" and not _changelist_filtered(request):
            self.message_user(
                request,
                "Revoking every learning needs a filter or search first (issue 14.4); "
                "select the learnings to revoke, or filter the list.",
                messages.ERROR,
            )
            return None
        form = ReasonForm(request.POST if _second_step(request) else None)
        if _second_step(request) and form.is_valid():
            reason = form.cleaned_data["reason"] or None
            _run_each(
                self,
                request,
                queryset.order_by("id"),
                "Revoked",
                lambda item: learning_services.learning_revoke(learning=item, actor=request.user, reason=reason),
            )
            return None
        return _page(
            self,
            request,
            queryset,
            action="revoke_selected",
            title="Revoke learnings",
            form=form,
            template="bulk_confirm.html",
            rows=_learning_rows(queryset.order_by("id")),
            extra={"verb": "Revoke", "warning": LEARNING_REVOKE_WARNING},
        )

    @admin.action(description="Supersede the selected learning…")
    def supersede_selected(self, request, queryset):
        """Opens the console's supersede page for the one selected learning; it returns to this changelist."""
        items = list(queryset[:2])
        if len(items) != 1:
            self.message_user(request, "Select exactly one learning to supersede.", messages.ERROR)
            return None
        target = reverse("console:learning-supersede", args=[items[0].pk])
        back = reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist")
        return HttpResponseRedirect(f"{target}?{urlencode({'next': back})}")


class SkillActions:
    """Bulk revoke (confirmation page) on the promoted-skill changelist."""

    @admin.action(description="Revoke selected promoted skills…")
    def revoke_selected(self, request, queryset):
        skills = queryset.order_by("skill_name")
        form = ReasonForm(request.POST if _second_step(request) else None)
        if _second_step(request) and form.is_valid():
            reason = form.cleaned_data["reason"] or None
            _run_each(
                self,
                request,
                skills,
                "Revoked",
                lambda skill: skill_services.skill_revoke(
                    skill_name=skill.skill_name, reason=reason, actor=request.user
                ),
                label=lambda skill: skill.skill_name,
                noun=" skill",
            )
            return None
        return _page(
            self,
            request,
            skills,
            action="revoke_selected",
            title="Revoke promoted skills",
            form=form,
            template="bulk_confirm.html",
            rows=[(s.skill_name, f"({s.status})") for s in skills],
            extra={"verb": "Revoke", "warning": SKILL_REVOKE_WARNING},
        )
