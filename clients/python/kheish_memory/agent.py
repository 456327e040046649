"""The agent loop in two calls.

    from kheish_memory import KheishClient, begin_turn, finish_turn

    kheish = KheishClient()                                   # KHEISH_BASE_URL, KHEISH_API_KEY
    session = kheish.create_session()
    turn = begin_turn(kheish, session.session_id, user_message)
    reply = my_model(system=turn.memory, user=turn.user_message)   # or: my_model(turn.prompt)
    finish_turn(kheish, turn, output=reply)                    # or error="..." to fail the run

``begin_turn`` opens (and starts) a run: the service packs the memory this input should see
(``learned_context``, ``recovered_memory``) and records what it injected. ``finish_turn`` completes the run with
the model's reply, or fails it with an error; the terminal run then feeds recovered memory and learning capture.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kheish_memory.models import RunView

if TYPE_CHECKING:
    from kheish_memory.client import AsyncKheishClient, KheishClient


@dataclass
class Turn:
    """An open run and the text to put in front of the model."""

    run: RunView
    user_message: str
    output: str | None = None  # set it inside ``with turn(...)``; completing the run reports it

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def session_id(self) -> str:
        return self.run.session_id

    @property
    def sections(self) -> dict[str, str]:
        """Rendered memory sections by name (absent when empty)."""
        prompt = self.run.prompt
        return {s.name: s.content for s in prompt.sections} if prompt else {}

    @property
    def memory(self) -> str:
        """The rendered memory sections, blank-line separated (empty string when there is nothing to recall):
        put it in the system prompt."""
        return "\n\n".join(content for content in self.sections.values() if content)

    @property
    def prompt(self) -> str:
        """Memory then the user's input, as one text (for models without a system role)."""
        return f"{self.memory}\n\n{self.user_message}" if self.memory else self.user_message

    def messages(self, system: str | None = None) -> list[dict[str, str]]:
        """Chat messages: ``system`` (plus memory) then the user's input."""
        head = "\n\n".join(part for part in (system, self.memory) if part)
        out = [{"role": "system", "content": head}] if head else []
        return [*out, {"role": "user", "content": self.user_message}]


def begin_turn(
    client: KheishClient, session_id: str, user_message: str, *, start: bool = True, **open_kwargs: Any
) -> Turn:
    """Open a run for ``user_message`` (and start it); return the :class:`Turn` with the memory to inject."""
    run = client.open_run(session_id, user_message, **open_kwargs)
    if start and run.status == "queued":
        started = client.start_run(run.run_id)
        run = started if started.prompt is not None else run.model_copy(update={"status": started.status})
    return Turn(run=run, user_message=user_message)


def finish_turn(
    client: KheishClient, turn: Turn | str, *, output: str | None = None, error: str | None = None
) -> RunView:
    """Complete the run with ``output`` (the model's reply), or fail it with ``error``."""
    run_id = turn.run_id if isinstance(turn, Turn) else turn
    if error is not None:
        return client.fail_run(run_id, error)
    status = turn.run.status if isinstance(turn, Turn) else client.get_run(run_id).status
    if status == "queued":
        client.start_run(run_id)
    return client.complete_run(run_id, output=output)


@contextmanager
def turn(client: KheishClient, session_id: str, user_message: str, **open_kwargs: Any) -> Iterator[Turn]:
    """``with turn(kheish, sid, msg) as t: t.output = model(t.prompt)`` — completes the run with ``t.output``,
    or fails it with the exception's text if the block raises (the exception propagates)."""
    current = begin_turn(client, session_id, user_message, **open_kwargs)
    try:
        yield current
    except BaseException as exc:
        finish_turn(client, current, error=f"{type(exc).__name__}: {exc}"[:20_000])
        raise
    finish_turn(client, current, output=current.output)


async def abegin_turn(
    client: AsyncKheishClient, session_id: str, user_message: str, *, start: bool = True, **open_kwargs: Any
) -> Turn:
    run = await client.open_run(session_id, user_message, **open_kwargs)
    if start and run.status == "queued":
        started = await client.start_run(run.run_id)
        run = started if started.prompt is not None else run.model_copy(update={"status": started.status})
    return Turn(run=run, user_message=user_message)


async def afinish_turn(
    client: AsyncKheishClient, turn: Turn | str, *, output: str | None = None, error: str | None = None
) -> RunView:
    run_id = turn.run_id if isinstance(turn, Turn) else turn
    if error is not None:
        return await client.fail_run(run_id, error)
    status = turn.run.status if isinstance(turn, Turn) else (await client.get_run(run_id)).status
    if status == "queued":
        await client.start_run(run_id)
    return await client.complete_run(run_id, output=output)
