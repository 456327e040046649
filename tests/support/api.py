"""API drivers shared by tests of several apps: run a session's run to a terminal status through /v1."""

from __future__ import annotations


def finish(client, session_id, content, how="complete", output=None, error="boom"):
    rid = client.post(f"/v1/sessions/{session_id}/runs", {"input": {"content": content}}, format="json").json()
    rid = rid["run_id"]
    if how != "cancel":
        client.post(f"/v1/runs/{rid}/start", {}, format="json")
    if output:
        client.post(f"/v1/runs/{rid}/output", {"content": output}, format="json")
    body = {"error": error} if how == "fail" else {}
    response = client.post(f"/v1/runs/{rid}/{how}", body, format="json")
    assert response.status_code == 200, response.content
    return rid
