"""The console's URL patterns (namespace ``console``, mounted at ``/admin/memory/`` by ``kheish/urls.py`` before
the admin), each view wrapped in ``admin.site.admin_view``: staff only, CSRF-protected, never cached."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

from kheish.console import dashboard, learnings, policy_editors, review, search, skills


def console_urls() -> tuple[list, str]:
    """URL patterns of the console (namespace ``console``), each wrapped in ``admin.site.admin_view``."""
    wrap = admin.site.admin_view
    patterns = [
        path("", wrap(dashboard.dashboard), name="dashboard"),
        path("review/", wrap(review.review_queue), name="review"),
        path("review/<int:pk>/publish/", wrap(review.candidate_publish), name="candidate-publish"),
        path("review/<int:pk>/reject/", wrap(review.candidate_reject), name="candidate-reject"),
        path("learnings/", wrap(learnings.learnings_list), name="learnings"),
        path("learnings/<int:pk>/", wrap(learnings.learning_provenance), name="learning"),
        path("learnings/<int:pk>/revoke/", wrap(learnings.learning_revoke), name="learning-revoke"),
        path("learnings/<int:pk>/supersede/", wrap(learnings.learning_supersede), name="learning-supersede"),
        path("learnings/<int:pk>/promote/", wrap(learnings.learning_promote), name="learning-promote"),
        path("skills/", wrap(skills.skills_page), name="skills"),
        path("skills/<int:pk>/rollout/", wrap(skills.skill_rollout), name="skill-rollout"),
        path("skills/<int:pk>/status/", wrap(skills.skill_status), name="skill-status"),
        path("skills/<int:pk>/revoke/", wrap(skills.skill_revoke), name="skill-revoke"),
        path("skills/<int:pk>/rollback/", wrap(skills.skill_rollback), name="skill-rollback"),
        path("search/", wrap(search.search), name="search"),
        path("policy/", wrap(policy_editors.learning_policy), name="learning-policy"),
        path("policy/run-memory/", wrap(policy_editors.run_memory_policy), name="run-memory-policy"),
    ]
    return patterns, "console"
