"""Run-memory records (Plane 2), the pure part: no database, no Django.

* building the recovered-memory entry of a terminal run (spec §4.1), scrubbed before truncation (§4.2 via
  ``memory.scrubbing``): ``RunFacts`` in, ``RecoveredEntry`` / ``BuiltRecord`` out;
* the preview and summary truncation rules (§1.2, §4.1);
* the run-id order and retention partitioning (§4.4).

Ranking lives in ``memory.recall``, section rendering and packing in ``memory.sections``. Services load rows,
call these functions and persist the results.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from memory.vocabulary import FAILURE_STATUSES, TERMINAL_STATUSES, RunKind, RunStatus

if TYPE_CHECKING:
    from memory.run_memory_policy import RunMemoryPolicy
    from memory.scrubbing import ScrubResult

PAYLOAD_REQUEST_KINDS = frozenset({RunKind.INPUT, RunKind.SCHEDULED_INPUT})
RESUME_REQUEST_KINDS = frozenset({RunKind.APPROVAL_RESUME, RunKind.USER_QUESTION_RESUME})

PREVIEW_CHARS = 160
MAX_SUMMARY_CHARS = 480
ELLIPSIS = "…"


# --------------------------------------------------------------------------------------------------- text


def truncate_preview(text: str | None) -> str | None:
    """Spec §1.2: trim, keep the first 160 characters, append ``…`` when longer; empty → ``None``."""
    text = (text or "").strip()
    if not text:
        return None
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + ELLIPSIS


def truncate_summary(text: str) -> str:
    """Spec §4.1 step 5: trim, keep the first 480 characters, append ``…`` when longer."""
    text = text.strip()
    return text if len(text) <= MAX_SUMMARY_CHARS else text[:MAX_SUMMARY_CHARS] + ELLIPSIS


# --------------------------------------------------------------------------------------------------- records


@dataclass(frozen=True)
class RunFacts:
    """What the caller knows about a run, read from durable state.

    ``input_content`` / ``input_items`` / ``attachments`` are the request payload: the submitted input for
    ``input`` / ``scheduled_input`` runs, the ``original_request`` for ``approval_resume`` /
    ``user_question_resume`` runs; ignored for other kinds. ``input_items`` use the reference shapes
    (``{"type": "text", "text"}``, ``{"type": "asset_reference", "asset_id"}``,
    ``{"type": "board_reference", "board_id", "revision_id"?}``,
    ``{"type": "inline_asset", "file_name", "media_type"?}``). ``attachments`` are the input attachments
    (an id string, or a dict with ``id`` / ``asset_id``). ``outputs`` are
    ``{"content", "artifacts", "parts"}`` in order, where ``artifacts`` are ids or ``{"id": …}`` and
    attachment parts are ``{"type": "attachment", "attachment": {"id": …}}``.
    """

    run_id: str
    status: str
    kind: str
    input_content: str | None
    input_items: list[dict[str, Any]]
    attachments: list[dict[str, Any]]
    text_preview: str | None
    outputs: list[dict[str, Any]]
    error: str | None
    finished_at_ms: int | None
    updated_at_ms: int


@dataclass(frozen=True)
class RecoveredEntry:
    """Spec §1.3 ``RecoveredMemoryEntry``."""

    run_id: str
    recorded_at_ms: int
    status: str
    request_preview: str | None
    outcome_preview: str | None
    artifact_ids: list[str]
    failure_markers: list[str]
    summary: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "recorded_at_ms": self.recorded_at_ms,
            "status": self.status,
            "request_preview": self.request_preview,
            "outcome_preview": self.outcome_preview,
            "artifact_ids": list(self.artifact_ids),
            "failure_markers": list(self.failure_markers),
            "summary": self.summary,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RecoveredEntry:
        """Inverse of :meth:`to_dict`; also accepts the reference wire form (absent optional keys).

        Raises ``ValueError`` on a malformed entry, so callers can treat it as unreadable.
        """
        try:
            run_id, status, summary = d["run_id"], d["status"], d["summary"]
            recorded_at_ms = d["recorded_at_ms"]
            request_preview = d.get("request_preview")
            outcome_preview = d.get("outcome_preview")
            artifact_ids = d.get("artifact_ids") or []
            failure_markers = d.get("failure_markers") or []
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"invalid recovered memory entry: missing {exc}") from exc
        if not all(isinstance(value, str) for value in (run_id, status, summary)):
            raise ValueError("invalid recovered memory entry: run_id, status and summary must be strings")
        if isinstance(recorded_at_ms, bool) or not isinstance(recorded_at_ms, int):
            raise ValueError("invalid recovered memory entry: recorded_at_ms must be an integer")
        for value in (request_preview, outcome_preview):
            if value is not None and not isinstance(value, str):
                raise ValueError("invalid recovered memory entry: previews must be strings or null")
        for values in (artifact_ids, failure_markers):
            if not isinstance(values, list) or not all(isinstance(value, str) for value in values):
                raise ValueError("invalid recovered memory entry: lists must hold strings")
        return cls(
            run_id=run_id,
            recorded_at_ms=recorded_at_ms,
            status=status,
            request_preview=request_preview,
            outcome_preview=outcome_preview,
            artifact_ids=list(artifact_ids),
            failure_markers=list(failure_markers),
            summary=summary,
        )


@dataclass(frozen=True)
class BuiltRecord:
    entry: RecoveredEntry
    redaction_count: int
    redactions: dict[str, int]


# Scrubbing is bounded by what can be stored (issue 19.1): a preview keeps 160 characters, so the scrubber reads
# those plus a margin, never the whole 200,000-character input. The margin holds any secret that starts in the
# kept part and runs past it (a PEM block, a YAML block scalar, a quoted passphrase), and the cut is never inside a
# token: it moves to the end of its line when that is near, else to the end of the token it falls in. So a secret
# straddling the 160-character cut is scrubbed whole and none of it is stored.
SCRUB_MARGIN_CHARS = 2048
_TOKEN_REST = re.compile(r"\S*")


def scrub_window(text: str, keep: int) -> tuple[str, bool]:
    """The part of ``text`` (stripped) that is scrubbed before its first ``keep`` characters are stored, and
    whether anything was left out."""
    text = text.strip()
    cut = keep + SCRUB_MARGIN_CHARS
    if len(text) <= cut:
        return text, False
    line_end = text.find("\n", cut, cut + SCRUB_MARGIN_CHARS)
    # r"\S*" matches at every position (if only the empty string): its match is never None
    cut = line_end if line_end >= 0 else cast("re.Match[str]", _TOKEN_REST.match(text, cut)).end()
    return text[:cut], cut < len(text)


def _scrub(text: str, redact_pii: bool) -> ScrubResult:
    # Imported on use: ranking, rendering and packing never need the scrubber, and keep working on their own.
    from memory.scrubbing import scrub

    return scrub(text, redact_pii=redact_pii)


def _item_preview(item: object) -> str | None:
    if not isinstance(item, Mapping):
        return None
    kind = item.get("type")
    if kind == "text":
        text = str(item.get("text") or "").strip()
        return text or None
    if kind == "asset_reference":
        return f"[asset:{item.get('asset_id', '')}]"
    if kind == "board_reference":
        revision = item.get("revision_id")
        suffix = f"@{revision}" if revision is not None else ""
        return f"[board:{item.get('board_id', '')}{suffix}]"
    if kind == "inline_asset":
        media_type = item.get("media_type") or "unknown"
        return f"[inline_asset:{item.get('file_name', '')} {media_type}]"
    return None


def _payload_request_preview(facts: RunFacts) -> str | None:
    if facts.kind not in PAYLOAD_REQUEST_KINDS and facts.kind not in RESUME_REQUEST_KINDS:
        return None
    if facts.input_items:
        preview = " ".join(p for p in map(_item_preview, facts.input_items) if p is not None)
        return preview if preview.strip() else None
    content = (facts.input_content or "").strip()
    if not content:
        return None
    if facts.attachments:
        return f"{content} [{len(facts.attachments)} attachment(s)]"
    return content


def request_preview_source(facts: RunFacts) -> str | None:
    """Spec §4.1 step 1, before scrubbing and truncation."""
    preview = _payload_request_preview(facts)
    if preview is not None:
        return preview
    fallback = (facts.text_preview or "").strip()
    return fallback or None


def outcome_preview_source(facts: RunFacts) -> str | None:
    """Spec §4.1 step 2: the content of the last output whose trimmed content is non-empty."""
    for output in reversed(facts.outputs):
        content = str((output or {}).get("content") or "").strip()
        if content:
            return content
    return None


def failure_marker_sources(facts: RunFacts) -> list[str]:
    """Spec §4.1 step 3."""
    markers = [facts.status] if facts.status in FAILURE_STATUSES else []
    error = (facts.error or "").strip()
    if error:
        markers.append(f"error: {error}")
    return markers


def _ref_id(ref: object, *keys: str) -> str | None:
    if isinstance(ref, str):
        return ref
    if isinstance(ref, Mapping):
        for key in keys:
            value = ref.get(key)
            if isinstance(value, str):
                return value
    return None


def collect_artifact_ids(facts: RunFacts) -> list[str]:
    """Spec §4.1 step 6: unique trimmed ids of input attachments, output attachment parts, then artifacts."""
    found: list[str] = []
    seen: set[str] = set()

    def push(value: str | None) -> None:
        value = (value or "").strip()
        if value and value not in seen:
            seen.add(value)
            found.append(value)

    for attachment in facts.attachments:
        push(_ref_id(attachment, "id", "asset_id"))
    for output in facts.outputs:
        output = output or {}
        for part in output.get("parts") or ():
            if isinstance(part, Mapping) and part.get("type") == "attachment":
                push(_ref_id(part.get("attachment"), "id", "asset_id"))
        for artifact in output.get("artifacts") or ():
            push(_ref_id(artifact, "id", "asset_id"))
    return found


def build_summary(
    *,
    status: str,
    has_outputs: bool,
    request_preview: str | None,
    outcome_preview: str | None,
    failure_markers: Sequence[str],
) -> str | None:
    """Spec §4.1 step 5; ``None`` for a non-terminal status or an empty summary."""
    if status not in TERMINAL_STATUSES:
        return None
    lines = []
    if request_preview:
        lines.append(f"Request: {request_preview}")
    if outcome_preview:
        lines.append(f"Result: {outcome_preview}")
    if status == RunStatus.COMPLETED:
        if not has_outputs:
            lines.append("Status: completed without recorded text output.")
    elif status == RunStatus.FAILED:
        error = next(
            (m[len("error: ") :].strip() for m in failure_markers if m.startswith("error: ")),
            "",
        )
        lines.append(f"Error: {error}" if error else "Status: failed.")
    elif status == RunStatus.INTERRUPTED:
        lines.append("Status: interrupted before completion.")
    else:
        lines.append("Status: cancelled before completion.")
    summary = truncate_summary("\n".join(lines))
    return summary or None


def build_record(facts: RunFacts, *, redact_pii: bool) -> BuiltRecord | None:
    """Spec §4.1: the recovered-memory entry of a terminal run, scrubbed, or ``None``.

    The caller checks that the policy is enabled. Each preview and failure marker is scrubbed before it is
    truncated, so a secret straddling the cut is removed whole rather than left half visible; only a bounded
    window of each is scrubbed (``scrub_window``).
    """
    if facts.status not in TERMINAL_STATUSES:
        return None
    redaction_count = 0
    redactions: dict[str, int] = {}

    def clean(value: str | None) -> str | None:
        nonlocal redaction_count
        if value is None:
            return None
        window, cut = scrub_window(value, PREVIEW_CHARS)
        result = _scrub(window, redact_pii)
        redaction_count += result.redaction_count
        for name, count in result.redactions.items():
            redactions[name] = redactions.get(name, 0) + count
        preview = truncate_preview(result.text)
        if cut and preview is not None and not preview.endswith(ELLIPSIS):
            preview += ELLIPSIS  # the text went on past what was scrubbed
        return preview

    request_preview = clean(request_preview_source(facts))
    outcome_preview = clean(outcome_preview_source(facts))
    failure_markers = [m for m in map(clean, failure_marker_sources(facts)) if m is not None]
    summary = build_summary(
        status=facts.status,
        has_outputs=bool(facts.outputs),
        request_preview=request_preview,
        outcome_preview=outcome_preview,
        failure_markers=failure_markers,
    )
    if summary is None:
        return None
    entry = RecoveredEntry(
        run_id=facts.run_id,
        recorded_at_ms=facts.finished_at_ms if facts.finished_at_ms is not None else facts.updated_at_ms,
        status=facts.status,
        request_preview=request_preview,
        outcome_preview=outcome_preview,
        artifact_ids=collect_artifact_ids(facts),
        failure_markers=failure_markers,
        summary=summary,
    )
    return BuiltRecord(entry=entry, redaction_count=redaction_count, redactions=redactions)


# ------------------------------------------------------------------------------------------- retention


_DIGITS = "0123456789"


@lru_cache(maxsize=4096)
def run_id_sort_key(run_id: str) -> tuple[str, int, str, str]:
    """Orders ``run-9`` before ``run-10``: by prefix, then the numeric suffix as a number, then the raw id.

    The number is compared by (length, digits), so a hostile id with thousands of digits costs nothing.
    """
    prefix = run_id.rstrip(_DIGITS)
    if len(prefix) == len(run_id):
        return (run_id, -1, "", run_id)
    digits = run_id[len(prefix) :].lstrip("0")
    return (prefix, len(digits), digits, run_id)


def _newest_first_key(pair: tuple[str, int]) -> tuple[int, tuple[str, int, str, str]]:
    return (pair[1], run_id_sort_key(pair[0]))


def is_expired(recorded_at_ms: int, *, policy: RunMemoryPolicy, now_ms: int) -> bool:
    """Spec §4.4: expired when the policy is disabled or ``now - recorded_at > retention_ms``."""
    return not policy.enabled or max(0, now_ms - recorded_at_ms) > policy.retention_ms


class Partition(NamedTuple):
    """Each list holds ``(run_id, recorded_at_ms)`` pairs, newest first."""

    kept: list[tuple[str, int]]
    ttl: list[tuple[str, int]]
    overflow: list[tuple[str, int]]


def partition_for_retention(entries: Iterable[tuple[str, int]], policy: RunMemoryPolicy, now_ms: int) -> Partition:
    """Spec §4.4: newest first; expired → ``ttl``; beyond ``max_tracked_per_session`` kept → ``overflow``."""
    kept: list[tuple[str, int]] = []
    ttl: list[tuple[str, int]] = []
    overflow: list[tuple[str, int]] = []
    for run_id, recorded_at_ms in sorted(entries, key=_newest_first_key, reverse=True):
        pair = (run_id, recorded_at_ms)
        if is_expired(recorded_at_ms, policy=policy, now_ms=now_ms):
            ttl.append(pair)
        elif len(kept) >= policy.max_tracked_per_session:
            overflow.append(pair)
        else:
            kept.append(pair)
    return Partition(kept=kept, ttl=ttl, overflow=overflow)
