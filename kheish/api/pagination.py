import functools

from drf_spectacular.utils import inline_serializer
from rest_framework import pagination, serializers
from rest_framework.utils.urls import replace_query_param

from memory import limits


class LimitOffsetPagination(pagination.LimitOffsetPagination):
    """``limit`` (default 50, at most 500) and ``offset``; a page is bounded in bytes too (issue 19.8): once its
    items reach ``KHEISH_MAX_PAGE_BYTES`` as JSON it stops early (at least one item is served) and ``next``
    continues right after the last item served. Follow ``next`` rather than adding ``limit`` to ``offset``."""

    default_limit = 50
    max_limit = 500

    def get_paginated_response(self, data):
        data = self._within_budget(list(data))
        return super().get_paginated_response(data)

    def _within_budget(self, items: list) -> list:
        budget, used = limits.max_page_bytes(), 0
        for index, item in enumerate(items):
            used += limits.json_bytes(item)
            if used > budget and index > 0:
                self.served = index
                return items[:index]
        self.served = len(items)
        return items

    def get_next_link(self):
        served = getattr(self, "served", None)
        if served is None or self.limit is None or served >= self.limit:
            return super().get_next_link()
        next_offset = self.offset + served
        if next_offset >= self.count:
            return None
        url = self.request.build_absolute_uri()
        url = replace_query_param(url, self.limit_query_param, self.limit)
        return replace_query_param(url, self.offset_query_param, next_offset)


@functools.cache
def paginated(serializer_class):
    """The schema of a LimitOffsetPagination page of ``serializer_class`` items, for views that paginate by hand
    (APIViews): ``{count, next, previous, results}`` (issue 14.15: documented as they are served)."""
    name = serializer_class.__name__.removesuffix("Serializer")
    return inline_serializer(f"Paginated{name}List", fields={
        "count": serializers.IntegerField(),
        "next": serializers.URLField(allow_null=True),
        "previous": serializers.URLField(allow_null=True),
        "results": serializer_class(many=True),
    })
