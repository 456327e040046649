"""Browsing promoted skills in the admin: the changelist (ladder stepper, counters, fingerprint, "in the runtime
catalog" filter) and the read-only record with its lifecycle events and history snapshots. Workflows are not
here: the Memory console (``kheish/console/skills.py``, ``learnings.py``) owns rollout checks, ladder moves,
revoke, rollback and promotion, and ``kheish/admin.py`` adds the bulk revoke and the links to those pages."""

from __future__ import annotations

from django.contrib import admin
from django.template.defaultfilters import pluralize
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from memory.admin_display import json_column, ms_column
from skills.models import LADDER, LearningSkill, SkillStatus


def stepper_html(status: str):
    """draft → verified → canary → active, the current step highlighted; a single red badge when revoked."""
    if status == SkillStatus.REVOKED:
        return mark_safe(  # a constant
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
        "updated",
    ]
    list_filter = ["status", MountedFilter, "verification_status"]
    list_select_related = ["source_learning"]
    search_fields = ["skill_name", "description"]
    show_full_result_count = False
    ordering = ["skill_name"]
    actions: list = []  # bulk revoke: kheish/admin.py
    readonly_fields = [
        "skill_name",
        "stepper",
        "source_learning_label",
        "source_scope",
        "description",
        "when_to_use",
        "version",
        "instructions",
        "runtime_json",
        "definition_fingerprint",
        "verification_status",
        "counters",
        "verifier_run_ids_json",
        "evidence_refs_json",
        "skill_path",
        "skill_root",
        "digest",
        "promoted",
        "updated",
        "revoked",
        "revoked_reason",
    ]
    fields = tuple(readonly_fields)
    promoted = ms_column("promoted_at_ms", "Promoted")
    updated = ms_column("updated_at_ms", "Updated")
    revoked = ms_column("revoked_at_ms", "Revoked")
    runtime_json = json_column("runtime", "Runtime")
    verifier_run_ids_json = json_column("verifier_run_ids", "Verifier run ids")
    evidence_refs_json = json_column("evidence_refs", "Evidence")

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
            f"{obj.successful_run_count} run{pluralize(obj.successful_run_count)} · "
            f"{obj.distinct_session_count} session{pluralize(obj.distinct_session_count)} · "
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
