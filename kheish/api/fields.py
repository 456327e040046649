"""Serializer helpers shared by every /v1 input serializer."""

from __future__ import annotations

import threading
from typing import Any, ClassVar

from django.utils.functional import cached_property
from rest_framework import serializers
from rest_framework.utils.serializer_helpers import BindingDict

_reused = threading.local()
"""Per thread: the bound fields of each ``StrictSerializer`` class that sets ``reuse_fields``."""


class StrictSerializer(serializers.Serializer[Any]):
    """Rejects unknown fields, so a typo never silently does nothing.

    ``field_help``: a field name → description table, for the fields declared without ``help_text``; the served
    schema shows them as the request fields' descriptions (issue 25.4).

    ``reuse_fields``: a request body's serializer on a hot path (``POST /v1/learnings``) builds its fields once per
    thread instead of once per request - DRF deep-copies every declared field (nested serializers included) for
    each new serializer, which costs more than validating the body. The fields are rebound to the newest root
    serializer of their class in the thread, so only for a class whose fields and ``get_fields`` use no
    per-instance state (no context, no ``partial``, no instance): plain input fields and defaults."""

    field_help: dict[str, str] = {}
    reuse_fields: ClassVar[bool] = False

    @cached_property
    def fields(self) -> BindingDict:
        if not self.reuse_fields or self.parent is not None or self.partial:
            return self._bound_fields()
        built: dict[type, dict[str, Any]] = _reused.__dict__.setdefault("fields", {})
        reused = built.get(type(self))
        if reused is None:
            fields = self._bound_fields()
            built[type(self)] = dict(fields.fields)
            return fields
        fields = BindingDict(self)
        fields.fields = dict(reused)
        for field in reused.values():  # what BindingDict's bind sets, on fields already bound once
            field.parent = self
        return fields

    def _bound_fields(self) -> BindingDict:
        fields = BindingDict(self)
        for key, value in self.get_fields().items():
            fields[key] = value
        return fields

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        for name, text in self.field_help.items():
            if name in fields and not fields[name].help_text:
                fields[name].help_text = text
        return fields

    def to_internal_value(self, data: object) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise serializers.ValidationError({"non_field_errors": ["request body must be a JSON object"]})
        unknown = sorted(set(data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError({unknown[0]: ["unknown field"]})
        validated: dict[str, Any] = super().to_internal_value(data)
        return validated


class StrictCharField(serializers.CharField):
    """A CharField that refuses numbers and booleans instead of converting them."""

    def to_internal_value(self, data: object) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictSlugField(serializers.SlugField):
    """A slug that must be sent as a JSON string (``0`` is 400, never the slug "0")."""

    def to_internal_value(self, data: object) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """A JSON boolean, nothing else (issue 19.9): ``"true"``, ``1`` or ``"yes"`` are 400, never coerced —
    ``{"all": "true"}`` must not revoke every learning. Every boolean read from a request body uses it
    (``tests/kheish/test_strict_input.py`` checks)."""

    default_error_messages = {"invalid": "must be a JSON boolean (true or false)"}

    def to_internal_value(self, data: object) -> bool:
        if data is True or data is False:
            return data
        self.fail("invalid")
