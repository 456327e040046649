"""Schema truth, round two (issue 22.5): what the served schema says is what the API does — for the cases the
schemathesis run found (tests/kheish/test_fuzz_schema.py is the broad net; these are its findings, pinned)."""

from __future__ import annotations

import http.client
from urllib.parse import quote

import pytest

from kheish.api.pagination import MAX_QUERY_CHARS
from tests.conftest import assert_problem
from tests.kheish.test_web_server import CONF, _Loaded, web_server  # noqa: F401 - the fixture
from tests.support.schema import served_schema

pytestmark = pytest.mark.django_db


def schema(client) -> dict:
    return served_schema(client)


def parameter(doc: dict, path: str, name: str, method: str = "get") -> dict:
    return next(p for p in doc["paths"][path][method]["parameters"] if p["name"] == name)


# ---- query parameters: strict, and their ranges documented ------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "offset=null&offset=null",
        "offset=1&offset=2",
        "offset=null",
        "offset=-1",
        "limit=0",
        "limit=abc",
        "limit=%D9%A1",
        "limit=1&limit=2",
        "offset=1e3",
        "offset=",
        "limit=",
    ],
)
def test_bad_paging_parameters_are_400(api_client, query):
    response = api_client.get(f"/v1/sessions?{query}")
    assert_problem(response, 400, field=query.split("=")[0])


def test_a_limit_over_the_maximum_serves_the_maximum(api_client):
    assert api_client.get("/v1/sessions?limit=100000").status_code == 200


def test_paging_parameters_are_documented_with_their_ranges(operator_client):
    doc = schema(operator_client)
    for path in ("/v1/sessions", "/v1/learnings", "/v1/skills", "/v1/learning-skills"):
        assert parameter(doc, path, "limit")["schema"]["minimum"] == 1, path
        offset = parameter(doc, path, "offset")["schema"]
        assert (offset["minimum"], offset["maximum"]) == (0, 2**62), path


@pytest.mark.parametrize(
    ("path", "name", "low", "high"),
    [
        ("/v1/sessions/{session_id}/context", "budget_tokens", 0, 10_000_000),
        ("/v1/sessions/{session_id}/events", "after_offset", 0, 2**62),
        ("/v1/runs/{run_id}/outputs", "limit", 1, 50),
        ("/v1/runs/{run_id}/outputs", "cursor", 0, 2**62),
        ("/v1/sessions/{session_id}/memory-search", "limit", -(2**31), 2**31),
    ],
)
def test_integer_parameters_document_the_range_they_enforce(
    operator_client, api_client, session_id, path, name, low, high
):
    documented = parameter(schema(operator_client), path, name)["schema"]
    assert (documented["minimum"], documented["maximum"]) == (low, high)
    from tests.support.api import finish

    run_id = finish(api_client, session_id, "hello")
    url = path.replace("{session_id}", session_id).replace("{run_id}", run_id)
    assert api_client.get(f"{url}?{name}={low}").status_code == 200
    assert api_client.get(f"{url}?{name}={high}").status_code == 200
    assert_problem(api_client.get(f"{url}?{name}={high + 1}"), 400, field=name)
    assert_problem(api_client.get(f"{url}?{name}="), 400, field=name)  # blank is not an integer


# ---- bodies ---------------------------------------------------------------------------------------------------


def test_strict_bodies_say_additional_properties_false(operator_client):
    components = schema(operator_client)["components"]["schemas"]
    for name in (
        "CompleteRequest",
        "OpenSessionRequest",
        "CreateLearningCandidateRequest",
        "ToolCallFinishedRequest",
        "RevokeMatchingLearningsRequest",
    ):
        if name in components:
            assert components[name].get("additionalProperties") is False, name
    strict = [n for n, c in components.items() if n.endswith("Request") and c.get("additionalProperties") is False]
    assert len(strict) >= 15


def test_non_blank_text_fields_say_so(operator_client):
    components = schema(operator_client)["components"]["schemas"]
    wait = components["WaitRequest"]["properties"]["request_ids"]["items"]
    assert wait.get("pattern") == "\\S" or wait.get("minLength") == 1
    assert parameter(schema(operator_client), "/v1/skills/{name}", "name", "get")["schema"]["pattern"] == (
        "^[A-Za-z0-9:_-]{1,64}$"
    )


def test_the_learning_scope_schema_states_the_scope_rules(operator_client):
    scope = schema(operator_client)["components"]["schemas"]["LearningScope"]
    shapes = {branch["properties"]["kind"]["pattern"]: branch for branch in scope["oneOf"]}
    assert set(shapes) == {"^session$", "^(persona|project)$", "^workspace$"}
    assert shapes["^session$"]["properties"]["id"]["pattern"].startswith("^\\s*session-[1-9]")
    assert shapes["^workspace$"]["required"] == ["kind"]


@pytest.mark.parametrize("body", ["null", "[]", "false", "0", '""'])
def test_a_non_object_body_to_a_run_action_is_400(api_client, session_id, body):
    run_id = api_client.post(f"/v1/sessions/{session_id}/runs", {"input": {"content": "x"}}, format="json").json()[
        "run_id"
    ]
    api_client.post(f"/v1/runs/{run_id}/start", {}, format="json")
    response = api_client.generic("POST", f"/v1/runs/{run_id}/complete", body, content_type="application/json")
    assert_problem(response, 400)
    assert api_client.get(f"/v1/runs/{run_id}").json()["status"] == "running"
    empty = api_client.generic("POST", f"/v1/runs/{run_id}/complete", "", content_type="application/json")
    assert empty.status_code == 200  # no body at all is {}


def test_a_non_object_body_to_reject_is_400(operator_client):
    from tests.support.learnings import candidate

    made = candidate("The release train is weekly.")
    response = operator_client.generic(
        "POST", f"/v1/learning-candidates/{made.public_id}/reject", "null", content_type="application/json"
    )
    assert_problem(response, 400)


def test_source_null_is_accepted_as_none(api_client):
    response = api_client.post(
        "/v1/learning-candidates",
        {
            "scope": {"kind": "workspace"},
            "kind": "fact",
            "content": "Codename Atlas.",
            "source": None,
            "evidence_refs": None,
        },
        format="json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["source"] == {} and response.json()["evidence_refs"] == []


# ---- paths and the request line --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/v1/skills/a%0A",
        "/v1/skills/%0A",
        "/v1/learning-skills/x%0A/revoke",
        "/v1/nothing-here%0A",
        "/v1/sessions/session-1%0A",
    ],
)
def test_a_newline_in_a_path_is_a_problem_never_html(operator_client, path):
    response = operator_client.get(path)
    assert response.status_code in (400, 404, 405)
    assert response["Content-Type"] == "application/problem+json"


def test_a_skill_name_with_a_trailing_newline_is_not_the_skill(operator_client, settings, tmp_path):
    """With ``$``, ``/v1/skills/<name>%0A`` served the skill ``<name>``: two names for one skill."""
    from skills import catalog

    skill = tmp_path / "catalog" / "release-notes"
    skill.mkdir(parents=True)
    skill.joinpath("SKILL.md").write_text(
        "---\nname: release-notes\ndescription: Draft release notes.\n---\n"
        "# Release notes\n\nList the merged changes.\n"
    )
    settings.KHEISH_CATALOG_DIR = tmp_path / "catalog"
    catalog.clear_cache()
    name = "release-notes"
    assert operator_client.get(f"/v1/skills/{quote(name)}").status_code == 200
    assert operator_client.get(f"/v1/skills/{quote(name)}%0A").status_code in (400, 404)


def test_queries_are_documented_and_enforced_at_the_max_that_fits_a_request_line(
    operator_client, api_client, session_id
):
    doc = schema(operator_client)
    for path in (
        "/v1/sessions/{session_id}/memory-search",
        "/v1/sessions/{session_id}/memory-context",
        "/v1/skills",
        "/v1/sessions/{session_id}/skills",
    ):
        assert parameter(doc, path, "query")["schema"]["maxLength"] == MAX_QUERY_CHARS, path
    ok = api_client.get(f"/v1/sessions/{session_id}/memory-search", {"query": "a" * MAX_QUERY_CHARS})
    assert ok.status_code == 200
    too_long = api_client.get(f"/v1/sessions/{session_id}/memory-search", {"query": "a" * (MAX_QUERY_CHARS + 1)})
    assert_problem(too_long, 400, field="query")


def test_the_longest_documented_query_fits_gunicorn_s_request_line(monkeypatch):
    monkeypatch.setenv("PORT", "8765")
    line_limit = _Loaded(CONF).cfg.limit_request_line
    assert line_limit == 8190
    worst = quote("\U0001f600" * MAX_QUERY_CHARS)  # 4-byte UTF-8: 12 bytes each, percent-encoded
    request_line = f"GET /v1/sessions/session-{'9' * 18}/memory-search?query={worst}&limit=-2147483648 HTTP/1.1"
    assert len(request_line) <= line_limit


def test_gunicorn_serves_a_request_line_of_8_kb(web_server):  # noqa: F811
    """A request line of ~8 KB reaches the application; gunicorn's default (4094) answered an HTML 414."""
    conn = http.client.HTTPConnection("127.0.0.1", web_server, timeout=10)
    try:
        conn.request("GET", "/?q=" + "a" * 8000)
        response = conn.getresponse()
        assert response.status == 200 and response.read() == b"hello"
    finally:
        conn.close()
