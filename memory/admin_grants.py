"""Agent grants in the admin: which personas and projects an agent may bind its sessions to. Saving goes through
``memory.grants.grants_set`` (validated and audited), never a bare M2M write."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import get_user_model

from memory import grants
from memory.models import AgentGrant, ApiKeyRole


@admin.register(AgentGrant)
class AgentGrantAdmin(admin.ModelAdmin):
    list_display = ["user", "granted_projects", "granted_personas"]
    list_select_related = ["user"]
    search_fields = ["user__username"]
    filter_horizontal = ["projects", "personas"]
    fields = ["user", "projects", "personas"]

    change_list_template = "admin/memory/agentgrant/change_list.html"

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        """Only agents are offered: principals holding an agent API key, never an operator account (operators see
        everything and bind anything; a grant would mean nothing for them)."""
        if db_field.name == "user":
            kwargs["queryset"] = (
                get_user_model()
                .objects.filter(is_staff=False, is_superuser=False, api_keys__role=ApiKeyRole.AGENT)
                .exclude(agent_grant__isnull=False)
                .distinct()
                .order_by("username")
            )
            kwargs.setdefault(
                "help_text",
                "Agents are the principals holding an agent API key (make key "
                "NAME=... ROLE=agent); an agent that already has grants is edited "
                "from the list instead.",
            )
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        return ["user"] if obj is not None else []

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("projects", "personas")

    @admin.display(description="projects")
    def granted_projects(self, obj) -> str:
        return ", ".join(sorted(p.project_id for p in obj.projects.all())) or "—"

    @admin.display(description="personas")
    def granted_personas(self, obj) -> str:
        return ", ".join(sorted(p.persona_id for p in obj.personas.all())) or "—"

    def save_model(self, request, obj, form, change):
        if not change:
            obj.save()

    def save_related(self, request, form, formsets, change):
        grants.grants_set(
            agent=form.instance.user,
            actor=request.user,
            project_ids=[p.project_id for p in form.cleaned_data["projects"]],
            persona_ids=[p.persona_id for p in form.cleaned_data["personas"]],
        )
