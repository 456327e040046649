"""The learning judge (§4.11): clamp table, reason normalisation, verdict parsing, prompt and failure."""

from __future__ import annotations

import json

import pytest

from learnings.judge import (
    JudgeError,
    Verdict,
    allowed_actions,
    apply_judge_verdict,
    build_judge_messages,
    clamp_judge_action,
    judge_failure,
    judge_json_schema,
    judge_review,
    normalise_reason,
    parse_verdict,
)

M, R, PP, PA = "manual_review", "reject", "publish_provisional", "publish_active"

CLAMP_TABLE = {
    # (baseline, judged): result
    (M, M): M,
    (M, R): M,
    (M, PP): M,
    (M, PA): M,
    (R, M): M,
    (R, R): R,
    (R, PP): M,
    (R, PA): M,
    (PP, M): M,
    (PP, R): R,
    (PP, PP): PP,
    (PP, PA): PP,
    (PA, M): M,
    (PA, R): R,
    (PA, PP): PP,
    (PA, PA): PA,
}


@pytest.mark.parametrize(("baseline", "judged", "expected"), [(*key, value) for key, value in CLAMP_TABLE.items()])
def test_clamp_table(baseline, judged, expected):
    assert clamp_judge_action(baseline, judged) == expected


def test_clamp_table_is_exhaustive_and_never_widens():
    assert len(CLAMP_TABLE) == 16
    for (baseline, judged), result in CLAMP_TABLE.items():
        assert result in allowed_actions(baseline)
        assert clamp_judge_action(baseline, judged) in allowed_actions(baseline)


def test_allowed_actions():
    assert allowed_actions(M) == (M,)
    assert allowed_actions(R) == (R, M)
    assert allowed_actions(PP) == (R, M, PP)
    assert allowed_actions(PA) == (R, M, PP, PA)


def test_unknown_actions_are_programming_errors():
    with pytest.raises(ValueError):
        allowed_actions("publish")
    with pytest.raises(ValueError):
        clamp_judge_action(PA, "approve")


def test_reason_normalisation():
    assert normalise_reason("  too   noisy\nfor\tactive  ") == "too noisy for active"
    assert normalise_reason(" \n\t ") == "judge did not provide a reason"
    assert normalise_reason("") == "judge did not provide a reason"
    assert normalise_reason(None) == "judge did not provide a reason"
    assert normalise_reason("x" * 500) == "x" * 400
    assert normalise_reason("é" * 401) == "é" * 400


# --- verdict parsing ----------------------------------------------------------------------------------


def test_parse_verdict_from_object_and_string():
    assert parse_verdict({"action": PA, "reason": " looks   fine "}) == Verdict(PA, "looks fine")
    assert parse_verdict('{"action": "reject", "reason": "secret-ish", "extra": 1}') == Verdict(R, "secret-ish")
    assert parse_verdict(b'{"action": " manual_review ", "reason": ""}') == Verdict(M, "judge did not provide a reason")


@pytest.mark.parametrize(
    "payload",
    [
        "{not json",
        "",
        b"\xff",
        "[]",
        [],
        None,
        42,
        {},
        {"reason": "no action"},
        {"action": None, "reason": "x"},
        {"action": 1, "reason": "x"},
        {"action": PA},
        {"action": PA, "reason": None},
        {"action": PA, "reason": ["x"]},
        {"action": "approve", "reason": "x"},
        {"action": "PUBLISH_ACTIVE", "reason": "x"},
        {"action": "", "reason": "x"},
    ],
)
def test_invalid_verdicts_raise_judge_error(payload):
    with pytest.raises(JudgeError):
        parse_verdict(payload)


def test_parse_verdict_does_not_clamp():
    assert parse_verdict({"action": PA, "reason": "x"}).action == PA


# --- applying the verdict -----------------------------------------------------------------------------


def test_apply_confirmed_verdict():
    action, reason = apply_judge_verdict(PA, "matched publication rule `session-fact`", Verdict(PA, "looks durable"))
    assert action == PA
    assert reason == "matched publication rule `session-fact`; judge confirmed PublishActive: looks durable"


def test_apply_changed_verdict():
    action, reason = apply_judge_verdict(PP, "matched unnamed publication rule", Verdict(R, "one-off request"))
    assert action == R
    assert reason == (
        "matched unnamed publication rule; judge changed action from PublishProvisional to Reject: one-off request"
    )


def test_apply_verdict_clamps_before_comparing():
    action, reason = apply_judge_verdict(PP, "base", Verdict(PA, "very sure"))
    assert action == PP
    assert reason == "base; judge confirmed PublishProvisional: very sure"
    action, reason = apply_judge_verdict(R, "base", Verdict(PA, "publish it"))
    assert action == M
    assert reason == "base; judge changed action from Reject to ManualReview: publish it"


def test_judge_review_records_the_clamped_action():
    assert judge_review(R, Verdict(PP, "why"), judged_at_ms=7) == {
        "action": M,
        "judged_at_ms": 7,
        "reason": "why",
    }


def test_judge_failure_fails_closed_only_when_enabled():
    action, reason, review = judge_failure("enabled", PA, "base", TimeoutError("timed out"), judged_at_ms=9)
    assert action == M
    assert reason == "base; judge execution failed: timed out"
    assert review == {"action": M, "judged_at_ms": 9, "reason": "judge execution failed: timed out"}
    action, reason, review = judge_failure("shadow", PA, "base", "boom\n  trace", judged_at_ms=9)
    assert (action, reason) == (PA, "base")
    assert review["reason"] == "judge execution failed: boom trace"


def test_judge_failure_reason_is_bounded():
    _, _, review = judge_failure("enabled", PA, "base", "e" * 1000, judged_at_ms=1)
    assert len(review["reason"]) == 400


# --- prompt and schema --------------------------------------------------------------------------------


def test_judge_messages():
    candidate = {"candidate_id": "learning-candidate-1", "kind": "fact", "content": "Editor is Helix"}
    baseline = {
        "mode": "enabled",
        "action": PP,
        "matched_rule_name": "session-fact",
        "reason": "matched",
        "x": 1,
    }
    messages = build_judge_messages(candidate, baseline)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "manual_review" in messages[0]["content"]
    payload = json.loads(messages[1]["content"])
    assert payload["candidate"] == candidate
    assert payload["baseline"] == {
        "mode": "enabled",
        "action": PP,
        "matched_rule_name": "session-fact",
        "reason": "matched",
    }
    assert payload["allowed_actions"] == [R, M, PP]
    assert any("conservative" in line.lower() for line in payload["instructions"])


def test_judge_schema():
    assert judge_json_schema() == {
        "type": "object",
        "properties": {"action": {"type": "string"}, "reason": {"type": "string"}},
        "required": ["action", "reason"],
        "additionalProperties": False,
    }
