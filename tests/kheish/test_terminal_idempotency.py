"""Issue 13.6: a repeated terminal action writes no second journal event and moves no timestamp; a different
terminal action on a terminal run is a 409 naming both statuses (spec §1.2: same→same; terminal→nothing)."""

from __future__ import annotations

from itertools import permutations

import pytest

from memory.models import AuditEvent, JournalEvent
from tests.conftest import assert_problem

# how a running run reaches each terminal status, and the body that repeats it
TERMINAL = {
    "completed": ("complete", {"output": {"content": "Done."}}),
    "failed": ("fail", {"error": "tool crashed"}),
    "interrupted": ("interrupt", {}),
    "cancelled": ("cancel", {}),
}


def _running_run(client, session_id) -> str:
    response = client.post(f"/v1/sessions/{session_id}/runs", {"input": {"content": "hello"}}, format="json")
    assert response.status_code == 202, response.content
    run_id = response.json()["run_id"]
    assert client.post(f"/v1/runs/{run_id}/start", {}, format="json").status_code == 200
    return run_id


def _trace(run_id: str) -> tuple[int, int]:
    events = JournalEvent.objects.filter(run__pk=int(run_id.split("-")[1])).count()
    audits = AuditEvent.objects.filter(subject_type="run", subject_id=run_id).count()
    return events, audits


@pytest.mark.django_db
@pytest.mark.parametrize("status", list(TERMINAL))
def test_repeating_a_terminal_action_leaves_the_run_unchanged(api_client, session_id, status):
    name, body = TERMINAL[status]
    run_id = _running_run(api_client, session_id)
    first = api_client.post(f"/v1/runs/{run_id}/{name}", body, format="json")
    assert first.status_code == 200, first.content
    assert first.json()["status"] == status
    before = _trace(run_id)

    again = api_client.post(f"/v1/runs/{run_id}/{name}", body, format="json")

    assert again.status_code == 200, again.content
    assert again.json() == first.json()  # same timestamps (finished_at_ms, updated_at_ms), same outputs, error
    assert _trace(run_id) == before  # no second lifecycle event, no second audit row
    lifecycle = JournalEvent.objects.filter(
        run__pk=int(run_id.split("-")[1]), type="run_lifecycle", event__to_status=status
    )
    assert lifecycle.count() == 1


@pytest.mark.django_db
# every ordered pair of two different terminal statuses (same→same is the idempotent case above)
@pytest.mark.parametrize(("status", "other"), list(permutations(TERMINAL, 2)))
def test_another_terminal_action_is_409_naming_both_statuses(api_client, session_id, status, other):
    name, body = TERMINAL[status]
    run_id = _running_run(api_client, session_id)
    done = api_client.post(f"/v1/runs/{run_id}/{name}", body, format="json").json()
    before = _trace(run_id)

    other_name, other_body = TERMINAL[other]
    problem = assert_problem(
        api_client.post(f"/v1/runs/{run_id}/{other_name}", other_body, format="json"), 409, "runs/invalid_transition"
    )

    assert status in problem["detail"] and other in problem["detail"], problem
    assert _trace(run_id) == before
    assert api_client.get(f"/v1/runs/{run_id}").json() == done


@pytest.mark.django_db
def test_a_repeated_complete_with_a_new_output_is_refused(api_client, session_id):
    run_id = _running_run(api_client, session_id)
    done = api_client.post(f"/v1/runs/{run_id}/complete", {"output": {"content": "Done."}}, format="json").json()
    before = _trace(run_id)
    again = api_client.post(f"/v1/runs/{run_id}/complete", {}, format="json")
    assert again.status_code == 200 and again.json() == done
    problem = assert_problem(
        api_client.post(f"/v1/runs/{run_id}/complete", {"output": {"content": "More."}}, format="json"),
        409,
        "runs/invalid_transition",
    )
    assert "completed" in problem["detail"]
    assert _trace(run_id) == before
