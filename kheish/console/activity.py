"""The dashboard's activity feed in words an operator reads: repeated rows collapsed ("12 × reviewed, still
waiting"), and why automation did or did not act, without the engine's names for things (``ManualReview``,
``daemon``, ``shadow``).

The audit rows keep the reference's exact reasons (they are the record); only their display is translated
here. A reason this module does not know is shown as stored."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kheish.console.common import Stamp
from learnings.learning_policy import (
    REASON_API_ORIGIN_ACTIVE,
    REASON_PROCEDURE_ACTIVE,
    REASON_SECRET,
    REASON_UNNAMED_RULE,
)
from learnings.vocabulary import CandidateState
from memory.models import AuditEvent

ACTION_WORDS = {
    "manual_review": "wait for a person to review it",
    "reject": "reject it",
    "publish_provisional": "publish it at the provisional tier (kept out of prompts)",
    "publish_active": "publish it for prompts",
}
_DEBUG_ACTIONS = {
    "ManualReview": "manual_review",
    "Reject": "reject",
    "PublishProvisional": "publish_provisional",
    "PublishActive": "publish_active",
}
_FALLBACK = re.compile(r"no publication rule matched; falling back to (\w+)")
_RULE = re.compile(r"matched publication rule `([^`]*)`")
_CONFLICT = re.compile(r"escalated because candidate conflicts with active learning (\S+)")
_UNSUPPORTED = "retained as provisional because no daemon-owned evidence matched the candidate content"
ACTORS = {"daemon": "automation", "tests": "tests"}
VERBS = {
    "review": "reviewed",
    "publish": "published",
    "reject": "rejected",
    "escalate": "handed to a person",
    "create": "proposed",
    "revoke": "revoked",
    "supersede": "superseded",
    "set_policy": "policy changed",
}
MODE_WORDS = {
    "shadow": "Automation is set to propose only, so it changed nothing",
    "manual_only": "Automation is off (manual only), so it changed nothing",
    "enabled": "",
}


def reason_words(reason: str) -> str:
    """A stored review reason in plain words (unknown text is returned as it is)."""
    if not reason:
        return ""
    parts = []
    fallback = _FALLBACK.match(reason)
    head = fallback.group(0) if fallback else reason.split(";")[0].strip()
    rule = _RULE.search(head)
    if fallback:
        action = ACTION_WORDS.get(_DEBUG_ACTIONS.get(fallback.group(1), ""), fallback.group(1))
        parts.append(f"No publication rule matched, so the default applies: {action}")
    elif rule:
        parts.append(f"Publication rule “{rule.group(1)}” matched")
    elif head == REASON_UNNAMED_RULE:
        parts.append("An unnamed publication rule matched")
    elif head == REASON_SECRET:
        parts.append("It looks like it holds a secret, so it is rejected")
    elif head == REASON_PROCEDURE_ACTIVE:
        parts.append("Procedures are never published for prompts automatically; a person decides")
    elif head == REASON_API_ORIGIN_ACTIVE.split(";")[0]:
        parts.append("Proposed through the API, so automation may only publish it provisionally")
    else:
        parts.append(head)
    conflict = _CONFLICT.search(reason)
    if conflict:
        parts.append(f"it contradicts active learning {conflict.group(1)}, so a person decides")
    if _UNSUPPORTED in reason:
        parts.append("its source run did not back it up, so it stays out of prompts (provisional)")
    sentence = "; ".join(parts)
    return sentence[:1].upper() + sentence[1:] + "."


def event_words(event: AuditEvent) -> str:
    """Why automation did (or did not) act, for an automation review row; the reason otherwise."""
    data = event.data or {}
    words = reason_words(event.reason)
    if event.action == "review" and event.from_state == event.to_state:
        mode = MODE_WORDS.get(data.get("mode") or "", "")
        if event.to_state == CandidateState.PENDING and mode:
            return f"{mode}: it would {ACTION_WORDS.get(data.get('action') or '', 'act')}. {words}".strip()
        if event.to_state == CandidateState.PUBLISHED:
            return f"Already published by a person; automation's review is kept for the record. {words}".strip()
    return words


def review_words(review: dict) -> str:
    """A candidate's stored automation review (``automation_review``) in plain words: what it proposed, why,
    and whether it acted."""
    if not review:
        return ""
    action = review.get("action") or ""
    mode = MODE_WORDS.get(review.get("mode") or "", "")
    why = reason_words(review.get("reason") or "")
    if mode:
        return f"{mode}: it would {ACTION_WORDS.get(action, 'act')}. {why}".strip()
    return f"Automation chose to {ACTION_WORDS.get(action, action or 'act')}. {why}".strip()


@dataclass
class FeedRow:
    event: AuditEvent
    when: Stamp
    count: int = 1
    subject_ids: list[str] = field(default_factory=list)
    verb: str = ""
    actor: str = ""
    why: str = ""

    @property
    def more(self) -> int:
        return max(0, len(self.subject_ids) - 3)

    @property
    def shown_ids(self) -> list[str]:
        return self.subject_ids[:3]


def _key(event: AuditEvent, why: str) -> tuple:
    return (event.subject_type, event.action, event.from_state, event.to_state, event.actor, why)


def feed(events: Iterable[AuditEvent], limit: int) -> list[FeedRow]:
    """Newest first; consecutive rows that say the same thing (same kind of subject, action, states, actor and
    reason) become one row with a count and their subjects; at most ``limit`` rows."""
    rows: list[FeedRow] = []
    last_key = None
    for event in events:
        why = event_words(event)
        key = _key(event, why)
        if rows and key == last_key:
            rows[-1].count += 1
            if event.subject_id not in rows[-1].subject_ids:
                rows[-1].subject_ids.append(event.subject_id)
            continue
        if len(rows) >= limit:
            break
        rows.append(
            FeedRow(
                event=event,
                when=Stamp(event.at_ms),
                subject_ids=[event.subject_id],
                verb=VERBS.get(event.action, event.action.replace("_", " ")),
                actor=ACTORS.get(event.actor, event.actor),
                why=why,
            )
        )
        last_key = key
    return rows


def recent(subject_types: Sequence[str], limit: int = 12, scan: int = 200) -> list[FeedRow]:
    """The feed of the latest governance events (at most ``scan`` rows read)."""
    events = AuditEvent.objects.filter(subject_type__in=subject_types).order_by("-id")[:scan]
    return feed(events, limit)
