"""One exception type for every /v1 error: the RFC 7807 problem+json fields, typed."""

from __future__ import annotations

from typing import Any


class KheishError(Exception):
    """A /v1 call failed. ``status`` is the HTTP status (0 when the server could not be reached); ``domain`` and
    ``code`` name the problem (``runs/invalid_transition``, ``auth/forbidden``, ...); ``field`` names the
    offending input for validation errors. ``problem`` is the whole body as the server sent it."""

    def __init__(
        self,
        status: int,
        *,
        code: str,
        domain: str,
        detail: str,
        field: str | None = None,
        title: str | None = None,
        type: str | None = None,
        problem: dict[str, Any] | None = None,
    ):
        self.status = status
        self.code = code
        self.domain = domain
        self.detail = detail
        self.field = field
        self.title = title
        self.type = type
        self.problem = problem or {}
        where = f" ({field})" if field else ""
        super().__init__(f"{status} {domain}/{code}: {detail}{where}")

    @property
    def problem_code(self) -> str:
        """``domain/code``, as the spec writes problem codes."""
        return f"{self.domain}/{self.code}"

    @classmethod
    def from_response(cls, status: int, body: Any, fallback: str) -> KheishError:
        if isinstance(body, dict) and "code" in body and "detail" in body:
            return cls(
                status,
                code=str(body.get("code")),
                domain=str(body.get("domain") or "api"),
                detail=str(body.get("detail")),
                field=body.get("field"),
                title=body.get("title"),
                type=body.get("type"),
                problem=body,
            )
        return cls(
            status,
            code="unexpected_response",
            domain="client",
            detail=fallback[:500],
            problem=body if isinstance(body, dict) else {},
        )

    @classmethod
    def unreachable(cls, exc: Exception) -> KheishError:
        return cls(0, code="unreachable", domain="client", detail=f"{type(exc).__name__}: {exc}")
