from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, overload

from drf_spectacular.utils import OpenApiParameter, extend_schema_serializer, inline_serializer
from rest_framework import pagination, serializers
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from memory import limits
from memory.errors import ValidationFailed

if TYPE_CHECKING:  # rest_framework.views imports this module (DEFAULT_PAGINATION_CLASS): annotations only
    from rest_framework.request import Request
    from rest_framework.views import APIView

MAX_OFFSET = 2**62
LIMIT_HELP = "Items per page: 1 or more (default 50); at most 500 are served, a larger limit serves 500."
OFFSET_HELP = "How many items to skip (0 to 2^62). Follow next: a page may stop early at its byte budget."


def single_query_value(request: Request, name: str) -> str | None:
    """A scalar query parameter: absent → None, given twice → 400 (``?offset=1&offset=2`` means nothing)."""
    values = request.query_params.getlist(name)
    if len(values) > 1:
        raise ValidationFailed(f"{name} may be given once", field=name)
    return values[0] if values else None


@overload
def int_query_value(request: Request, name: str, *, default: int, minimum: int, maximum: int) -> int: ...
@overload
def int_query_value(request: Request, name: str, *, default: None, minimum: int, maximum: int) -> int | None: ...
def int_query_value(request: Request, name: str, *, default: int | None, minimum: int, maximum: int) -> int | None:
    """An integer query parameter in [minimum, maximum]: ASCII digits (an optional ``-``), else 400 (blank too:
    ``?cursor=`` is not an integer)."""
    raw = single_query_value(request, name)
    if raw is None:
        return default
    text = raw[1:] if raw.startswith("-") else raw
    if not (text.isascii() and text.isdigit()) or len(text) > 19:
        raise ValidationFailed(f"{name} must be an integer", field=name)
    value = int(raw)
    if not minimum <= value <= maximum:
        raise ValidationFailed(f"{name} must be between {minimum} and {maximum}", field=name)
    return value


def int_parameter(name: str, *, minimum: int, maximum: int | None = None, description: str = "") -> OpenApiParameter:
    """An integer query parameter with its range in the schema (issue 22.5: no undocumented ranges)."""
    schema = {"type": "integer", "minimum": minimum}
    if maximum is not None:
        schema["maximum"] = maximum
    return OpenApiParameter(name, schema, description=description)


def text_parameter(name: str, *, max_length: int, description: str = "") -> OpenApiParameter:
    return OpenApiParameter(name, {"type": "string", "maxLength": max_length}, description=description)


MAX_QUERY_CHARS = 600
"""A search ``query`` in a URL (issue 22.5): any 600 characters fit gunicorn's 8,190-byte request line even when
percent-encoding expands each to 12 bytes (4-byte UTF-8), so the documented maximum is always reachable."""
QUERY_HELP = f"search text, at most {MAX_QUERY_CHARS} characters"


def query_text(request: Request, name: str = "query") -> str | None:
    """A search text parameter: given at most once and at most ``MAX_QUERY_CHARS`` characters, else 400."""
    query = single_query_value(request, name)
    if query is not None and len(query) > MAX_QUERY_CHARS:
        raise ValidationFailed(f"{name} exceeds the {MAX_QUERY_CHARS} character limit", field=name)
    return query


def query_parameter(name: str = "query") -> OpenApiParameter:
    return text_parameter(name, max_length=MAX_QUERY_CHARS, description=QUERY_HELP)


def page_parameters() -> list[OpenApiParameter]:
    """``limit`` and ``offset`` as documented for list views whose page schema is ``paginated(...)``."""
    return [
        int_parameter("limit", minimum=1, description=LIMIT_HELP),
        int_parameter("offset", minimum=0, maximum=MAX_OFFSET, description=OFFSET_HELP),
    ]


class LimitOffsetPagination(pagination.LimitOffsetPagination):
    """``limit`` (default 50, at most 500) and ``offset``; a page is bounded in bytes too (issue 19.8): once its
    items reach ``KHEISH_MAX_PAGE_BYTES`` as JSON it stops early (at least one item is served) and ``next``
    continues right after the last item served. Follow ``next`` rather than adding ``limit`` to ``offset``."""

    default_limit: int = 50
    max_limit: int = 500
    served: int  # items on the page served (``_within_budget``)

    def get_limit(self, request: Request) -> int:
        """Strict (issue 22.5): a limit that is not an integer ≥ 1 is 400 (DRF would serve the default)."""
        limit = int_query_value(request, self.limit_query_param, default=self.default_limit, minimum=1, maximum=10**18)
        return min(limit, self.max_limit)

    def get_offset(self, request: Request) -> int:
        return int_query_value(request, self.offset_query_param, default=0, minimum=0, maximum=MAX_OFFSET)

    def get_schema_operation_parameters(self, view: APIView) -> list[dict[str, Any]]:
        return [
            {
                "name": self.limit_query_param,
                "required": False,
                "in": "query",
                "description": LIMIT_HELP,
                "schema": {"type": "integer", "minimum": 1},
            },
            {
                "name": self.offset_query_param,
                "required": False,
                "in": "query",
                "description": OFFSET_HELP,
                "schema": {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET},
            },
        ]

    def get_paginated_response(self, data: Any) -> Response:
        data = self._within_budget(list(data))
        return super().get_paginated_response(data)

    def _within_budget(self, items: list[Any]) -> list[Any]:
        budget, used = limits.max_page_bytes(), 0
        for index, item in enumerate(items):
            used += limits.json_bytes(item)
            if used > budget and index > 0:
                self.served = index
                return items[:index]
        self.served = len(items)
        return items

    def get_next_link(self) -> str | None:
        served = getattr(self, "served", None)
        if served is None or self.limit is None or served >= self.limit:
            return super().get_next_link()
        # paginate_queryset set them, as it set limit
        assert self.offset is not None and self.count is not None and self.request is not None
        next_offset = self.offset + served
        if next_offset >= self.count:
            return None
        url = self.request.build_absolute_uri()
        url = replace_query_param(url, self.limit_query_param, self.limit)
        return replace_query_param(url, self.offset_query_param, next_offset)


@functools.cache
def paginated(serializer_class: type[serializers.BaseSerializer[Any]]) -> serializers.Serializer[Any]:
    """The schema of a LimitOffsetPagination page of ``serializer_class`` items, for list views whose items are
    not one model's rows: ``{count, next, previous, results}``, all four always present (issue 14.15:
    documented as they are served). Marked ``many=False`` so that drf-spectacular does not wrap the page, which
    is already the whole answer, in a second page for a ViewSet's ``list``."""
    name = serializer_class.__name__.removesuffix("Serializer")
    page = inline_serializer(
        f"Paginated{name}List",
        fields={
            "count": serializers.IntegerField(),
            "next": serializers.URLField(allow_null=True),
            "previous": serializers.URLField(allow_null=True),
            "results": serializer_class(many=True),
        },
    )
    extend_schema_serializer(many=False)(type(page))
    return page
