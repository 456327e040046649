"""Capture from terminal runs (spec §4.3, §4.8, §4.9): run_summary candidates, heuristic and model-backed
semantic capture, receipts, exactly-once delivery, replay."""

from __future__ import annotations

import pytest

from learnings import capture, tasks
from learnings.models import LearningCandidate
from memory.models import RunMemoryRecord
from memory.runs import RunInput, run_fail, run_open, run_start
from tests.factories import SessionFactory
from tests.support.learnings import set_policy, terminal_run

pytestmark = pytest.mark.django_db

PREFERENCE = "Preference: always report sizes in gigabytes, not gibibytes."


def semantic_policy(max_candidates=2, timeout_ms=None, run_summary=True, enabled=True):
    set_policy(
        {
            "mode": "manual_only",
            "capture": {
                "run_summary_candidates": run_summary,
                "semantic_candidates": {
                    "enabled": enabled,
                    "max_candidates_per_run": max_candidates,
                    "timeout_ms": timeout_ms,
                },
            },
        }
    )


def semantic(run):
    return list(LearningCandidate.objects.filter(source_run=run).exclude(kind="run_summary").order_by("id"))


def receipt(run):
    return RunMemoryRecord.objects.get(run=run).semantic_capture


@pytest.fixture
def session():
    return SessionFactory()


def test_terminal_run_queues_capture_on_commit(session, llm_unconfigured, django_capture_on_commit_callbacks):
    semantic_policy()
    with django_capture_on_commit_callbacks(execute=True):
        run = terminal_run(session, PREFERENCE)
    summary = LearningCandidate.objects.get(source_run=run, kind="run_summary")
    assert summary.origin == "daemon" and summary.sensitivity == "sensitive" and summary.confidence == 100
    assert summary.scope_key == f"session:{session.public_id}"
    [pref] = semantic(run)
    assert (pref.kind, pref.content, pref.confidence, pref.origin) == (
        "preference",
        "always report sizes in gigabytes, not gibibytes",
        98,
        "daemon",
    )
    assert (pref.scope_kind, pref.scope_id, pref.sensitivity) == ("session", session.public_id, "scoped")
    assert pref.source == {"run_id": run.public_id, "session_id": session.public_id, "agent_id": session.owner.username}
    assert pref.evidence_refs == [{"run_id": run.public_id, "note": "source run"}]
    assert pref.created_at_ms == RunMemoryRecord.objects.get(run=run).recorded_at_ms
    assert receipt(run) == "completed"


def test_heuristic_trims_and_splits_labels(session, llm_unconfigured):
    semantic_policy(max_candidates=3)
    run = terminal_run(session, "Fact: Project codename is Atlas. Decision: ship on Fridays; reply exactly OK.")
    capture.capture_run(run.pk)
    assert [(c.kind, c.content) for c in semantic(run)] == [
        ("fact", "Project codename is Atlas"),
        ("decision", "ship on Fridays"),
    ]


def test_capture_runs_exactly_once_when_delivered_twice(session, fake_model):
    semantic_policy()
    fake_model.reply_json({"candidate_1": {"kind": "fact", "content": "The project codename is Atlas."}})
    run = terminal_run(session, "We talked about the project codename, Atlas, and more.")
    first = tasks.capture_run(run.pk)
    second = tasks.capture_run(run.pk)
    assert len(first["created"]) == 2 and second["created"] == [] and second["receipt"] == "completed"
    assert len(fake_model.requests) == 1
    assert LearningCandidate.objects.filter(source_run=run).count() == 2


def test_model_extraction_normalises_and_caps(session, fake_model):
    semantic_policy(max_candidates=2)
    fake_model.reply_json(
        {
            "candidate_1": {"kind": "fact", "content": "Project   codename is Atlas.", "confidence": 130},
            "candidate_2": {"kind": "FACT", "content": "project codename: atlas"},
        }
    )
    run = terminal_run(session, "The codename for the project is Atlas.")
    capture.capture_run(run.pk)
    [fact] = semantic(run)
    assert (fact.content, fact.confidence) == ("Project codename is Atlas.", 100)
    request = fake_model.requests[0]
    assert request["response_format"]["json_schema"]["name"] == "learning_extraction"
    assert "The codename for the project" in request["messages"][1]["content"]
    assert receipt(run) == "completed"
    schema = request["response_format"]["json_schema"]["schema"]
    assert sorted(schema["properties"]) == ["candidate_1", "candidate_2"]  # at most max_candidates_per_run


def test_model_replies_with_nulls_and_extra_fields_are_answers(session, fake_model):
    """The system prompt lets the model set unused candidates to null; a null confidence is 80 and fields
    past the maximum are ignored (§4.9): such a reply completes the capture, it is not a failure to retry."""
    semantic_policy(max_candidates=2)
    fake_model.reply_json(
        {
            "candidate_1": None,
            "candidate_2": {"kind": "preference", "content": "Preferred shell is fish.", "confidence": None},
            "candidate_3": {"kind": "fact", "content": "Beyond the maximum is ignored."},
            "explanation": "one durable preference",
        }
    )
    run = terminal_run(session, "Shell of choice: fish.")
    outcome = capture.capture_run(run.pk)
    assert outcome.error is None and receipt(run) == "completed"
    assert [(c.kind, c.content, c.confidence) for c in semantic(run)] == [
        ("preference", "Preferred shell is fish.", 80)
    ]
    assert capture.pending_capture_run_ids() == []


def test_model_drafts_with_secrets_or_unknown_kinds_are_dropped(session, fake_model):
    semantic_policy(max_candidates=3)
    fake_model.reply_json(
        {
            "candidate_1": {"kind": "procedure", "content": "Run make deploy."},
            "candidate_2": {"kind": "fact", "content": "api_key=sk-abcdefghijklmnopqrstuvwx"},
            "candidate_3": {"kind": "preference", "content": "Preferred editor is Helix."},
        }
    )
    run = terminal_run(session, "Editor of choice: Helix.")
    capture.capture_run(run.pk)
    assert [(c.kind, c.content) for c in semantic(run)] == [("preference", "Preferred editor is Helix.")]


@pytest.mark.parametrize(
    "script",
    [
        lambda server: server.reply_delay(2.0, {"candidate_1": {"kind": "fact", "content": "Late fact is here."}}),
        lambda server: server.reply_text("not json at all"),
        lambda server: server.reply_raw("{oops"),
        lambda server: server.reply_json({"candidate_1": {"kind": "fact"}}),
        lambda server: server.reply_status(503),
    ],
    ids=["timeout", "prose", "broken-body", "schema-mismatch", "http-503"],
)
def test_extraction_failure_leaves_receipt_pending_then_replay_succeeds(session, fake_model, script):
    semantic_policy(timeout_ms=500)
    script(fake_model)
    run = terminal_run(session, "Codename agreed for the project: Atlas.")
    outcome = capture.capture_run(run.pk)
    assert outcome.error and receipt(run) == "pending" and semantic(run) == []
    assert LearningCandidate.objects.filter(source_run=run, kind="run_summary").count() == 1
    fake_model.reset()
    fake_model.reply_json({"candidate_1": {"kind": "fact", "content": "Project codename is Atlas."}})
    assert capture.pending_capture_run_ids() == [run.pk]
    assert tasks.replay_pending_captures() == {"queued": 1}
    assert receipt(run) == "completed" and [c.content for c in semantic(run)] == ["Project codename is Atlas."]
    assert LearningCandidate.objects.filter(source_run=run, kind="run_summary").count() == 1


def test_replay_tries_the_least_tried_receipts_first(session, fake_model):
    """A run whose extraction keeps failing counts its attempts and goes to the back of the replay queue, so
    a batch full of such runs cannot starve newer pending captures."""
    semantic_policy(timeout_ms=500)
    fake_model.reply_text("not json at all")
    stubborn = terminal_run(session, "Codename agreed for the project: Atlas.")
    for _ in range(2):
        assert capture.capture_run(stubborn.pk).error
    assert RunMemoryRecord.objects.get(run=stubborn).semantic_capture_attempts == 2
    newer = terminal_run(SessionFactory(), "The deploy window moved to Tuesday mornings.")
    assert capture.pending_capture_run_ids() == [newer.pk, stubborn.pk]
    assert capture.pending_capture_run_ids(limit=1) == [newer.pk]
    assert receipt(stubborn) == receipt(newer) == "pending"


def test_pending_receipts_wait_while_semantic_capture_is_off(session, llm_unconfigured):
    """Capture runs only when enabled (§4.9): turning it off leaves a pending receipt pending - not replayed,
    not marked skipped - and turning it back on captures the run."""
    semantic_policy()
    run = terminal_run(session, PREFERENCE)
    assert receipt(run) == "pending"
    semantic_policy(enabled=False)
    assert capture.capture_run(run.pk).receipt == "pending" and semantic(run) == []
    assert capture.pending_capture_run_ids() == []
    semantic_policy()
    assert capture.pending_capture_run_ids() == [run.pk]
    assert capture.capture_run(run.pk).receipt == "completed" and len(semantic(run)) == 1


def test_no_model_configured_completes_without_candidates(session, llm_unconfigured):
    semantic_policy()
    run = terminal_run(session, "Nothing labelled here.")
    capture.capture_run(run.pk)
    assert semantic(run) == [] and receipt(run) == "completed"


def test_disabled_semantic_capture_is_skipped(session, llm_unconfigured):
    semantic_policy(enabled=False)
    run = terminal_run(session, PREFERENCE)
    assert receipt(run) == "skipped"  # memory asked learnings whether capture is on
    capture.capture_run(run.pk)
    assert semantic(run) == [] and receipt(run) == "skipped"
    assert LearningCandidate.objects.filter(source_run=run, kind="run_summary").exists()


def test_run_summary_capture_can_be_turned_off(session, llm_unconfigured):
    semantic_policy(run_summary=False)
    run = terminal_run(session, PREFERENCE)
    capture.capture_run(run.pk)
    assert not LearningCandidate.objects.filter(source_run=run, kind="run_summary").exists()
    assert len(semantic(run)) == 1


def test_failed_run_gets_a_run_summary_but_no_semantic_capture(session, llm_unconfigured):
    semantic_policy()
    run, _ = run_open(session=session, run_input=RunInput(content=PREFERENCE, attachments=[], metadata={}))
    run = run_fail(run=run_start(run=run), error="tool crashed")
    capture.capture_run(run.pk)
    summary = LearningCandidate.objects.get(source_run=run, kind="run_summary")
    assert "Error: tool crashed" in summary.content
    assert semantic(run) == [] and receipt(run) == "skipped"


def test_existing_semantic_candidate_marks_capture_completed(session, llm_unconfigured):
    semantic_policy()
    run = terminal_run(session, PREFERENCE)
    capture.capture_run(run.pk)
    assert len(semantic(run)) == 1
    RunMemoryRecord.objects.filter(run=run).update(semantic_capture="pending")
    assert capture.capture_run(run.pk).created == [] and receipt(run) == "completed"


def test_run_without_a_record_captures_nothing(session, llm_unconfigured):
    semantic_policy()
    run = terminal_run(session, PREFERENCE)
    RunMemoryRecord.objects.filter(run=run).delete()
    assert capture.capture_run(run.pk) is None
    assert not LearningCandidate.objects.exists()
