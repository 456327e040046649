"""The model client against a real HTTP server on loopback (tests/support/fake_llm.py)."""

from __future__ import annotations

import time

import pytest

from memory.llm import ModelConfig, ModelError, chat_json, chat_text, model_config, parse_json_object
from tests.support.fake_llm import MODEL, FakeModelServer

pytest_plugins = ["tests.support.fixtures"]

JUDGE_SCHEMA = {
    "type": "object",
    "properties": {"action": {"type": "string"}, "reason": {"type": "string"}},
    "required": ["action", "reason"],
    "additionalProperties": False,
}
MESSAGES = [{"role": "system", "content": "You judge."}, {"role": "user", "content": "{}"}]


def _config(server: FakeModelServer, timeout_ms: int = 5000) -> ModelConfig:
    return ModelConfig(base_url=server.base_url, model=MODEL, api_key="not-needed", timeout_ms=timeout_ms)


# -- configuration -------------------------------------------------------------------------------------------


def test_model_config_is_none_when_nothing_is_configured(llm_unconfigured: None) -> None:
    assert model_config() is None


def test_model_config_needs_both_base_url_and_model(llm_unconfigured: None, llm_settings) -> None:
    llm_settings(KHEISH_LLM_BASE_URL="http://127.0.0.1:9/v1")
    assert model_config() is None
    assert model_config(model="hook-model") == ModelConfig(
        base_url="http://127.0.0.1:9/v1", model="hook-model", api_key="not-needed", timeout_ms=15000
    )


def test_model_config_reads_the_configuration(fake_model: FakeModelServer) -> None:
    config = model_config()
    assert config == ModelConfig(base_url=fake_model.base_url, model=MODEL, api_key="not-needed", timeout_ms=5000)
    assert model_config(model="judge-model", timeout_ms=250) == ModelConfig(
        base_url=fake_model.base_url, model="judge-model", api_key="not-needed", timeout_ms=250
    )


def test_model_config_rejects_a_zero_timeout(fake_model: FakeModelServer) -> None:
    with pytest.raises(ModelError, match="greater than zero"):
        model_config(timeout_ms=0)


# -- chat_json -----------------------------------------------------------------------------------------------


def test_chat_json_returns_the_object_and_asks_for_structured_output(fake_model: FakeModelServer) -> None:
    fake_model.reply_json({"action": "publish", "reason": "explicit user preference"})

    result = chat_json(model_config(), MESSAGES, schema=JUDGE_SCHEMA, schema_name="learning_judge")

    assert result == {"action": "publish", "reason": "explicit user preference"}
    [sent] = fake_model.requests
    assert sent["model"] == MODEL
    assert sent["messages"] == MESSAGES
    assert sent["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "learning_judge", "schema": JUDGE_SCHEMA, "strict": True},
    }


def test_chat_json_extracts_the_first_object_from_prose(fake_model: FakeModelServer) -> None:
    fake_model.reply_text('Here you go:\n```json\n{"action": "reject", "reason": "one-off {task}"}\n```\n{"x": 1}')

    result = chat_json(_config(fake_model), MESSAGES, schema=JUDGE_SCHEMA, schema_name="learning_judge")

    assert result == {"action": "reject", "reason": "one-off {task}"}


@pytest.mark.parametrize("content", ["not json at all", "[1, 2]", '{"action": "publish", ', ""])
def test_chat_json_rejects_content_that_is_not_a_json_object(fake_model: FakeModelServer, content: str):
    fake_model.reply_text(content)
    with pytest.raises(ModelError):
        chat_json(_config(fake_model), MESSAGES, schema=JUDGE_SCHEMA, schema_name="learning_judge")


def test_chat_json_rejects_a_broken_http_body(fake_model: FakeModelServer) -> None:
    fake_model.reply_raw('{"choices": [')
    with pytest.raises(ModelError):
        chat_json(_config(fake_model), MESSAGES, schema=JUDGE_SCHEMA, schema_name="learning_judge")


@pytest.mark.parametrize(
    "reply", [{"action": 3, "reason": "x"}, {"action": "publish"}, {"action": "a", "reason": "b", "extra": 1}]
)
def test_chat_json_rejects_a_schema_mismatch(fake_model: FakeModelServer, reply: dict) -> None:
    fake_model.reply_json(reply)
    with pytest.raises(ModelError, match="does not match learning_judge"):
        chat_json(_config(fake_model), MESSAGES, schema=JUDGE_SCHEMA, schema_name="learning_judge")


def test_chat_json_timeout_is_a_hard_bound(fake_model: FakeModelServer) -> None:
    fake_model.reply_delay(5, {"action": "publish", "reason": "too late"})

    started = time.monotonic()
    with pytest.raises(ModelError, match="timed out"):
        chat_json(_config(fake_model, timeout_ms=300), MESSAGES, schema=JUDGE_SCHEMA, schema_name="j")
    elapsed = time.monotonic() - started

    assert 0.25 <= elapsed < 1.5


def test_http_500_is_a_model_error_without_retries(fake_model: FakeModelServer) -> None:
    fake_model.reply_status(500)
    fake_model.reply_json({"action": "publish", "reason": "a retry would get this"})

    with pytest.raises(ModelError, match="HTTP 500"):
        chat_json(_config(fake_model), MESSAGES, schema=JUDGE_SCHEMA, schema_name="learning_judge")

    assert len(fake_model.requests) == 1


def test_an_unscripted_request_fails_closed(fake_model: FakeModelServer) -> None:
    with pytest.raises(ModelError, match="HTTP 500"):
        chat_json(_config(fake_model), MESSAGES, schema=JUDGE_SCHEMA, schema_name="learning_judge")


def test_an_unreachable_endpoint_is_a_model_error() -> None:
    with FakeModelServer() as server:
        config = _config(server, timeout_ms=2000)
    with pytest.raises(ModelError, match="could not reach"):
        chat_json(config, MESSAGES, schema=JUDGE_SCHEMA, schema_name="learning_judge")


# -- chat_text -----------------------------------------------------------------------------------------------


def test_chat_text_returns_the_content(fake_model: FakeModelServer) -> None:
    fake_model.reply_text("A short summary.")

    assert chat_text(model_config(), MESSAGES, max_tokens=120) == "A short summary."
    [sent] = fake_model.requests
    assert sent["max_tokens"] == 120
    assert "response_format" not in sent


def test_chat_text_errors_are_model_errors(fake_model: FakeModelServer) -> None:
    fake_model.reply_status(503)
    with pytest.raises(ModelError, match="HTTP 503"):
        chat_text(_config(fake_model), MESSAGES)


# -- parsing -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('  {"a": {"b": [1, "}"]}}  ', {"a": {"b": [1, "}"]}}),
        ('noise { not json } then {"a": 2} and {"a": 3}', {"a": 2}),
    ],
)
def test_parse_json_object(text: str, expected: dict) -> None:
    assert parse_json_object(text) == expected
