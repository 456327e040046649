"""Operator console for promoted skills: the ladder position, counters, fingerprint, lifecycle events and
history of each record; per-object workflow views (record rollout evidence, revoke, rollback) and the
"promote to skill" view for eligible procedure learnings. Every change goes through ``skills.services``;
revoke and rollback (destructive) sit behind server-rendered confirmation pages."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import Exists, OuterRef
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from learnings.models import Learning, LearningKind, LearningStatus, PublishTier, ScopeKind
from memory.errors import AppError
from skills import services
from skills.fingerprint import CONTEXT_FORK
from skills.models import LADDER, LearningSkill, RolloutKind, SkillStatus

MAX_TOOLS_FIELD = 4000


def stepper_html(status: str):
    """draft → verified → canary → active, the current step highlighted; a single red badge when revoked."""
    if status == SkillStatus.REVOKED:
        return mark_safe(  # noqa: S308 - a constant
            '<span class="skill-badge skill-revoked" style="background:#ba2121;color:#fff;padding:2px 8px;'
            'border-radius:8px">revoked</span>'
        )
    position = [step.value for step in LADDER].index(status) if status in LADDER else -1
    parts = []
    for index, step in enumerate(LADDER):
        if index < position:
            style = "color:#417690"
        elif index == position:
            style = "background:#417690;color:#fff;padding:2px 8px;border-radius:8px;font-weight:bold"
        else:
            style = "color:#999"
        parts.append((step.value, style))
    return format_html(
        '<span class="skill-stepper" data-status="{}">{}</span>',
        status,
        format_html_join(" → ", '<span class="skill-step" data-step="{0}" style="{1}">{0}</span>', parts),
    )


class MountedFilter(admin.SimpleListFilter):
    """Which records are in the runtime catalog (only active ones are mounted)."""

    title = "runtime catalog"
    parameter_name = "mounted"

    def lookups(self, request, model_admin):
        return [("yes", "mounted (active)"), ("no", "not mounted")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(status=SkillStatus.ACTIVE)
        if self.value() == "no":
            return queryset.exclude(status=SkillStatus.ACTIVE)
        return queryset


class RolloutForm(forms.Form):
    kind = forms.ChoiceField(choices=RolloutKind.choices)
    run_id = forms.CharField(max_length=40, help_text="A completed run of this service, e.g. run-12.")
    expected_output_contains = forms.CharField(
        max_length=2000, label="Expected output marker", help_text="The run's latest output must contain it."
    )
    definition_fingerprint = forms.CharField(
        max_length=64,
        required=False,
        help_text="Guards the evidence: it is refused if the definition changed since this page was opened.",
    )


class ReasonForm(forms.Form):
    reason = forms.CharField(
        required=False, max_length=services.MAX_REASON_CHARS, widget=forms.Textarea(attrs={"rows": 3})
    )


def _tools(value: str) -> list[str]:
    return [item.strip() for item in value.replace("\n", ",").split(",") if item.strip()]


class PromoteForm(forms.Form):
    skill_name = forms.CharField(
        max_length=200, help_text="ASCII letters, digits, ':', '_' and '-' only; at most 64 characters."
    )
    description = forms.CharField(max_length=1024, required=False, help_text="One line; empty uses the default.")
    when_to_use = forms.CharField(max_length=1024, required=False)
    version = forms.CharField(max_length=64, required=False)
    instructions = forms.CharField(widget=forms.Textarea(attrs={"rows": 10, "cols": 90}), max_length=20_000)
    allowed_tools = forms.CharField(max_length=MAX_TOOLS_FIELD, required=False, help_text="Comma-separated.")
    blocked_tools = forms.CharField(max_length=MAX_TOOLS_FIELD, required=False, help_text="Comma-separated.")


def eligible_learnings():
    """Active, active-tier, workspace procedures without a live promoted skill."""
    live = LearningSkill.objects.filter(source_learning=OuterRef("pk")).exclude(status=SkillStatus.REVOKED)
    return (
        Learning.objects.filter(
            kind=LearningKind.PROCEDURE,
            status=LearningStatus.ACTIVE,
            publish_tier=PublishTier.ACTIVE,
            scope_kind=ScopeKind.WORKSPACE,
        )
        .filter(~Exists(live))
        .order_by("-id")
    )


@admin.register(LearningSkill)
class LearningSkillAdmin(admin.ModelAdmin):
    list_display = [
        "skill_name",
        "stepper",
        "source_learning_label",
        "verification_status",
        "counters",
        "short_fingerprint",
        "version",
        "updated_at_ms",
    ]
    list_filter = ["status", MountedFilter, "verification_status"]
    list_select_related = ["source_learning"]
    search_fields = ["skill_name", "description"]
    show_full_result_count = False
    ordering = ["skill_name"]
    actions = ["revoke_selected"]
    readonly_fields = [
        "skill_name",
        "stepper",
        "source_learning_label",
        "source_scope",
        "description",
        "when_to_use",
        "version",
        "instructions",
        "runtime",
        "definition_fingerprint",
        "verification_status",
        "counters",
        "verifier_run_ids",
        "evidence_refs",
        "skill_path",
        "skill_root",
        "digest",
        "promoted_at_ms",
        "updated_at_ms",
        "revoked_at_ms",
        "revoked_reason",
    ]
    fields = readonly_fields
    change_form_template = "admin/skills/learningskill/change_form.html"
    change_list_template = "admin/skills/learningskill/change_list.html"

    # ---- read-only record -----------------------------------------------------------------------------

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="Rollout", ordering="status")
    def stepper(self, obj):
        return stepper_html(obj.status)

    @admin.display(description="Source learning", ordering="source_learning_id")
    def source_learning_label(self, obj):
        return obj.source_learning_public_id

    @admin.display(description="Runs · sessions · canary ✓/✗")
    def counters(self, obj):
        return (
            f"{obj.successful_run_count} runs · {obj.distinct_session_count} sessions · "
            f"canary {obj.canary_success_count}/{obj.canary_failure_count}"
        )

    @admin.display(description="Fingerprint")
    def short_fingerprint(self, obj):
        return format_html('<code title="{}">{}…</code>', obj.definition_fingerprint, obj.definition_fingerprint[:12])

    def change_view(self, request, object_id, form_url="", extra_context=None):
        skill = self.get_object(request, object_id)
        extra_context = extra_context or {}
        if skill is not None:
            extra_context.update(
                lifecycle_events=skill.lifecycle_events.order_by("-recorded_at_ms", "-id")[:100],
                history=skill.history.order_by("-recorded_at_ms", "-id")[:50],
                can_rollback=skill.history.filter(status=SkillStatus.ACTIVE).exists(),
                skill=skill,
            )
        return super().change_view(request, object_id, form_url, extra_context)

    # ---- workflow views -------------------------------------------------------------------------------

    def get_urls(self):
        wrap = self.admin_site.admin_view
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path("promote/", wrap(self.promote_list_view), name=f"{prefix}_promote_list"),
            path("promote/<int:learning_pk>/", wrap(self.promote_view), name=f"{prefix}_promote"),
            path("<path:object_id>/rollout/", wrap(self.rollout_view), name=f"{prefix}_rollout"),
            path("<path:object_id>/revoke/", wrap(self.revoke_view), name=f"{prefix}_revoke"),
            path("<path:object_id>/rollback/", wrap(self.rollback_view), name=f"{prefix}_rollback"),
            *super().get_urls(),
        ]

    def _change_url(self, skill: LearningSkill) -> str:
        return reverse("admin:skills_learningskill_change", args=[skill.pk])

    def _skill_or_404(self, request, object_id) -> LearningSkill:
        if not self.has_view_permission(request):
            raise PermissionDenied
        return get_object_or_404(LearningSkill.objects.select_related("source_learning"), pk=object_id)

    def _render(self, request, template: str, **context):
        return TemplateResponse(
            request,
            f"admin/skills/learningskill/{template}",
            {**self.admin_site.each_context(request), "opts": self.opts, **context},
        )

    def rollout_view(self, request, object_id):
        skill = self._skill_or_404(request, object_id)
        form = RolloutForm(
            request.POST or None,
            initial={"definition_fingerprint": skill.definition_fingerprint, "kind": _default_kind(skill)},
        )
        if request.method == "POST" and form.is_valid():
            try:
                services.skill_record_rollout(
                    skill_name=skill.skill_name,
                    kind=form.cleaned_data["kind"],
                    run_id=form.cleaned_data["run_id"].strip(),
                    expected_output_contains=form.cleaned_data["expected_output_contains"],
                    definition_fingerprint=form.cleaned_data["definition_fingerprint"] or None,
                    actor=request.user,
                )
            except AppError as exc:
                form.add_error(None, exc.detail)
            else:
                self.message_user(request, f"Recorded {form.cleaned_data['kind']} evidence for {skill.skill_name}.")
                return HttpResponseRedirect(self._change_url(skill))
        return self._render(
            request,
            "rollout_form.html",
            title=f"Record rollout evidence for {skill.skill_name}",
            skill=skill,
            form=form,
        )

    def revoke_view(self, request, object_id):
        skill = self._skill_or_404(request, object_id)
        return self._confirm(
            request,
            skill,
            verb="revoke",
            title=f"Revoke promoted skill {skill.skill_name}?",
            call=lambda reason: services.skill_revoke(skill_name=skill.skill_name, reason=reason, actor=request.user),
            done=f"Revoked {skill.skill_name}.",
        )

    def rollback_view(self, request, object_id):
        skill = self._skill_or_404(request, object_id)
        return self._confirm(
            request,
            skill,
            verb="rollback",
            title=f"Roll back promoted skill {skill.skill_name}?",
            call=lambda reason: services.skill_rollback(skill_name=skill.skill_name, reason=reason, actor=request.user),
            done=f"Rolled back {skill.skill_name} to its newest active snapshot.",
        )

    def _confirm(self, request, skill, *, verb: str, title: str, call, done: str):
        form = ReasonForm(request.POST or None)
        if request.method == "POST" and request.POST.get("confirm") == "yes" and form.is_valid():
            try:
                call(form.cleaned_data["reason"] or None)
            except AppError as exc:
                form.add_error(None, exc.detail)
            else:
                self.message_user(request, done)
                return HttpResponseRedirect(self._change_url(skill))
        return self._render(request, "confirm_action.html", title=title, skill=skill, form=form, verb=verb)

    @admin.action(description="Revoke selected promoted skills")
    def revoke_selected(self, request, queryset):
        """Bulk revoke behind a confirmation page (in the manner of ``delete_selected``)."""
        form = ReasonForm(request.POST if request.POST.get("confirm") == "yes" else None)
        if request.POST.get("confirm") == "yes" and form.is_valid():
            done, failed = [], []
            for skill in queryset.order_by("skill_name"):
                try:
                    services.skill_revoke(
                        skill_name=skill.skill_name, reason=form.cleaned_data["reason"] or None, actor=request.user
                    )
                    done.append(skill.skill_name)
                except AppError as exc:
                    failed.append(f"{skill.skill_name}: {exc.detail}")
            if done:
                self.message_user(request, f"Revoked {len(done)} skill(s): {', '.join(done)}.")
            for failure in failed:
                self.message_user(request, f"Not revoked — {failure}", level=messages.ERROR)
            return None
        return self._render(
            request,
            "bulk_revoke_confirmation.html",
            title="Revoke promoted skills?",
            skills=queryset.order_by("skill_name"),
            form=form,
            action_checkbox_name=helpers.ACTION_CHECKBOX_NAME,
        )

    # ---- promote to skill -----------------------------------------------------------------------------

    def promote_list_view(self, request):
        if not self.has_view_permission(request):
            raise PermissionDenied
        return self._render(
            request,
            "promote_list.html",
            title="Promote a procedure learning to a skill",
            learnings=eligible_learnings()[:200],
        )

    def promote_view(self, request, learning_pk: int):
        if not self.has_view_permission(request):
            raise PermissionDenied
        learning = get_object_or_404(Learning, pk=learning_pk)
        form = PromoteForm(request.POST or None, initial={"instructions": learning.content})
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            try:
                skill = services.skill_promote(
                    learning=learning,
                    request=services.PromotionRequest(
                        skill_name=data["skill_name"],
                        instructions=data["instructions"],
                        description=data["description"] or None,
                        when_to_use=data["when_to_use"] or None,
                        version=data["version"] or None,
                        allowed_tools=tuple(_tools(data["allowed_tools"])),
                        blocked_tools=tuple(_tools(data["blocked_tools"])),
                        context=CONTEXT_FORK,
                    ),
                    actor=request.user,
                )
            except AppError as exc:
                form.add_error(None, exc.detail)
            else:
                self.message_user(request, f"Promoted {learning.public_id} as draft skill {skill.skill_name}.")
                return HttpResponseRedirect(self._change_url(skill))
        return self._render(
            request,
            "promote_form.html",
            title=f"Promote {learning.public_id} to a skill",
            learning=learning,
            eligible=services.is_promotable(learning),
            form=form,
        )


def _default_kind(skill: LearningSkill) -> str:
    return RolloutKind.CANARY if skill.status == SkillStatus.CANARY else RolloutKind.VERIFICATION
