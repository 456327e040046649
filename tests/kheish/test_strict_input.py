"""Flags and ids are never coerced (issue 19.9): booleans in a body are JSON booleans, public ids are canonical
ASCII (``memory.public_ids``), and a session scope names a session by its canonical id."""

from __future__ import annotations

import importlib
import inspect

import pytest
from rest_framework import serializers

from kheish.api.fields import StrictBooleanField, StrictSerializer
from learnings.models import Learning, LearningStatus
from memory import public_ids
from tests.conftest import assert_problem
from tests.support.learnings import learning

ARABIC_ONE = "\u0661"  # ١
FULLWIDTH_ONE = "\uff11"  # １


# ---- the id helper ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["session-1", "session-42", "session-" + "9" * 18])
def test_canonical_ids_parse(value):
    assert public_ids.parse_id(value, "session") == int(value.removeprefix("session-"))


@pytest.mark.parametrize(
    "value",
    [
        f"session-{ARABIC_ONE}",
        f"session-{FULLWIDTH_ONE}",
        "session-01",
        "session-0",
        "session-+1",
        "session- 1",
        "session-1 ",
        "session-1\n",
        "session--1",
        "session-1e3",
        "session-" + "9" * 19,
        "Session-1",
        "session_1",
        "session-",
        "run-1",
        "",
        None,
        1,
    ],
)
def test_everything_else_names_no_record(value):
    assert public_ids.parse_id(value, "session") is None


def test_format_round_trips():
    assert public_ids.format_id("learning-candidate", 7) == "learning-candidate-7"
    assert public_ids.parse_id(public_ids.format_id("learning-candidate", 7), "learning-candidate") == 7


# ---- ids in routes ---------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_non_ascii_or_padded_session_ids_are_404(api_client, session_id):
    number = session_id.removeprefix("session-")
    assert number == "1" or number.isascii()
    assert api_client.get(f"/v1/sessions/{session_id}").status_code == 200
    arabic = "session-" + "".join(chr(0x0660 + int(d)) for d in number)
    for alias in (arabic, f"session-0{number}", "session-" + "".join(chr(0xFF10 + int(d)) for d in number)):
        response = api_client.get(f"/v1/sessions/{alias}")
        assert_problem(response, 404)


@pytest.mark.django_db
def test_non_ascii_run_learning_and_candidate_ids_are_404(api_client, operator_client, session_id):
    from tests.support.api import finish

    run_id = finish(api_client, session_id, "hello")
    number = run_id.removeprefix("run-")
    assert api_client.get(f"/v1/runs/{run_id}").status_code == 200
    assert_problem(api_client.get("/v1/runs/run-" + "".join(chr(0x0660 + int(d)) for d in number)), 404)
    assert_problem(api_client.get(f"/v1/runs/run-0{number}"), 404)
    made = learning("The release train is weekly.")
    assert operator_client.get(f"/v1/learnings/{made.public_id}").status_code == 200
    assert_problem(operator_client.get(f"/v1/learnings/learning-0{made.pk}"), 404)
    assert_problem(operator_client.get("/v1/learning-candidates/learning-candidate-" + ARABIC_ONE), 404)


@pytest.mark.django_db
def test_run_list_filter_by_a_non_canonical_session_id_matches_nothing(api_client, session_id):
    from tests.support.api import finish

    finish(api_client, session_id, "hello")
    assert api_client.get("/v1/runs", {"session_id": session_id}).json()["count"] == 1
    number = session_id.removeprefix("session-")
    assert api_client.get("/v1/runs", {"session_id": f"session-0{number}"}).json()["count"] == 0


@pytest.mark.django_db
def test_a_candidate_scoped_to_a_non_canonical_session_id_is_refused(operator_client, api_client, session_id):
    """Before, ``session-١`` parsed as the agent's own ``session-1`` and the candidate was stored under a scope
    key no session ever matches."""
    number = session_id.removeprefix("session-")
    arabic = "session-" + "".join(chr(0x0660 + int(d)) for d in number)
    body = {"scope": {"kind": "session", "id": arabic}, "kind": "fact", "content": "Codename Atlas."}
    assert_problem(operator_client.post("/v1/learning-candidates", body, format="json"), 400, field="scope.id")
    # an agent: not one of its sessions' scopes (as for any id that names no session of its own)
    assert_problem(api_client.post("/v1/learning-candidates", body, format="json"), 403, field="scope")
    assert_problem(
        operator_client.post(
            "/v1/learning-candidates", {**body, "scope": {"kind": "session", "id": f"session-0{number}"}}, format="json"
        ),
        400,
        field="scope.id",
    )
    ok = api_client.post(
        "/v1/learning-candidates", {**body, "scope": {"kind": "session", "id": session_id}}, format="json"
    )
    assert ok.status_code == 200 and ok.json()["scope"] == {"kind": "session", "id": session_id}


# ---- booleans --------------------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("flag", ["true", 1, "1", "yes", "True", 1.0, [], {}, None])
def test_revoke_matching_all_must_be_a_json_boolean(operator_client, flag):
    made = learning("The release train is weekly.")
    response = operator_client.post("/v1/learnings/revoke-matching", {"all": flag}, format="json")
    assert_problem(response, 400, field="all")
    assert Learning.objects.get(pk=made.pk).status != LearningStatus.REVOKED


@pytest.mark.django_db
def test_revoke_matching_all_true_still_revokes(operator_client):
    made = learning("The release train is weekly.")
    response = operator_client.post("/v1/learnings/revoke-matching", {"all": True}, format="json")
    assert response.status_code == 200, response.content
    assert Learning.objects.get(pk=made.pk).status == LearningStatus.REVOKED


@pytest.mark.django_db
def test_redaction_preview_redact_pii_must_be_a_json_boolean(operator_client):
    response = operator_client.post(
        "/v1/runtime/redaction-preview", {"text": "a@b.example", "redact_pii": "false"}, format="json"
    )
    assert_problem(response, 400, field="redact_pii")
    ok = operator_client.post(
        "/v1/runtime/redaction-preview", {"text": "a@b.example", "redact_pii": False}, format="json"
    )
    assert ok.status_code == 200 and ok.json()["text"] == "a@b.example"


@pytest.mark.django_db
def test_tool_call_finished_is_error_must_be_a_json_boolean(api_client, session_id):
    run_id = api_client.post(f"/v1/sessions/{session_id}/runs", {"input": {"content": "x"}}, format="json").json()
    run_id = run_id["run_id"]
    api_client.post(f"/v1/runs/{run_id}/start", {}, format="json")
    api_client.post(f"/v1/runs/{run_id}/tool-call-started", {"call_id": "c1", "name": "grep"}, format="json")
    response = api_client.post(f"/v1/runs/{run_id}/tool-call-finished", {"call_id": "c1", "is_error": 0}, format="json")
    assert_problem(response, 400, field="is_error")


API_MODULES = (
    "kheish.api.learnings",
    "kheish.api.runtime",
    "kheish.api.runs",
    "kheish.api.sessions",
    "kheish.api.skills",
    "kheish.api.agents",
)


def _input_serializers():
    for name in API_MODULES:
        module = importlib.import_module(name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, StrictSerializer) and cls is not StrictSerializer:
                yield cls


def _booleans(serializer) -> list[tuple[str, serializers.Field]]:
    found = []
    for name, field in serializer.fields.items():
        if isinstance(field, serializers.BooleanField):
            found.append((name, field))
        elif isinstance(field, serializers.Serializer):
            found.extend((f"{name}.{inner}", f) for inner, f in _booleans(field))
        elif isinstance(field, serializers.ListSerializer):
            found.extend((f"{name}[].{inner}", f) for inner, f in _booleans(field.child))
    return found


def test_every_boolean_read_from_a_body_is_strict():
    serializers_seen = list(_input_serializers())
    assert len(serializers_seen) > 10
    booleans = [(cls.__name__, name, field) for cls in serializers_seen for name, field in _booleans(cls())]
    assert {(cls, name) for cls, name, _ in booleans} >= {
        ("RevokeMatchingLearningsSerializer", "all"),
        ("RedactionPreviewSerializer", "redact_pii"),
        ("ToolCallFinishedSerializer", "is_error"),
    }
    loose = [(cls, name) for cls, name, field in booleans if not isinstance(field, StrictBooleanField)]
    assert loose == []
