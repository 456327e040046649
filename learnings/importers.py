"""Readers for ``manage.py import_memories``: what other memory systems export, as ``ImportItem`` records.

* ``jsonl`` (Kheish's own): one JSON object a line - ``content``, ``kind`` (default ``--kind``), ``scope``
  (``{"kind": "project", "id": "atlas"}`` or ``"project:atlas"``; default ``--scope``), optional
  ``external_id`` (or ``id``), ``stated_at_ms`` (or an ISO-8601 ``stated_at`` / ``created_at``), ``source``
  (a LearningSourceRef), ``evidence_refs``, ``confidence``, ``expires_at_ms``.
* ``mem0``: the output of mem0's ``Memory.get_all()`` - ``{"results": [{"id", "memory", "created_at",
  "user_id", "metadata", ...}]}`` - as one JSON document, a JSON list, or one memory a line.
* ``langgraph``: items of LangGraph's store (``BaseStore.search()`` / ``get()``, as ``Item.dict()``) -
  ``{"namespace": [...], "key", "value": {...}, "created_at", "updated_at"}`` - as a JSON list or one a line;
  the text is ``value["content"]`` (or ``text``, ``memory``, ``data``), the external id
  ``namespace/…/key``.

An item without an id of its own gets one from its scope, kind and content (so the same line imports once).
A line that cannot be read becomes an item with an error, reported with its line number, never a stop."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple, cast

from learnings.services.imports import ImportItem
from learnings.validation import LearningScope

FORMATS = ("jsonl", "mem0", "langgraph")
TEXT_KEYS = ("content", "text", "memory", "data")


@dataclass(frozen=True)
class Read:
    line: int
    item: ImportItem | None
    error: str | None = None


class ReadError(ValueError):
    pass


def parse_scope(value: object) -> LearningScope:
    """The scope as given, its id None or not a string maybe: ``import_batch`` normalises it (and reports an
    item whose scope it refuses), ``derived_id`` reads it as given."""
    if isinstance(value, dict):
        return LearningScope(kind=str(value.get("kind", "")), id=cast(str, value.get("id")))
    if isinstance(value, str) and value:
        kind, _, scope_id = value.partition(":")
        return LearningScope(kind=kind, id=cast(str, scope_id or None))
    raise ReadError("scope must be {'kind': ..., 'id': ...} or 'kind:id' (or pass --scope)")


def epoch_ms(value: object) -> int | None:
    """An int (epoch ms), or an ISO-8601 date-time (naive: UTC), as epoch milliseconds; None stays None."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ReadError("a timestamp must be epoch milliseconds or an ISO-8601 date-time")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as exc:
            raise ReadError(f"unreadable timestamp {value[:40]!r}") from exc
        if moment.tzinfo is None:
            from datetime import UTC

            moment = moment.replace(tzinfo=UTC)
        return int(moment.timestamp() * 1000)
    raise ReadError("a timestamp must be epoch milliseconds or an ISO-8601 date-time")


def derived_id(scope: LearningScope, kind: str, content: str) -> str:
    digest = hashlib.sha256(f"{scope.kind}:{scope.id}\n{kind}\n{content}".encode()).hexdigest()
    return f"sha256:{digest[:40]}"


def _records(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, decoded JSON) for a JSON document (a list, or an object with ``results``/``items``) or
    for JSON Lines; a line that is not JSON yields (line, ReadError)."""
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if stripped.startswith("[") or (stripped.startswith("{") and "\n{" not in stripped.strip()):
        try:
            document = json.loads(text)
        except json.JSONDecodeError:
            document = None
        if document is not None:
            if isinstance(document, dict):
                document = document.get("results", document.get("items", [document]))
            yield from enumerate(document if isinstance(document, list) else [], start=1)
            return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            yield number, ReadError(f"not JSON: {exc.msg}")


def count(path: Path) -> int:
    """How many records ``read`` will go through (at most that many memories): the entries of a JSON document,
    else the non-blank lines, without decoding each one."""
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if stripped.startswith("[") or (stripped.startswith("{") and "\n{" not in stripped.strip()):
        try:
            document = json.loads(text)
        except json.JSONDecodeError:
            document = None
        if document is not None:
            if isinstance(document, dict):
                document = document.get("results", document.get("items", [document]))
            return len(document) if isinstance(document, list) else 0
    return sum(1 for line in text.splitlines() if line.strip())


class _Fields(NamedTuple):
    """What a format says of one memory, before the checks every format shares."""

    content: object
    external: object
    stated_at_ms: int | None
    kind: object


def _jsonl_fields(record: dict, kind: object, default_kind: str) -> _Fields:
    stated = epoch_ms(record.get("stated_at_ms", record.get("stated_at", record.get("created_at"))))
    return _Fields(record.get("content"), record.get("external_id", record.get("id")), stated, kind)


def _mem0_fields(record: dict, kind: object, default_kind: str) -> _Fields:
    metadata = record.get("metadata")
    if record.get("kind") is None:
        kind = (metadata.get("kind") if isinstance(metadata, dict) else None) or default_kind
    return _Fields(record.get("memory"), record.get("id"), epoch_ms(record.get("created_at")), kind)


def _langgraph_fields(record: dict, kind: object, default_kind: str) -> _Fields:
    value = record.get("value")
    if not isinstance(value, dict):
        value = {}
    content = next((value[key] for key in TEXT_KEYS if isinstance(value.get(key), str)), None)
    namespace = record.get("namespace") or []
    key = record.get("key")
    external = "/".join([*map(str, namespace), str(key)]) if key is not None else None
    return _Fields(content, external, epoch_ms(record.get("created_at")), value.get("kind") or kind)


_FIELDS = {"jsonl": _jsonl_fields, "mem0": _mem0_fields, "langgraph": _langgraph_fields}


def _item(record: dict, *, fmt: str, default_scope: LearningScope | None, default_kind: str) -> ImportItem:
    if not isinstance(record, dict):
        raise ReadError("each memory must be a JSON object")
    scope = parse_scope(record["scope"]) if record.get("scope") is not None else default_scope
    if scope is None:
        raise ReadError("no scope: give each memory a scope, or pass --scope kind:id")
    content, external, stated, kind = _FIELDS[fmt](record, record.get("kind") or default_kind, default_kind)
    if not isinstance(content, str) or not content.strip():
        raise ReadError("no text: a memory needs its content")
    if not isinstance(kind, str):
        raise ReadError("kind must be a string")
    external = str(external) if external not in (None, "") else derived_id(scope, kind, content.strip())
    own = fmt == "jsonl"  # Kheish's own format carries provenance, evidence and expiry; the others do not
    return ImportItem(
        external_id=external,
        content=content,
        kind=kind,
        scope=scope,
        stated_at_ms=stated,
        source=record.get("source") if own else None,
        evidence_refs=record.get("evidence_refs") if own else None,
        confidence=record.get("confidence", 80),
        expires_at_ms=record.get("expires_at_ms") if own else None,
    )


def read(
    path: Path, *, fmt: str, default_scope: LearningScope | None = None, default_kind: str = "fact"
) -> Iterator[Read]:
    if fmt not in FORMATS:
        raise ReadError(f"format must be one of {', '.join(FORMATS)}")
    for number, record in _records(path):
        if isinstance(record, ReadError):
            yield Read(number, None, str(record))
            continue
        try:
            yield Read(number, _item(record, fmt=fmt, default_scope=default_scope, default_kind=default_kind))
        except ReadError as exc:
            yield Read(number, None, str(exc))
