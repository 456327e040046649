"""``OPTIONS`` on /v1: DRF's simple metadata, for every ViewSet.

DRF describes a view's writable fields from ``get_serializer()``; a ViewSet whose actions each name their own
request serializer (skills, runtime) has no ``serializer_class``, and DRF's assertion would answer 500. Such a
view's ``OPTIONS`` answers its name, description and media types without the ``actions`` block.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rest_framework.metadata import SimpleMetadata

if TYPE_CHECKING:  # rest_framework.views imports this module (DEFAULT_METADATA_CLASS): annotations only
    from rest_framework.request import Request
    from rest_framework.views import APIView


class V1Metadata(SimpleMetadata):
    def determine_actions(self, request: Request, view: APIView) -> dict[str, Any]:
        # rest_framework.generics imports this setting's class: compare by owner, not by importing it here
        chooser = getattr(type(view), "get_serializer_class", None)
        own_choice = chooser is not None and chooser.__qualname__ != "GenericAPIView.get_serializer_class"
        if getattr(view, "serializer_class", None) is None and not own_choice:
            return {}
        return super().determine_actions(request, view)
