"""What schema fuzzing found, now said the same way by the schema and the API (CI's schemathesis run): blank
enum filters, an unknown learning named in a request body, and ``OPTIONS`` on every operation."""

from __future__ import annotations

import re

import pytest

from tests.conftest import assert_problem
from tests.support.schema import served_schema

pytestmark = pytest.mark.django_db


@pytest.fixture
def schema(operator_client):
    return served_schema(operator_client)


def _enum_query_parameters(schema):
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            for param in operation.get("parameters", []) if isinstance(operation, dict) else []:
                if param.get("in") == "query" and "enum" in param.get("schema", {}):
                    yield path, method, param


def test_every_enum_filter_documents_blank_as_no_filter(schema):
    """One convention on every list: a blank enum filter is no filter, and the schema says so (before, /v1/runs
    and /v1/learning-skills answered 200 to ``?kind=`` while their schema refused the blank value)."""
    found = list(_enum_query_parameters(schema))
    assert {path for path, _, _ in found} >= {"/v1/runs", "/v1/learning-skills", "/v1/learnings"}
    for path, method, param in found:
        assert "" in param["schema"]["enum"], (method, path, param["name"])


@pytest.mark.parametrize(
    ("path", "param"),
    [("/v1/runs", "kind"), ("/v1/runs", "status"), ("/v1/learning-skills", "status"), ("/v1/learnings", "kind")],
)
def test_a_blank_enum_filter_lists_as_no_filter_and_a_wrong_one_is_400(operator_client, path, param):
    assert operator_client.get(path, {param: ""}).json()["count"] == operator_client.get(path).json()["count"]
    assert_problem(operator_client.get(path, {param: "no-such-value"}), 400)


def test_an_unknown_supersedes_is_a_documented_404_naming_the_field(operator_client, schema):
    body = {
        "scope": {"kind": "workspace"},
        "kind": "decision",
        "content": "Deploys go out on Tuesdays.",
        "supersedes": "learning-999999",
    }
    response = operator_client.post("/v1/learnings", body, format="json")
    assert_problem(response, 404, field="supersedes")
    assert "404" in schema["paths"]["/v1/learnings"]["post"]["responses"]
    assert "404" not in schema["paths"]["/v1/learnings"]["get"]["responses"]


def test_options_never_fails_on_any_operation(operator_client, api_client, schema):
    """``OPTIONS /v1/learning-skills/0/rollback`` answered 500: a ViewSet without one serializer_class."""
    for path in schema["paths"]:
        concrete = re.sub(r"\{[^}]+\}", "0", path)
        for client in (operator_client, api_client):
            assert client.options(concrete).status_code < 500, path
