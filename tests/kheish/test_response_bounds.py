"""List responses are bounded in bytes, and so is what one agent stores as metadata (issue 19.8)."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlparse

import pytest

from memory.limits import DEFAULT_MAX_METADATA_BYTES, json_bytes
from memory.models import Run, Session
from tests.conftest import assert_problem

pytestmark = pytest.mark.django_db


def blob(size: int) -> dict:
    """A metadata object of exactly ``size`` bytes as compact JSON."""
    overhead = json_bytes({"k": ""})
    return {"k": "x" * (size - overhead)}


def test_session_metadata_over_the_limit_is_400_naming_field_and_limit(api_client):
    assert json_bytes(blob(DEFAULT_MAX_METADATA_BYTES)) == DEFAULT_MAX_METADATA_BYTES
    ok = api_client.post("/v1/sessions", {"metadata": blob(DEFAULT_MAX_METADATA_BYTES)}, format="json")
    assert ok.status_code == 201, ok.content
    response = api_client.post("/v1/sessions", {"metadata": blob(DEFAULT_MAX_METADATA_BYTES + 1)}, format="json")
    problem = assert_problem(response, 400, code="metadata_too_large", field="metadata")
    assert str(DEFAULT_MAX_METADATA_BYTES) in problem["detail"] and "KHEISH_MAX_METADATA_BYTES" in problem["detail"]
    assert Session.objects.count() == 1


def test_non_ascii_metadata_is_measured_in_bytes(api_client):
    response = api_client.post(
        "/v1/sessions", {"metadata": {"k": "é" * (DEFAULT_MAX_METADATA_BYTES // 2)}}, format="json"
    )
    assert_problem(response, 400, code="metadata_too_large", field="metadata")


def test_the_metadata_limit_is_a_setting(api_client, settings):
    settings.KHEISH_MAX_METADATA_BYTES = 100
    assert_problem(
        api_client.post("/v1/sessions", {"metadata": blob(101)}, format="json"),
        400,
        code="metadata_too_large",
        field="metadata",
    )
    assert api_client.post("/v1/sessions", {"metadata": blob(100)}, format="json").status_code == 201


def test_run_input_metadata_over_the_limit_is_400(api_client, session_id):
    response = api_client.post(
        f"/v1/sessions/{session_id}/runs",
        {"input": {"content": "hi", "metadata": blob(DEFAULT_MAX_METADATA_BYTES + 1)}},
        format="json",
    )
    assert_problem(response, 400, code="metadata_too_large", field="input.metadata")
    assert not Run.objects.exists()


def _sessions(client, count: int, metadata_bytes: int) -> set[str]:
    ids = set()
    for _ in range(count):
        response = client.post("/v1/sessions", {"metadata": blob(metadata_bytes)}, format="json")
        assert response.status_code == 201, response.content
        ids.add(response.json()["session_id"])
    return ids


def test_a_page_stops_at_the_byte_budget_and_next_continues_after_it(api_client, settings):
    settings.KHEISH_MAX_PAGE_BYTES = 40_000
    made = _sessions(api_client, 12, 8_000)
    url, seen, pages = "/v1/sessions?limit=500", [], 0
    while url:
        response = api_client.get(url)
        assert response.status_code == 200
        body = response.json()
        assert body["count"] == 12
        assert len(response.content) < 40_000 + 9_000  # the budget, plus the envelope and one item at most
        seen.extend(item["session_id"] for item in body["results"])
        url, pages = body["next"], pages + 1
        assert pages < 20
    assert pages >= 3
    assert len(seen) == len(set(seen)) == 12 and set(seen) == made  # nothing skipped, nothing repeated


def test_next_keeps_the_limit_and_points_right_after_the_last_item(api_client, settings):
    settings.KHEISH_MAX_PAGE_BYTES = 20_000
    _sessions(api_client, 6, 8_000)
    body = api_client.get("/v1/sessions?limit=5&offset=1").json()
    served = len(body["results"])
    assert 1 <= served < 5
    query = parse_qs(urlparse(body["next"]).query)
    assert query["offset"] == [str(1 + served)] and query["limit"] == ["5"]


def test_an_item_larger_than_the_budget_is_still_served_alone(api_client, settings):
    settings.KHEISH_MAX_PAGE_BYTES = 1_000
    _sessions(api_client, 3, 4_000)
    body = api_client.get("/v1/sessions").json()
    assert len(body["results"]) == 1 and body["next"] is not None


def test_a_page_under_the_budget_is_unchanged(api_client):
    _sessions(api_client, 3, 100)
    body = api_client.get("/v1/sessions?limit=2").json()
    assert len(body["results"]) == 2
    assert parse_qs(urlparse(body["next"]).query)["offset"] == ["2"]
    last = api_client.get(body["next"]).json()
    assert len(last["results"]) == 1 and last["next"] is None


def test_the_issue_s_case_is_bounded(api_client):
    """30 sessions with (what is now the largest allowed) metadata and ?limit=500: one response stays within
    the default 2 MiB page budget; before, 30 × 1 MiB came back in one 31.5 MB response."""
    _sessions(api_client, 30, DEFAULT_MAX_METADATA_BYTES)
    response = api_client.get("/v1/sessions?limit=500")
    assert len(response.content) <= 2 * 1024 * 1024 + DEFAULT_MAX_METADATA_BYTES + 4096
    assert len(json.loads(response.content)["results"]) == 30  # 30 × 16 KiB fits in one page
