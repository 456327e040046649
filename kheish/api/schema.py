"""What the served OpenAPI schema (/v1/schema/) says beyond the serializers (issues 13.5, 14.15):

* ``described(summary, description, caller=...)``: ``extend_schema`` with a summary, a description that ends with
  who may call the operation, and ``x-kheish-caller`` (``agent``: agents and operators; ``operator``: operators
  only, an agent key gets 403);
* ``problem_responses``: a drf-spectacular postprocessing hook that documents the problem+json error responses
  (``Problem``, kheish.api.errors) on every operation where they can occur.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from drf_spectacular.utils import extend_schema

from kheish.api.errors import PROBLEM_CONTENT_TYPE, TITLES

AGENT = "agent"
OPERATOR = "operator"
CALLERS = {
    AGENT: "Callers: agents (their own sessions, runs and scopes) and operators (everything).",
    OPERATOR: "Callers: operators only (an operator key or a staff session); an agent key gets 403.",
}


F = TypeVar("F", bound=Callable[..., Any])


def described(summary: str, description: str, *, caller: str = AGENT, **kwargs: Any) -> Callable[[F], F]:
    """``extend_schema`` for one operation: what it does for an agent developer, who may call it, its errors."""
    return extend_schema(
        summary=summary,
        description=f"{description}\n\n{CALLERS[caller]}",
        extensions={"x-kheish-caller": caller},
        **kwargs,
    )


PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "An RFC 7807 problem (application/problem+json): every /v1 error has this shape.",
    "properties": {
        "type": {"type": "string", "description": "https://kheish.dev/problems/{domain}/{code}"},
        "title": {"type": "string", "description": "the HTTP status phrase"},
        "status": {"type": "integer", "description": "the HTTP status code"},
        "code": {"type": "string", "description": "stable machine-readable code (validation_failed, not_found...)"},
        "domain": {"type": "string", "description": "the area that refused: api, auth, runs, learnings, skills..."},
        "detail": {"type": "string", "description": "a human-readable explanation"},
        "field": {"type": "string", "description": "the request field at fault (metadata.tags[2]), when one is"},
        "errors": {"description": "validation errors by field (400 validation_failed only)"},
    },
    "required": ["type", "title", "status", "code", "domain", "detail"],
}

ERROR_TEXT = {
    400: "Invalid input: a malformed body, an unknown or invalid field, or a bad query parameter.",
    401: "No valid API key (Authorization: Bearer <key>).",
    403: "The caller may not do this: an operator-only operation, or a scope, grant or provenance that is not "
    "the caller's.",
    404: "No such object visible to the caller (other agents' objects are 404 too).",
    409: "Conflict with the object's current state: an invalid status transition, a duplicate, or a stale "
    "expected_revision.",
    413: "The request body exceeds the size limit (KHEISH_MAX_BODY_BYTES).",
    415: "The request body is not application/json.",
    429: "Too many requests: slow down and retry after the Retry-After header's seconds.",
}

NO_CONFLICT = frozenset({"runtime_redaction_preview_create", "learnings_revoke_matching_create"})
"""Unsafe operations that never answer 409 (a preview; a bulk revoke that skips what is already revoked)."""

BODY_REFERENCES = frozenset({"learnings_create"})
"""Operations without path parameters whose body names another object by id (``supersedes``): 404 when it is
unknown, with the field named."""

UNSAFE = frozenset({"post", "put", "patch", "delete"})
METHODS = frozenset({"get", "head", *UNSAFE})


def error_statuses(method: str, operation: dict[str, Any]) -> list[int]:
    """The error statuses an operation can answer, from its shape: every one can be 400 (a NUL in the query
    string is refused before routing), 401 and 429; 404 with path parameters; 403 for operator-only and
    unsafe operations; 404 too when the body names another object by id (BODY_REFERENCES); 409 for
    state-changing ones; 413 and 415 with a request body."""
    statuses = [400, 401, 429]
    if (
        any(p.get("in") == "path" for p in operation.get("parameters", []))
        or operation.get("operationId") in BODY_REFERENCES
    ):
        statuses.append(404)
    if operation.get("x-kheish-caller") == OPERATOR or method in UNSAFE:
        statuses.append(403)
    if method in UNSAFE and operation.get("operationId") not in NO_CONFLICT:
        statuses.append(409)
    if method in UNSAFE:
        statuses += [413, 415]
    return sorted(statuses)


def problem_responses(
    result: dict[str, Any], generator: SchemaGenerator, request: Request | None, public: bool
) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: the ``Problem`` component and the error responses of every
    operation (those an operation already documents are kept)."""
    result.setdefault("components", {}).setdefault("schemas", {})["Problem"] = PROBLEM_SCHEMA
    ref = {"$ref": "#/components/schemas/Problem"}
    for item in result.get("paths", {}).values():
        for method, operation in item.items():
            if method not in METHODS:
                continue
            responses = operation.setdefault("responses", {})
            for status in error_statuses(method, operation):
                responses.setdefault(
                    str(status),
                    {
                        "description": f"{TITLES.get(status, 'Error')}: {ERROR_TEXT[status]}",
                        "content": {PROBLEM_CONTENT_TYPE: {"schema": ref}},
                    },
                )
    return result


# ---- request bodies: what the serializers enforce, said in the schema (issue 22.5) ---------------------------

from drf_spectacular.extensions import OpenApiSerializerExtension, OpenApiSerializerFieldExtension  # noqa: E402
from drf_spectacular.generators import SchemaGenerator  # noqa: E402
from drf_spectacular.openapi import AutoSchema  # noqa: E402
from drf_spectacular.utils import Direction  # noqa: E402
from rest_framework.request import Request  # noqa: E402


class StrictCharFieldSchema(OpenApiSerializerFieldExtension):  # type: ignore[no-untyped-call]  # an unannotated __init_subclass__
    """A non-blank ``StrictCharField`` says so: ``minLength: 1``, or, when it trims, ``pattern: \\S`` (a
    whitespace-only value trims to blank and is refused)."""

    target_class = "kheish.api.fields.StrictCharField"
    match_subclasses = True

    def map_serializer_field(self, auto_schema: AutoSchema, direction: Direction) -> dict[str, Any]:
        schema: dict[str, Any] = auto_schema._map_serializer_field(  # type: ignore[no-untyped-call]  # unannotated
            self.target, direction, bypass_extensions=True
        )
        if not self.target.allow_blank and schema.get("type") == "string":
            if self.target.trim_whitespace:
                schema.setdefault("pattern", "\\S")
            else:
                schema.setdefault("minLength", 1)
        return schema


class StrictSerializerSchema(OpenApiSerializerExtension):  # type: ignore[no-untyped-call]  # an unannotated __init_subclass__
    """Every ``StrictSerializer`` refuses unknown fields (400 "unknown field"), so its schema says
    ``additionalProperties: false``: a body with an extra field is schema-violating, not schema-valid."""

    target_class = "kheish.api.fields.StrictSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema: AutoSchema, direction: Direction) -> dict[str, Any]:
        schema: dict[str, Any] = auto_schema._map_basic_serializer(  # type: ignore[no-untyped-call]  # unannotated
            self.target, direction
        )
        schema["additionalProperties"] = False
        return schema


def openapi_schema(json_schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON Schema (Draft 2020-12, as ``learnings.services.cleaning`` declares its references) as an OpenAPI 3.0
    schema: ``["string", "null"]`` types become ``nullable``; ``$schema``, ``title`` and ``x-messages`` go."""
    out: dict[str, Any] = {}
    for key, value in json_schema.items():
        if key in ("$schema", "title", "x-messages"):
            continue
        if key == "type" and isinstance(value, list):
            kinds = [kind for kind in value if kind != "null"]
            out["type"] = kinds[0]
            if "null" in value:
                out["nullable"] = True
        elif key == "properties":
            out[key] = {name: openapi_schema(sub) for name, sub in value.items()}
        elif key == "items":
            out[key] = openapi_schema(value)
        else:
            out[key] = value
    return out


# ---- policy replacement bodies ----------------------------------------------------------------------------

from drf_spectacular.utils import inline_serializer  # noqa: E402
from rest_framework import serializers  # noqa: E402


def policy_request(name: str, noun: str) -> serializers.Serializer[Any]:
    """The body that replaces a policy whole, ``{policy, expected_revision?}`` (the run-memory and the learning
    policy take the same one): ``name`` is its schema component, ``noun`` the policy's name in the help text."""
    return inline_serializer(
        name,
        fields={
            "policy": serializers.DictField(
                help_text=f"the whole {noun} policy (read it with GET, change it, send it back)"
            ),
            "expected_revision": serializers.IntegerField(
                required=False,
                allow_null=True,
                min_value=0,
                help_text="the revision you read; 409 when someone changed the policy since",
            ),
        },
    )
