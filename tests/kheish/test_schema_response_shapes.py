"""Issue 14.15 (part): the served schema says what the responses are - paginated lists where they are paged,
an array where revoke-matching returns one, enum query parameters as enums, memory payloads as components."""

from __future__ import annotations

import json

import pytest

from tests.support.schema import served_schema

pytestmark = pytest.mark.django_db


@pytest.fixture
def schema(operator_client):
    return served_schema(operator_client)


def _response_schema(schema, path, method="get", status="200"):
    body = schema["paths"][path][method]["responses"][status]["content"]["application/json"]["schema"]
    if "$ref" in body:
        body = schema["components"]["schemas"][body["$ref"].rsplit("/", 1)[1]]
    return body


@pytest.mark.parametrize("path", ["/v1/skills", "/v1/learning-skills", "/v1/sessions/{session_id}/skills"])
def test_paged_skill_lists_are_documented_as_pages(schema, path):
    body = _response_schema(schema, path)
    assert body.get("type") == "object" and {"count", "next", "previous", "results"} <= set(body["properties"])


def test_revoke_matching_is_documented_as_an_array(schema):
    assert _response_schema(schema, "/v1/learnings/revoke-matching", "post")["type"] == "array"


def test_status_filters_are_enums(schema):
    params = {p["name"]: p for p in schema["paths"]["/v1/learnings"]["get"]["parameters"]}
    assert set(params["status"]["schema"]["enum"]) >= {"active", "revoked"}
    params = {p["name"]: p for p in schema["paths"]["/v1/learning-candidates"]["get"]["parameters"]}
    assert "pending" in params["state"]["schema"]["enum"]


def test_outputs_page_and_grants_are_in_the_schema(schema):
    assert "/v1/runs/{run_id}/outputs" in schema["paths"]
    assert {"get", "put"} <= set(schema["paths"]["/v1/agents/{agent_id}/grants"])


def _refs(node) -> str:
    return json.dumps(node)


def test_memory_payloads_are_typed_components(schema):
    """The run's prompt, memory-search results and memory-context sections are components, not bare objects."""
    components = schema["components"]["schemas"]
    assert "RunPrompt" in _refs(components["RunView"]["properties"]["prompt"])
    assert components["RunPrompt"]["required"] == ["sections"]
    assert "SearchResult" in _refs(components["SessionMemorySearchView"]["properties"]["results"])
    context = components["SessionMemoryContextView"]["properties"]
    assert "LearnedContext" in _refs(context["learned_context"]) and "RecoveredMemory" in _refs(
        context["recovered_memory"]
    )
    assert "retrieval" in context


def test_learning_kind_is_an_enum(schema):
    assert set(schema["components"]["schemas"]["LearningKindEnum"]["enum"]) == {
        "run_summary",
        "fact",
        "preference",
        "decision",
        "procedure",
    }
    assert "LearningKindEnum" in _refs(schema["components"]["schemas"]["CreateLearningCandidateRequest"])
