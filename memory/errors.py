"""Application errors. Each carries the problem `domain/code`, an HTTP status and, for validation, the field.

The API exception handler (kheish.api.errors) turns them into RFC 7807 problem+json; the admin shows
`detail` to the operator. Services raise them; nothing else decides status codes.
"""

from __future__ import annotations


class AppError(Exception):
    status = 400
    domain = "api"
    code = "bad_request"

    def __init__(
        self,
        detail: str,
        *,
        field: str | None = None,
        domain: str | None = None,
        code: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.field = field
        if domain:
            self.domain = domain
        if code:
            self.code = code
        if status:
            self.status = status


class ValidationFailed(AppError):
    status = 400
    code = "validation_failed"


class NotFound(AppError):
    status = 404
    code = "not_found"


class Conflict(AppError):
    status = 409
    code = "conflict"


class Forbidden(AppError):
    status = 403
    code = "forbidden"
