"""Serializer helpers shared by every /v1 input serializer."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class StrictSerializer(serializers.Serializer[Any]):
    """Rejects unknown fields, so a typo never silently does nothing.

    ``field_help``: a field name → description table, for the fields declared without ``help_text``; the served
    schema shows them as the request fields' descriptions (issue 25.4)."""

    field_help: dict[str, str] = {}

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
