"""Plane 1 and 2 vocabulary, written once (issue 21.1): run statuses (and which are terminal), run kinds,
journal event types, API key roles, policy kinds, semantic-capture receipts; and the public ids
(``memory.public_ids``: ``session-N``, ``run-N``, formatted and parsed there only). ``memory.models``
re-exports these; the run status machine (``memory.runs``), the record rules (``memory.run_records``), the API
and the console read them from here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from django.db import models


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING_FOR_APPROVAL = "waiting_for_approval"
    WAITING_FOR_USER_QUESTION = "waiting_for_user_question"
    COMPLETED = "completed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"


FAILURE_STATUSES: frozenset[str] = frozenset({RunStatus.FAILED, RunStatus.INTERRUPTED, RunStatus.CANCELLED})
"""Terminal statuses that are not success: a failure marker of the run's record (§4.1)."""
TERMINAL_STATUSES: frozenset[str] = frozenset({RunStatus.COMPLETED, *FAILURE_STATUSES})
ACTIVE_STATUSES: frozenset[str] = frozenset(set(RunStatus.values) - {str(s) for s in TERMINAL_STATUSES})


class RunKind(models.TextChoices):
    INPUT = "input"
    GOAL_CONTINUATION = "goal_continuation"
    SCHEDULED_INPUT = "scheduled_input"
    OBSERVATION_MATERIALIZATION = "observation_materialization"
    SCHEDULED_OBSERVATION_MATERIALIZATION = "scheduled_observation_materialization"
    MAILBOX_DELIVERY = "mailbox_delivery"
    CHANNEL_DELIVERY = "channel_delivery"
    PARENT_CLARIFICATION = "parent_clarification"
    APPROVAL_RESUME = "approval_resume"
    USER_QUESTION_RESUME = "user_question_resume"


class EventType(models.TextChoices):
    INPUT_RECEIVED = "input_received"
    MESSAGE_APPENDED = "message_appended"
    TOOL_CALL_STARTED = "tool_call_started"
    TOOL_CALL_FINISHED = "tool_call_finished"
    USER_QUESTION_REQUESTED = "user_question_requested"
    USER_QUESTION_RESOLVED = "user_question_resolved"
    COMPACTION_BOUNDARY = "compaction_boundary"
    RUN_LIFECYCLE = "run_lifecycle"


class ApiKeyRole(models.TextChoices):
    AGENT = "agent"
    OPERATOR = "operator"


class PolicyKind(models.TextChoices):
    RUN_MEMORY = "run_memory"
    LEARNING = "learning"


class SemanticCapture(models.TextChoices):
    PENDING = "pending"
    COMPLETED = "completed"
    SKIPPED = "skipped"


def listing(
    values: Iterable[str], notes: Mapping[str, str] | None = None, *, sep: str = " | ", last: str | None = None
) -> str:
    """``a | b (note) | c``, or with ``sep=", ", last=" or "`` ``a, b or c``: the values of a vocabulary as the
    schema text and the console say them."""
    words = [f"{value} ({notes[value]})" if notes and value in notes else str(value) for value in values]
    if last is not None and len(words) > 1:
        return sep.join(words[:-1]) + last + words[-1]
    return sep.join(words)
