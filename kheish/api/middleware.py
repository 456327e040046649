"""Guards every /v1 request passes before anything reads it (problem+json errors):

- oversized bodies are 413;
- a ``Transfer-Encoding: chunked`` body is read here (the server has de-chunked it when it says so with
  ``wsgi.input_terminated``, as gunicorn does) and handed on with its real length, or refused with 411 when the
  server cannot frame it - Django alone would see no ``Content-Length`` and read the body as empty (issue 14.8);
  malformed chunked framing is 400 ``malformed_chunked_body`` (issue 22.4);
- NUL characters in the path or the query string are 400 (PostgreSQL text cannot hold them, issue 14.6)."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Unpack

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBase

from kheish.api.errors import PROBLEM_CONTENT_TYPE, ProblemArgs, problem

READ_CHUNK = 65_536


def _problem_response(status: int, **kwargs: Unpack[ProblemArgs]) -> HttpResponse:
    return HttpResponse(json.dumps(problem(status, **kwargs)), status=status, content_type=PROBLEM_CONTENT_TYPE)


def _too_large(limit: int) -> HttpResponse:
    return _problem_response(
        413, domain="api", code="body_too_large", detail=f"request body exceeds the {limit} byte limit", field="body"
    )


def _malformed_chunked(exc: Exception) -> HttpResponse:
    """The server could not de-chunk the body: a chunk size that is not hex, a chunk longer or shorter than it
    says, no terminating chunk. The rest of the connection cannot be framed either, so it is closed."""
    reason = type(exc).__name__
    response = _problem_response(
        400,
        domain="api",
        code="malformed_chunked_body",
        field="body",
        detail=f"request body: malformed Transfer-Encoding: chunked framing ({reason})",
    )
    response["Connection"] = "close"
    return response


def _read_chunked(request: HttpRequest, limit: int) -> HttpResponse | None:
    if not request.META.get("wsgi.input_terminated"):
        return _problem_response(
            411,
            domain="api",
            code="length_required",
            field="body",
            detail="chunked request bodies are not supported by this server; send Content-Length",
        )
    stream = request.META["wsgi.input"]
    parts: list[bytes] = []
    size = 0
    while True:
        try:
            part = stream.read(min(READ_CHUNK, limit + 1 - size))
        except Exception as exc:  # noqa: BLE001 - the server's framing error (gunicorn: InvalidChunkSize, ...)
            return _malformed_chunked(exc)
        if not part:
            break
        parts.append(part)
        size += len(part)
        if size > limit:
            return _too_large(limit)
    body = b"".join(parts)
    request.META["CONTENT_LENGTH"] = str(len(body))
    request._stream = io.BytesIO(body)
    return None


class BodySizeLimitMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if request.path.startswith("/v1/"):
            refused = self._check(request)
            if refused is not None:
                return refused
        return self.get_response(request)

    def _check(self, request: HttpRequest) -> HttpResponse | None:
        if "\x00" in request.path:
            return _problem_response(
                400, domain="api", code="invalid_path", field="path", detail="the request path contains a NUL character"
            )
        for key, values in request.GET.lists():
            if "\x00" in key or any("\x00" in value for value in values):
                name = key.replace("\x00", "\\u0000")
                return _problem_response(
                    400,
                    domain="api",
                    code="validation_failed",
                    field=name,
                    detail=f"{name}: query parameter contains a NUL character",
                )
        limit = settings.KHEISH_MAX_BODY_BYTES
        if "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower():
            return _read_chunked(request, limit)
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > limit:
            return _too_large(limit)
        return None
