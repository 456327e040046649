"""What one request may store, and what one list page may carry (issue 19.8). Settings, with their defaults:

* ``KHEISH_MAX_METADATA_BYTES`` (16 KiB): a session's ``metadata`` and a run's ``input.metadata``, measured as
  compact UTF-8 JSON. Larger → 400 ``metadata_too_large`` naming the field and the limit. Metadata is the
  caller's own bookkeeping; it is copied into every list that shows the record, so it is kept small.
* ``KHEISH_MAX_PAGE_BYTES`` (2 MiB): a list page stops early once its items reach this many bytes (at least one
  item is always served); its ``next`` link continues right after the last item served
  (``kheish.api.pagination``). Page sizes are capped too: ``limit`` is at most 500.

Both are measured the same way (``json_bytes``).
"""

from __future__ import annotations

import json

from django.conf import settings

from memory.errors import ValidationFailed

DEFAULT_MAX_METADATA_BYTES = 16 * 1024
DEFAULT_MAX_PAGE_BYTES = 2 * 1024 * 1024


def json_bytes(value: object) -> int:
    """Size of ``value`` as compact UTF-8 JSON (what a response or the database stores, give or take)."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str).encode("utf-8"))


def max_metadata_bytes() -> int:
    return int(getattr(settings, "KHEISH_MAX_METADATA_BYTES", DEFAULT_MAX_METADATA_BYTES))


def max_page_bytes() -> int:
    return int(getattr(settings, "KHEISH_MAX_PAGE_BYTES", DEFAULT_MAX_PAGE_BYTES))


def check_metadata(value: object, *, field: str) -> None:
    """400 ``metadata_too_large`` when ``value`` exceeds ``KHEISH_MAX_METADATA_BYTES`` as JSON."""
    limit = max_metadata_bytes()
    if value is None:
        return
    size = json_bytes(value)
    if size > limit:
        raise ValidationFailed(
            f"{field} is {size} bytes as JSON; at most {limit} bytes are stored per object (KHEISH_MAX_METADATA_BYTES)",
            field=field,
            code="metadata_too_large",
        )
