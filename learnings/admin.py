"""Browsing the learning plane in the admin: the candidate and learning changelists with their named filters
(awaiting review, scope, matched rule, prompt visibility) and read-only records. Workflows are not here: the
Memory console (``kheish/console/``) owns review, governance and the learning policy editor, and
``kheish/admin.py`` adds the changelists' bulk actions (publish, reject, revoke, supersede), which use the
console's forms and ``learnings.services``."""

from __future__ import annotations

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from learnings import screening
from learnings.models import (
    CandidateState,
    Learning,
    LearningCandidate,
    ScopeKind,
)
from memory.admin_display import json_column, json_pre, ms_column, plain_reason, readable_review


class ReadOnlyModelAdmin(admin.ModelAdmin):
    show_full_result_count = False

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


# ---- list filters -----------------------------------------------------------------------------------------


class CandidateStateFilter(admin.SimpleListFilter):
    """The review queue by default: pending and escalated candidates."""

    title = "state"
    parameter_name = "state"
    QUEUE = "queue"

    def lookups(self, request, model_admin):
        return [
            (self.QUEUE, "Awaiting review (pending + escalated, run summaries apart)"),
            *CandidateState.choices,
            ("all", "All"),
        ]

    def value(self):
        return super().value() or self.QUEUE

    def choices(self, changelist):
        for lookup, title in self.lookup_choices:
            yield {
                "selected": self.value() == str(lookup),
                "display": title,
                "query_string": changelist.get_query_string({self.parameter_name: lookup}),
            }

    def queryset(self, request, queryset):
        value = self.value()
        if value == self.QUEUE:
            return queryset.awaiting_review()
        if value in CandidateState.values:
            return queryset.filter(state=value)
        return queryset


class ScopeKindFilter(admin.SimpleListFilter):
    title = "scope"
    parameter_name = "scope_kind"

    def lookups(self, request, model_admin):
        return ScopeKind.choices

    def queryset(self, request, queryset):
        return queryset.filter(scope_kind=self.value()) if self.value() else queryset


class MatchedRuleFilter(admin.SimpleListFilter):
    title = "matched rule"
    parameter_name = "matched_rule"

    def lookups(self, request, model_admin):
        names = (
            LearningCandidate.objects.exclude(matched_rule_name="")
            .order_by("matched_rule_name")
            .values_list("matched_rule_name", flat=True)
            .distinct()[:50]
        )
        return [("-", "No rule matched"), *((name, name) for name in names)]

    def queryset(self, request, queryset):
        if not self.value():
            return queryset
        return queryset.filter(matched_rule_name="" if self.value() == "-" else self.value())


class PromptVisibleFilter(admin.SimpleListFilter):
    title = "prompt visibility"
    parameter_name = "prompt_visible"

    def lookups(self, request, model_admin):
        return [("yes", "Eligible for prompts"), ("no", "Not eligible")]

    def queryset(self, request, queryset):
        eligible = Learning.objects.live().prompt_visible().prompt_kinds().unshadowed().values("pk")
        if self.value() == "yes":
            return queryset.filter(pk__in=eligible)
        if self.value() == "no":
            return queryset.exclude(pk__in=eligible)
        return queryset


class ScreenFlaggedFilter(admin.SimpleListFilter):
    title = "poisoning screen"
    parameter_name = "screen"

    def lookups(self, request, model_admin):
        return [("flagged", "Flagged"), ("clear", "Not flagged")]

    def queryset(self, request, queryset):
        if self.value() == "flagged":
            return queryset.filter(screen_flagged=True)
        if self.value() == "clear":
            return queryset.filter(screen_flagged=False)
        return queryset


# ---- candidates -------------------------------------------------------------------------------------------


@admin.register(LearningCandidate)
class LearningCandidateAdmin(ReadOnlyModelAdmin):
    list_display = [
        "public_id",
        "kind",
        "state",
        "screen",
        "scope_key",
        "confidence",
        "origin",
        "review",
        "source_run_link",
        "created",
    ]
    list_filter = [CandidateStateFilter, "kind", "origin", ScopeKindFilter, MatchedRuleFilter, ScreenFlaggedFilter]
    list_select_related = ["published_learning"]
    search_fields = ["content", "scope_key"]
    ordering = ["-id"]
    readonly_fields = [
        "public_id",
        "origin",
        "state",
        "screen_findings",
        "scope_key",
        "kind",
        "sensitivity",
        "content",
        "confidence",
        "source_json",
        "evidence_json",
        "created",
        "expires",
        "review_json",
        "published_learning",
    ]
    fields = tuple(readonly_fields)
    actions: list = []  # bulk actions: kheish/admin.py
    created = ms_column("created_at_ms", "Created")
    expires = ms_column("expires_at_ms", "Expires")
    source_json = json_column("source", "Source")
    evidence_json = json_column("evidence_refs", "Evidence")

    @admin.display(description="Automated review")
    def review_json(self, obj):
        return json_pre(readable_review(obj.automation_review))

    @admin.display(description="Candidate", ordering="id")
    def public_id(self, obj):
        return obj.public_id

    @admin.display(description="Screen", ordering="screen_flagged")
    def screen(self, obj):
        if not obj.screen_flagged:
            return "—"
        return format_html('<span class="badge flagged" title="{}">⚠ flagged</span>', screening.summary(obj.screening))

    @admin.display(description="Poisoning screen")
    def screen_findings(self, obj):
        """What the memory-poisoning screen found when the candidate was written (issue 19.5)."""
        if obj.screening is None:
            return "not screened"
        if not obj.screen_flagged:
            return "nothing found"
        items = format_html_join(
            "",
            "<li><strong>{}</strong> ({}): “{}”</li>",
            (
                (f.get("category", "").replace("_", " "), f.get("rule", ""), f.get("excerpt", ""))
                for f in obj.screening.get("findings", [])
            ),
        )
        return format_html(
            '<div class="screen-findings"><p><strong>⚠ Flagged</strong>: automation will not publish this '
            "candidate; publish it only if the text is memory, not instructions to the model.</p><ul>{}</ul></div>",
            items,
        )

    @admin.display(description="Judge / rule reason")
    def review(self, obj):
        return plain_reason(obj.review_reason) or "—"

    @admin.display(description="Source run")
    def source_run_link(self, obj):
        if not obj.source_run_id:
            return (obj.source or {}).get("run_id") or "—"
        url = reverse("admin:memory_run_change", args=[obj.source_run_id])
        return format_html('<a href="{}">run-{}</a>', url, obj.source_run_id)


# ---- learnings --------------------------------------------------------------------------------------------


@admin.register(Learning)
class LearningAdmin(ReadOnlyModelAdmin):
    list_display = [
        "public_id",
        "kind",
        "status",
        "publish_tier",
        "verification_status",
        "decision",
        "scope_key",
        "excerpt",
        "published",
    ]
    list_filter = [
        "status",
        "publish_tier",
        "verification_status",
        "policy_decision",
        "kind",
        ScopeKindFilter,
        PromptVisibleFilter,
    ]
    search_fields = ["content", "scope_key"]
    ordering = ["-id"]
    readonly_fields = [
        "public_id",
        "status",
        "publish_tier",
        "verification_status",
        "policy_decision",
        "policy_actor",
        "scope_key",
        "kind",
        "sensitivity",
        "content",
        "confidence",
        "source_candidate",
        "created",
        "published",
        "expires",
        "supersedes",
        "superseded_by",
        "revoked",
        "revoked_reason",
        "source_json",
        "evidence_json",
    ]
    fields = tuple(readonly_fields)
    actions: list = []  # bulk actions: kheish/admin.py
    created = ms_column("created_at_ms", "Created")
    published = ms_column("published_at_ms", "Published")
    expires = ms_column("expires_at_ms", "Expires")
    revoked = ms_column("revoked_at_ms", "Revoked")
    source_json = json_column("source", "Source")
    evidence_json = json_column("evidence_refs", "Evidence")

    @admin.display(description="Learning", ordering="id")
    def public_id(self, obj):
        return obj.public_id

    @admin.display(description="Decision")
    def decision(self, obj):
        return {"automatic": "auto-published", "manual": "published manually"}.get(
            obj.policy_decision or "", obj.policy_decision or "—"
        )

    @admin.display(description="Content")
    def excerpt(self, obj):
        return obj.content[:120]
