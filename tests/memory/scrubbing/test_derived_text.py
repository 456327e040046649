"""Scrubbing where derived text is stored or shown, through the API: the run-memory record, the run_summary
candidate, the memory-search excerpt and the operator's redaction preview.

Issue 19.1: a pathological completion (up to 200,000 characters of input and output) or preview answers in
bounded time. Issue 20: each secret form is removed from every one of those places.
"""

from __future__ import annotations

import time

import pytest

from benchmarks.scrubbing import PATHOLOGICAL
from learnings.models import LearningCandidate
from memory.models import RunMemoryRecord
from tests.support.api import finish

pytestmark = pytest.mark.django_db

SLOW_FAMILIES = [
    "pem opener",
    "key word run then =",
    "secret word run",
    "SSN-like in one token",
    "12 groups then x",
    "a. run then @",
    "distinct sensitive keys",
]


def record_of(rid: str) -> RunMemoryRecord:
    return RunMemoryRecord.objects.get(run_id=int(rid.split("-")[1]))


@pytest.mark.slow  # times 200,000-character runs through the API
@pytest.mark.parametrize("family", SLOW_FAMILIES)
def test_a_pathological_completion_answers_in_bounded_time(api_client, session_id, family):
    """The issue's case (``"-----BEGIN " * 18000`` as input and output took 47 s in ``complete``) and the
    other families that were quadratic: the whole run, 200k characters in and out, well within 10 s."""
    text = PATHOLOGICAL[family](199_000)
    start = time.perf_counter()
    rid = finish(api_client, session_id, text, output=text)
    assert time.perf_counter() - start < 10, family
    record = record_of(rid)
    assert len(record.request_preview) <= 161 and len(record.summary) <= 481


@pytest.mark.slow  # times 200,000-character previews
@pytest.mark.parametrize("family", SLOW_FAMILIES)
def test_a_pathological_redaction_preview_answers_in_bounded_time(operator_client, family):
    text = PATHOLOGICAL[family](200_000)
    start = time.perf_counter()
    response = operator_client.post("/v1/runtime/redaction-preview", {"text": text}, format="json")
    assert response.status_code == 200
    assert time.perf_counter() - start < 5, family


# -- issue 20: each secret form is removed from every derived place -------------------------------------------

KHM = "khm_" + "0f1e2d3c4b5a" + "_" + "9f3c1e5b7d4a6f8e0c2b4d6f8a0c2e4b" + "6d8f0a1b2c3d4e5f"
GLPAT = "gl" + "pat-" + "xY9zW8vU7tS6rQ5pO4nM"
HEX40 = "3f2a9c1e5b7d4a6f8e0c" + "2b4d6f8a0c2e4b6d8f0a"
AWS_ID = "AKIA" + "IOSFODNN7EXAMPLE"
FORMS = {
    "product key in prose": (f"use {KHM} to call the API", KHM),
    "pwd assignment": ("connect with pwd=Hunter2Hunter2 to db1", "Hunter2Hunter2"),
    "password in prose": ("my password is correcthorsebatterystaple ok", "correcthorsebatterystaple"),
    "passphrase in prose": ("the wifi passphrase for the lab is tangerine-owl-42 now", "tangerine-owl-42"),
    "GitLab token": (f"token {GLPAT} for CI", GLPAT),
    "bare hex after a token noun": (f"deploy token {HEX40} for the release", HEX40),
    "AWS example key id": (f"uploads use {AWS_ID} today", AWS_ID),
}


@pytest.fixture
def capture_on():
    from tests.support.learnings import set_policy

    set_policy({"mode": "manual_only", "capture": {"run_summary_candidates": True}})


@pytest.mark.parametrize("form", list(FORMS))
def test_secret_form_is_removed_everywhere_derived_text_is_kept(
    api_client, operator_client, session_id, capture_on, django_capture_on_commit_callbacks, form
):
    text, secret = FORMS[form]
    content = f"Ops note: {text}"
    with django_capture_on_commit_callbacks(execute=True):
        rid = finish(api_client, session_id, content, output=f"Done. {text}")
    record = record_of(rid)
    stored = "\n".join(
        [record.request_preview or "", record.outcome_preview or "", record.summary, *record.failure_markers]
    )
    assert "Ops note:" in stored and "<redacted" in stored
    assert secret not in stored and secret[:8] not in stored and secret[-8:] not in stored, stored
    # the run_summary candidate
    summary = LearningCandidate.objects.get(source_run_id=record.run_id, kind="run_summary")
    assert secret not in summary.content and secret[-8:] not in summary.content
    # the memory-search excerpt
    hits = api_client.get(f"/v1/sessions/{session_id}/memory-search", {"query": "Ops note"}).json()["results"]
    excerpts = [hit["excerpt"] for hit in hits if hit["kind"] != "learning"]
    assert excerpts and all(secret not in e and secret[-8:] not in e for e in excerpts), excerpts
    # the operator's redaction preview
    preview = operator_client.post("/v1/runtime/redaction-preview", {"text": content}, format="json").json()
    assert secret not in preview["text"] and preview["redaction_count"] >= 1
    assert preview["text"].startswith("Ops note:")


@pytest.mark.parametrize(
    "content",
    [
        "The wifi passphrase for the lab is tangerine-owl-42.",
        "My password is correcthorsebatterystaple.",
        f"Use {KHM} for the memory API.",
    ],
)
def test_a_secret_stated_in_prose_is_not_accepted_as_a_learning(api_client, session_id, content):
    response = api_client.post(
        "/v1/learning-candidates", {"scope": {"kind": "workspace"}, "kind": "fact", "content": content}, format="json"
    )
    assert response.status_code == 400, response.content
    assert response.json().get("field") == "content"


@pytest.mark.parametrize(
    "content",
    [
        "Prefers secrets in 1Password rather than .env files.",
        'The login form uses autocomplete="current-password".',
        "Reads the password with getpass.getpass('Password: ').",
        "The old value was secret_token=<redacted>.",
    ],
)
def test_prose_and_code_about_secrets_are_accepted_as_learnings(api_client, session_id, content):
    response = api_client.post(
        "/v1/learning-candidates", {"scope": {"kind": "workspace"}, "kind": "fact", "content": content}, format="json"
    )
    assert response.status_code in (200, 201), response.content
