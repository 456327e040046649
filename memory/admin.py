"""Browsing Plane 1 and Plane 2 in the admin: API keys (created and revoked through ``memory.identity``), personas,
projects, and read-only sessions (journal, injection ledger), runs, checkpoints, audit events, run-memory
records, policy revisions and maintenance reports. Status fields are read-only: changes go through services.
The session page's Memory card is added by ``kheish/admin.py`` (it reads across the planes)."""

from __future__ import annotations

import json

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import unquote
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import transaction
from django.http import HttpResponseRedirect
from django.template.defaultfilters import pluralize
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from memory import identity, public_ids, sessions
from memory.admin_display import (
    EMPTY,
    actor_display,
    json_column,
    ms_column,
    ms_date,
    plain_reason,
    readable_json,
)
from memory.errors import AppError, ValidationFailed
from memory.models import (
    ApiKey,
    ApiKeyRole,
    AuditEvent,
    Checkpoint,
    JournalEvent,
    MaintenanceReport,
    Persona,
    PolicyRevision,
    Project,
    Run,
    RunMemoryRecord,
    Session,
)
from memory.sessions import effective_capability_scope, learning_scope_keys


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class PrincipalChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj):
        return f"{obj.get_username()} (staff)" if obj.is_staff else f"{obj.get_username()} (agent)"


class ApiKeyAddForm(forms.ModelForm):
    """Adding a key: the same rules as ``create_api_key`` (``identity.api_key_create``). An agent key belongs to
    an agent principal (picked, or created from the key's name), never to a staff user; an operator key
    belongs to a staff user."""

    user = PrincipalChoiceField(
        queryset=get_user_model().objects.order_by("username"),
        required=False,
        label="Principal",
        help_text="Leave empty to create a principal named after the key (as <code>make key</code> does). "
        "Agent keys need a non-staff principal: the agent's identity (<code>agent_id</code>), "
        "whose sessions and runs it owns. Operator keys need a staff user.",
    )

    class Meta:
        model = ApiKey
        fields = ["name", "role", "user"]
        help_texts = {
            "name": "A label for the key. With no principal picked, it is also the new principal's name "
            "(the agent_id its runs report).",
            "role": "agent: opens sessions and runs, proposes learnings, sees only its own data. "
            "operator: everything, including policies and publication (a staff user).",
        }

    def clean(self):
        data = super().clean()
        name, role, user = (data.get("name") or "").strip(), data.get("role"), data.get("user")
        if not name or not role:
            return data
        if user is None:  # api_key_create would take (or create) the user named after the key
            user = get_user_model().objects.filter(username=name).first()
            if user is not None and role == ApiKeyRole.AGENT and (user.is_staff or user.is_superuser):
                self.add_error(
                    "name",
                    f"'{name}' is a staff user: an agent key named after it would act as "
                    "that user. Choose another name (a new agent principal is created).",
                )
        elif role == ApiKeyRole.AGENT and (user.is_staff or user.is_superuser):
            self.add_error(
                "user",
                f"{user.get_username()} is a staff user: agent keys belong to agent "
                "principals. Leave Principal empty to create one named after the key.",
            )
        elif role == ApiKeyRole.OPERATOR and not user.is_staff:
            self.add_error(
                "user",
                f"{user.get_username()} is not a staff user: operator keys belong to staff "
                "users. Leave Principal empty to create a staff principal named after the key.",
            )
        return data


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["name", "role", "user", "prefix", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["role", ("revoked_at", admin.EmptyFieldListFilter)]
    list_select_related = ["user"]
    search_fields = ["name", "prefix", "user__username"]
    fields = ["name", "role", "user", "prefix", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = ["prefix", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke_keys"]

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = ApiKeyAddForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fields(self, request, obj=None):
        return ["name", "role", "user"] if obj is None else self.fields

    def get_readonly_fields(self, request, obj=None):
        return [*self.readonly_fields, "name", "role", "user"] if obj else []

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        if change:
            return
        try:
            issued = identity.api_key_create(
                name=obj.name, role=obj.role, user=form.cleaned_data.get("user"), actor=request.user
            )
        except ValidationFailed as exc:  # clean() already refused what the service refuses; belt and braces
            raise PermissionDenied(str(exc)) from exc
        obj.pk = issued.api_key.pk
        obj.user = issued.api_key.user
        messages.warning(
            request,
            format_html(
                "API key created for {} ({}). Copy it now, it is shown only once: <code id='new-api-key'>{}</code>",
                issued.api_key.user.get_username(),
                issued.api_key.role,
                issued.plaintext,
            ),
        )

    @admin.action(description="Revoke selected API keys")
    def revoke_keys(self, request, queryset):
        count = 0
        for key in queryset:
            identity.api_key_revoke(api_key=key, actor=request.user)
            count += 1
        self.message_user(request, f"Revoked {count} key{pluralize(count)}.")


class PersonaForm(forms.ModelForm):
    """The persona page's form; saving goes through ``memory.sessions.persona_create`` / ``persona_update``."""

    class Meta:
        model = Persona
        fields = ["persona_id", "display_name", "version", "soul", "capability_scope"]

    def clean_capability_scope(self):
        value = self.cleaned_data.get("capability_scope")
        try:
            return sessions._string_list(value, "capability_scope")
        except ValidationFailed as exc:
            raise forms.ValidationError(exc.detail) from exc


class _ScopeAdmin(admin.ModelAdmin):
    """Personas and projects: add, change and delete through the audited services of ``memory.sessions``; the
    id is read-only once created (scope keys and grants name it). Deleting - one or "delete selected" - shows
    what it touches (sessions bound, agents granted, learnings scoped) on a confirmation page first."""

    kind = ""
    id_field = ""
    delete_confirmation_template = "admin/memory/scope_delete_confirmation.html"
    actions = ["delete_with_impact"]

    def get_readonly_fields(self, request, obj=None):
        return [self.id_field] if obj is not None else []

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # Django's bare delete would skip the services and the audit
        return actions

    def _write(self, request, obj, form, change):
        raise NotImplementedError

    def save_model(self, request, obj, form, change):
        try:
            saved = self._write(request, obj, form, change)
        except AppError as exc:  # the form's own validation refuses what the services refuse; belt and braces
            raise PermissionDenied(exc.detail) from exc
        obj.pk = saved.pk
        obj.created_at_ms = saved.created_at_ms

    def _impact(self, obj):
        raise NotImplementedError

    def _delete(self, request, obj):
        raise NotImplementedError

    def _confirm_or_delete(self, request, objects, *, action: str | None):
        impacts = [self._impact(obj) for obj in objects]
        blocked = any(impact.blocked for impact in impacts)
        if request.POST.get("post") == "yes" and not blocked:
            try:
                with transaction.atomic():
                    for obj in objects:
                        self._delete(request, obj)
            except AppError as exc:
                self.message_user(request, exc.detail, messages.ERROR)
                return None
            noun = self.opts.verbose_name if len(objects) == 1 else self.opts.verbose_name_plural
            self.message_user(request, f"Deleted {len(objects)} {noun}.", messages.SUCCESS)
            return None
        return TemplateResponse(
            request,
            self.delete_confirmation_template,
            {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "title": f"Delete {self.kind}s",
                "impacts": impacts,
                "blocked": blocked,
                "queryset": objects,
                "action": action,
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                "media": self.media,
            },
        )

    @admin.action(
        description="Delete selected %(verbose_name_plural)s (shows what each touches)", permissions=["delete"]
    )
    def delete_with_impact(self, request, queryset):
        return self._confirm_or_delete(request, list(queryset.order_by("pk")), action="delete_with_impact")

    def delete_view(self, request, object_id, extra_context=None):
        obj = self.get_object(request, unquote(object_id))
        if obj is None or not self.has_delete_permission(request, obj):
            return super().delete_view(request, object_id, extra_context)
        response = self._confirm_or_delete(request, [obj], action=None)
        if response is None:
            return HttpResponseRedirect(reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist"))
        return response

    def delete_model(self, request, obj):  # any other path to a single delete still goes through the service
        self._delete(request, obj)

    def delete_queryset(self, request, queryset):
        with transaction.atomic():
            for obj in queryset.order_by("pk"):
                self._delete(request, obj)


@admin.register(Persona)
class PersonaAdmin(_ScopeAdmin):
    form = PersonaForm
    kind = "persona"
    id_field = "persona_id"
    list_display = ["persona_id", "display_name", "version", "capability_scope"]
    search_fields = ["persona_id", "display_name"]

    def _write(self, request, obj, form, change):
        data = form.cleaned_data
        fields = {
            "display_name": data["display_name"],
            "version": data["version"],
            "soul": data.get("soul") or "",
            "capability_scope": data.get("capability_scope"),
        }
        if change:
            return sessions.persona_update(persona=obj, actor=request.user, **fields)
        return sessions.persona_create(persona_id=data["persona_id"], actor=request.user, **fields)

    def _impact(self, obj):
        return sessions.persona_delete_impact(obj)

    def _delete(self, request, obj):
        sessions.persona_delete(persona=obj, actor=request.user)


@admin.register(Project)
class ProjectAdmin(_ScopeAdmin):
    kind = "project"
    id_field = "project_id"
    fields = ["project_id", "name"]
    list_display = ["project_id", "name"]
    search_fields = ["project_id", "name"]

    def _write(self, request, obj, form, change):
        if change:
            return sessions.project_update(project=obj, name=form.cleaned_data["name"], actor=request.user)
        return sessions.project_create(
            project_id=form.cleaned_data["project_id"], name=form.cleaned_data["name"], actor=request.user
        )

    def _impact(self, obj):
        return sessions.project_delete_impact(obj)

    def _delete(self, request, obj):  # the confirmation page is the operator's consent to unbind sessions
        sessions.project_delete(project=obj, actor=request.user, unbind_sessions=True)


@admin.register(Session)
class SessionAdmin(ReadOnlyAdmin):
    list_display = ["public_id", "owner", "persona", "journal_events", "updated"]
    ordering = ["-updated_at_ms", "-id"]  # the sessions active last come first (issue 25.5)
    list_filter = ["persona"]
    list_select_related = ["owner", "persona"]
    search_fields = ["id", "owner__username"]
    show_full_result_count = False
    readonly_fields = [
        "public_id",
        "owner",
        "persona",
        "projects_list",
        "capability_scope_json",
        "effective_scope",
        "learning_scopes",
        "metadata_json",
        "created",
        "updated",
    ]
    fields = tuple(readonly_fields)
    change_form_template = "admin/memory/session/change_form.html"
    created = ms_column("created_at_ms", "Created")
    updated = ms_column("updated_at_ms", "Updated")

    @admin.display(description="Capability scope")
    def capability_scope_json(self, obj):
        scope = obj.capability_scope
        return "any capability (not restricted)" if scope is None else ", ".join(scope) or "none"

    @admin.display(description="Journal events", ordering="last_offset")
    def journal_events(self, obj):
        return obj.last_offset

    @admin.display(description="Session")
    def public_id(self, obj):
        return obj.public_id

    @admin.display(description="Projects")
    def projects_list(self, obj):
        return ", ".join(p.project_id for p in obj.projects.all()) or "—"

    @admin.display(description="Effective capability scope")
    def effective_scope(self, obj):
        scope = effective_capability_scope(obj)
        return "any" if scope is None else ", ".join(scope) or "none"

    @admin.display(description="Learning scopes")
    def learning_scopes(self, obj):
        return ", ".join(learning_scope_keys(obj))

    metadata_json = json_column("metadata", "Metadata")

    def change_view(self, request, object_id, form_url="", extra_context=None):
        session = self.get_object(request, object_id)
        extra_context = extra_context or {}
        if session is not None:
            page = Paginator(JournalEvent.objects.filter(session=session).order_by("-offset"), 50).get_page(
                request.GET.get("journal_page")
            )
            extra_context["journal_page"] = page
            extra_context["journal_rows"] = [
                {
                    "offset": e.offset,
                    "timestamp_ms": e.timestamp_ms,
                    "when": ms_date(e.timestamp_ms),
                    "type": e.type,
                    "run_id": public_ids.run_id(e.run_id) if e.run_id else "",
                    "event": json.dumps(e.event, indent=1)[:4000],
                }
                for e in page
            ]
            extra_context["recent_runs"] = Run.objects.filter(session=session).order_by("-id")[:10]
        return super().change_view(request, object_id, form_url, extra_context)


class RunStatusFilter(admin.SimpleListFilter):
    title = "persona"
    parameter_name = "persona"

    def lookups(self, request, model_admin):
        return [(p.persona_id, p.display_name) for p in Persona.objects.all()[:100]]

    def queryset(self, request, queryset):
        return queryset.filter(session__persona__persona_id=self.value()) if self.value() else queryset


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ["public_id", "session", "kind", "status", "submitted", "finished"]
    list_filter = ["status", "kind", RunStatusFilter]
    list_select_related = ["session"]
    search_fields = ["id", "session__id"]
    show_full_result_count = False
    readonly_fields = [
        "session",
        "kind",
        "status",
        "submitted",
        "started",
        "finished",
        "waiting_for",
        "request_json",
        "input_json",
        "outputs_json",
        "error",
        "prompt_ledger",
    ]
    fields = tuple(readonly_fields)
    submitted = ms_column("submitted_at_ms", "Submitted")

    @admin.display(description="Waiting for")
    def waiting_for(self, obj):
        """A waiting run's pending approvals or questions, with what the agent asked (wait-for-approval /
        wait-for-user-question ``question``)."""
        ids = list(obj.pending_approval_ids or []) + list(obj.pending_question_ids or [])
        if not ids:
            return EMPTY
        what = "approval" if obj.pending_approval_ids else "answer"
        asked = f": “{obj.pending_question}”" if obj.pending_question else ""
        return f"{what} {', '.join(ids)}{asked}"

    started = ms_column("started_at_ms", "Started")
    finished = ms_column("finished_at_ms", "Finished")
    request_json = json_column("request", "Request")
    input_json = json_column("input", "Input")
    outputs_json = json_column("outputs", "Outputs")

    @admin.display(description="Run")
    def public_id(self, obj):
        return obj.public_id

    prompt_ledger = json_column("prompt", "Injection ledger (what this run was given)")


@admin.register(Checkpoint)
class CheckpointAdmin(ReadOnlyAdmin):
    list_display = ["session", "compacted_until_offset", "prompt_window_created_by", "created"]
    list_select_related = ["session"]
    created = ms_column("created_at_ms", "Created")


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["at", "subject", "action", "transition", "who", "reason_excerpt"]
    list_filter = ["subject_type", "action"]
    search_fields = ["subject_id", "actor", "reason"]
    show_full_result_count = False
    readonly_fields = [
        "at",
        "subject_type",
        "subject_id",
        "action",
        "transition",
        "who",
        "reason_text",
        "change",
        "data_json",
    ]
    fields = tuple(readonly_fields)
    at = ms_column("at_ms", "When")
    data_json = json_column("data", "Data")

    @admin.display(description="Subject", ordering="subject_id")
    def subject(self, obj):
        return format_html('{}<br><span class="mono">{}</span>', obj.subject_type.replace("_", " "), obj.subject_id)

    @admin.display(description="State (before → after)")
    def transition(self, obj):
        if not obj.from_state and not obj.to_state:
            return EMPTY
        return f"{obj.from_state or EMPTY} → {obj.to_state or EMPTY}"

    @admin.display(description="Actor", ordering="actor")
    def who(self, obj):
        return actor_display(obj.actor)

    @admin.display(description="Reason")
    def reason_excerpt(self, obj):
        text = plain_reason(obj.reason)
        return (text if len(text) <= 90 else text[:90] + "…") or EMPTY

    @admin.display(description="Reason")
    def reason_text(self, obj):
        return plain_reason(obj.reason) or EMPTY

    @admin.display(description="Change (before → after)")
    def change(self, obj):
        """The settings that changed, side by side, when the event kept both states (policies, grants)."""
        data = obj.data or {}
        if not isinstance(data, dict) or "before" not in data or "after" not in data:
            return EMPTY
        before, after = data["before"] or {}, data["after"] or {}
        if not isinstance(before, dict) or not isinstance(after, dict):
            return format_html("{} → {}", json.dumps(before), json.dumps(after))
        rows = [
            (key, before.get(key, EMPTY), after.get(key, EMPTY))
            for key in sorted(set(before) | set(after))
            if before.get(key) != after.get(key)
        ]
        if not rows:
            return "no change"
        return format_html(
            '<table class="audit-change"><thead><tr><th>setting</th><th>before</th><th>after</th>'
            "</tr></thead><tbody>{}</tbody></table>",
            format_html_join(
                "",
                "<tr><td>{}</td><td><pre>{}</pre></td><td><pre>{}</pre></td></tr>",
                ((key, _short_json(old), _short_json(new)) for key, old, new in rows),
            ),
        )


def _short_json(value) -> str:
    text = value if isinstance(value, str) else json.dumps(readable_json(value), indent=1, ensure_ascii=False)
    return text if len(text) <= 2000 else text[:2000] + "…"


@admin.register(RunMemoryRecord)
class RunMemoryRecordAdmin(ReadOnlyAdmin):
    list_display = ["run_id_label", "session", "status", "semantic_capture", "recorded", "summary_excerpt"]
    list_filter = ["status", "semantic_capture"]
    search_fields = ["session__id", "summary"]
    list_select_related = ["session"]
    show_full_result_count = False
    readonly_fields = [
        "run",
        "session",
        "status",
        "semantic_capture",
        "recorded",
        "request_preview",
        "outcome_preview",
        "artifact_ids_json",
        "failure_markers_json",
        "summary",
        "scope_keys_json",
        "redaction_count",
    ]
    fields = tuple(readonly_fields)
    recorded = ms_column("recorded_at_ms", "Recorded")
    artifact_ids_json = json_column("artifact_ids", "Artifact ids")
    failure_markers_json = json_column("failure_markers", "Failure markers")
    scope_keys_json = json_column("scope_keys", "Scope keys")

    @admin.display(description="Run")
    def run_id_label(self, obj):
        return public_ids.run_id(obj.run_id)

    @admin.display(description="Summary")
    def summary_excerpt(self, obj):
        return obj.summary[:120]


@admin.register(PolicyRevision)
class PolicyRevisionAdmin(ReadOnlyAdmin):
    list_display = ["kind", "revision", "actor", "created"]
    list_filter = ["kind"]
    readonly_fields = ["kind", "revision", "actor", "created", "policy_json"]
    fields = tuple(readonly_fields)
    created = ms_column("created_at_ms", "Saved")
    policy_json = json_column("policy", "Policy")


@admin.register(MaintenanceReport)
class MaintenanceReportAdmin(ReadOnlyAdmin):
    list_display = ["checked", "source"]
    readonly_fields = ["source", "checked", "report_json"]
    fields = tuple(readonly_fields)
    checked = ms_column("checked_at_ms", "Checked")
    report_json = json_column("report", "Report")


from memory import admin_grants  # noqa: E402,F401  (agent grants, issue 14.1)
