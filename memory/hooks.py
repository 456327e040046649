"""A small registry through which higher planes react to lower-plane events without import cycles.

memory fills `terminal_run` with the run-memory recorder at ready-time; learnings adds semantic capture.
Hooks run inside the transaction of the status change; use transaction.on_commit for side effects.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_hooks: dict[str, list[Callable[..., Any]]] = {"terminal_run": [], "learning_revoking": []}


def register(name: str, func: Callable[..., Any]) -> None:
    if func not in _hooks[name]:
        _hooks[name].append(func)


def fire(name: str, *args: Any, **kwargs: Any) -> None:
    for func in list(_hooks[name]):
        func(*args, **kwargs)
