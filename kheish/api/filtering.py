"""The /v1 list filter backend: django-filter, except that an enum parameter sent empty is refused.

django-filter reads ``?kind=`` as "no filter", so an empty enum value would silently list everything while the
schema says the parameter is one of its choices. Here it is a 400 naming the parameter and its choices.
"""

from __future__ import annotations

import django_filters
from django_filters.rest_framework import DjangoFilterBackend

from memory.errors import ValidationFailed


class StrictFilterBackend(DjangoFilterBackend):
    def get_filterset(self, request, queryset, view):
        filterset = super().get_filterset(request, queryset, view)
        if filterset is not None:
            for name, spec in filterset.filters.items():
                if isinstance(spec, django_filters.ChoiceFilter) and request.query_params.get(name, None) == "":
                    choices = ", ".join(str(value) for value, _ in spec.extra["choices"])
                    raise ValidationFailed(f"{name}: must be one of {choices} (not empty)", field=name)
        return filterset
