"""The Memory console: the operator's one surface for every workflow over the three planes, inside the Django
admin at ``/admin/memory/``.

Who owns what. The console owns review (publish / reject a candidate), learnings governance (revoke, supersede,
promote to a skill, provenance), skill rollout (checks, ladder moves, revoke, rollback), memory search and both
policy editors (each with its dry run). The ModelAdmin changelists (``memory/``, ``learnings/``, ``skills/``
``admin.py``) are for browsing: filters, read-only records, audit fields. Their bulk actions are added by
``kheish/admin.py`` from ``bulk`` here and use the console's forms and the same services; their per-object
buttons link to the console's pages. No workflow is written twice.

Modules, one per workflow: ``dashboard``, ``review``, ``learnings``, ``skills``, ``search``, ``policy_editors``;
``bulk`` (the changelists' bulk actions); ``forms`` (every form, one per workflow); ``common`` (page chrome, time
stamps, paging, the automation status line); ``activity`` and ``explain`` (the feed's and the prompt gate's words);
``urls`` (``console_urls()``, wired in ``kheish/urls.py``). ``tests/kheish/test_console_workflows.py`` holds every
workflow to these places.

Views read through selectors and querysets and write only through the planes' services, which validate,
change state with guarded updates and write the audit events; the errors they raise are shown to the
operator with their literal ``detail``. Destructive actions (reject, revoke, rollback) go through a
server-rendered confirmation page.
"""

from kheish.console.urls import console_urls

__all__ = ["console_urls"]
