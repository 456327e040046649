"""Operator console for the learning plane: the candidate review queue, learnings governance and the learning
policy editor. Status fields are read-only; every action goes through ``learnings.services`` (or
``learnings.policy_store``) row by row and reports successes and failures. Publish asks for a tier;
reject, revoke and supersede go through a server-rendered confirmation page."""

from __future__ import annotations

import json

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from learnings import policy_store, services
from learnings.models import (
    CandidateState,
    Learning,
    LearningCandidate,
    LearningKind,
    PublishTier,
    ScopeKind,
)
from learnings.policy import ACTIONS, MODES
from memory.errors import AppError


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
        return [(self.QUEUE, "Awaiting review (pending + escalated)"), *CandidateState.choices, ("all", "All")]

    def value(self):
        return super().value() or self.QUEUE

    def choices(self, changelist):
        for lookup, title in self.lookup_choices:
            yield {"selected": self.value() == str(lookup), "display": title,
                   "query_string": changelist.get_query_string({self.parameter_name: lookup})}

    def queryset(self, request, queryset):
        value = self.value()
        if value == self.QUEUE:
            return queryset.pending_review()
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
        names = (LearningCandidate.objects.exclude(matched_rule_name="").order_by("matched_rule_name")
                 .values_list("matched_rule_name", flat=True).distinct()[:50])
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


# ---- forms ------------------------------------------------------------------------------------------------

class PublishForm(forms.Form):
    publish_tier = forms.ChoiceField(choices=PublishTier.choices, initial=PublishTier.ACTIVE,
                                     widget=forms.RadioSelect, label="Publish tier")


class ReasonForm(forms.Form):
    reason = forms.CharField(required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 3}))


class SupersedeForm(forms.Form):
    content = forms.CharField(max_length=100_000, widget=forms.Textarea(attrs={"rows": 4, "cols": 80}),
                              strip=False, label="New content")
    confidence = forms.IntegerField(required=False, label="Confidence (blank keeps the current one)")


class LearningPolicyForm(forms.Form):
    """The policy dialog: mode, capture, judge; publication (rules, default action, quarantine, api-origin
    gate) as JSON. Validation is ``LearningPolicy``'s, with its literal messages."""

    mode = forms.ChoiceField(choices=[(m, m) for m in MODES])
    run_summary_candidates = forms.BooleanField(required=False, label="Capture run_summary candidates")
    semantic_enabled = forms.BooleanField(required=False, label="Semantic capture")
    max_candidates_per_run = forms.IntegerField(min_value=0, max_value=1000, label="Max candidates per run")
    semantic_timeout_ms = forms.IntegerField(required=False, min_value=0, label="Extractor timeout (ms)")
    judge_enabled = forms.BooleanField(required=False, label="Model judge")
    judge_timeout_ms = forms.IntegerField(required=False, min_value=0, label="Judge timeout (ms)")
    publication = forms.CharField(widget=forms.Textarea(attrs={"rows": 14, "cols": 90}),
                                  help_text="JSON: default_action, allow_api_origin_active_publication, "
                                            "quarantined_rule_names, rules")
    expected_revision = forms.IntegerField(widget=forms.HiddenInput, min_value=0)

    @classmethod
    def initial_for(cls, policy, revision: int) -> dict:
        data = policy.to_dict()
        semantic = data["capture"]["semantic_candidates"]
        return {"mode": data["mode"], "run_summary_candidates": data["capture"]["run_summary_candidates"],
                "semantic_enabled": semantic["enabled"], "max_candidates_per_run": semantic["max_candidates_per_run"],
                "semantic_timeout_ms": semantic["timeout_ms"], "judge_enabled": data["judge"]["enabled"],
                "judge_timeout_ms": data["judge"]["timeout_ms"],
                "publication": json.dumps(data["publication"], indent=2), "expected_revision": revision}

    def clean_publication(self):
        try:
            value = json.loads(self.cleaned_data["publication"])
        except ValueError as exc:
            raise forms.ValidationError(f"publication is not valid JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise forms.ValidationError("publication must be a JSON object")
        return value

    def request_body(self, current) -> dict:
        """The ``POST /v1/runtime/learning-policy`` body for this form (model overrides kept as they are)."""
        data = self.cleaned_data
        base = current.to_dict()
        semantic = {**base["capture"]["semantic_candidates"], "enabled": data["semantic_enabled"],
                    "max_candidates_per_run": data["max_candidates_per_run"],
                    "timeout_ms": data["semantic_timeout_ms"]}
        policy = {
            "mode": data["mode"],
            "capture": {"run_summary_candidates": data["run_summary_candidates"], "semantic_candidates": semantic},
            "publication": data["publication"],
            "judge": {**base["judge"], "enabled": data["judge_enabled"], "timeout_ms": data["judge_timeout_ms"]},
        }
        return {"policy": policy, "expected_revision": data["expected_revision"]}


# ---- action plumbing --------------------------------------------------------------------------------------

def _intermediate(modeladmin, request, queryset, *, action: str, title: str, form, template: str,
                  objects=None, extra: dict | None = None) -> TemplateResponse:
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": title, "opts": modeladmin.model._meta, "action": action, "form": form,
        "objects": list(objects if objects is not None else queryset),
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME, **(extra or {}),
    }
    return TemplateResponse(request, template, context)


def _run_each(modeladmin, request, items, verb: str, func) -> None:
    """Call a service per row; report how many succeeded and why each failure failed."""
    done, failed = [], []
    for item in items:
        try:
            func(item)
        except AppError as exc:
            failed.append(f"{item.public_id}: {exc.detail}")
        else:
            done.append(item.public_id)
    if done:
        modeladmin.message_user(request, f"{verb} {len(done)}: {', '.join(done)}.", messages.SUCCESS)
    if failed:
        modeladmin.message_user(request, f"{len(failed)} failed — " + "; ".join(failed), messages.ERROR)


# ---- candidates -------------------------------------------------------------------------------------------

@admin.register(LearningCandidate)
class LearningCandidateAdmin(ReadOnlyModelAdmin):
    list_display = ["public_id", "kind", "state", "scope_key", "confidence", "origin", "review", "source_run_link",
                    "created_at_ms"]
    list_filter = [CandidateStateFilter, "kind", "origin", ScopeKindFilter, MatchedRuleFilter]
    list_select_related = ["published_learning"]
    search_fields = ["content", "scope_key"]
    ordering = ["-id"]
    readonly_fields = ["public_id", "origin", "state", "scope_key", "kind", "sensitivity", "content", "confidence",
                       "source_json", "evidence_json", "created_at_ms", "expires_at_ms", "review_json",
                       "published_learning"]
    fields = readonly_fields
    actions = ["publish_selected", "reject_selected"]
    change_list_template = "admin/learnings/learningcandidate/change_list.html"

    @admin.display(description="Candidate", ordering="id")
    def public_id(self, obj):
        return obj.public_id

    @admin.display(description="Judge / rule reason")
    def review(self, obj):
        return obj.review_reason or "—"

    @admin.display(description="Source run")
    def source_run_link(self, obj):
        if not obj.source_run_id:
            return (obj.source or {}).get("run_id") or "—"
        url = reverse("admin:memory_run_change", args=[obj.source_run_id])
        return format_html('<a href="{}">run-{}</a>', url, obj.source_run_id)

    @admin.display(description="Source")
    def source_json(self, obj):
        return format_html("<pre>{}</pre>", json.dumps(obj.source, indent=2))

    @admin.display(description="Evidence")
    def evidence_json(self, obj):
        return format_html("<pre>{}</pre>", json.dumps(obj.evidence_refs, indent=2))

    @admin.display(description="Automation review")
    def review_json(self, obj):
        return format_html("<pre>{}</pre>", json.dumps(obj.automation_review, indent=2))

    @admin.action(description="Publish selected candidates…")
    def publish_selected(self, request, queryset):
        form = PublishForm(request.POST if "post" in request.POST else None)
        if "post" in request.POST and form.is_valid():
            tier = form.cleaned_data["publish_tier"]
            _run_each(self, request, queryset.order_by("id"), f"Published ({tier})",
                      lambda c: services.candidate_publish(candidate=c, actor=request.user, publish_tier=tier))
            return None
        return _intermediate(self, request, queryset, action="publish_selected", title="Publish candidates",
                             form=form, template="admin/learnings/publish_candidates.html")

    @admin.action(description="Reject selected candidates…")
    def reject_selected(self, request, queryset):
        form = ReasonForm(request.POST if "post" in request.POST else None)
        if "post" in request.POST and form.is_valid():
            reason = form.cleaned_data["reason"]
            _run_each(self, request, queryset.order_by("id"), "Rejected",
                      lambda c: services.candidate_reject(candidate=c, actor=request.user, reason=reason))
            return None
        return _intermediate(self, request, queryset, action="reject_selected", title="Reject candidates",
                             form=form, template="admin/learnings/confirm_action.html",
                             extra={"verb": "Reject", "warning": "Rejected candidates are never published."})

    # -- the learning policy editor --------------------------------------------------------------------------

    def get_urls(self):
        return [path("policy/", self.admin_site.admin_view(self.policy_view), name="learnings_learning_policy"),
                *super().get_urls()]

    def changelist_view(self, request, extra_context=None):
        policy, revision = policy_store.current_policy_and_revision()
        extra = {"learning_policy": policy, "policy_revision": revision,
                 "policy_url": reverse("admin:learnings_learning_policy")}
        return super().changelist_view(request, {**(extra_context or {}), **extra})

    def policy_view(self, request):
        if not request.user.is_staff:
            return HttpResponseRedirect(reverse("admin:login"))
        policy, revision = policy_store.current_policy_and_revision()
        if request.method == "POST":
            form = LearningPolicyForm(request.POST)
            if form.is_valid():
                try:
                    saved, new_revision = policy_store.set_policy(form.request_body(policy), actor=request.user)
                except AppError as exc:
                    form.add_error(None, exc.detail)
                else:
                    self.message_user(request, f"Learning policy saved (revision {new_revision}, mode "
                                               f"{saved.mode}).", messages.SUCCESS)
                    return HttpResponseRedirect(reverse("admin:learnings_learning_policy"))
        else:
            form = LearningPolicyForm(initial=LearningPolicyForm.initial_for(policy, revision))
        context = {**self.admin_site.each_context(request), "title": "Learning policy", "opts": self.model._meta,
                   "form": form, "policy": policy, "revision": revision,
                   "rule_count": len(policy.publication.rules),
                   "active_rule_count": len([r for r in policy.publication.rules
                                             if (r.name or "").strip().lower() not in
                                             policy.publication.quarantine_set]),
                   "actions": ACTIONS}
        return TemplateResponse(request, "admin/learnings/learning_policy.html", context)


# ---- learnings --------------------------------------------------------------------------------------------

@admin.register(Learning)
class LearningAdmin(ReadOnlyModelAdmin):
    list_display = ["public_id", "kind", "status", "publish_tier", "verification_status", "decision", "scope_key",
                    "excerpt", "published_at_ms"]
    list_filter = ["status", "publish_tier", "verification_status", "policy_decision", "kind", ScopeKindFilter,
                   PromptVisibleFilter]
    search_fields = ["content", "scope_key"]
    ordering = ["-id"]
    readonly_fields = ["public_id", "status", "publish_tier", "verification_status", "policy_decision",
                       "policy_actor", "scope_key", "kind", "sensitivity", "content", "confidence", "source_candidate",
                       "created_at_ms", "published_at_ms", "expires_at_ms", "supersedes", "superseded_by",
                       "revoked_at_ms", "revoked_reason"]
    fields = readonly_fields
    actions = ["revoke_selected", "supersede_selected"]

    @admin.display(description="Learning", ordering="id")
    def public_id(self, obj):
        return obj.public_id

    @admin.display(description="Decision")
    def decision(self, obj):
        return {"automatic": "auto-published", "manual": "published manually"}.get(obj.policy_decision or "",
                                                                                  obj.policy_decision or "—")

    @admin.display(description="Content")
    def excerpt(self, obj):
        return obj.content[:120]

    @admin.action(description="Revoke selected learnings…")
    def revoke_selected(self, request, queryset):
        form = ReasonForm(request.POST if "post" in request.POST else None)
        if "post" in request.POST and form.is_valid():
            reason = form.cleaned_data["reason"] or None
            _run_each(self, request, queryset.order_by("id"), "Revoked",
                      lambda item: services.learning_revoke(learning=item, actor=request.user, reason=reason))
            return None
        return _intermediate(self, request, queryset, action="revoke_selected", title="Revoke learnings",
                             form=form, template="admin/learnings/confirm_action.html",
                             extra={"verb": "Revoke", "warning": "Revoked learnings never reach prompts again; "
                                    "a skill promoted from one is revoked with it."})

    @admin.action(description="Supersede the selected learning…")
    def supersede_selected(self, request, queryset):
        items = list(queryset[:2])
        if len(items) != 1:
            self.message_user(request, "Select exactly one learning to supersede.", messages.ERROR)
            return None
        target = items[0]
        form = SupersedeForm(request.POST if "post" in request.POST else None,
                             initial={"content": target.content})
        if "post" in request.POST and form.is_valid():
            try:
                new = services.learning_supersede(learning=target, actor=request.user,
                                                  content=form.cleaned_data["content"],
                                                  confidence=form.cleaned_data["confidence"])
            except AppError as exc:
                form.add_error(None, exc.detail)
            else:
                self.message_user(request, f"Superseded {target.public_id} with {new.public_id}.", messages.SUCCESS)
                return None
        return _intermediate(self, request, queryset, action="supersede_selected", title="Supersede learning",
                             form=form, template="admin/learnings/supersede_learning.html", objects=[target],
                             extra={"kinds": LearningKind.choices})
