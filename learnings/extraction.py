"""Semantic capture from a completed run (spec §4.9), without the model call itself.

* :func:`heuristic_candidates` lifts explicitly labelled items (``Preference:``, ``Fact:``, ``Decision:``)
  out of the run-memory request preview at confidence 98; when it yields anything the model is not called.
* :func:`build_extraction_messages` / :func:`extraction_json_schema` prepare the structured model call,
  and :func:`normalise_model_candidates` turns whatever came back into drafts, skipping anything malformed.

A :class:`Draft` becomes a daemon candidate in the service layer (session scope, ``scoped`` sensitivity,
source run/session/agent, evidence from :func:`evidence_refs_for_run`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from learnings.semantic import semantic_keys
from learnings.validation import content_has_secret_material
from learnings.vocabulary import SEMANTIC_KINDS

HEURISTIC_CONFIDENCE = 98
DEFAULT_MODEL_CONFIDENCE = 80
MAX_CONFIDENCE = 100

_LABELS = {"preference:": "preference", "fact:": "fact", "decision:": "decision"}
_LABEL_RE = re.compile(
    "(?<![A-Za-z])(?:" + "|".join(re.escape(label) for label in _LABELS) + ")", re.IGNORECASE | re.ASCII
)
_STATEMENT_END_RE = re.compile(r"\n|(?<=[.!?])(?<![\s(][A-Za-z][.!?])\s+(?=[A-Z0-9\"'(*\-•#])")
"""Where a labelled statement ends when no other label follows: a line break, or a sentence end followed by a
new sentence (so "Preference: sizes in GB. Now, about the logs…" is one statement, not the rest of the input)."""
_REPLY_INSTRUCTION_RE = re.compile(r" (?:reply|respond|answer) exactly ", re.IGNORECASE | re.ASCII)
_EDGE_RE = re.compile(r"^[\s.;,]+|[\s.;,]+$")


@dataclass(frozen=True)
class Draft:
    """One semantic candidate proposed for a run: ``kind`` is fact/preference/decision,
    ``confidence`` is 0..100."""

    kind: str
    content: str
    confidence: int


def collapse_whitespace(text: str) -> str:
    return " ".join(text.split())


def _dedupe(drafts: Sequence[Draft]) -> list[Draft]:
    seen: set[tuple[str, str]] = set()
    unique: list[Draft] = []
    for draft in drafts:
        key = (draft.kind, semantic_keys(draft.content).content_key)
        if key not in seen:
            seen.add(key)
            unique.append(draft)
    return unique


# ---------------------------------------------------------------------------------------------------------
# Heuristic path
# ---------------------------------------------------------------------------------------------------------


def _clean_segment(segment: str) -> str:
    cut = _REPLY_INSTRUCTION_RE.search(segment)
    if cut is not None:
        segment = segment[: cut.start()]
    return collapse_whitespace(_EDGE_RE.sub("", segment))


def heuristic_candidates(request_preview: str | None, max_candidates: int) -> list[Draft]:
    """Explicitly labelled memory items of a request preview (§4.9).

    Every case-insensitive ``preference:`` / ``fact:`` / ``decision:`` (not inside a word: ``artifact:``
    is not a label) starts a segment that runs to the next label, or the end of its statement (a line break,
    or a sentence end followed by another sentence), or the end. The whole input is read (capture passes
    the run's scrubbed, bounded input, not its 160-character preview). Each segment is cut before the first
    `` reply exactly `` / `` respond
    exactly `` / `` answer exactly ``, trimmed of whitespace and ``.;,`` at both ends, and
    whitespace-collapsed; empty or secret-looking segments are skipped. Collection stops at
    ``max_candidates``, then duplicates by (kind, semantic content key) are dropped, so the result may hold
    fewer than ``max_candidates`` drafts. Confidence is 98.
    """
    if not request_preview or max_candidates <= 0:
        return []
    labels = list(_LABEL_RE.finditer(request_preview))
    drafts: list[Draft] = []
    for index, match in enumerate(labels):
        end = labels[index + 1].start() if index + 1 < len(labels) else len(request_preview)
        statement_end = _STATEMENT_END_RE.search(request_preview, match.end(), end)
        if statement_end is not None:
            end = statement_end.start()
        content = _clean_segment(request_preview[match.end() : end])
        if not content or content_has_secret_material(content):
            continue
        kind = _LABELS[match.group(0).lower()]
        drafts.append(Draft(kind=kind, content=content, confidence=HEURISTIC_CONFIDENCE))
        if len(drafts) >= max_candidates:
            break
    return _dedupe(drafts)


# ---------------------------------------------------------------------------------------------------------
# Model path
# ---------------------------------------------------------------------------------------------------------


def _confidence(value: object) -> int:
    """Missing, null or non-numeric → 80; numbers are rounded (half up) and clamped to 0..100."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return DEFAULT_MODEL_CONFIDENCE
    if isinstance(value, float):
        if math.isnan(value):
            return DEFAULT_MODEL_CONFIDENCE
        if math.isinf(value):
            return MAX_CONFIDENCE if value > 0 else 0
        value = math.floor(value + 0.5)
    return max(0, min(MAX_CONFIDENCE, int(value)))


def normalise_model_candidates(payload: object, max_candidates: int) -> list[Draft]:
    """Drafts from the extractor's structured output (§4.9). Never raises.

    ``payload`` is the decoded JSON object (a JSON string is decoded first). ``candidate_1`` …
    ``candidate_<max_candidates>`` are read in order; a missing, null or non-object entry is skipped, as is
    one whose ``kind`` (trimmed, case-insensitive) is not fact/preference/decision, whose ``content`` is not
    a string or is empty once whitespace is collapsed, whose content looks secret, or which repeats an
    earlier (kind, semantic content key). Confidence: see :func:`_confidence`.
    """
    if isinstance(payload, bytes | bytearray):
        try:
            payload = payload.decode("utf-8")
        except UnicodeDecodeError:
            return []
    if isinstance(payload, str):
        try:
            payload = json.loads(payload)
        except ValueError:
            return []
    if not isinstance(payload, Mapping) or max_candidates <= 0:
        return []
    seen: set[tuple[str, str]] = set()
    drafts: list[Draft] = []
    for index in range(1, max_candidates + 1):
        item = payload.get(f"candidate_{index}")
        if not isinstance(item, Mapping):
            continue
        kind = item.get("kind")
        content = item.get("content")
        if not isinstance(kind, str) or not isinstance(content, str):
            continue
        kind = kind.strip().lower()
        content = collapse_whitespace(content)
        if kind not in SEMANTIC_KINDS or not content or content_has_secret_material(content):
            continue
        key = (kind, semantic_keys(content).content_key)
        if key in seen:
            continue
        seen.add(key)
        drafts.append(Draft(kind=kind, content=content, confidence=_confidence(item.get("confidence"))))
        if len(drafts) >= max_candidates:
            break
    return drafts


EXTRACTION_SYSTEM_PROMPT = """\
You are the semantic memory extractor of a service that owns what AI agents remember.

Review one completed run and propose at most a few conservative durable-memory candidates.
Allowed kinds: fact, preference, decision.

Prefer information the user stated explicitly, and stable decisions made during the run.
Statements that say remember, preferred, preference, always or codename are strong signals.
Never extract summaries, procedures, one-off task instructions, ephemeral outputs, secrets or guesses.
When unsure, return fewer candidates; when nothing should be remembered, return no candidates.
Return only one JSON object with the fields candidate_1, candidate_2, and so on; leave unused ones out or
set them to null."""

EXTRACTION_INSTRUCTIONS = (
    "Extract only conservative durable memory that should help future turns in the same session.",
    "Prefer explicit user-stated facts, preferences, or stable decisions made during the run.",
    "When the request explicitly says remember, preferred, preference, always, or codename, treat that as "
    "a strong extraction signal.",
    "Prefer the user's explicit statements over the assistant's reply wording.",
    "Do not extract one-off task instructions, ephemeral outputs, summaries, procedures, secrets, or "
    "speculative inferences.",
    "When nothing should be remembered, return an empty JSON object (or every candidate set to null).",
    "Return only JSON matching the requested schema.",
)

RUN_FIELDS = (
    "run_id",
    "session_id",
    "agent_id",
    "kind",
    "status",
    "request_preview",
    "outcome_preview",
    "summary",
    "failure_markers",
)


def extraction_payload(run: Mapping[str, Any], max_candidates: int) -> dict[str, Any]:
    """The JSON object sent as the user message: ``run`` (the fields of :data:`RUN_FIELDS`, missing ones
    null, ``failure_markers`` a list), ``allowed_kinds``, ``max_candidates_per_run``, ``instructions``."""
    run_view = {field: run.get(field) for field in RUN_FIELDS}
    run_view["failure_markers"] = list(run.get("failure_markers") or [])
    return {
        "run": run_view,
        "allowed_kinds": list(SEMANTIC_KINDS),
        "max_candidates_per_run": max_candidates,
        "instructions": list(EXTRACTION_INSTRUCTIONS),
    }


def build_extraction_messages(run: Mapping[str, Any], max_candidates: int) -> list[dict[str, str]]:
    """Chat-completions messages for the extractor: the system prompt, then the JSON payload."""
    user = json.dumps(extraction_payload(run, max_candidates), indent=2, ensure_ascii=False, default=str)
    return [
        {"role": "system", "content": EXTRACTION_SYSTEM_PROMPT},
        {"role": "user", "content": user},
    ]


def extraction_json_schema(max_candidates: int, *, strict: bool = True) -> dict[str, Any]:
    """JSON schema of the extractor output: an object with fields ``candidate_1`` …
    ``candidate_<max_candidates>``, each ``{kind: string, content: string, confidence?: number}``.

    The reference makes the candidates (and ``confidence``) optional. Structured outputs in strict mode
    (``memory.llm.chat_json``'s default) require every property to be listed as required, so with
    ``strict=True`` the optional fields are required but nullable instead; without it they are optional and
    nullable too (the system prompt allows null), and - as the reference's reply type - other fields are
    ignored rather than refused (say ``candidate_3`` when the maximum is 2). :func:`normalise_model_candidates`
    treats a null candidate as absent and a null confidence as 80. Pass the same ``strict`` to the model
    call, which checks the reply against the same schema.
    """
    count = max(max_candidates, 0)
    names = [f"candidate_{index}" for index in range(1, count + 1)]
    if strict:
        item = {
            "type": "object",
            "properties": {
                "kind": {"type": "string"},
                "content": {"type": "string"},
                "confidence": {"type": ["number", "null"]},
            },
            "required": ["kind", "content", "confidence"],
            "additionalProperties": False,
        }
        return {
            "type": "object",
            "properties": {name: {"anyOf": [item, {"type": "null"}]} for name in names},
            "required": names,
            "additionalProperties": False,
        }
    item = {
        "type": "object",
        "properties": {
            "kind": {"type": "string"},
            "content": {"type": "string"},
            "confidence": {"type": ["number", "null"]},
        },
        "required": ["kind", "content"],
    }
    return {
        "type": "object",
        "properties": {name: {"anyOf": [dict(item), {"type": "null"}]} for name in names},
    }


def evidence_refs_for_run(run_id: str, artifact_ids: Sequence[str]) -> list[dict[str, str]]:
    """Evidence of a captured draft (§4.9): one ``{run_id, artifact_id, note: "source run artifact"}`` per
    run artifact, or a single ``{run_id, note: "source run"}`` when the run has none."""
    if artifact_ids:
        return [
            {"run_id": run_id, "artifact_id": artifact_id, "note": "source run artifact"}
            for artifact_id in artifact_ids
        ]
    return [{"run_id": run_id, "note": "source run"}]
