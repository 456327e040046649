"""One error envelope for /v1: RFC 7807 application/problem+json {type, title, status, code, domain, detail,
field?}. Services raise memory.errors.AppError; DRF's own exceptions are mapped here too."""

from __future__ import annotations

import json
import logging
import math
import sys
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, Unpack

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse
from django.views import defaults
from rest_framework import exceptions
from rest_framework.response import Response

from memory.errors import AppError

if TYPE_CHECKING:
    from rest_framework.views import APIView

    _View = APIView
else:
    _View = object

logger = logging.getLogger("kheish.api")

PROBLEM_CONTENT_TYPE = "application/problem+json"
TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    406: "Not Acceptable",
    409: "Conflict",
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
# How long a client is told to wait when the database is unreachable (the embedded server is restarted by its
# supervisor within seconds; a managed server fails over in tens of seconds).
DATABASE_RETRY_AFTER_S = 5


class ProblemArgs(TypedDict):
    """``problem()``'s keyword arguments, for the helpers that pass them on."""

    domain: str
    code: str
    detail: str
    field: NotRequired[str | None]
    extra: NotRequired[dict[str, Any] | None]


def problem(
    status: int, *, domain: str, code: str, detail: str, field: str | None = None, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": f"https://kheish.dev/problems/{domain}/{code}",
        "title": TITLES.get(status, "Error"),
        "status": status,
        "code": code,
        "domain": domain,
        "detail": detail,
    }
    if field:
        body["field"] = field
    if extra:
        body.update(extra)
    return body


def problem_response(status: int, **kwargs: Unpack[ProblemArgs]) -> Response:
    return Response(problem(status, **kwargs), status=status, content_type=PROBLEM_CONTENT_TYPE)


def _first_error(detail: object, path: str = "") -> tuple[str, str]:
    if isinstance(detail, dict):
        for key, value in detail.items():
            sub = key if not path else (f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}")
            if key == "non_field_errors":
                sub = path
            return _first_error(value, sub)
    if isinstance(detail, list):
        for index, value in enumerate(detail):
            if isinstance(value, dict | list) and value:
                return _first_error(value, f"{path}[{index}]" if isinstance(value, dict) else path)
            if value:
                return path, str(value)
    return path, str(detail)


def database_unavailable(exc: BaseException | None) -> bool:
    """The database could not be reached, or went away mid-request (Django's wrappers of the driver's errors:
    refused or lost connection, server shutting down, a statement cancelled by the server)."""
    return isinstance(exc, OperationalError | InterfaceError)


def _database_unavailable_body() -> dict[str, Any]:
    return problem(
        503,
        domain="api",
        code="database_unavailable",
        detail=f"the database is unavailable; retry in {DATABASE_RETRY_AFTER_S} s",
        extra={"retry_after": DATABASE_RETRY_AFTER_S},
    )


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: an exception outside DRF's handler (the console, the admin, a middleware, a response
    being finished). Database unavailability is 503 problem+json with ``Retry-After``; anything else is
    Django's 500 page."""
    exc = sys.exc_info()[1]
    if database_unavailable(exc):
        logger.warning(
            "database unavailable: %s %s: %s: %s",
            request.method,
            request.path,
            type(exc).__name__,
            str(exc).strip()[:300],
        )
        response = HttpResponse(json.dumps(_database_unavailable_body()), status=503, content_type=PROBLEM_CONTENT_TYPE)
        response["Retry-After"] = str(DATABASE_RETRY_AFTER_S)
        return response
    return defaults.server_error(request)


def problem_exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    if database_unavailable(exc):
        logger.warning("database unavailable: %s: %s", type(exc).__name__, str(exc).strip()[:300])
        response = Response(_database_unavailable_body(), status=503, content_type=PROBLEM_CONTENT_TYPE)
        response["Retry-After"] = str(DATABASE_RETRY_AFTER_S)
        return response
    if isinstance(exc, AppError):
        return problem_response(exc.status, domain=exc.domain, code=exc.code, detail=exc.detail, field=exc.field)
    if isinstance(exc, Http404):
        return problem_response(404, domain="api", code="not_found", detail="not found")
    if isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    if isinstance(exc, exceptions.ValidationError):
        field, message = _first_error(exc.detail)
        detail = f"{field}: {message}" if field else message
        return problem_response(
            400,
            domain="api",
            code="validation_failed",
            detail=detail,
            field=field or None,
            extra={"errors": exc.detail},
        )
    if isinstance(exc, exceptions.ParseError):
        return problem_response(
            400, domain="api", code="malformed_json", detail=f"request body: {exc.detail}", field="body"
        )
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        response = problem_response(401, domain="auth", code="unauthenticated", detail=str(exc.detail))
        response["WWW-Authenticate"] = 'Bearer realm="kheish"'
        return response
    if isinstance(exc, exceptions.PermissionDenied):
        return problem_response(403, domain="auth", code="forbidden", detail=str(exc.detail))
    if isinstance(exc, exceptions.Throttled):  # 429 with Retry-After (kheish.api.throttling)
        seconds: float | None = exc.wait  # type: ignore[attr-defined]  # Throttled.__init__ sets it; the stubs omit it
        wait = max(1, math.ceil(seconds)) if seconds is not None else 1
        code = getattr(exc, "problem_code", None)
        detail = str(exc.detail) if code else f"Request rate limit reached. Retry in {wait} s."
        response = problem_response(
            429,
            domain=getattr(exc, "problem_domain", "api"),
            code=code or "throttled",
            detail=detail,
            extra={"retry_after": wait},
        )
        response["Retry-After"] = str(wait)
        return response
    if isinstance(exc, exceptions.APIException):
        code = exc.default_code if isinstance(exc.default_code, str) else "error"
        return problem_response(exc.status_code, domain="api", code=code, detail=str(exc.detail))
    logger.exception("unhandled API error", exc_info=exc)
    return problem_response(500, domain="api", code="internal_error", detail="internal error")


class JsonErrorsMixin(_View):
    """For views whose normal renderer is HTML or YAML (schema, docs): errors still render as problem+json."""

    def handle_exception(self, exc: Exception) -> Response:
        from rest_framework.renderers import JSONRenderer

        self.request.accepted_renderer = JSONRenderer()
        self.request.accepted_media_type = "application/json"
        return super().handle_exception(exc)
