"""Plane 2 records, the pure part: building a terminal run's entry (§4.1) and retention (§4.4), no database."""

from __future__ import annotations

import dataclasses
import random
import sys
import types
from typing import NamedTuple

import pytest

from memory import run_records
from memory.run_memory_policy import RunMemoryPolicy
from memory.run_records import (
    RecoveredEntry,
    RunFacts,
    build_record,
    partition_for_retention,
    truncate_preview,
)
from tests.support.sections import entry

# ------------------------------------------------------------------------------------------------ helpers


class _Result(NamedTuple):
    text: str
    redaction_count: int
    redactions: dict[str, int]


@pytest.fixture
def spy_scrub(monkeypatch):
    """A fake scrubber that records what it is given and rewrites nothing but ``SECRET``."""
    calls: list[tuple[str, bool]] = []

    def scrub(text: str, *, redact_pii: bool = True) -> _Result:
        calls.append((text, redact_pii))
        count = text.count("SECRET")
        redactions = {"secret": count, "pii": 1 if redact_pii and count else 0}
        return _Result(text.replace("SECRET", "<x>"), count, {k: v for k, v in redactions.items() if v})

    module = types.ModuleType("memory.scrubbing")
    module.scrub = scrub
    monkeypatch.setitem(sys.modules, "memory.scrubbing", module)
    return calls


def facts(**changes) -> RunFacts:
    base = RunFacts(
        run_id="run-2",
        status="completed",
        kind="input",
        input_content="inspect the repo",
        input_items=[],
        attachments=[],
        text_preview="inspect the repo",
        outputs=[{"content": "done", "artifacts": [], "parts": []}],
        error=None,
        finished_at_ms=2_000,
        updated_at_ms=2_500,
    )
    return dataclasses.replace(base, **changes)


def test_truncate_preview():
    assert truncate_preview(None) is None
    assert truncate_preview("") is None
    assert truncate_preview("  \n ") is None
    assert truncate_preview("  hi  ") == "hi"
    assert truncate_preview("a" * 160) == "a" * 160
    assert truncate_preview(" " + "a" * 161 + " ") == "a" * 160 + "…"


def test_completed_run_captures_request_result_and_status():
    built = build_record(facts(), redact_pii=True)
    assert built is not None
    assert built.entry == RecoveredEntry(
        run_id="run-2",
        recorded_at_ms=2_000,
        status="completed",
        request_preview="inspect the repo",
        outcome_preview="done",
        artifact_ids=[],
        failure_markers=[],
        summary="Request: inspect the repo\nResult: done",
    )
    assert (built.redaction_count, built.redactions) == (0, {})


def test_completed_without_outputs_notes_it():
    built = build_record(facts(outputs=[]), redact_pii=True)
    assert built.entry.summary == "Request: inspect the repo\nStatus: completed without recorded text output."


def test_completed_with_blank_outputs_has_no_status_line():
    built = build_record(facts(outputs=[{"content": "  "}]), redact_pii=True)
    assert built.entry.outcome_preview is None
    assert built.entry.summary == "Request: inspect the repo"


def test_latest_non_blank_output_is_the_outcome():
    outputs = [{"content": "first"}, {"content": " second "}, {"content": "\n"}]
    assert build_record(facts(outputs=outputs), redact_pii=True).entry.outcome_preview == "second"


def test_failed_run_with_error():
    built = build_record(facts(status="failed", outputs=[], error="  boom  "), redact_pii=True)
    assert built.entry.failure_markers == ["failed", "error: boom"]
    assert built.entry.summary == "Request: inspect the repo\nError: boom"


def test_failed_run_without_error():
    built = build_record(facts(status="failed", outputs=[], error="   "), redact_pii=True)
    assert built.entry.failure_markers == ["failed"]
    assert built.entry.summary == "Request: inspect the repo\nStatus: failed."


@pytest.mark.parametrize(
    ("status", "line"),
    [
        ("interrupted", "Status: interrupted before completion."),
        ("cancelled", "Status: cancelled before completion."),
    ],
)
def test_interrupted_and_cancelled_runs(status, line):
    built = build_record(facts(status=status, error="stopped"), redact_pii=True)
    assert built.entry.status == status
    assert built.entry.failure_markers == [status, "error: stopped"]
    assert built.entry.summary == f"Request: inspect the repo\nResult: done\n{line}"


@pytest.mark.parametrize(
    "status", ["queued", "running", "waiting_for_approval", "waiting_for_user_question", "exploded"]
)
def test_non_terminal_runs_have_no_record(status):
    assert build_record(facts(status=status), redact_pii=True) is None


def test_empty_summary_has_no_record():
    quiet = facts(input_content="", text_preview=None, outputs=[{"content": ""}])
    assert build_record(quiet, redact_pii=True) is None


def test_recorded_at_falls_back_to_updated_at():
    assert build_record(facts(finished_at_ms=None), redact_pii=True).entry.recorded_at_ms == 2_500


def test_summary_is_capped_at_480_characters():
    long = facts(status="failed", input_content="q" * 400, outputs=[{"content": "r" * 400}], error="e" * 400)
    built = build_record(long, redact_pii=True)
    lines = ["Request: " + "q" * 160 + "…", "Result: " + "r" * 160 + "…", "Error: " + "e" * 160 + "…"]
    full = "\n".join(lines)
    assert len(full) > 480
    assert built.entry.summary == full[:480] + "…"
    assert len(built.entry.summary) == 481
    assert built.entry.request_preview == "q" * 160 + "…"


def test_content_with_attachments_counts_them():
    built = build_record(
        facts(input_content=" hello ", attachments=[{"id": "asset-1"}, {"id": "asset-2"}]), redact_pii=True
    )
    assert built.entry.request_preview == "hello [2 attachment(s)]"


def test_input_items_preview():
    items = [
        {"type": "text", "text": "  compare  "},
        {"type": "text", "text": "   "},
        {"type": "asset_reference", "asset_id": "asset-7"},
        {"type": "board_reference", "board_id": "board-1", "revision_id": "rev-3"},
        {"type": "board_reference", "board_id": "board-2"},
        {"type": "inline_asset", "file_name": "a.png", "media_type": "image/png", "content_base64": "AA=="},
        {"type": "inline_asset", "file_name": "b.bin"},
        {"type": "mystery"},
    ]
    built = build_record(facts(input_items=items, input_content="ignored", attachments=[{"id": "x"}]), redact_pii=True)
    assert built.entry.request_preview == (
        "compare [asset:asset-7] [board:board-1@rev-3] [board:board-2] "
        "[inline_asset:a.png image/png] [inline_asset:b.bin unknown]"
    )


def test_blank_items_fall_back_to_text_preview():
    built = build_record(
        facts(input_items=[{"type": "text", "text": " "}], text_preview=" from the view "), redact_pii=True
    )
    assert built.entry.request_preview == "from the view"


def test_empty_content_falls_back_to_text_preview():
    built = build_record(facts(input_content="  ", text_preview="preview text"), redact_pii=True)
    assert built.entry.request_preview == "preview text"


@pytest.mark.parametrize("kind", ["approval_resume", "user_question_resume", "scheduled_input"])
def test_payload_kinds_use_the_request(kind):
    built = build_record(facts(kind=kind, input_content="original ask", text_preview="x"), redact_pii=True)
    assert built.entry.request_preview == "original ask"


@pytest.mark.parametrize("kind", ["goal_continuation", "mailbox_delivery", "parent_clarification"])
def test_other_kinds_have_no_payload_preview(kind):
    built = build_record(facts(kind=kind, input_content="payload", text_preview="summary"), redact_pii=True)
    assert built.entry.request_preview == "summary"
    no_fallback = build_record(facts(kind=kind, input_content="payload", text_preview=None), redact_pii=True)
    assert no_fallback.entry.request_preview is None
    assert no_fallback.entry.summary == "Result: done"


def test_artifact_ids_are_unique_trimmed_and_ordered():
    outputs = [
        {
            "content": "one",
            "parts": [
                {"type": "text", "text": "hi"},
                {"type": "attachment", "attachment": {"id": " part-1 "}},
                {"type": "attachment", "attachment": {"id": "in-1"}},
            ],
            "artifacts": ["art-1", {"id": "art-2"}, " "],
        },
        {"content": "two", "parts": [], "artifacts": [{"id": "part-1"}, "art-3"]},
    ]
    built = build_record(facts(attachments=[{"id": " in-1 "}, "in-2", {"id": ""}], outputs=outputs), redact_pii=True)
    assert built.entry.artifact_ids == ["in-1", "in-2", "part-1", "art-1", "art-2", "art-3"]


def test_each_field_is_scrubbed_whole_before_truncation(spy_scrub):
    request = "r" * 200 + " SECRET"
    run = facts(status="failed", input_content=request, outputs=[{"content": "SECRET out"}], error="SECRET err")
    built = build_record(run, redact_pii=False)
    assert spy_scrub == [
        (request, False),
        ("SECRET out", False),
        ("failed", False),
        ("error: SECRET err", False),
    ]
    assert built.entry.outcome_preview == "<x> out"
    assert built.entry.failure_markers == ["failed", "error: <x> err"]
    assert built.entry.summary.endswith("\nError: <x> err")
    assert built.redaction_count == 3
    assert built.redactions == {"secret": 3}


def test_redaction_counts_are_summed(spy_scrub):
    built = build_record(facts(input_content="SECRET SECRET", outputs=[{"content": "SECRET"}]), redact_pii=True)
    assert built.redaction_count == 3
    assert built.redactions == {"secret": 3, "pii": 2}


def test_secret_straddling_the_preview_cut_leaves_nothing_behind():
    email = "alice.secret-person@example.com"
    request = "x" * 150 + " " + email + " tail"
    assert request.index(email) < 160 < request.index(email) + len(email)
    naive = (truncate_preview(request) or "")[:160]
    assert naive.endswith(" alice.sec")  # truncating first would keep half the address, no longer an email
    built = build_record(facts(input_content=request, outputs=[{"content": f"mail {email}"}]), redact_pii=True)
    for text in (built.entry.request_preview, built.entry.outcome_preview, built.entry.summary):
        assert "alice" not in text
        assert "example.com" not in text
    assert built.entry.outcome_preview == "mail <redacted:email>"
    assert built.redaction_count == 2
    assert built.redactions.get("email") == 2


def test_secret_tokens_are_scrubbed_even_without_pii():
    token = "sk-" + "proj" + "Abcdef0123456789abcdef0123"
    built = build_record(facts(input_content=f"use {token} for bob@example.com"), redact_pii=False)
    assert token not in built.entry.summary
    assert "bob@example.com" in built.entry.request_preview


def test_entry_round_trips_through_dict():
    built = build_record(facts(status="failed", error="boom", attachments=["a-1"]), redact_pii=True)
    data = built.entry.to_dict()
    assert list(data) == [
        "run_id",
        "recorded_at_ms",
        "status",
        "request_preview",
        "outcome_preview",
        "artifact_ids",
        "failure_markers",
        "summary",
    ]
    assert RecoveredEntry.from_dict(data) == built.entry


def test_entry_from_reference_wire_form():
    data = {"run_id": "run-1", "recorded_at_ms": 5, "status": "completed", "summary": "Result: ok"}
    assert RecoveredEntry.from_dict(data) == entry("run-1", 5, "Result: ok")


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"run_id": "run-1", "recorded_at_ms": "5", "status": "completed", "summary": "x"},
        {"run_id": "run-1", "recorded_at_ms": True, "status": "completed", "summary": "x"},
        {"run_id": "run-1", "recorded_at_ms": 5, "status": "completed", "summary": None},
        {"run_id": "run-1", "recorded_at_ms": 5, "status": "completed", "summary": "x", "artifact_ids": [1]},
        {"run_id": "run-1", "recorded_at_ms": 5, "status": "completed", "summary": "x", "request_preview": 3},
        [],
    ],
)
def test_malformed_entry_is_rejected(data):
    with pytest.raises(ValueError, match="invalid recovered memory entry"):
        RecoveredEntry.from_dict(data)


# ------------------------------------------------------------------------------------------------ pruning


def test_prune_keeps_the_32_newest_of_40_and_drops_expired():
    now = 10_000_000_000
    policy = RunMemoryPolicy()
    fresh = [(f"run-{i}", now - 1_000 * (40 - i)) for i in range(1, 41)]  # run-40 is the newest
    stale = [("run-100", now - policy.retention_ms - 1), ("run-101", 0)]
    random.Random(3).shuffle(pairs := fresh + stale)
    part = partition_for_retention(pairs, policy, now)
    assert [run_id for run_id, _ in part.kept] == [f"run-{i}" for i in range(40, 8, -1)]
    assert [run_id for run_id, _ in part.overflow] == [f"run-{i}" for i in range(8, 0, -1)]
    assert part.ttl == [("run-100", now - policy.retention_ms - 1), ("run-101", 0)]


def test_prune_boundary_and_clock_skew():
    policy = RunMemoryPolicy(retention_ms=100)
    part = partition_for_retention([("run-1", 900), ("run-2", 899), ("run-3", 5_000)], policy, 1_000)
    assert part.kept == [("run-3", 5_000), ("run-1", 900)]
    assert part.ttl == [("run-2", 899)]


def test_prune_orders_run_ids_numerically_on_ties():
    policy = RunMemoryPolicy(max_tracked_per_session=2, max_prompt_entries=1)
    part = partition_for_retention([("run-9", 7), ("run-10", 7), ("run-2", 7)], policy, 7)
    assert part.kept == [("run-10", 7), ("run-9", 7)]
    assert part.overflow == [("run-2", 7)]


def test_disabled_policy_expires_everything():
    policy = RunMemoryPolicy(enabled=False)
    part = partition_for_retention([("run-1", 10), ("run-2", 20)], policy, 20)
    assert (part.kept, part.overflow, part.ttl) == ([], [], [("run-2", 20), ("run-1", 10)])


def test_run_id_sort_key_handles_odd_ids():
    ids = ["run-10", "run-9", "run-09", "../../x", "run-", "9" * 5000 + "x", "run-" + "9" * 5000]
    ordered = sorted(ids, key=run_records.run_id_sort_key)
    assert ordered.index("run-9") < ordered.index("run-10") < ordered.index("run-" + "9" * 5000)
