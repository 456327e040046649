"""Fixtures for the client and MCP tests: the test suite's own server on loopback (pytest-django's
``live_server``, committed data) and real API keys. The client package lives in ``clients/python`` (it is not a
dependency of the service), so it is put on ``sys.path`` here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

CLIENT_SRC = Path(__file__).resolve().parents[2] / "clients" / "python"
if str(CLIENT_SRC) not in sys.path:
    sys.path.insert(0, str(CLIENT_SRC))

pytest.importorskip("httpx2")

PREFERENCE = "Preference: always report sizes in gigabytes."
PREFERENCE_CONTENT = "always report sizes in gigabytes"


@pytest.fixture
def base_url(live_server) -> str:
    return live_server.url


@pytest.fixture
def agent_client(base_url, agent_key):
    from kheish_memory import KheishClient

    with KheishClient(base_url, agent_key.plaintext) as client:
        yield client


@pytest.fixture
def other_agent_client(base_url, other_agent_key):
    from kheish_memory import KheishClient

    with KheishClient(base_url, other_agent_key.plaintext) as client:
        yield client


@pytest.fixture
def ops_client(base_url, operator_key):
    from kheish_memory import KheishClient

    with KheishClient(base_url, operator_key.plaintext) as client:
        yield client


@pytest.fixture
def heuristic_capture(ops_client, llm_unconfigured):
    """The learning policy with semantic capture on and no model configured: the heuristic extractor turns a
    labelled statement (``Preference: …``) into a daemon candidate; ``manual_only`` keeps it for an operator."""
    policy = ops_client.get_learning_policy().model_dump()
    policy["mode"] = "manual_only"
    policy["capture"]["semantic_candidates"]["enabled"] = True
    return ops_client.set_learning_policy(policy)
