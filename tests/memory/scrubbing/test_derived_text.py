"""Scrubbing where derived text is stored or shown, through the API: the run-memory record, the run_summary
candidate, the memory-search excerpt and the operator's redaction preview.

Issue 19.1: a pathological completion (up to 200,000 characters of input and output) or preview answers in
bounded time. Issue 20: each secret form is removed from every one of those places.
"""

from __future__ import annotations

import time

import pytest

from benchmarks.scrubbing import PATHOLOGICAL
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


@pytest.mark.parametrize("family", SLOW_FAMILIES)
def test_a_pathological_redaction_preview_answers_in_bounded_time(operator_client, family):
    text = PATHOLOGICAL[family](200_000)
    start = time.perf_counter()
    response = operator_client.post("/v1/runtime/redaction-preview", {"text": text}, format="json")
    assert response.status_code == 200
    assert time.perf_counter() - start < 5, family
