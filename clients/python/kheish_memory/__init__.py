"""Kheish Memory client: a typed /v1 client, the agent-loop helpers and (extra ``[mcp]``) an MCP server."""

from kheish_memory.agent import Turn, abegin_turn, afinish_turn, begin_turn, finish_turn, turn
from kheish_memory.client import AsyncKheishClient, KheishClient
from kheish_memory.errors import KheishError
from kheish_memory.models import (
    LearningCandidateView,
    LearningView,
    Page,
    RunView,
    Session,
    SessionMemoryContextView,
    SessionMemorySearchView,
)

__all__ = [
    "AsyncKheishClient",
    "KheishClient",
    "KheishError",
    "LearningCandidateView",
    "LearningView",
    "Page",
    "RunView",
    "Session",
    "SessionMemoryContextView",
    "SessionMemorySearchView",
    "Turn",
    "abegin_turn",
    "afinish_turn",
    "begin_turn",
    "finish_turn",
    "turn",
]
__version__ = "0.1.0"
