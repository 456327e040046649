"""What the project package adds to the apps' admin pages, so that no app imports ``kheish``: the changelists'
bulk actions (``kheish.console.bulk``: the console's forms, the planes' services), the links from the candidate
and skill pages to the console's workflow pages, and the session page's Memory card, which reads across the
planes (``kheish.composition.memory_context``). Each app's ModelAdmin is unregistered and registered again as
a subclass here; ``kheish`` is the last installed app, so its ``admin`` module is discovered last."""

from __future__ import annotations

from django.contrib import admin
from django.urls import reverse

from kheish import composition
from kheish.console import bulk, explain
from learnings import policy_in_force
from learnings.admin import LearningAdmin, LearningCandidateAdmin
from learnings.models import Learning, LearningCandidate, LearningKind
from learnings.vocabulary import PROMPT_KINDS, REVIEW_STATES, CandidateState
from memory import public_ids
from memory.admin import SessionAdmin
from memory.models import Session
from skills.admin import LearningSkillAdmin
from skills.models import LearningSkill

EXPLAINED_ROWS = 25  # per kind of record: the newest learnings / candidates that will not be injected


def memory_card(session: Session, query: str | None = None) -> dict:
    """What the session's next prompt would be given (learnings, recovered runs) for ``query`` (the input the
    operator typed, or none), its capability scopes, and why each learning or candidate of the session's scopes
    that is left out is left out (``kheish.console.explain``, over ``Learning.is_prompt_eligible``, the prompt
    set ``Learning.objects.for_prompt`` and the ranker's choice)."""
    try:
        preview = composition.memory_context(session, query)
    except Exception:  # noqa: BLE001 - the card must never break the page
        return {}
    learned = (preview.get("learned_context") or {}).get("entries", [])
    recovered = (preview.get("recovered_memory") or {}).get("entries", [])
    scope_keys = preview["learning_scopes"]
    injected = {entry["learning_id"] for entry in learned}
    prompt_set = set(Learning.objects.for_prompt(scope_keys).values_list("pk", flat=True))
    retrieval = preview["retrieval"]
    in_scope = Learning.objects.in_scopes(scope_keys).order_by("-id")
    left_out = []
    injected_pks = [public_ids.parse_id(i, public_ids.LEARNING) for i in injected]
    for learning in in_scope.exclude(pk__in=injected_pks)[:EXPLAINED_ROWS]:
        reasons = explain.learning_exclusion(learning)
        if not reasons and learning.pk not in prompt_set:
            reasons = [explain.SHADOWED_REASON]
        if not reasons:
            reasons = [
                f"no match for the input ({retrieval['ranker']} ranker)"
                if query
                else f"left out by the section's limits ({retrieval['max_entries']} entries, "
                f"{retrieval['max_tokens']} tokens)"
            ]
        left_out.append(
            {
                "id": learning.public_id,
                "kind": learning.kind,
                "content": learning.content,
                "reasons": reasons,
                "url": reverse("console:learning", args=[learning.pk]),
            }
        )
    candidates = list(
        LearningCandidate.objects.in_scopes(scope_keys)
        .exclude(state=CandidateState.PUBLISHED)
        .order_by("-id")[:EXPLAINED_ROWS]
    )
    waiting = [
        {
            "id": candidate.public_id,
            "kind": candidate.kind,
            "content": candidate.content,
            "reasons": explain.candidate_exclusion(candidate),
            "url": reverse("admin:learnings_learningcandidate_change", args=[candidate.pk]),
        }
        for candidate in candidates
    ]
    return {
        "memory_card": {
            "learned": learned,
            "recovered": recovered,
            "query": query or "",
            "counts": {
                "learned": explain.count(len(learned), "learning"),
                "recovered": explain.count(len(recovered), "recovered run"),
            },
            "left_out": left_out,
            "candidates": waiting,
            "why_empty": [] if learned else _why_no_learnings(in_scope.count(), candidates, query),
            "capability_scope": session.capability_scope,
            "effective_capability_scope": preview["effective_capability_scope"],
        }
    }


def _why_no_learnings(learning_count: int, candidates: list[LearningCandidate], query: str | None) -> list[str]:
    """Sentences that say why the next prompt gets no learning."""
    semantic = policy_in_force.current_policy().capture.semantic_candidates.enabled
    capture = (
        "labelled statements (Preference: / Fact: / Decision:) in a run's input become candidates only with "
        "semantic capture, " + ("on" if semantic else "off: turn it on in the Memory console")
    )
    kinds = {candidate.kind for candidate in candidates}
    sentences = []
    if learning_count:
        sentences.append(
            f"None of the {explain.count(learning_count, 'learning')} in this session's scopes would "
            "be in the next prompt" + (" for this input" if query else "") + ": the reasons are below."
        )
    elif not candidates:
        sentences.append("Nothing has been learned in this session's scopes yet: no learning, no candidate.")
    elif kinds == {LearningKind.RUN_SUMMARY}:
        sentences.append(
            f"Only {explain.count(len(candidates), 'run_summary candidate')} exist"
            f"{'s' if len(candidates) == 1 else ''}: run summaries never reach a prompt."
        )
    else:
        pending = [c for c in candidates if c.state in REVIEW_STATES]
        sentences.append(
            f"No learning yet: {explain.count(len(pending), 'candidate')} await"
            f"{'s' if len(pending) == 1 else ''} review; a candidate reaches a prompt only once "
            "published (active tier)."
        )
    if not learning_count and not kinds & set(PROMPT_KINDS):
        sentences.append(capture[0].upper() + capture[1:] + ".")
    return sentences


class SessionWithMemoryCard(SessionAdmin):
    change_form_template = "admin/console/session_change_form.html"

    def change_view(self, request, object_id, form_url="", extra_context=None):
        session = self.get_object(request, object_id)
        query = request.GET.get("memory_input", "").strip() or None
        extra = {**(extra_context or {}), **(memory_card(session, query) if session is not None else {})}
        return super().change_view(request, object_id, form_url, extra)


class CandidateConsoleAdmin(bulk.CandidateActions, LearningCandidateAdmin):
    actions = ["publish_selected", "reject_selected"]
    change_list_template = "admin/console/candidate_change_list.html"

    def changelist_view(self, request, extra_context=None):
        policy, revision = policy_in_force.current_policy_and_revision()
        extra = {
            "learning_policy": policy,
            "policy_revision": revision,
            "policy_url": reverse("console:learning-policy"),
        }
        return super().changelist_view(request, {**(extra_context or {}), **extra})


class LearningConsoleAdmin(bulk.LearningActions, LearningAdmin):
    actions = ["revoke_selected", "supersede_selected"]


class SkillConsoleAdmin(bulk.SkillActions, LearningSkillAdmin):
    actions = ["revoke_selected"]
    change_form_template = "admin/console/skill_change_form.html"
    change_list_template = "admin/console/skill_change_list.html"


for model, model_admin in (
    (Session, SessionWithMemoryCard),
    (LearningCandidate, CandidateConsoleAdmin),
    (Learning, LearningConsoleAdmin),
    (LearningSkill, SkillConsoleAdmin),
):
    admin.site.unregister(model)
    admin.site.register(model, model_admin)


# The admin's branding (issue 13.3): "Kheish Memory", not "Django administration"; "View site" goes to the
# landing page at "/" (kheish.ops.landing), which links the console, the API reference and the ops endpoints.
admin.site.site_header = "Kheish Memory"
admin.site.site_title = "Kheish Memory"
admin.site.index_title = "Operator console"
admin.site.site_url = "/"
