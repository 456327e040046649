"""The one way a lower plane triggers a higher one: named hooks that the higher app fills at ready-time.

Imports go ``memory`` ← ``learnings`` ← ``skills`` ← ``kheish``. When a lower plane must make a higher one act
(a terminal run triggers semantic capture, a revoked learning revokes the skill grown from it), the lower plane
calls ``fire(NAME, ...)`` and the higher app's ``AppConfig.ready`` has called ``register(NAME, listener)``; the
lower plane never imports the higher one. Every hook name is declared below with who fires it and what the
listeners get; registering or firing an undeclared name is an error.

- ``TERMINAL_RUN`` — fired by ``memory.runs`` inside the transaction of a run's terminal status change, with
  ``(run)``. memory records the run memory; learnings queues capture with ``transaction.on_commit``.
- ``LEARNING_REVOKING`` — fired by learnings before a learning stops being live (revoke, supersede), with
  ``(learning, actor=, reason=, superseding=)``. skills revokes the promoted skill grown from it. A listener's
  error propagates and aborts the caller's transaction.
- ``SEMANTIC_CAPTURE_ENABLED`` — asked by ``memory.run_memory`` when it stores a record, with no arguments;
  learnings answers from its policy. Capture is on when any listener answers true (none registered: off).
- ``SCOPE_DEPENDENTS`` — asked by ``memory.sessions`` when an operator is about to delete a persona or project,
  with ``(scope_key)``; each listener answers ``{label: count}`` of the records it keeps in that scope
  (learnings answers its learnings and candidates), shown on the confirmation page and kept in the audit row.

``fire`` calls the listeners in registration order and returns their results in that order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

TERMINAL_RUN = "terminal_run"
LEARNING_REVOKING = "learning_revoking"
SEMANTIC_CAPTURE_ENABLED = "semantic_capture_enabled"
SCOPE_DEPENDENTS = "scope_dependents"

_hooks: dict[str, list[Callable[..., Any]]] = {
    TERMINAL_RUN: [],
    LEARNING_REVOKING: [],
    SEMANTIC_CAPTURE_ENABLED: [],
    SCOPE_DEPENDENTS: [],
}


def _listeners_of(name: str) -> list[Callable[..., Any]]:
    try:
        return _hooks[name]
    except KeyError:
        raise ValueError(f"unknown hook {name!r} (declared: {', '.join(_hooks)})") from None


def register(name: str, func: Callable[..., Any]) -> None:
    """Add ``func`` to the listeners of hook ``name`` (once: registering the same function again is a no-op)."""
    listeners = _listeners_of(name)
    if func not in listeners:
        listeners.append(func)


def unregister(name: str, func: Callable[..., Any]) -> None:
    """Remove ``func`` from the listeners of hook ``name`` (absent: a no-op)."""
    listeners = _listeners_of(name)
    if func in listeners:
        listeners.remove(func)


def listeners(name: str) -> tuple[Callable[..., Any], ...]:
    """The listeners of hook ``name``, in the order they are called."""
    return tuple(_listeners_of(name))


def fire(name: str, *args: Any, **kwargs: Any) -> list[Any]:
    """Call every listener of hook ``name`` with these arguments; their results, in registration order."""
    return [func(*args, **kwargs) for func in list(_listeners_of(name))]
