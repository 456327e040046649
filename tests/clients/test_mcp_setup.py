"""Issue 25.2 and 25.4 through the MCP stdio server: the documented example config
(``KHEISH_PROJECT_IDS: "my-project"``) fails with an error that says what to do, works once an operator followed
docs/agents.md ("Projects and grants"), and the server is quiet on stderr unless asked to log."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import anyio
import pytest

from tests.clients.test_mcp import _env, call, stdio_client

pytest.importorskip("mcp")

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]  # slow: starts the MCP server


def test_the_example_project_config_fails_helpfully_then_works_after_the_documented_steps(
    base_url, agent_key, ops_client
):
    agent_id = agent_key.api_key.user.username

    async def recall() -> tuple[bool, str | dict]:
        async with stdio_client(base_url, agent_key.plaintext, KHEISH_PROJECT_IDS="my-project") as client:
            result = await client.call_tool("recall", {"query": "sizes"})
            if result.is_error:
                return False, result.content[0].text
            return True, await call(client, "recall", query="sizes")

    ok, error = anyio.run(recall)
    assert not ok
    assert (
        "403 sessions/binding_not_granted: project my-project is not granted to this agent: an operator "
        "creates the project if it does not exist yet (POST /v1/projects)"
    ) in error
    assert "KHEISH_PROJECT_IDS" in error

    # docs/agents.md, "Projects and grants": an operator creates the project and grants it to the agent.
    ops_client.create_project("my-project", "My project")
    ok, error = anyio.run(recall)
    assert not ok and "is not granted to this agent: an operator creates the project if it does not" in error
    grants = ops_client.set_agent_grants(agent_id, project_ids=["my-project"], persona_ids=[])
    assert grants.project_ids == ["my-project"]

    ok, answer = anyio.run(recall)
    assert ok, answer
    session = ops_client.get_session(answer["session_id"])
    assert session.project_ids == ["my-project"]


def _stdio_exchange(base_url: str, api_key: str, *extra_args: str, **env: str) -> str:
    """One initialize + tools/call over the stdio transport, by hand; returns what the server wrote to stderr."""
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "recall", "arguments": {}}},
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "kheish_memory.mcp", *extra_args],
        env={**os.environ, **_env(KHEISH_BASE_URL=base_url, KHEISH_API_KEY=api_key, **env)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    answers = []
    try:
        for message in messages:
            proc.stdin.write(json.dumps(message) + "\n")
            proc.stdin.flush()
            if "id" in message:
                answers.append(json.loads(proc.stdout.readline()))
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert answers[-1]["result"]["isError"] is False, answers[-1]
    return proc.stderr.read()


def test_the_stdio_server_is_quiet_unless_asked_to_log(base_url, agent_key):
    assert "/v1/sessions" not in _stdio_exchange(base_url, agent_key.plaintext)
    logged = _stdio_exchange(base_url, agent_key.plaintext, KHEISH_MCP_LOG_LEVEL="INFO")
    assert "/v1/sessions" in logged
    assert "/v1/sessions" in _stdio_exchange(base_url, agent_key.plaintext, "--log-level", "info")


def test_an_unknown_log_level_is_refused_in_one_line(base_url, agent_key):
    done = subprocess.run(
        [sys.executable, "-m", "kheish_memory.mcp"],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            **_env(KHEISH_BASE_URL=base_url, KHEISH_API_KEY=agent_key.plaintext, KHEISH_MCP_LOG_LEVEL="loud"),
        },
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "KHEISH_MCP_LOG_LEVEL" in done.stderr or "--log-level" in done.stderr
