"""The OpenAI-compatible model client (chat completions through the ``openai`` SDK).

Configuration (Django settings when configured, else the environment): ``KHEISH_LLM_BASE_URL``,
``KHEISH_LLM_MODEL``, ``KHEISH_LLM_API_KEY`` (default ``not-needed``), ``KHEISH_LLM_TIMEOUT_MS`` (default
15000). With no base URL or no model, :func:`model_config` returns ``None``: model-backed steps are off.

Every failure — timeout, connection or HTTP error, a reply that is not a JSON object, a JSON object that does
not match the schema — raises :class:`ModelError`, so callers fail closed. There are no SDK retries and the
timeout bounds the whole call, not each socket read.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from dataclasses import dataclass
from typing import Any

DEFAULT_API_KEY = "not-needed"
DEFAULT_TIMEOUT_MS = 15000


class ModelError(Exception):
    """The model call failed or answered something unusable; nothing derived from it may be published."""


@dataclass(frozen=True)
class ModelConfig:
    base_url: str
    model: str
    api_key: str
    timeout_ms: int


def _setting(name: str) -> Any:
    """Django settings win when they are configured and define ``name``; otherwise the environment."""
    try:
        from django.conf import settings
        from django.core.exceptions import ImproperlyConfigured
    except ImportError:
        return os.environ.get(name)
    try:
        if (settings.configured or os.environ.get("DJANGO_SETTINGS_MODULE")) and hasattr(settings, name):
            return getattr(settings, name)
    except (ImproperlyConfigured, ImportError):
        pass
    return os.environ.get(name)


def model_config(*, model: str | None = None, timeout_ms: int | None = None) -> ModelConfig | None:
    """The configured provider, with optional per-step overrides (a hook's model or timeout).

    ``None`` when no base URL or no model is configured: model-backed steps are off.
    """
    base_url = str(_setting("KHEISH_LLM_BASE_URL") or "").strip()
    model_name = str(model or _setting("KHEISH_LLM_MODEL") or "").strip()
    if not base_url or not model_name:
        return None
    api_key = str(_setting("KHEISH_LLM_API_KEY") or "").strip() or DEFAULT_API_KEY
    if timeout_ms is None:
        raw = _setting("KHEISH_LLM_TIMEOUT_MS")
        try:
            timeout_ms = int(raw) if raw not in (None, "") else DEFAULT_TIMEOUT_MS
        except (TypeError, ValueError) as exc:
            raise ModelError(f"KHEISH_LLM_TIMEOUT_MS must be an integer, got {raw!r}") from exc
    if timeout_ms <= 0:
        raise ModelError("model timeout_ms must be greater than zero")
    return ModelConfig(base_url=base_url, model=model_name, api_key=api_key, timeout_ms=int(timeout_ms))


def _complete(config: ModelConfig, **request: Any) -> Any:
    """One chat completion, bounded by ``config.timeout_ms`` end to end.

    The SDK's timeout applies per connect/read/write, so a server that trickles bytes could outlast it; the
    call therefore runs in a daemon thread and is abandoned (its client closed) when the deadline passes.
    """
    import openai

    seconds = config.timeout_ms / 1000
    client = openai.OpenAI(base_url=config.base_url, api_key=config.api_key, timeout=seconds, max_retries=0)
    outcome: dict[str, Any] = {}

    def call() -> None:
        try:
            outcome["response"] = client.chat.completions.create(model=config.model, **request)
        except Exception as exc:  # noqa: BLE001 - handed to the caller's thread below
            outcome["error"] = exc

    worker = threading.Thread(target=call, name="kheish-llm", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        with contextlib.suppress(Exception):  # best effort: the abandoned request ends at its read timeout
            client.close()
        raise ModelError(f"model call timed out after {config.timeout_ms} ms")
    client.close()
    error = outcome.get("error")
    if error is not None:
        raise ModelError(_describe(error)) from error
    return outcome["response"]


def _describe(error: Exception) -> str:
    import openai

    if isinstance(error, openai.APITimeoutError):
        return "model call timed out"
    if isinstance(error, openai.APIStatusError):
        return f"model endpoint answered HTTP {error.status_code}"
    if isinstance(error, openai.APIConnectionError):
        return f"could not reach the model endpoint: {error.__cause__ or error}"
    return f"model call failed: {type(error).__name__}: {error}"


def _first_message(response: Any) -> Any:
    choices = getattr(response, "choices", None)
    if not choices:
        raise ModelError("model reply has no choices")
    message = getattr(choices[0], "message", None)
    if message is None:
        raise ModelError("model reply has no message")
    if getattr(message, "refusal", None):
        raise ModelError("model refused to answer")
    return message


def parse_json_object(text: str) -> dict:
    """The JSON object in ``text``: the whole text, else the first ``{...}`` block that decodes to an
    object (models sometimes wrap it in prose or a code fence)."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if isinstance(value, dict):
        return value
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            value, _ = decoder.raw_decode(text, start)
        except ValueError:
            pass
        else:
            if isinstance(value, dict):
                return value
        start = text.find("{", start + 1)
    raise ModelError("model reply is not a JSON object")


def _validate(value: dict, schema: dict, schema_name: str) -> None:
    import jsonschema

    validator_cls = jsonschema.validators.validator_for(schema)
    error = jsonschema.exceptions.best_match(validator_cls(schema).iter_errors(value))
    if error is not None:
        where = "/".join(str(part) for part in error.absolute_path) or "(root)"
        raise ModelError(f"model reply does not match {schema_name} at {where}: {error.message}")


def chat_json(
    config: ModelConfig, messages: list[dict], *, schema: dict, schema_name: str, strict: bool = True
) -> dict:
    """Ask for a JSON object matching ``schema`` (structured outputs) and return it, validated."""
    response = _complete(
        config,
        messages=messages,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": schema_name, "schema": schema, "strict": strict},
        },
    )
    content = _first_message(response).content
    if not isinstance(content, str) or not content.strip():
        raise ModelError("model reply is empty")
    value = parse_json_object(content)
    _validate(value, schema, schema_name)
    return value


def chat_text(config: ModelConfig, messages: list[dict], *, max_tokens: int = 800) -> str:
    """A plain text completion."""
    response = _complete(config, messages=messages, max_tokens=max_tokens)
    content = _first_message(response).content
    if not isinstance(content, str):
        raise ModelError("model reply has no text")
    return content
