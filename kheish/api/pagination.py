import functools

from drf_spectacular.utils import inline_serializer
from rest_framework import pagination, serializers


class LimitOffsetPagination(pagination.LimitOffsetPagination):
    default_limit = 50
    max_limit = 500


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
