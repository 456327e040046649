"""memory.hooks: the one registry through which a lower plane triggers a higher one."""

from __future__ import annotations

import pytest

from memory import hooks


def test_the_apps_register_their_listeners_at_ready_time():
    assert len(hooks.listeners(hooks.TERMINAL_RUN)) == 2  # memory's run-memory recorder, learnings' capture
    assert [f.__name__ for f in hooks.listeners(hooks.LEARNING_REVOKING)] == ["on_learning_revoking"]  # skills
    assert len(hooks.listeners(hooks.SEMANTIC_CAPTURE_ENABLED)) == 1  # learnings' policy


@pytest.mark.django_db
def test_fire_calls_listeners_in_order_and_returns_their_results():
    calls = []

    def first(*args, **kwargs):
        calls.append(("first", args, kwargs))
        return 1

    def second(*args, **kwargs):
        calls.append(("second", args, kwargs))
        return 2

    before = hooks.listeners(hooks.SEMANTIC_CAPTURE_ENABLED)
    hooks.register(hooks.SEMANTIC_CAPTURE_ENABLED, first)
    hooks.register(hooks.SEMANTIC_CAPTURE_ENABLED, second)
    hooks.register(hooks.SEMANTIC_CAPTURE_ENABLED, first)  # once only
    try:
        assert hooks.fire(hooks.SEMANTIC_CAPTURE_ENABLED) == [*(func() for func in before), 1, 2]
        assert [name for name, _, _ in calls] == ["first", "second"]
    finally:
        hooks.unregister(hooks.SEMANTIC_CAPTURE_ENABLED, first)
        hooks.unregister(hooks.SEMANTIC_CAPTURE_ENABLED, second)
    assert hooks.listeners(hooks.SEMANTIC_CAPTURE_ENABLED) == before
    hooks.unregister(hooks.SEMANTIC_CAPTURE_ENABLED, first)  # absent: a no-op


def test_undeclared_hook_names_are_refused():
    with pytest.raises(ValueError, match="unknown hook 'terminal-run'"):
        hooks.register("terminal-run", print)
    with pytest.raises(ValueError, match="unknown hook"):
        hooks.fire("semantic_capture_on")
