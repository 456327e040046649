"""Issue 25.4: docs/agents.md lists every client method with its signature, as the client defines it."""

from __future__ import annotations

import inspect

from kheish.service_config import REPO_DIR
from tests.clients.conftest import CLIENT_SRC  # noqa: F401  (puts the client package on sys.path)


def _rendered(name: str, function) -> str:
    """``name(a, b, *, c=None)`` the way docs/agents.md writes it."""
    parts, starred = [], False
    for parameter in list(inspect.signature(function).parameters.values())[1:]:
        if parameter.kind is parameter.VAR_KEYWORD:
            parts.append(f"**{parameter.name}")
            continue
        if parameter.kind is parameter.KEYWORD_ONLY and not starred:
            parts.append("*")
            starred = True
        default = parameter.default
        if default is parameter.empty:
            parts.append(parameter.name)
        else:
            parts.append(f"{parameter.name}={default!r}".replace("'", '"'))
    return f"{name}({', '.join(parts)})"


def test_every_client_method_is_documented_with_its_signature():
    from kheish_memory import KheishClient

    docs = (REPO_DIR / "docs" / "agents.md").read_text()
    methods = [
        (name, fn) for name, fn in inspect.getmembers(KheishClient, inspect.isfunction) if not name.startswith("_")
    ]
    assert len(methods) > 50
    missing = [_rendered(name, fn) for name, fn in methods if f"`{_rendered(name, fn)}`" not in docs]
    assert missing == [], "not in docs/agents.md as written:\n" + "\n".join(missing)
