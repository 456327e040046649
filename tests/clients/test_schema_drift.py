"""The client's typed models and request bodies against the OpenAPI schema the live server serves
(``/v1/schema/``): a field added, removed or made nullable on either side fails here, as does a client call to
an operation the schema does not document."""

from __future__ import annotations

import inspect
import re
import types
import typing
from typing import Any

import httpx2
import pytest

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def served_schema(agent_client) -> dict:
    schema = agent_client.openapi_schema()
    assert schema["openapi"].startswith("3.")
    return schema


def _admits_none(annotation: Any) -> bool:
    if annotation is Any or annotation is None or annotation is type(None):
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_admits_none(arg) for arg in typing.get_args(annotation))
    return False


def _nullable(prop: dict) -> bool:
    if prop.get("nullable"):
        return True
    variants = prop.get("oneOf") or prop.get("anyOf") or []
    return any(v.get("type") == "null" or v.get("$ref", "").endswith("/NullEnum") for v in variants)


def test_every_model_matches_its_schema_component(served_schema):
    from kheish_memory.models import RESPONSE_MODELS

    components = served_schema["components"]["schemas"]
    problems = []
    for model in RESPONSE_MODELS:
        component = components.get(model.schema_component)
        if component is None:
            problems.append(f"{model.__name__}: component {model.schema_component} is not in the schema")
            continue
        served = component.get("properties", {})
        fields = model.model_fields
        if set(served) != set(fields):
            missing, unknown = sorted(set(served) - set(fields)), sorted(set(fields) - set(served))
            problems.append(
                f"{model.__name__} vs {model.schema_component}: missing in the client {missing}, "
                f"unknown to the server {unknown}"
            )
        for name, prop in served.items():
            if name in fields and _nullable(prop) and not _admits_none(fields[name].annotation):
                problems.append(f"{model.__name__}.{name} is nullable on the server but not in the client")
    assert not problems, "\n".join(problems)


def test_every_request_body_matches_its_schema_component(served_schema):
    from kheish_memory.client import REQUEST_FIELDS

    components = served_schema["components"]["schemas"]
    problems = []
    for name, sent in REQUEST_FIELDS.items():
        if name not in components:
            problems.append(f"request component {name} is not in the schema")
            continue
        served = set(components[name].get("properties", {}))
        if served != set(sent):
            problems.append(
                f"{name}: the server takes {sorted(served - sent)} the client cannot send; "
                f"the client sends {sorted(sent - served)} the server does not take"
            )
    assert not problems, "\n".join(problems)


def _dummy(name: str, annotation: Any) -> Any:
    if name in ("request_ids",):
        return ["r-1"]
    if name == "policy":
        return {}
    return "x-1"


def test_every_client_call_is_a_documented_operation(served_schema):
    """Each method of the client makes a request whose method and path are an operation of the schema."""
    from kheish_memory.client import KheishClient, _Surface

    operations = []
    for path, item in served_schema["paths"].items():
        pattern = "[^/]+".join(re.escape(part) for part in re.split(r"\{[^}]+\}", path))
        for method in item:
            operations.append((method.upper(), re.compile(f"^{pattern}$"), path))

    seen: list[tuple[str, str]] = []

    def record(request: httpx2.Request) -> httpx2.Response:
        seen.append((request.method, request.url.path))
        return httpx2.Response(599, json={"status": 599, "code": "recorded", "domain": "test", "detail": "-"})

    client = KheishClient("http://kheish.invalid", "k", transport=httpx2.MockTransport(record), retries=0)
    undocumented = []
    methods = [
        name
        for name, fn in inspect.getmembers(_Surface, inspect.isfunction)
        if not name.startswith("_") and name != "openapi_schema"
    ]  # the schema does not list itself
    assert len(methods) > 50
    for name in methods:
        fn = getattr(client, name)
        args, kwargs = [], {}
        for param in inspect.signature(fn).parameters.values():
            if param.default is not inspect.Parameter.empty or param.kind is param.VAR_KEYWORD:
                continue
            value = _dummy(param.name, param.annotation)
            (args.append(value) if param.kind is param.POSITIONAL_OR_KEYWORD else kwargs.__setitem__(param.name, value))
        before = len(seen)
        with pytest.raises(Exception):  # the recorder answers every call with an error
            fn(*args, **kwargs)
        assert len(seen) == before + 1, name
        method, path = seen[-1]
        if not any(method == m and rx.match(path) for m, rx, _ in operations):
            undocumented.append(f"{name}: {method} {path}")
    assert not undocumented, "\n".join(undocumented)


# --- the client's own vocabulary (it cannot import the server's) -----------------------------------------------


def _disagreement(name: str, client_values: typing.Iterable[str], server_values: typing.Iterable[str]) -> list[str]:
    client, server = {str(v) for v in client_values}, {str(v) for v in server_values}
    if client == server:
        return []
    return [
        f"{name}: the server has {sorted(server - client)} the client lacks; "
        f"the client has {sorted(client - server)} the server does not"
    ]


def _vocabularies() -> list[tuple[str, typing.Iterable[str], typing.Iterable[str]]]:
    """Each client literal (``kheish_memory.models``) beside the server vocabulary it copies."""
    from kheish_memory import models as client

    from learnings import vocabulary as learning_vocabulary
    from memory import vocabulary as memory_vocabulary

    return [
        ("LearningKind", typing.get_args(client.LearningKind), learning_vocabulary.LearningKind.values),
        ("ScopeKind", typing.get_args(client.ScopeKind), learning_vocabulary.ScopeKind.values),
        ("RunStatus", typing.get_args(client.RunStatus), memory_vocabulary.RunStatus.values),
        ("TERMINAL_STATUSES", client.TERMINAL_STATUSES, memory_vocabulary.TERMINAL_STATUSES),
    ]


def test_the_client_literals_are_the_server_vocabulary():
    """A kind, scope kind or run status added to (or removed from) a server ``vocabulary.py`` must be added to
    the client's literal too (docs/architecture.md, "Where things go")."""
    problems = [problem for args in _vocabularies() for problem in _disagreement(*args)]
    assert not problems, "\n".join(problems)


def test_a_kind_the_client_lacks_is_a_disagreement():
    from learnings.vocabulary import LearningKind

    client_kinds = typing.get_args(typing.Literal["run_summary", "fact", "preference", "decision"])
    assert _disagreement("LearningKind", client_kinds, LearningKind.values) == [
        "LearningKind: the server has ['procedure'] the client lacks; the client has [] the server does not"
    ]
    assert _disagreement("LearningKind", [*client_kinds, "procedure", "hunch"], LearningKind.values) == [
        "LearningKind: the server has [] the client lacks; the client has ['hunch'] the server does not"
    ]
