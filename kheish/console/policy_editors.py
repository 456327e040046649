"""The two policy editors, the only ones (the learning policy and the run-memory policy), at ``policy/`` and
``policy/run-memory/``. Each posts a dry run first — what the edited policy would decide (learning: the
publication rules over the last N candidates; run memory: what enforcement would prune) and a diff against the
policy in force — and saves only the policy whose dry run was shown (a digest of it travels with the form).
Validation is the policy code's own (``learnings.policy_in_force.parse_request``, ``memory.run_memory``), so the
operator reads the API's literal messages; saving is ``learnings.services.set_policy`` / ``run_memory.set_policy``,
which write the revision and the audit event. The revision history can load an old revision into the editor."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from kheish.console.common import Stamp, learning_status_line, render
from kheish.console.forms import LearningPolicyForm, RuleForm, RuleFormSet, RunMemoryPolicyForm, human_duration
from learnings import policy_in_force
from learnings import services as learning_services
from learnings.learning_policy import ACTIONS, LearningPolicy, evaluate_candidate
from learnings.models import CandidateState, LearningCandidate
from memory import run_memory
from memory.clock import now_ms
from memory.errors import AppError
from memory.models import AuditEvent, PolicyKind, PolicyRevision

ENABLED_OUTCOME = {
    "manual_review": "escalated to an operator",
    "reject": "rejected",
    "publish_provisional": "published provisional",
    "publish_active": "published active if verified against its source run, else provisional",
}


def _digest(policy: dict) -> str:
    return hashlib.sha256(json.dumps(policy, sort_keys=True).encode()).hexdigest()


def _flatten(value, prefix: str = "") -> dict[str, object]:
    """Leaf paths of a policy; each publication rule is one leaf showing only the fields it sets."""
    if isinstance(value, dict):
        out: dict[str, object] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}.{key}" if prefix else key))
        return out
    if prefix.endswith("rules") and isinstance(value, list):
        return {
            f"{prefix}[{index}]": json.dumps({k: v for k, v in rule.items() if v not in (None, False)})
            for index, rule in enumerate(value)
        }
    if prefix.endswith("retention_ms") and isinstance(value, int) and not isinstance(value, bool):
        return {prefix: f"{human_duration(value)} ({value} ms)"}  # people read durations, the API keeps ms
    return {prefix: json.dumps(value)}


def policy_diff(before: dict, after: dict) -> list[dict]:
    """Changed settings, one row per leaf path (a rule is one leaf): ``{path, before, after}``."""
    old, new = _flatten(before), _flatten(after)
    return [
        {"path": key, "before": old.get(key, "—"), "after": new.get(key, "—")}
        for key in sorted(set(old) | set(new), key=lambda k: (k.split("[")[0], k))
        if old.get(key) != new.get(key)
    ]


def policy_history(kind: str) -> list[dict]:
    rows = list(PolicyRevision.objects.filter(kind=kind).order_by("-revision")[:15])
    changed = {
        event.to_state: (event.data or {}).get("changed", [])
        for event in AuditEvent.objects.filter(
            subject_type="policy", subject_id=kind, to_state__in=[f"r{row.revision}" for row in rows]
        )
    }
    return [
        {
            "row": row,
            "when": Stamp(row.created_at_ms),
            "changed": changed.get(f"r{row.revision}", []),
            "url": reverse("admin:memory_policyrevision_change", args=[row.pk]),
        }
        for row in rows
    ]


RULE_INDEX = re.compile(r"publication\.rules\[(\d+)\]")
LEARNING_FIELDS = {
    "mode": "mode",
    "capture.run_summary_candidates": "run_summary_candidates",
    "capture.semantic_candidates.enabled": "semantic_enabled",
    "capture.semantic_candidates.max_candidates_per_run": "max_candidates_per_run",
    "capture.semantic_candidates.timeout_ms": "semantic_timeout_ms",
    "judge.enabled": "judge_enabled",
    "judge.timeout_ms": "judge_timeout_ms",
    "publication.default_action": "default_action",
    "publication.allow_api_origin_active_publication": "allow_api_origin_active_publication",
    "publication.quarantined_rule_names": "quarantined_rule_names",
    "retrieval.ranker": "retrieval_ranker",
    "retrieval.max_tokens": "retrieval_max_tokens",
    "retrieval.max_entries": "retrieval_max_entries",
    "retrieval.standing_tokens": "retrieval_standing_tokens",
}


def _field_of(field: str | None, mapping: dict[str, str]) -> str | None:
    name = (field or "").removeprefix("policy.")
    name = re.sub(r"\[\d+\]$", "", name)
    return mapping.get(name)


def _edit_rows(data, action: str) -> None:
    """ "Add a rule" and "move up/down" edit the posted rows in place (nothing is validated or saved)."""
    total = int(data.get("rules-TOTAL_FORMS") or 0)
    if action == "add_rule":
        data["rules-TOTAL_FORMS"] = str(total + 1)
        return
    verb, _, index = action.partition(":")
    if not index.isdigit():
        return
    i = int(index)
    j = i - 1 if verb == "up" else i + 1
    if not (0 <= i < total and 0 <= j < total):
        return
    names = list(RuleForm.base_fields) + ["DELETE"]
    for name in names:
        a, b = f"rules-{i}-{name}", f"rules-{j}-{name}"
        va, vb = data.getlist(a), data.getlist(b)
        data.setlist(a, vb)
        data.setlist(b, va)


def dry_run(new: LearningPolicy, old: LearningPolicy, size: int) -> dict:
    """What ``new`` (and the policy in force) would decide for the last ``size`` candidates: the publication
    rules of §4.10 only — the judge and verification need the model and the moment of review. Pure: nothing
    is written."""
    at = now_ms()
    rows: list[dict[str, Any]] = []
    for candidate in LearningCandidate.objects.order_by("-id")[:size]:
        after = evaluate_candidate(new, candidate, now_ms=at)
        before = evaluate_candidate(old, candidate, now_ms=at)
        rows.append(
            {
                "candidate": candidate,
                "before": before,
                "after": after,
                "changed": (before.action, before.matched_rule_name) != (after.action, after.matched_rule_name),
                "url": reverse("admin:learnings_learningcandidate_change", args=[candidate.pk]),
            }
        )
    totals = {action: sum(1 for row in rows if row["after"].action == action) for action in ACTIONS}
    pending = sum(1 for row in rows if row["candidate"].state == CandidateState.PENDING)
    return {
        "rows": rows,
        "size": size,
        "totals": totals,
        "changed": sum(1 for row in rows if row["changed"]),
        "pending": pending,
        "mode": new.mode,
        "outcomes": ENABLED_OUTCOME,
    }


@require_http_methods(["GET", "POST"])
def learning_policy(request: HttpRequest) -> HttpResponse:
    current, revision = policy_in_force.current_policy_and_revision()
    current_dict = current.to_dict()
    errors: list[str] = []
    preview = None
    notice = None
    show_errors = True
    if request.method == "POST":
        action = request.POST.get("action", "dry_run")
        data = request.POST.copy()
        if action not in ("dry_run", "save"):
            _edit_rows(data, action)
            show_errors = False
        form = LearningPolicyForm(data)
        rules = RuleFormSet(data, prefix="rules")
        if action in ("dry_run", "save"):
            rule_forms = [
                f for f in rules.forms if f.is_valid() and not f.cleaned_data.get("DELETE") and not f.is_blank()
            ]
            if form.is_valid() and rules.is_valid():
                body = {
                    "policy": form.policy([f.rule() for f in rule_forms], current_dict),
                    "expected_revision": form.cleaned_data["expected_revision"],
                }
                try:
                    parsed, expected = policy_in_force.parse_request(body)
                except AppError as exc:
                    errors.append(exc.detail)
                    match = RULE_INDEX.search(exc.field or "")
                    if match and int(match.group(1)) < len(rule_forms):
                        rule_forms[int(match.group(1))].add_error(None, exc.detail)
                    elif _field_of(exc.field, LEARNING_FIELDS):
                        form.add_error(_field_of(exc.field, LEARNING_FIELDS), exc.detail)
                else:
                    digest = _digest(parsed.to_dict())
                    if action == "save" and request.POST.get("previewed") == digest:
                        try:
                            saved, new_revision = learning_services.set_policy(body, actor=request.user)
                        except AppError as exc:
                            errors.append(exc.detail)
                        else:
                            messages.success(
                                request,
                                f"Learning policy saved as revision {new_revision} "
                                f"(automation {saved.mode}). Pending candidates are "
                                "queued for review under it.",
                            )
                            return HttpResponseRedirect(reverse("console:learning-policy"))
                    else:
                        if action == "save":
                            notice = "The policy changed since its dry run. Check this dry run, then save."
                        size = form.cleaned_data["dry_run_size"]
                        preview = dry_run(parsed, current, size)
                        preview["digest"] = digest
                        preview["diff"] = policy_diff(current_dict, parsed.to_dict())
                        form = LearningPolicyForm(
                            initial={**LearningPolicyForm.initial_for(parsed.to_dict(), expected), "dry_run_size": size}
                        )
                        rules = RuleFormSet(
                            initial=[RuleForm.initial_for(rule) for rule in parsed.to_dict()["publication"]["rules"]]
                            + [{}],
                            prefix="rules",
                        )
            else:
                errors.append("Correct the highlighted fields.")
    else:
        source = current_dict
        loaded = request.GET.get("revision", "")
        if loaded.isdigit():
            row = PolicyRevision.objects.filter(kind=PolicyKind.LEARNING, revision=int(loaded)).first()
            if row is not None:
                try:
                    source = LearningPolicy.from_dict(row.policy).to_dict()
                    notice = (
                        f"Revision {row.revision} is loaded into the editor. Run a dry run, then save to restore it."
                    )
                except Exception:  # noqa: BLE001 - an unreadable old revision is reported, not fatal
                    notice = f"Revision {row.revision} cannot be loaded: it no longer parses."
        form = LearningPolicyForm(initial=LearningPolicyForm.initial_for(source, revision))
        rules = RuleFormSet(
            initial=[RuleForm.initial_for(rule) for rule in source["publication"]["rules"]] + [{}], prefix="rules"
        )
    return render(
        request,
        "learning_policy.html",
        "Learning policy",
        tab="policy",
        form=form,
        rules=rules,
        errors=errors,
        preview=preview,
        notice=notice,
        show_errors=show_errors,
        revision=revision,
        status_line=learning_status_line(),
        history=policy_history(PolicyKind.LEARNING),
        http_status=400 if errors else 200,
    )


# ---- run-memory policy ------------------------------------------------------------------------------------


@require_http_methods(["GET", "POST"])
def run_memory_policy(request: HttpRequest) -> HttpResponse:
    current = run_memory.current_policy()
    revision = run_memory.policy_revision()
    errors: list[str] = []
    preview = None
    notice = None
    if request.method == "POST":
        action = request.POST.get("action", "dry_run")
        form = RunMemoryPolicyForm(request.POST)
        if form.is_valid():
            data = form.policy()
            try:
                parsed = run_memory.parse_policy(data)
            except AppError as exc:
                errors.append(exc.detail)
                name = (exc.field or "").removeprefix("policy.")
                if name in RunMemoryPolicyForm.FIELDS:
                    form.add_error(name, exc.detail)
            else:
                digest = _digest(parsed.to_dict())
                if action == "save" and request.POST.get("previewed") == digest:
                    try:
                        _, new_revision, report = run_memory.set_policy(
                            data=data, expected_revision=form.cleaned_data["expected_revision"], actor=request.user
                        )
                    except AppError as exc:
                        errors.append(exc.detail)
                    else:
                        messages.success(
                            request,
                            f"Run-memory policy saved as revision {new_revision}; "
                            f"{report['pruned_ttl_count']} expired and "
                            f"{report['pruned_overflow_count']} overflow "
                            f"record{pluralize(report['pruned_overflow_count'])} pruned.",
                        )
                        return HttpResponseRedirect(reverse("console:run-memory-policy"))
                else:
                    if action == "save":
                        notice = "The policy changed since its dry run. Check this dry run, then save."
                    report = run_memory.enforce_policy(policy=parsed, source="console_dry_run", apply=False)
                    preview = {
                        "report": report,
                        "digest": digest,
                        "diff": policy_diff(current.to_dict(), parsed.to_dict()),
                    }
        else:
            errors.append("Correct the highlighted fields.")
    else:
        source = current.to_dict()
        loaded = request.GET.get("revision", "")
        if loaded.isdigit():
            row = PolicyRevision.objects.filter(kind=PolicyKind.RUN_MEMORY, revision=int(loaded)).first()
            if row is not None:
                source = {**source, **{k: v for k, v in row.policy.items() if k in RunMemoryPolicyForm.FIELDS}}
                notice = f"Revision {row.revision} is loaded into the editor. Run a dry run, then save to restore it."
        form = RunMemoryPolicyForm(initial={**source, "expected_revision": revision})
    return render(
        request,
        "run_memory_policy.html",
        "Run-memory policy",
        tab="policy",
        form=form,
        errors=errors,
        preview=preview,
        notice=notice,
        revision=revision,
        current=current,
        run_memory_status=run_memory.status_view(),
        history=policy_history(PolicyKind.RUN_MEMORY),
        http_status=400 if errors else 200,
    )
