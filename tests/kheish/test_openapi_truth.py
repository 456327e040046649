"""Issue 13.5: the served schema (/v1/schema/) tells the truth about request bodies. For every run action, an
example built from the documented request schema (required fields only, then every documented field) is
accepted: 2xx or 409 (the run's status), never 400 "unknown field". Every operation has a summary, a
description naming its callers, and its problem+json error responses; the component names are not doubled."""

from __future__ import annotations

import pytest

from tests.support.schema import served_schema

pytestmark = pytest.mark.django_db

RUN_ACTIONS = [
    "start",
    "output",
    "tool-call-started",
    "tool-call-finished",
    "wait-for-approval",
    "wait-for-user-question",
    "resume",
    "complete",
    "fail",
    "interrupt",
    "cancel",
]


def schema(client) -> dict:
    return served_schema(client)


def resolve(doc: dict, node: dict) -> dict:
    while "$ref" in node:
        node = doc["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    if "allOf" in node and len(node["allOf"]) == 1:
        return resolve(doc, node["allOf"][0])
    return node


def example(doc: dict, node: dict, *, every_field: bool):
    node = resolve(doc, node)
    if "enum" in node:
        return node["enum"][0]
    kind = node.get("type")
    if kind == "object" or "properties" in node:
        props = node.get("properties", {})
        names = props if every_field else node.get("required", [])
        return {
            name: example(doc, props[name], every_field=every_field)
            for name in names
            if not props[name].get("readOnly")
        }
    if kind == "array":
        return [example(doc, node.get("items", {}), every_field=every_field)] if node.get("minItems") else []
    if kind == "string":
        return "call-1"
    if kind == "integer":
        return max(1, node.get("minimum", 1))
    if kind == "boolean":
        return False
    return {}


def request_schema(doc: dict, path: str) -> dict | None:
    body = doc["paths"][path]["post"].get("requestBody")
    return None if body is None else body["content"]["application/json"]["schema"]


@pytest.mark.parametrize("every_field", [False, True], ids=["required", "every-field"])
def test_run_action_bodies_are_the_real_request_shapes(operator_client, api_client, session_id, every_field):
    doc = schema(operator_client)
    for name in RUN_ACTIONS:
        node = request_schema(doc, f"/v1/runs/{{run_id}}/{name}")  # None: no body (an empty serializer)
        documented = {} if node is None else resolve(doc, node)
        assert "run_id" not in documented.get("properties", {}), f"{name} documents the whole RunView"
        run = api_client.post(f"/v1/sessions/{session_id}/runs", {"input": {"content": "x"}}, format="json").json()
        if name not in ("start", "fail", "cancel"):
            api_client.post(f"/v1/runs/{run['run_id']}/start", {}, format="json")
        if name == "tool-call-finished":
            api_client.post(
                f"/v1/runs/{run['run_id']}/tool-call-started", {"call_id": "call-1", "name": "t"}, format="json"
            )
        if name == "resume":
            api_client.post(f"/v1/runs/{run['run_id']}/wait-for-approval", {"request_ids": ["r"]}, format="json")
        body = {} if node is None else example(doc, node, every_field=every_field)
        response = api_client.post(f"/v1/runs/{run['run_id']}/{name}", body, format="json")
        assert response.status_code < 300 or response.status_code == 409, (name, body, response.content)
        api_client.post(f"/v1/runs/{run['run_id']}/cancel", {}, format="json")  # free the session


def test_every_run_action_has_a_summary(operator_client):
    doc = schema(operator_client)
    for name in RUN_ACTIONS:
        operation = doc["paths"][f"/v1/runs/{{run_id}}/{name}"]["post"]
        assert operation.get("summary") and operation.get("description"), name


METHODS = ("get", "post", "put", "patch", "delete")


def operations(doc: dict):
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                yield f"{method.upper()} {path}", method, operation


def test_every_operation_has_a_summary_a_description_and_its_caller(operator_client):
    doc = schema(operator_client)
    undescribed = [
        name
        for name, _, op in operations(doc)
        if not (op.get("summary") and op.get("description") and "Callers:" in op["description"])
    ]
    assert len(list(operations(doc))) > 50
    assert not undescribed, undescribed
    callers = {name: op.get("x-kheish-caller") for name, _, op in operations(doc)}
    assert set(callers.values()) == {"agent", "operator"}, callers
    assert callers["POST /v1/learnings/{learning_id}/revoke"] == "operator"
    assert callers["POST /v1/sessions/{session_id}/runs"] == "agent"


def test_component_names_are_not_doubled(operator_client):
    names = schema(operator_client)["components"]["schemas"]
    assert not [n for n in names if n.endswith("RequestRequest")]
    assert {"CreateLearningCandidateRequest", "RedactionPreviewRequest", "SetLearningPolicyRequest"} <= set(names)


def test_every_operation_documents_its_problem_responses(operator_client):
    doc = schema(operator_client)
    problem = doc["components"]["schemas"]["Problem"]
    assert set(problem["required"]) == {"type", "title", "status", "code", "domain", "detail"}
    assert "field" in problem["properties"]
    missing = []
    for name, method, op in operations(doc):
        expected = {"400", "401", "429"}
        if "{" in name:
            expected.add("404")
        if method != "get":
            expected |= {"403", "413"}
        if op.get("x-kheish-caller") == "operator":
            expected.add("403")
        for status in expected:
            content = op["responses"].get(status, {}).get("content", {})
            if content.get("application/problem+json", {}).get("schema") != {"$ref": "#/components/schemas/Problem"}:
                missing.append(f"{name} {status}")
    assert not missing, missing
    assert "409" in doc["paths"]["/v1/runs/{run_id}/complete"]["post"]["responses"]
    assert "409" not in doc["paths"]["/v1/runtime/redaction-preview"]["post"]["responses"]


def test_a_documented_error_is_what_the_server_answers(operator_client, api_client, anon_client):
    """The 401/403/404 the schema documents come back as problem+json with the Problem fields."""
    doc = schema(operator_client)
    required = set(doc["components"]["schemas"]["Problem"]["required"])
    answers = [
        anon_client.get("/v1/sessions"),
        api_client.get("/v1/runtime/run-memory-policy"),
        api_client.get("/v1/runs/run-999999999"),
    ]
    assert [a.status_code for a in answers] == [401, 403, 404]
    for answer in answers:
        assert answer["Content-Type"].startswith("application/problem+json")
        assert required <= set(answer.json())


def test_candidate_create_is_documented_as_it_answers(operator_client, api_client, session_id):
    doc = schema(operator_client)
    responses = doc["paths"]["/v1/learning-candidates"]["post"]["responses"]
    assert "200" in responses and "201" not in responses
    answer = api_client.post(
        "/v1/learning-candidates",
        {"scope": {"kind": "session", "id": session_id}, "kind": "fact", "content": "the build uses make"},
        format="json",
    )
    assert answer.status_code == 200, answer.content
