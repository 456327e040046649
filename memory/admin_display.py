"""What the admin pages of every app (``memory``, ``learnings``, ``skills``) use to show stored values to a person:
epoch-millisecond columns as dates (``ms_column``) and JSON fields pretty-printed (``json_column``). The stored
value stays one hover away (the ``<time>`` element's ``title``) for anyone matching it against the API."""

from __future__ import annotations

import json
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
    return format_html('<time datetime="{}" title="{} ms since the epoch">{}</time>', moment.isoformat(), value,
                       moment.strftime("%Y-%m-%d %H:%M:%S UTC"))


def json_pre(value: Any):
    """A JSON value pretty-printed in a ``<pre>`` (HTML-escaped); ``—`` when null."""
    if value is None:
        return EMPTY
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)
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
