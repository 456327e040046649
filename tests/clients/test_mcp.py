"""The MCP server driven by the MCP SDK's own client, over stdio (a subprocess) and over streamable HTTP (a
subprocess on loopback), against the live test server: the worked scenario and authorisation through MCP."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from contextlib import asynccontextmanager

import anyio
import pytest

from tests.clients.conftest import CLIENT_SRC, PREFERENCE, PREFERENCE_CONTENT

pytest.importorskip("mcp")

import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]  # slow: starts the MCP server
TIMEOUT = 60


def _env(**values: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(CLIENT_SRC), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, **values}


def stdio_client(base_url: str, api_key: str, **env: str) -> Client:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "kheish_memory.mcp"],
        env=_env(KHEISH_BASE_URL=base_url, KHEISH_API_KEY=api_key, **env),
    )
    return Client(params, read_timeout_seconds=TIMEOUT)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def http_mcp(base_url):
    """``kheish-memory-mcp --transport http`` as a subprocess; yields its endpoint URL."""
    port = _free_port()
    env = {**os.environ, **_env(KHEISH_BASE_URL=base_url)}
    env.pop("KHEISH_API_KEY", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kheish_memory.mcp", "--transport", "http", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"MCP HTTP server exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("MCP HTTP server did not start")
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@asynccontextmanager
async def http_client(url: str, api_key: str | None, headers: dict[str, str] | None = None):
    all_headers = dict(headers or {})
    if api_key:
        all_headers["Authorization"] = f"Bearer {api_key}"
    async with (
        httpx2.AsyncClient(headers=all_headers, timeout=TIMEOUT) as http,
        Client(streamable_http_client(url, http_client=http), read_timeout_seconds=TIMEOUT) as client,
    ):
        yield client


async def call(client: Client, tool: str, **arguments) -> dict:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    return result.structured_content or json.loads(result.content[0].text)


async def call_error(client: Client, tool: str, **arguments) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result
    return result.content[0].text


async def worked_scenario(client: Client, ops_client, session_id: str | None = None) -> str:
    """A labelled preference -> a pending candidate -> an operator publishes it -> the next recall has it."""
    ids = {"session_id": session_id} if session_id else {}
    tools = {tool.name for tool in (await client.list_tools()).tools}
    assert tools == {"recall", "remember", "record_run"}

    empty = await call(client, "recall", query="disk sizes", **ids)
    session_id = empty["session_id"]
    assert empty["learnings"] == [] and empty["memory"] == ""

    run = await call(
        client,
        "record_run",
        input=PREFERENCE,
        output="Noted.",
        session_id=session_id,
        tool_calls=[{"name": "notes.write", "input": {"text": "gb"}, "output": "ok"}],
    )
    assert run["status"] == "completed" and run["session_id"] == session_id

    pending = await anyio.to_thread.run_sync(
        lambda: ops_client.review_queue(scope_kind="session", scope_id=session_id, kind="preference")
    )
    assert [(c.content, c.origin, c.state) for c in pending.results] == [(PREFERENCE_CONTENT, "daemon", "pending")]
    not_yet = await call(client, "recall", query="disk sizes", session_id=session_id)
    assert not_yet["learnings"] == []

    learning = await anyio.to_thread.run_sync(lambda: ops_client.publish_candidate(pending.results[0].candidate_id))
    recalled = await call(client, "recall", query="Report the disk usage sizes", session_id=session_id)
    assert [e["learning_id"] for e in recalled["learnings"]] == [learning.learning_id]
    assert PREFERENCE_CONTENT in recalled["memory"] and "# Learned Context" in recalled["memory"]
    assert any(m["source_id"] == learning.learning_id for m in recalled["matches"])
    assert [e["run_id"] for e in recalled["recovered_runs"]] == [run["run_id"]]

    card = await client.read_resource(f"kheish://sessions/{session_id}/memory")
    assert PREFERENCE_CONTENT in card.contents[0].text and "1 learnings · 1 recovered runs" in card.contents[0].text

    # `remember` only proposes: the candidate is pending review even though a learning is already published.
    proposed = await call(
        client, "remember", content="The staging cluster is called Nimbus.", kind="fact", session_id=session_id
    )
    assert proposed["state"] == "pending" and proposed["scope"] == f"session:{session_id}"
    candidate = await anyio.to_thread.run_sync(lambda: ops_client.get_candidate(proposed["candidate_id"]))
    assert (candidate.origin, candidate.state, candidate.published_learning_id) == ("api", "pending", None)
    return session_id


async def authorisation_checks(client: Client, victim_session: str, ops_client) -> None:
    """An agent key through MCP: another agent's session is not found, operator-only effects are refused."""
    for tool, args in (
        ("recall", {"query": "sizes"}),
        ("record_run", {"input": "hi"}),
        ("remember", {"content": "The owner is me."}),
    ):
        message = await call_error(client, tool, session_id=victim_session, **args)
        assert "404" in message and "not_found" in message, message
    with pytest.raises(Exception, match="404|not found|not_found"):  # the SDK's MCPError
        await client.read_resource(f"kheish://sessions/{victim_session}/memory")
    own = await call(client, "recall")
    # Proposing into a scope the key does not own is the API's 403, surfaced as a tool error.
    project = await anyio.to_thread.run_sync(lambda: ops_client.create_project("secret-project", "Secret"))
    message = await call_error(
        client,
        "remember",
        content="The budget is large.",
        scope="project",
        project_id=project.project_id,
        session_id=own["session_id"],
    )
    assert "403" in message and "scope_forbidden" in message, message
    # No MCP tool publishes, revokes or changes policy: the only writes are proposals and run reports.
    tools = {tool.name for tool in (await client.list_tools()).tools}
    assert not tools & {"publish", "publish_candidate", "revoke", "supersede", "set_learning_policy"}


def test_mcp_over_stdio(base_url, agent_key, other_agent_key, ops_client, heuristic_capture):
    async def scenario():
        async with stdio_client(base_url, agent_key.plaintext) as client:
            session_id = await worked_scenario(client, ops_client)
            card = await client.read_resource("kheish://session/memory")  # the process's current session
            assert session_id in card.contents[0].text and PREFERENCE_CONTENT in card.contents[0].text
        async with stdio_client(base_url, other_agent_key.plaintext) as intruder:
            await authorisation_checks(intruder, session_id, ops_client)

    anyio.run(scenario)


def test_mcp_stdio_pinned_session(base_url, agent_client, agent_key):
    session = agent_client.create_session()

    async def scenario():
        async with stdio_client(base_url, agent_key.plaintext, KHEISH_SESSION_ID=session.session_id) as client:
            assert (await call(client, "recall"))["session_id"] == session.session_id
            run = await call(client, "record_run", input="try", status="failed", error="tool crashed")
            assert run["status"] == "failed"
        assert agent_client.get_run(run["run_id"]).error == "tool crashed"

    anyio.run(scenario)


def test_mcp_over_streamable_http(http_mcp, agent_client, agent_key, other_agent_key, ops_client, heuristic_capture):
    async def scenario():
        async with http_client(http_mcp, agent_key.plaintext) as client:
            session_id = await worked_scenario(client, ops_client)
        # A new connection with the same key keeps that key's current session (tools and the static resource).
        async with http_client(http_mcp, agent_key.plaintext) as client:
            card = await client.read_resource("kheish://session/memory")
            assert session_id in card.contents[0].text and PREFERENCE_CONTENT in card.contents[0].text
        # The X-Kheish-Session header picks the current session of the tools.
        other = await anyio.to_thread.run_sync(lambda: agent_client.create_session().session_id)
        async with http_client(http_mcp, agent_key.plaintext, {"X-Kheish-Session": other}) as client:
            assert (await call(client, "recall"))["session_id"] == other
        async with http_client(http_mcp, other_agent_key.plaintext) as intruder:
            await authorisation_checks(intruder, session_id, ops_client)

    anyio.run(scenario)


def test_mcp_http_requires_a_valid_key(http_mcp):
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    headers = {"Accept": "application/json, text/event-stream"}
    missing = httpx2.post(http_mcp, json=body, headers=headers, timeout=TIMEOUT)
    assert missing.status_code == 401 and "Bearer" in missing.headers.get("www-authenticate", "")
    wrong = httpx2.post(
        http_mcp, json=body, headers={**headers, "Authorization": "Bearer khm_bad_key"}, timeout=TIMEOUT
    )
    assert wrong.status_code == 401


def test_mcp_http_passes_the_auth_failure_limit_through(http_mcp, settings, agent_key):
    """Issue 22.4: once /v1's per-address auth-failure limit trips, the MCP HTTP server answered 500; it answers
    /v1's 429 (with Retry-After), and a valid key still gets in."""
    from django.core.cache import caches

    caches["auth_failures"].clear()  # committed counts of earlier tests (this test's data is committed too)
    settings.KHEISH_AUTH_FAILURES_PER_ADDRESS = "3/5m"
    settings.KHEISH_AUTH_FAILURES_PER_PREFIX = "off"
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    headers = {"Accept": "application/json, text/event-stream"}

    def post(key: str):
        return httpx2.post(http_mcp, json=body, headers={**headers, "Authorization": f"Bearer {key}"}, timeout=TIMEOUT)

    for n in range(3):
        wrong = post(f"khm_{n:012x}_{'0' * 48}")
        assert wrong.status_code == 401, wrong.text
        assert "Bearer" in wrong.headers.get("www-authenticate", "")
    limited = post(f"khm_{9:012x}_{'0' * 48}")
    assert limited.status_code == 429, limited.text
    assert int(limited.headers["retry-after"]) >= 1
    assert limited.headers["content-type"] == "application/problem+json"
    assert limited.json()["code"] == "too_many_auth_failures"
    assert post(agent_key.plaintext).status_code == 200  # a valid key is never refused because of failures
    caches["auth_failures"].clear()
