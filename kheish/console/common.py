"""What every console page shares: the ``Stamp`` (epoch ms as relative / full / ISO time), ``render`` (a page in
the console chrome with its tabs), ``next_url`` (the same-host ``next`` after an action), ``paginate`` (a page of rows
without a COUNT over the table), the automation status line and the run link. No view lives here."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from django.contrib import admin
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme

from learnings import policy_in_force
from memory import llm, public_ids
from memory.clock import now_ms
from memory.run_records import PREVIEW_CHARS

PAGE_SIZE = 50
TABS = (
    ("dashboard", "Overview"),
    ("review", "Review"),
    ("learnings", "Learnings"),
    ("skills", "Skills"),
    ("search", "Search"),
)
MODE_DOT = {"enabled": "on", "shadow": "shadow", "manual_only": "off"}


@dataclass(frozen=True)
class Stamp:
    """An epoch-ms timestamp as the console shows it: relative text, full UTC time, ISO for ``<time>``."""

    ms: int | None

    @property
    def iso(self) -> str:
        return "" if not self.ms else datetime.fromtimestamp(self.ms / 1000, UTC).isoformat()

    @property
    def full(self) -> str:
        return "" if not self.ms else datetime.fromtimestamp(self.ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

    @property
    def relative(self) -> str:
        if not self.ms:
            return "—"
        delta = (now_ms() - self.ms) // 1000
        future, delta = delta < 0, abs(delta)
        if delta < 45:
            return "just now"
        if delta >= 30 * 86400:
            return self.full[:10]
        if delta < 60:  # 45-59 s round up to a minute (never "N min" for N seconds)
            amount = "1 min"
        else:
            size, unit = next((s, u) for s, u in ((86400, "d"), (3600, "h"), (60, "min")) if delta >= s)
            amount = f"{delta // size} {unit}"
        return f"in {amount}" if future else f"{amount} ago"

    def __str__(self) -> str:
        return self.relative


def render(
    request: HttpRequest,
    template: str,
    title: str,
    *,
    tab: str | None = None,
    http_status: int = 200,
    base: dict | None = None,
    **context,
) -> TemplateResponse:
    return TemplateResponse(
        request,
        f"admin/console/{template}",
        {
            **(base if base is not None else admin.site.each_context(request)),
            "is_nav_sidebar_enabled": False,
            "title": title,
            "tab": tab,
            "tabs": TABS,
            **context,
        },
        status=http_status,
    )


def next_url(request: HttpRequest, default: str) -> str:
    """Where to go after an action: the ``next`` the form carried (same host only), else ``default``."""
    target = request.POST.get("next") or request.GET.get("next")
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return default


def paginate(request: HttpRequest, queryset, size: int = PAGE_SIZE):
    """A simple page of ``queryset`` without a COUNT over the whole table (one extra row tells "more")."""
    try:
        number = max(1, int(request.GET.get("page", "1")))
    except ValueError:
        number = 1
    rows = list(queryset[(number - 1) * size : number * size + 1])
    query = request.GET.copy()
    query.pop("page", None)
    base = query.urlencode()

    def link(number: int) -> str:
        return f"?{base}&page={number}" if base else f"?page={number}"

    return rows[:size], {
        "number": number,
        "previous": link(number - 1) if number > 1 else None,
        "next": link(number + 1) if len(rows) > size else None,
    }


def learning_status_line() -> dict:
    """The automation status line (mode, capture, judge, revision, rules) shown on the dashboard, the review
    queue and the policy editor."""
    policy, revision = policy_in_force.current_policy_and_revision()
    return {
        "mode": policy.mode,
        "dot": MODE_DOT.get(policy.mode, "off"),
        "capture": policy.capture.semantic_candidates.enabled,  # semantic capture (the reference's switch)
        "run_summary_capture": policy.capture.run_summary_candidates,
        "judge": policy.judge.enabled,
        "revision": revision,
        "rule_count": len(policy.publication.rules),
        "active_rule_count": len(
            [
                rule
                for rule in policy.publication.rules
                if (rule.name or "").strip().lower() not in policy.publication.quarantine_set
            ]
        ),
        "default_action": policy.publication.default_action,
    }


def capture_paths() -> dict:
    """Which capture paths the policy in force turns on, as ``learnings.capture.capture_run`` applies them.

    - run summaries (``capture.run_summary_candidates``, on by default): one ``run_summary`` candidate per
      terminal run that has a run-memory record; it can be published but never reaches a prompt (§4.7).
    - semantic capture (``capture.semantic_candidates.enabled``, off by default as the reference ships it),
      completed runs only: the heuristic first (labelled ``Preference:`` / ``Fact:`` / ``Decision:``
      statements in the run's request preview, no model); only when it finds none, the model extractor, which
      needs ``KHEISH_LLM_BASE_URL`` and a model (``KHEISH_LLM_MODEL`` or the policy's model override). With no
      model configured the extractor yields nothing (no error), so semantic capture is heuristic-only; there
      is no separate "heuristic only" switch. Runs that finished while semantic capture was off keep a
      ``pending`` receipt and are captured by the beat replay once it is on.
    """
    policy, revision = policy_in_force.current_policy_and_revision()
    semantic = policy.capture.semantic_candidates
    override = semantic.model.generation.model if semantic.model and semantic.model.generation else None
    try:
        model = llm.model_config(model=override, timeout_ms=semantic.effective_timeout_ms)
    except llm.ModelError:
        model = None
    return {
        "revision": revision,
        "run_summary": policy.capture.run_summary_candidates,
        "semantic": semantic.enabled,
        "heuristic": semantic.enabled,  # the heuristic path runs whenever semantic capture does
        "model": semantic.enabled and model is not None,
        "model_configured": model is not None,
        "model_name": model.model if model is not None else None,
        "max_candidates": semantic.max_candidates_per_run,
        "preview_chars": PREVIEW_CHARS,
    }


def run_link(run_pk: int | None, fallback: str | None = None) -> dict | None:
    if run_pk:
        return {"label": public_ids.run_id(run_pk), "url": reverse("admin:memory_run_change", args=[run_pk])}
    return {"label": fallback, "url": None} if fallback else None
