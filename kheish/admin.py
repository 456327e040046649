"""What the project package adds to the apps' admin pages, so that no app imports ``kheish``: the changelists'
bulk actions (``kheish.console.bulk``: the console's forms, the planes' services), the links from the candidate
and skill pages to the console's workflow pages, and the session page's Memory card, which reads across the
planes (``kheish.composition.memory_context``). Each app's ModelAdmin is unregistered and registered again as
a subclass here; ``kheish`` is the last installed app, so its ``admin`` module is discovered last."""

from __future__ import annotations

from django.contrib import admin
from django.urls import reverse

from kheish import composition
from kheish.console import bulk
from learnings import policy_store
from learnings.admin import LearningAdmin, LearningCandidateAdmin
from learnings.models import Learning, LearningCandidate
from memory.admin import SessionAdmin
from memory.models import Session
from skills.admin import LearningSkillAdmin
from skills.models import LearningSkill


def memory_card(session: Session) -> dict:
    """What the session's next prompt would be given (learnings, recovered runs) and its capability scopes."""
    try:
        preview = composition.memory_context(session, None)
    except Exception:  # noqa: BLE001 - the card must never break the page
        return {}
    learned = (preview.get("learned_context") or {}).get("entries", [])
    recovered = (preview.get("recovered_memory") or {}).get("entries", [])
    return {"memory_card": {"learned": learned, "recovered": recovered,
                            "capability_scope": session.capability_scope,
                            "effective_capability_scope": preview["effective_capability_scope"]}}


class SessionWithMemoryCard(SessionAdmin):
    change_form_template = "admin/console/session_change_form.html"

    def change_view(self, request, object_id, form_url="", extra_context=None):
        session = self.get_object(request, object_id)
        extra = {**(extra_context or {}), **(memory_card(session) if session is not None else {})}
        return super().change_view(request, object_id, form_url, extra)


class CandidateConsoleAdmin(bulk.CandidateActions, LearningCandidateAdmin):
    actions = ["publish_selected", "reject_selected"]
    change_list_template = "admin/console/candidate_change_list.html"

    def changelist_view(self, request, extra_context=None):
        policy, revision = policy_store.current_policy_and_revision()
        extra = {"learning_policy": policy, "policy_revision": revision,
                 "policy_url": reverse("console:learning-policy")}
        return super().changelist_view(request, {**(extra_context or {}), **extra})


class LearningConsoleAdmin(bulk.LearningActions, LearningAdmin):
    actions = ["revoke_selected", "supersede_selected"]


class SkillConsoleAdmin(bulk.SkillActions, LearningSkillAdmin):
    actions = ["revoke_selected"]
    change_form_template = "admin/console/skill_change_form.html"
    change_list_template = "admin/console/skill_change_list.html"


for model, model_admin in ((Session, SessionWithMemoryCard), (LearningCandidate, CandidateConsoleAdmin),
                           (Learning, LearningConsoleAdmin), (LearningSkill, SkillConsoleAdmin)):
    admin.site.unregister(model)
    admin.site.register(model, model_admin)


# The admin's branding (issue 13.3): "Kheish Memory", not "Django administration"; "View site" goes to the
# landing page at "/" (kheish.ops.landing), which links the console, the API reference and the ops endpoints.
admin.site.site_header = "Kheish Memory"
admin.site.site_title = "Kheish Memory"
admin.site.index_title = "Operator console"
admin.site.site_url = "/"
