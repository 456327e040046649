"""Semantic capture (§4.9): heuristic labels, model-output normalisation, prompt and schema."""

from __future__ import annotations

import json

import pytest

from learnings.extraction import (
    Draft,
    build_extraction_messages,
    evidence_refs_for_run,
    extraction_json_schema,
    heuristic_candidates,
    normalise_model_candidates,
)
from tests.support.secret_stub import secret_classifier_fixtures

# Deterministic stand-in for memory.redaction.looks_like_secret (see test_validation.py).
_FAKE_SECRET_MARKERS = ("<redacted", "sk-", "api key is", "api-key:", "clientsecret:", "secret_token=")


fake_secret_classifier, real_secret_classifier = secret_classifier_fixtures(_FAKE_SECRET_MARKERS)


PREFIX = "For future turns, retain these durable memory items exactly: "


# --- heuristic path -----------------------------------------------------------------------------------


def test_heuristic_extracts_labelled_items_at_98():
    preview = PREFIX + "Preference: Preferred editor is Helix. Fact: Project codename is Atlas. Reply exactly OK."
    assert heuristic_candidates(preview, 4) == [
        Draft(kind="preference", content="Preferred editor is Helix", confidence=98),
        Draft(kind="fact", content="Project codename is Atlas", confidence=98),
    ]


def test_heuristic_drops_secret_items():
    preview = PREFIX + "Fact: Access token is <redacted>. Fact: Project codename is Atlas. Reply exactly OK."
    assert heuristic_candidates(preview, 4) == [
        Draft(kind="fact", content="Project codename is Atlas", confidence=98),
    ]


def test_heuristic_ignores_unlabelled_text_and_empty_input():
    assert heuristic_candidates("Reply exactly OK.", 4) == []
    assert heuristic_candidates("", 4) == []
    assert heuristic_candidates(None, 4) == []
    assert heuristic_candidates("Fact: Project codename is Atlas", 0) == []


@pytest.mark.parametrize("marker", ["reply exactly", "Respond exactly", "ANSWER EXACTLY"])
def test_heuristic_cuts_reply_instructions(marker):
    preview = f"Decision: ship on Friday, {marker} DONE"
    assert heuristic_candidates(preview, 2) == [Draft("decision", "ship on Friday", 98)]


def test_heuristic_labels_are_case_insensitive_and_ordered_by_position():
    preview = "DECISION: use Postgres; fact:  the   API  is   versioned ; PREFERENCE: dark mode,"
    assert heuristic_candidates(preview, 8) == [
        Draft("decision", "use Postgres", 98),
        Draft("fact", "the API is versioned", 98),
        Draft("preference", "dark mode", 98),
    ]


def test_heuristic_skips_empty_segments():
    assert heuristic_candidates("Fact: . Preference: ; Decision: keep it", 4) == [Draft("decision", "keep it", 98)]


def test_heuristic_stops_at_max():
    preview = "Fact: one thing. Fact: another thing. Fact: third thing."
    assert [d.content for d in heuristic_candidates(preview, 2)] == ["one thing", "another thing"]


def test_heuristic_drops_semantic_duplicates_after_the_cap():
    preview = "Fact: Project codename is Atlas. Fact: project codename: atlas. Fact: Editor is Helix."
    # The cap is applied before de-duplication, as in the reference.
    assert heuristic_candidates(preview, 2) == [Draft("fact", "Project codename is Atlas", 98)]
    assert heuristic_candidates(preview, 3) == [
        Draft("fact", "Project codename is Atlas", 98),
        Draft("fact", "Editor is Helix", 98),
    ]


def test_heuristic_same_content_different_kind_is_kept():
    preview = "Fact: Editor is Helix. Preference: Editor is Helix."
    assert [d.kind for d in heuristic_candidates(preview, 4)] == ["fact", "preference"]


def test_heuristic_secret_items_are_not_counted_towards_the_cap():
    preview = "Fact: The API key is sk-proj-secret. Fact: one. Fact: two."
    assert [d.content for d in heuristic_candidates(preview, 2)] == ["one", "two"]


def test_heuristic_with_real_classifier(real_secret_classifier):
    # (A scrubbed marker is not a secret any more - issue 20 - so the refused item carries a value the scrubber
    # leaves and the classifier still catches.)
    preview = (
        PREFIX + "Fact: The key for staging is aZ3kP9qL2mN8xV5t. Fact: Project codename is Atlas. Reply exactly OK."
    )
    assert heuristic_candidates(preview, 4) == [Draft("fact", "Project codename is Atlas", 98)]
    preview = "Preference: Token budget is 1000. Fact: The API key is sk-proj-secret."
    assert heuristic_candidates(preview, 4) == [Draft("preference", "Token budget is 1000", 98)]


# --- model path ---------------------------------------------------------------------------------------


def candidates(*items):
    return {f"candidate_{index}": item for index, item in enumerate(items, start=1)}


def test_model_normalisation_drops_unknown_kinds_duplicates_and_empty_and_caps_confidence():
    payload = candidates(
        {"kind": "preference", "content": "  Preferred   editor   is   Helix. ", "confidence": 101},
        {"kind": "preference", "content": "preferred editor: helix", "confidence": 80},
        {"kind": "procedure", "content": "Never keep this.", "confidence": 90},
        {"kind": "decision", "content": "", "confidence": 90},
    )
    assert normalise_model_candidates(payload, 4) == [Draft("preference", "Preferred editor is Helix.", 100)]


def test_model_normalisation_respects_max():
    payload = candidates(
        {"kind": "fact", "content": "one", "confidence": 70},
        {"kind": "preference", "content": "two", "confidence": 80},
        {"kind": "decision", "content": "three", "confidence": 90},
    )
    assert normalise_model_candidates(payload, 2) == [
        Draft("fact", "one", 70),
        Draft("preference", "two", 80),
    ]


def test_model_normalisation_only_reads_candidates_up_to_max():
    payload = {"candidate_3": {"kind": "fact", "content": "three"}, "extra": {"kind": "fact", "content": "x"}}
    assert normalise_model_candidates(payload, 2) == []
    assert normalise_model_candidates(payload, 3) == [Draft("fact", "three", 80)]


def test_model_normalisation_drops_secrets():
    payload = candidates(
        {"kind": "fact", "content": "The API key is sk-proj-secret.", "confidence": 99},
        {"kind": "fact", "content": "Access token is <redacted>.", "confidence": 99},
        {"kind": "preference", "content": "Preferred editor is Helix.", "confidence": 92},
    )
    assert normalise_model_candidates(payload, 4) == [Draft("preference", "Preferred editor is Helix.", 92)]


@pytest.mark.parametrize(
    ("confidence", "expected"),
    [
        (None, 80),
        ("high", 80),
        ("90", 80),
        (True, 80),
        ([90], 80),
        (float("nan"), 80),
        (-5, 0),
        (250, 100),
        (float("inf"), 100),
        (87.5, 88),
        (87.4, 87),
        (0, 0),
    ],
)
def test_model_confidence_defaults_and_bounds(confidence, expected):
    payload = candidates({"kind": "fact", "content": "Project codename is Atlas", "confidence": confidence})
    assert normalise_model_candidates(payload, 1)[0].confidence == expected


def test_model_confidence_missing_defaults_to_80():
    assert normalise_model_candidates(candidates({"kind": "fact", "content": "x y"}), 1)[0].confidence == 80


def test_model_kind_is_trimmed_and_case_insensitive():
    payload = candidates({"kind": " FACT ", "content": "Project codename is Atlas"})
    assert normalise_model_candidates(payload, 1) == [Draft("fact", "Project codename is Atlas", 80)]


@pytest.mark.parametrize(
    "payload",
    [
        None,
        [],
        "not json",
        b"\xff\xfe",
        "[1, 2]",
        42,
        {},
        candidates(None),
        candidates("fact: text"),
        candidates(["fact", "text"]),
        candidates({"kind": None, "content": "text"}),
        candidates({"kind": "fact", "content": 12}),
        candidates({"kind": 3, "content": "text"}),
        candidates({"content": "text"}),
        candidates({"kind": "fact"}),
        candidates({"kind": "fact", "content": " \n\t "}),
        candidates({"kind": "run_summary", "content": "Request: x"}),
    ],
)
def test_malformed_model_output_is_skipped_without_raising(payload):
    assert normalise_model_candidates(payload, 4) == []


def test_malformed_items_do_not_hide_valid_ones():
    payload = candidates(None, {"kind": "fact", "content": 1}, {"kind": "fact", "content": "Editor is Helix"})
    assert normalise_model_candidates(payload, 3) == [Draft("fact", "Editor is Helix", 80)]


def test_model_output_may_be_a_json_string():
    payload = json.dumps(candidates({"kind": "decision", "content": "Ship on Friday", "confidence": 91}))
    assert normalise_model_candidates(payload, 2) == [Draft("decision", "Ship on Friday", 91)]
    assert normalise_model_candidates(payload.encode(), 2) == [Draft("decision", "Ship on Friday", 91)]


def test_model_output_with_non_positive_max_is_empty():
    assert normalise_model_candidates(candidates({"kind": "fact", "content": "x y"}), 0) == []


# --- prompt and schema --------------------------------------------------------------------------------

RUN = {
    "run_id": "run-7",
    "session_id": "session-1",
    "agent_id": "agent-1",
    "kind": "input",
    "status": "completed",
    "request_preview": "Remember that the project codename is Atlas.",
    "outcome_preview": "Noted.",
    "summary": "Request: Remember that the project codename is Atlas.\nResult: Noted.",
    "failure_markers": [],
    "unrelated": "must not leak",
}


def test_extraction_messages():
    messages = build_extraction_messages(RUN, 3)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "candidate_1" in messages[0]["content"]
    payload = json.loads(messages[1]["content"])
    assert set(payload) == {"run", "allowed_kinds", "max_candidates_per_run", "instructions"}
    assert payload["run"] == {key: value for key, value in RUN.items() if key != "unrelated"}
    assert payload["allowed_kinds"] == ["fact", "preference", "decision"]
    assert payload["max_candidates_per_run"] == 3
    instructions = " ".join(payload["instructions"])
    for phrase in ("conservative", "remember, preferred, preference, always, or codename", "secrets"):
        assert phrase in instructions
    assert "empty JSON object" in instructions


def test_extraction_messages_fill_missing_run_fields():
    payload = json.loads(build_extraction_messages({"run_id": "run-1", "failure_markers": None}, 2)[1]["content"])
    assert payload["run"]["run_id"] == "run-1"
    assert payload["run"]["request_preview"] is None
    assert payload["run"]["failure_markers"] == []


def test_extraction_messages_keep_unicode():
    content = build_extraction_messages({"request_preview": "Le projet est Atlas, à Tōkyō"}, 1)[1]["content"]
    assert "à Tōkyō" in content


def test_extraction_schema_for_strict_structured_outputs():
    schema = extraction_json_schema(3)
    assert schema["type"] == "object"
    assert list(schema["properties"]) == ["candidate_1", "candidate_2", "candidate_3"]
    assert schema["required"] == ["candidate_1", "candidate_2", "candidate_3"]
    assert schema["additionalProperties"] is False
    item, null = schema["properties"]["candidate_2"]["anyOf"]
    assert null == {"type": "null"}
    assert item["properties"] == {
        "kind": {"type": "string"},
        "content": {"type": "string"},
        "confidence": {"type": ["number", "null"]},
    }
    assert item["required"] == ["kind", "content", "confidence"]
    assert item["additionalProperties"] is False


def test_extraction_schema_without_strict_mode_has_optional_fields():
    schema = extraction_json_schema(2, strict=False)
    assert "required" not in schema
    assert list(schema["properties"]) == ["candidate_1", "candidate_2"]
    item, null = schema["properties"]["candidate_1"]["anyOf"]
    assert null == {"type": "null"} and "additionalProperties" not in schema
    assert item["properties"]["confidence"] == {"type": ["number", "null"]}
    assert item["required"] == ["kind", "content"]


def test_schemas_accept_what_the_normaliser_reads():
    jsonschema = pytest.importorskip("jsonschema")
    strict_reply = {
        "candidate_1": {"kind": "fact", "content": "Project codename is Atlas", "confidence": None},
        "candidate_2": None,
    }
    jsonschema.validate(strict_reply, extraction_json_schema(2))
    assert normalise_model_candidates(strict_reply, 2) == [Draft("fact", "Project codename is Atlas", 80)]
    lenient_reply = {
        "candidate_1": None,
        "candidate_2": {"kind": "preference", "content": "Dark mode", "confidence": None},
    }
    jsonschema.validate({}, extraction_json_schema(2, strict=False))
    jsonschema.validate(lenient_reply, extraction_json_schema(2, strict=False))
    assert normalise_model_candidates(lenient_reply, 2) == [Draft("preference", "Dark mode", 80)]
    jsonschema.validate({"candidate_3": {"extra": True}, "note": "x"}, extraction_json_schema(2, strict=False))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"candidate_1": {"kind": "fact"}}, extraction_json_schema(2, strict=False))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"candidate_2": {"kind": "fact", "content": 7}}, extraction_json_schema(2, strict=False))


def test_evidence_refs_for_run():
    assert evidence_refs_for_run("run-1", []) == [{"run_id": "run-1", "note": "source run"}]
    assert evidence_refs_for_run("run-1", ["a1", "a2"]) == [
        {"run_id": "run-1", "artifact_id": "a1", "note": "source run artifact"},
        {"run_id": "run-1", "artifact_id": "a2", "note": "source run artifact"},
    ]
