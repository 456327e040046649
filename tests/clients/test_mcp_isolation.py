"""Issue 19 through MCP, driven by the MCP SDK's own client over stdio against the live test server: the MCP
server only calls /v1 with the agent's key, so what /v1 narrows, ``recall`` and ``remember`` narrow too."""

from __future__ import annotations

import anyio
import pytest

from tests.clients.test_mcp import call, call_error, stdio_client
from tests.factories import LearningFactory

pytest.importorskip("mcp")

pytestmark = pytest.mark.django_db(transaction=True)


def test_mcp_recall_follows_a_withdrawn_grant_and_never_crosses_agents(
    base_url, agent_key, other_agent_key, agent_client, other_agent_client, ops_client, grant
):
    ops_client.create_project("atlas", "Atlas")
    ops_client.create_project("borealis", "Borealis")
    agent, other = agent_key.api_key.user, other_agent_key.api_key.user
    grant(agent, projects=["atlas"])
    grant(other, projects=["borealis"])
    learning = LearningFactory(
        scope_kind="project",
        scope_id="atlas",
        kind="preference",
        content="Atlas deploys always go through the blue pipeline.",
    )
    policy = ops_client.get_run_memory_policy().model_dump()
    ops_client.set_run_memory_policy({**policy, "search_visibility": "learning_scopes"})
    mine = agent_client.create_session(project_ids=["atlas"]).session_id
    theirs = other_agent_client.create_session(project_ids=["borealis"]).session_id
    query = "How do atlas deploys through the blue pipeline work?"

    async def scenario():
        async with stdio_client(base_url, agent_key.plaintext, KHEISH_SESSION_ID=mine) as client:
            before = await call(client, "recall", query=query)
            assert [e["learning_id"] for e in before["learnings"]] == [learning.public_id]
            assert any(m["source_id"] == learning.public_id for m in before["matches"])
            run = await call(client, "record_run", input="Deploy atlas build seven", output="deployed")

            await anyio.to_thread.run_sync(lambda: grant(agent))  # every grant withdrawn; the session stays bound
            after = await call(client, "recall", query=query)
            assert after["learnings"] == [] and "always go through" not in after["memory"]
            assert not [m for m in after["matches"] if m["kind"] == "learning"]
            message = await call_error(
                client, "remember", content="Atlas has a new owner.", scope="project", project_id="atlas"
            )
            assert "403" in message and "scope_forbidden" in message, message

            await anyio.to_thread.run_sync(lambda: grant(agent, projects=["atlas"]))
            again = await call(client, "recall", query=query)
            assert [e["learning_id"] for e in again["learnings"]] == [learning.public_id]

        async with stdio_client(base_url, other_agent_key.plaintext, KHEISH_SESSION_ID=theirs) as intruder:
            seen = await call(intruder, "recall", query="atlas blue pipeline deploy")
            assert seen["learnings"] == [] and seen["recovered_runs"] == []
            assert [m for m in seen["matches"] if m["source_id"] in (run["run_id"], learning.public_id)] == []
            message = await call_error(intruder, "recall", query="atlas", session_id=mine)
            assert "404" in message, message

    anyio.run(scenario)
