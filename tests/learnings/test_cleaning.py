"""Source and evidence references of candidates and learnings (learnings.services.cleaning): declared as
JSON Schema, reported with the same messages and fields the hand-written checks gave."""

from __future__ import annotations

from types import MappingProxyType

import pytest
from jsonschema import Draft202012Validator

from learnings.services import cleaning
from memory.errors import ValidationFailed

OFFSET_MESSAGE = "source.input_event_offset must be a non-negative integer"


def error_of(function, value):
    with pytest.raises(ValidationFailed) as info:
        function(value)
    return info.value.field, info.value.detail


def test_the_schemas_are_valid_draft_2020_12_schemas():
    Draft202012Validator.check_schema(cleaning.SOURCE_SCHEMA)
    Draft202012Validator.check_schema(cleaning.EVIDENCE_REFS_SCHEMA)
    assert tuple(cleaning.SOURCE_SCHEMA["properties"]) == cleaning.SOURCE_FIELDS
    assert tuple(cleaning.EVIDENCE_REFS_SCHEMA["items"]["properties"]) == cleaning.EVIDENCE_FIELDS


@pytest.mark.parametrize(
    ("value", "field", "message"),
    [
        (3, "source", "source must be an object"),
        (["run-1"], "source", "source must be an object"),
        ({"zz": 1, "aa": 2}, "source.aa", "unknown field aa"),
        ({"run_id": 5}, "source.run_id", "source.run_id must be a string of at most 500 characters"),
        ({"agent_id": "x" * 501}, "source.agent_id", "source.agent_id must be a string of at most 500 characters"),
        ({"input_event_offset": -1}, "source.input_event_offset", OFFSET_MESSAGE),
        ({"input_event_offset": 2.0}, "source.input_event_offset", OFFSET_MESSAGE),
        ({"input_event_offset": True}, "source.input_event_offset", OFFSET_MESSAGE),
        # An unknown field is reported before a wrong value.
        ({"run_id": 5, "bogus": 1}, "source.bogus", "unknown field bogus"),
    ],
)
def test_source_errors(value, field, message):
    assert error_of(cleaning.clean_source, value) == (field, message)


def test_clean_source_keeps_set_fields():
    assert cleaning.clean_source(None) == {}
    assert cleaning.clean_source({"run_id": "r", "session_id": None, "input_event_offset": 0}) == {
        "run_id": "r",
        "input_event_offset": 0,
    }
    assert cleaning.clean_source(MappingProxyType({"agent_id": "x" * 500})) == {"agent_id": "x" * 500}


@pytest.mark.parametrize(
    ("value", "field", "message"),
    [
        ("x", "evidence_refs", "evidence_refs must be a list"),
        ({}, "evidence_refs", "evidence_refs must be a list"),
        ([{}] * 33, "evidence_refs", "evidence_refs may hold at most 32 items"),
        ([{"run_id": "a"}, 3], "evidence_refs[1]", "evidence_refs[1] must be an object"),
        ([{"note": 3}], "evidence_refs[0].note", "evidence_refs[0].note must be a string of at most 500 characters"),
        ([{"b": 1, "a": 2}], "evidence_refs[0].a", "unknown field a"),
    ],
)
def test_evidence_ref_errors(value, field, message):
    assert error_of(cleaning.clean_evidence_refs, value) == (field, message)


def test_clean_evidence_refs_keeps_set_fields():
    assert cleaning.clean_evidence_refs(None) == []
    refs = [{"run_id": "r", "note": None}, {}] + [{}] * 30
    assert cleaning.clean_evidence_refs(refs) == [{"run_id": "r"}] + [{}] * 31
