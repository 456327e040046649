"""What schema fuzzing found and the schema or the API now says the same way (CI's schemathesis run):
an enum filter sent empty, and an unknown learning named in a request body."""

from __future__ import annotations

import pytest

from tests.conftest import assert_problem

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("path", "param"),
    [
        ("/v1/runs", "kind"),
        ("/v1/runs", "status"),
        ("/v1/learnings", "kind"),
        ("/v1/learnings", "status"),
        ("/v1/learnings", "policy_decision"),
        ("/v1/learning-candidates", "kind"),
        ("/v1/learning-candidates", "state"),
        ("/v1/learning-candidates", "origin"),
    ],
)
def test_an_enum_filter_sent_empty_is_refused_naming_it(operator_client, path, param):
    """django-filter reads ``?kind=`` as "no filter" and listed everything; the schema says one of the choices."""
    response = operator_client.get(path, {param: ""})
    assert_problem(response, 400, field=param)
    assert "must be one of" in response.json()["detail"]
    assert operator_client.get(path).status_code == 200  # absent is still "no filter"


def test_an_unknown_supersedes_is_a_documented_404_naming_the_field(operator_client):
    body = {
        "scope": {"kind": "workspace"},
        "kind": "decision",
        "content": "Deploys go out on Tuesdays.",
        "supersedes": "learning-999999",
    }
    response = operator_client.post("/v1/learnings", body, format="json")
    assert_problem(response, 404, field="supersedes")
    schema = operator_client.get("/v1/schema/", HTTP_ACCEPT="application/json").json()
    assert "404" in schema["paths"]["/v1/learnings"]["post"]["responses"]
    assert "404" not in schema["paths"]["/v1/learnings"]["get"]["responses"]
