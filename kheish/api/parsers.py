"""The /v1 JSON body parser: every JSON value in a request body is checked once, here, before any serializer or
service sees it (issue 14.6/14.7). PostgreSQL ``jsonb`` and ``text`` cannot hold NUL (``\\u0000``), a lone UTF-16
surrogate cannot be encoded (not even into the error that names it), ±Infinity/NaN are not JSON, and very deep
nesting exhausts Python's recursion; each is a 400 problem naming the field path (``metadata.tags[2]``)."""

from __future__ import annotations

import codecs
import json
import math
from collections.abc import Mapping
from typing import IO, Any, NoReturn

from django.conf import settings
from rest_framework.parsers import JSONParser

from memory.errors import ValidationFailed

MAX_JSON_DEPTH = 64


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def _path(parent: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else key


def _printable(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _bad_string(text: str) -> str | None:
    if "\x00" in text:
        return "contains a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone UTF-16 surrogate"
    return None


def check_json_value(value: object, *, root: str = "", max_depth: int = MAX_JSON_DEPTH) -> None:
    """Raise ValidationFailed (400, the field path) for a value PostgreSQL or the response encoder would choke on.

    Iterative, so no depth of nesting can exhaust the stack."""
    stack: list[tuple[object, str, int]] = [(value, root, 0)]
    while stack:
        node, path, depth = stack.pop()
        if depth > max_depth:
            raise ValidationFailed(
                f"{path or 'body'}: JSON nested deeper than {max_depth} levels",
                field=path or "body",
                code="json_too_deep",
            )
        if isinstance(node, str):
            problem = _bad_string(node)
            if problem:
                raise ValidationFailed(
                    f"{path or 'body'}: string {problem}", field=path or "body", code="invalid_json_value"
                )
        elif isinstance(node, float):
            if not math.isfinite(node):
                raise ValidationFailed(
                    f"{path or 'body'}: number is not finite", field=path or "body", code="invalid_json_value"
                )
        elif isinstance(node, dict):
            for key, child in node.items():
                problem = _bad_string(key)
                if problem:
                    shown = _printable(key)
                    raise ValidationFailed(
                        f"{_path(path, shown)}: field name {problem}",
                        field=_path(path, shown),
                        code="invalid_json_value",
                    )
                stack.append((child, _path(path, key), depth + 1))
        elif isinstance(node, list):
            stack.extend((child, _path(path, index), depth + 1) for index, child in enumerate(node))


class SafeJSONParser(JSONParser):
    """``JSONParser`` plus :func:`check_json_value` over the whole body; NaN/±Infinity (and numbers that overflow
    to infinity) are a parse error, a RecursionError is the depth rule's 400."""

    def parse(
        self, stream: IO[Any], media_type: str | None = None, parser_context: Mapping[str, Any] | None = None
    ) -> Any:  # any JSON value, not only an object (a serializer refuses what its view does not take)
        parser_context = parser_context or {}
        encoding = parser_context.get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = codecs.getreader(encoding)(stream).read()
        except LookupError as exc:  # a charset Python does not know
            raise ValidationFailed(
                f"request body: unknown charset {str(encoding)[:40]!r} in Content-Type (send UTF-8 JSON)",
                field="body",
                code="malformed_json",
            ) from exc
        except UnicodeError as exc:  # not decodable as declared (also UTF-16 without a byte-order mark)
            raise ValidationFailed(
                f"request body is not valid {str(encoding)[:40]} (the charset its Content-Type names; send UTF-8 JSON)",
                field="body",
                code="malformed_json",
            ) from exc
        try:
            data = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
        except RecursionError as exc:
            raise ValidationFailed(
                f"body: JSON nested deeper than {MAX_JSON_DEPTH} levels", field="body", code="json_too_deep"
            ) from exc
        except ValueError as exc:
            raise ValidationFailed(
                f"request body: JSON parse error - {exc}", field="body", code="malformed_json"
            ) from exc
        check_json_value(data)
        return data
