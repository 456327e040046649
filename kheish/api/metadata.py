"""``OPTIONS`` on /v1: DRF's simple metadata, for every ViewSet.

DRF describes a view's writable fields from ``get_serializer()``; a ViewSet whose actions each name their own
request serializer (skills, runtime) has no ``serializer_class``, and DRF's assertion would answer 500. Such a
view's ``OPTIONS`` answers its name, description and media types without the ``actions`` block.
"""

from __future__ import annotations

from rest_framework.metadata import SimpleMetadata


class V1Metadata(SimpleMetadata):
    def determine_actions(self, request, view):
        # rest_framework.generics imports this setting's class: compare by owner, not by importing it here
        chooser = getattr(type(view), "get_serializer_class", None)
        own_choice = chooser is not None and chooser.__qualname__ != "GenericAPIView.get_serializer_class"
        if getattr(view, "serializer_class", None) is None and not own_choice:
            return {}
        return super().determine_actions(request, view)
