"""Every form of the operator console, one per workflow, used by the console's pages and by the changelists'
bulk actions alike (``kheish.console.bulk``): publish, reason + confirmation (reject, revoke, rollback, bulk
revoke), supersede, promote, rollout check, skill status, the two policy editors, search.

The forms only parse what the operator typed into the shapes the services take. They deliberately carry no
range checks of their own: bounds are enforced by the same code as the API (``LearningPolicy.validate``,
``RunMemoryPolicy.validate``, the learning and skills services), so the operator reads the same literal
messages an API client gets. Only type coercion (a number field holding letters) is Django's.
"""

from __future__ import annotations

from typing import cast

import humanfriendly
from django import forms
from django.forms import formset_factory

from learnings.learning_policy import ACTIONS, MODES, RANKERS, RETRIEVAL_MAX_ENTRIES_LIMIT, RETRIEVAL_MAX_TOKENS_LIMIT
from learnings.models import LearningKind, PublishTier, ScopeKind, Sensitivity
from learnings.vocabulary import PROMOTABLE_KINDS, PROMPT_KINDS, kind_plural, listing
from memory.admin_display import MODE_LABELS
from memory.run_memory_policy import SEARCH_VISIBILITIES
from skills.models import RolloutKind

DRY_RUN_SIZES = (10, 20, 50, 100)
BLANK = [("", "—")]


def _choices(values) -> list[tuple[str, str]]:
    return [(value, value) for value in values]


def split_lines(value: str) -> list[str]:
    """One item per line; lines that are completely empty are ignored (whitespace-only lines are kept, so the
    policy's own "must not be empty" message can speak)."""
    return [line for line in (value or "").splitlines() if line != ""]


def split_tools(value: str) -> list[str]:
    return [item.strip() for item in (value or "").replace("\n", ",").split(",") if item.strip()]


# ---- review queue -----------------------------------------------------------------------------------------


class PublishForm(forms.Form):
    """Publish a candidate; the bulk action shows only the tier (``supersedes`` is for one candidate). With a
    ``candidate`` the tier labels and help say what publishing *that* candidate gives (``explain``: the
    ``Learning.is_prompt_eligible`` of the learning it would become); without one (bulk), the general rule."""

    publish_tier = forms.ChoiceField(
        choices=PublishTier.choices,
        initial=PublishTier.ACTIVE,
        label="Publish tier",
        help_text=f"Only {listing([kind_plural(k) for k in PROMPT_KINDS], sep=', ', last=' and ')} that are not "
        "sensitive reach a prompt, and only at the active tier; provisional learnings are kept, never "
        "injected.",
    )
    supersedes = forms.CharField(
        required=False,
        max_length=40,
        label="Supersedes (optional)",
        help_text="A learning id such as learning-12: publish as its replacement (needs the active tier).",
    )

    def __init__(self, *args, candidate=None, **kwargs):
        super().__init__(*args, **kwargs)
        from kheish.console import explain

        field = self.fields["publish_tier"]
        field.choices = explain.publish_tier_choices(candidate)
        if candidate is None:
            return
        eligible, reasons = explain.publish_outcome(candidate, PublishTier.ACTIVE)
        if eligible:
            field.help_text = (
                "active: this learning enters a prompt when the input matches it · provisional: kept, never injected."
            )
        else:
            field.help_text = (
                f"Neither tier puts this {candidate.get_kind_display().lower()} in a prompt: "
                f"{'; '.join(reasons)}. Publishing keeps it as a governed learning (searchable, "
                "auditable" + (", promotable to a skill" if candidate.kind in PROMOTABLE_KINDS else "") + ")."
            )


class ReasonForm(forms.Form):
    """The second step of a destructive action (one object or a bulk selection): an optional reason and an
    explicit confirmation (``confirm=yes``, a hidden field of the confirmation page)."""

    reason = forms.CharField(
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3}),
        label="Reason (optional, kept in the audit trail)",
    )
    confirm = forms.CharField(widget=forms.HiddenInput, initial="yes")

    def clean_confirm(self):
        if self.cleaned_data["confirm"] != "yes":
            raise forms.ValidationError("Confirm the action to proceed.")
        return "yes"


# ---- learnings --------------------------------------------------------------------------------------------


class SupersedeForm(forms.Form):
    content = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4}), max_length=100_000, strip=False, label="Corrected content"
    )
    confidence = forms.IntegerField(required=False, label="Confidence (blank keeps the current one)")


class PromoteForm(forms.Form):
    skill_name = forms.CharField(
        max_length=200,
        help_text="ASCII letters, digits, ':', '_' and '-'; at most 64 characters.",
    )
    description = forms.CharField(max_length=1024, required=False, help_text="One line; blank uses the default.")
    when_to_use = forms.CharField(max_length=1024, required=False)
    version = forms.CharField(max_length=64, required=False)
    instructions = forms.CharField(widget=forms.Textarea(attrs={"rows": 8}), max_length=20_000)
    allowed_tools = forms.CharField(max_length=4000, required=False, help_text="Comma-separated.")
    blocked_tools = forms.CharField(max_length=4000, required=False, help_text="Comma-separated.")


# ---- skills -----------------------------------------------------------------------------------------------


class RolloutForm(forms.Form):
    kind = forms.ChoiceField(choices=RolloutKind.choices, label="Kind of check")
    run_id = forms.CharField(max_length=40, label="Run id", help_text="A completed run, e.g. run-12.")
    expected_output_contains = forms.CharField(
        max_length=2000,
        label="Expected output marker",
        help_text="The run's latest output must contain it.",
    )
    definition_fingerprint = forms.CharField(
        max_length=64,
        required=False,
        label="Definition fingerprint",
        help_text="The definition this evidence is for; refused if the skill changed since.",
    )


class SkillStatusForm(forms.Form):
    status = forms.ChoiceField(choices=[], label="Move to")

    def __init__(self, *args, allowed: list[str], **kwargs):
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["status"]).choices = _choices(allowed)


# ---- policies ---------------------------------------------------------------------------------------------


class RuleForm(forms.Form):
    """One publication rule. Every field is optional here; a row left entirely blank is ignored, and the
    policy parser reports the rest (``publication.rules[0].action is required`` and the §3.2 messages)."""

    name = forms.CharField(required=False, max_length=200)
    scope_kind = forms.ChoiceField(required=False, choices=BLANK + list(ScopeKind.choices), label="Scope kind")
    scope_id = forms.CharField(required=False, max_length=200, strip=False, label="Scope id")
    kind = forms.ChoiceField(required=False, choices=BLANK + list(LearningKind.choices))
    sensitivity = forms.ChoiceField(required=False, choices=BLANK + list(Sensitivity.choices))
    min_confidence = forms.IntegerField(required=False, label="Min confidence")
    require_evidence = forms.BooleanField(required=False, label="Evidence")
    require_source_run = forms.BooleanField(required=False, label="Source run")
    require_source_session = forms.BooleanField(required=False, label="Source session")
    action = forms.ChoiceField(required=False, choices=BLANK + _choices(ACTIONS))
    expires_after_ms = forms.IntegerField(required=False, label="Expires after (ms)")

    TEXT = ("name", "scope_kind", "scope_id", "kind", "sensitivity", "action")
    NUMBERS = ("min_confidence", "expires_after_ms")
    FLAGS = ("require_evidence", "require_source_run", "require_source_session")

    @classmethod
    def initial_for(cls, rule: dict) -> dict:
        return {name: ("" if rule.get(name) is None else rule.get(name)) for name in cls.base_fields}

    def is_blank(self) -> bool:
        data = self.cleaned_data
        return not any(data.get(name) not in (None, "") for name in (*self.TEXT, *self.NUMBERS)) and not any(
            data.get(name) for name in self.FLAGS
        )

    def rule(self) -> dict:
        """The rule as the API takes it: blank optional fields are left out."""
        data = self.cleaned_data
        rule: dict = {}
        for name in self.TEXT:
            if data.get(name) not in (None, ""):
                rule[name] = data[name]
        for name in self.NUMBERS:
            if data.get(name) is not None:
                rule[name] = data[name]
        for name in self.FLAGS:
            rule[name] = bool(data.get(name))
        return rule


RuleFormSet = formset_factory(RuleForm, extra=0, can_delete=True)


class LearningPolicyForm(forms.Form):
    mode = forms.ChoiceField(
        choices=[(mode, f"{MODE_LABELS[mode]} · {mode}") for mode in MODES],
        label="Automated review",
        help_text=(
            "off: nothing is evaluated, people review every candidate · dry run: rules and judge run and their "
            "proposal is shown in the review queue, nothing is published · on: the automated review acts on its "
            "decision."
        ),
    )
    run_summary_candidates = forms.BooleanField(
        required=False, label="Run-summary capture", help_text="One sensitive run_summary candidate per terminal run."
    )
    semantic_enabled = forms.BooleanField(
        required=False, label="Semantic capture", help_text="Facts, preferences and decisions from completed runs."
    )
    max_candidates_per_run = forms.IntegerField(label="Max candidates per run", help_text="1 to 8.")
    semantic_timeout_ms = forms.IntegerField(required=False, label="Extractor timeout (ms)", help_text="Blank: 15000.")
    judge_enabled = forms.BooleanField(required=False, label="Model judge")
    judge_timeout_ms = forms.IntegerField(required=False, label="Judge timeout (ms)", help_text="Blank: 15000.")
    default_action = forms.ChoiceField(
        choices=_choices(ACTIONS),
        label="Default action",
        help_text="When no rule matches (publish_active is not allowed here).",
    )
    allow_api_origin_active_publication = forms.BooleanField(
        required=False,
        label="API-origin gate open",
        help_text="Let API-origin candidates be auto-published at the active tier (off: they stay provisional).",
    )
    quarantined_rule_names = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        strip=False,
        label="Quarantined rules",
        help_text="One rule name per line; a quarantined rule is skipped during evaluation.",
    )
    retrieval_ranker = forms.ChoiceField(
        choices=_choices(RANKERS),
        label="Ranker",
        help_text="hybrid: full-text (stemmed, BM25) fused with embedding similarity, from indexes · lexical: "
        "word-overlap scoring only (no index, no embeddings).",
    )
    retrieval_max_tokens = forms.IntegerField(
        label="Learned-context budget (tokens)",
        help_text=f"0 to {RETRIEVAL_MAX_TOKENS_LIMIT}; the prompt window's budget still applies if smaller.",
    )
    retrieval_max_entries = forms.IntegerField(
        label="Learned-context entries", help_text=f"1 to {RETRIEVAL_MAX_ENTRIES_LIMIT}."
    )
    retrieval_standing_tokens = forms.IntegerField(
        label="Standing preferences budget (tokens)",
        help_text=f"0 to {RETRIEVAL_MAX_TOKENS_LIMIT}: the part of learned context kept for the session's "
        "preferences and decisions, which enter whatever the input's words (at most half the "
        "section; 0: off; hybrid ranker only).",
    )
    expected_revision = forms.IntegerField(widget=forms.HiddenInput, min_value=0)
    dry_run_size = forms.TypedChoiceField(
        choices=[(n, n) for n in DRY_RUN_SIZES], coerce=int, initial=20, label="Dry run over the last"
    )

    @classmethod
    def initial_for(cls, policy: dict, revision: int | None) -> dict:
        semantic = policy["capture"]["semantic_candidates"]
        publication = policy["publication"]
        return {
            "mode": policy["mode"],
            "run_summary_candidates": policy["capture"]["run_summary_candidates"],
            "semantic_enabled": semantic["enabled"],
            "max_candidates_per_run": semantic["max_candidates_per_run"],
            "semantic_timeout_ms": semantic["timeout_ms"],
            "judge_enabled": policy["judge"]["enabled"],
            "judge_timeout_ms": policy["judge"]["timeout_ms"],
            "default_action": publication["default_action"],
            "allow_api_origin_active_publication": publication["allow_api_origin_active_publication"],
            "quarantined_rule_names": "\n".join(publication["quarantined_rule_names"]),
            "retrieval_ranker": policy["retrieval"]["ranker"],
            "retrieval_max_tokens": policy["retrieval"]["max_tokens"],
            "retrieval_max_entries": policy["retrieval"]["max_entries"],
            "retrieval_standing_tokens": policy["retrieval"]["standing_tokens"],
            "expected_revision": revision,
            "dry_run_size": 20,
        }

    def policy(self, rules: list[dict], base: dict) -> dict:
        """The whole policy object; model overrides the console does not edit are kept from ``base``."""
        data = self.cleaned_data
        return {
            "mode": data["mode"],
            "capture": {
                "run_summary_candidates": data["run_summary_candidates"],
                "semantic_candidates": {
                    **base["capture"]["semantic_candidates"],
                    "enabled": data["semantic_enabled"],
                    "max_candidates_per_run": data["max_candidates_per_run"],
                    "timeout_ms": data["semantic_timeout_ms"],
                },
            },
            "publication": {
                "default_action": data["default_action"],
                "allow_api_origin_active_publication": data["allow_api_origin_active_publication"],
                "quarantined_rule_names": split_lines(data["quarantined_rule_names"]),
                "rules": rules,
            },
            "judge": {**base["judge"], "enabled": data["judge_enabled"], "timeout_ms": data["judge_timeout_ms"]},
            "retrieval": {
                "ranker": data["retrieval_ranker"],
                "max_tokens": data["retrieval_max_tokens"],
                "max_entries": data["retrieval_max_entries"],
                "standing_tokens": data["retrieval_standing_tokens"],
            },
        }


UNITS_MS = (("day", 86_400_000), ("hour", 3_600_000), ("minute", 60_000), ("second", 1000))


def human_duration(ms: object) -> str:
    """Milliseconds as the largest whole unit that expresses them exactly: ``2592000000`` → ``30 days``."""
    if isinstance(ms, bool) or not isinstance(ms, int):
        return "" if ms is None else str(ms)
    for unit, size in UNITS_MS:
        if ms and ms % size == 0:
            count = ms // size
            return f"{count} {unit}{'' if count == 1 else 's'}"
    return str(ms)


class DurationMsField(forms.Field):
    """A duration typed the way people write one ("7 days", "12h", "1.5 hours"; humanfriendly's parser), or a
    bare number of milliseconds; cleaned to integer milliseconds. Shown as ``30 days``."""

    widget = forms.TextInput

    def prepare_value(self, value):
        return human_duration(value) if isinstance(value, int) and not isinstance(value, bool) else value

    def to_python(self, value):
        text = str(value if value is not None else "").strip()
        if not text:
            raise forms.ValidationError("Enter a duration, such as 30 days or 12h.", code="required")
        if text.isdigit():
            return int(text)
        try:
            seconds = humanfriendly.parse_timespan(text)
        except humanfriendly.InvalidTimespan:
            raise forms.ValidationError(
                f"{text!r} is not a duration: write e.g. 30 days, 12h or 90 minutes.", code="invalid"
            ) from None
        return round(seconds * 1000)


class RunMemoryPolicyForm(forms.Form):
    enabled = forms.BooleanField(
        required=False,
        label="Recovered run memory",
        help_text="Off: no records are kept and existing ones are pruned on save.",
    )
    retention_ms = DurationMsField(
        label="Retention",
        help_text="How long a finished run is remembered: e.g. 30 days, 12h, 90 minutes, "
        "2 weeks (a bare number is milliseconds, as in the API).",
    )
    max_tracked_per_session = forms.IntegerField(label="Records kept per session")
    max_prompt_entries = forms.IntegerField(
        label="Entries per prompt", help_text="At most the number of records kept per session."
    )
    redact_pii = forms.BooleanField(
        required=False, label="Redact PII", help_text="Emails, phones, cards, SSNs are scrubbed from the records."
    )
    search_visibility = forms.ChoiceField(
        choices=_choices(SEARCH_VISIBILITIES),
        label="Search visibility",
        help_text="session_only: a session searches its own runs · learning_scopes: also the runs of sessions "
        "that share a persona or project with it, both agents being granted it now (the workspace alone "
        "shares nothing) · workspace: every session's runs, every agent's · injection into prompts "
        "stays session-only whatever you choose.",
    )
    expected_revision = forms.IntegerField(widget=forms.HiddenInput, min_value=0)

    FIELDS = (
        "enabled",
        "retention_ms",
        "max_tracked_per_session",
        "max_prompt_entries",
        "redact_pii",
        "search_visibility",
    )

    def policy(self) -> dict:
        return {name: self.cleaned_data[name] for name in self.FIELDS}


# ---- search -----------------------------------------------------------------------------------------------


class SearchForm(forms.Form):
    session = forms.ChoiceField(choices=[], label="Session")
    q = forms.CharField(
        required=False,
        max_length=1000,
        label="Query",
        help_text="Blank: browse what this session can see, most recent first.",
    )
    limit = forms.IntegerField(required=False, min_value=1, max_value=50, initial=12, label="Hits")

    def __init__(self, *args, sessions: list[tuple[str, str]], **kwargs):
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["session"]).choices = sessions
