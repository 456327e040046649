"""What the admin pages of every app (``memory``, ``learnings``, ``skills``) use to show stored values to a person:
epoch-millisecond columns as dates (``ms_column``) and JSON fields pretty-printed (``json_column``). The stored
value stays one hover away (the ``<time>`` element's ``title``) for anyone matching it against the API."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from django.contrib import admin
from django.utils.html import format_html

EMPTY = "—"


def ms_date(value: int | None):
    """An epoch-ms value as ``2025-05-01 12:00:03 UTC`` in a ``<time>`` element; ``—`` when empty."""
    if value is None:
        return EMPTY
    moment = datetime.fromtimestamp(value / 1000, UTC)
    return format_html(
        '<time datetime="{}" title="{} ms since the epoch">{}</time>',
        moment.isoformat(),
        value,
        moment.strftime("%Y-%m-%d %H:%M:%S UTC"),
    )


def readable_json(value: Any) -> Any:
    """``value`` with every epoch-millisecond number under a ``*_ms`` key shown as a date (``"2025-05-01
    12:00:03 UTC (1746100803000 ms)"``), for display only: a person reads dates, not epoch numbers."""
    if isinstance(value, dict):
        return {
            key: _readable_ms(item) if str(key).endswith("_ms") else readable_json(item) for key, item in value.items()
        }
    if isinstance(value, list):
        return [readable_json(item) for item in value]
    return value


def _readable_ms(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 10**14:
        return readable_json(value)
    moment = datetime.fromtimestamp(value / 1000, UTC)
    return f"{moment.strftime('%Y-%m-%d %H:%M:%S UTC')} ({value} ms)"


def json_pre(value: Any):
    """A JSON value pretty-printed in a ``<pre>`` (HTML-escaped), epoch-ms values as dates; ``—`` when null."""
    if value is None:
        return EMPTY
    text = json.dumps(readable_json(value), indent=2, ensure_ascii=False, sort_keys=False)
    return format_html('<pre class="json" style="white-space:pre-wrap;margin:0">{}</pre>', text)


def ms_column(field: str, description: str):
    """A ModelAdmin column (list_display / readonly_fields) showing ``field`` (epoch ms) as a date, sortable by
    the field: ``created = ms_column("created_at_ms", "Created")``."""

    @admin.display(description=description, ordering=field)
    def column(self, obj):
        return ms_date(getattr(obj, field))

    column.__name__ = field.removesuffix("_ms")
    return column


def json_column(field: str, description: str):
    """A read-only ModelAdmin field showing the JSON ``field`` pretty-printed."""

    @admin.display(description=description)
    def column(self, obj):
        return json_pre(getattr(obj, field))

    column.__name__ = f"{field}_json"
    return column


# ---- wire values in the words an operator reads (issue 25.3; docs/agents.md, "Glossary") -----------------------

MODE_LABELS = {
    "manual_only": "off (people review every candidate)",
    "shadow": "dry run (rules propose, people decide)",
    "enabled": "on (rules publish)",
}
"""The learning policy's modes as the console names them; the API keeps ``manual_only`` | ``shadow`` | ``enabled``."""

ACTION_WORDS = {
    "ManualReview": "manual review",
    "PublishProvisional": "publish provisional",
    "PublishActive": "publish active",
    "Reject": "reject",
}
_ACTION = re.compile(r"\b(" + "|".join(ACTION_WORDS) + r")\b")
AUTOMATIC_ACTOR = "daemon"
"""The actor of automatic steps (capture, automated review, maintenance) in audit rows and ``policy_actor``."""


def plain_reason(text: str | None) -> str:
    """A stored review reason with the reference's action spellings (``falling back to ManualReview``) in words."""
    return _ACTION.sub(lambda m: ACTION_WORDS[m.group(1)], text or "")


def actor_display(actor: str | None) -> str:
    """An audit or policy actor; the automatic one as "the service (automatic)"."""
    return "the service (automatic)" if actor == AUTOMATIC_ACTOR else (actor or "")


def readable_review(review: dict | None) -> dict | None:
    """An ``automation_review`` for display: its reasons in words, its dates as dates."""
    if not isinstance(review, dict):
        return review
    shown = readable_json(review)
    for key in ("reason",):
        if isinstance(shown.get(key), str):
            shown[key] = plain_reason(shown[key])
    judge = shown.get("judge")
    if isinstance(judge, dict) and isinstance(judge.get("reason"), str):
        shown["judge"] = {**judge, "reason": plain_reason(judge["reason"])}
    return shown
