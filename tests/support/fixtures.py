"""Pytest fixtures for the model provider; load with ``pytest_plugins = ["tests.support.fixtures"]``.

They work with pytest-django (Django settings are overridden through its ``settings`` fixture) and without it
(``-p no:django``): the environment is always set too, so subprocesses such as a real worker see it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.support.fake_llm import MODEL, FakeModelServer

LLM_SETTINGS = ("KHEISH_LLM_BASE_URL", "KHEISH_LLM_MODEL", "KHEISH_LLM_API_KEY", "KHEISH_LLM_TIMEOUT_MS")


def _django_settings(request: pytest.FixtureRequest):
    """pytest-django's ``settings`` fixture when the plugin is active and Django is configured, else None
    (that fixture would skip the test rather than run it without Django)."""
    if not request.config.pluginmanager.hasplugin("django"):
        return None
    try:
        from django.conf import settings
    except ImportError:
        return None
    if not settings.configured:
        return None
    return request.getfixturevalue("settings")


@pytest.fixture
def llm_settings(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """``llm_settings(KHEISH_LLM_MODEL="m", ...)`` sets model-provider settings for one test; a value of
    ``None`` unsets it. Everything is restored afterwards."""
    django_settings = _django_settings(request)

    def configure(**values: object) -> None:
        for name, value in values.items():
            if name not in LLM_SETTINGS:
                raise TypeError(f"not a model-provider setting: {name}")
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, str(value))
            if django_settings is not None:
                default = 15000 if name == "KHEISH_LLM_TIMEOUT_MS" else ""
                setattr(django_settings, name, default if value is None else value)

    return configure


@pytest.fixture
def llm_unconfigured(llm_settings: Callable[..., None]) -> None:
    """No model provider: model-backed steps are off."""
    llm_settings(**dict.fromkeys(LLM_SETTINGS))


@pytest.fixture
def fake_model_server() -> Iterator[FakeModelServer]:
    """A started :class:`FakeModelServer`, not wired into the configuration."""
    with FakeModelServer() as server:
        yield server


@pytest.fixture
def fake_model(llm_settings: Callable[..., None], fake_model_server: FakeModelServer) -> FakeModelServer:
    """A started :class:`FakeModelServer` configured as the model provider (model ``fake-model``, 5 s)."""
    llm_settings(
        KHEISH_LLM_BASE_URL=fake_model_server.base_url,
        KHEISH_LLM_MODEL=MODEL,
        KHEISH_LLM_API_KEY="not-needed",
        KHEISH_LLM_TIMEOUT_MS=5000,
    )
    return fake_model_server


SPEC_RETRIEVAL = {"ranker": "lexical", "max_tokens": 150_000, "max_entries": 500}
"""The reference's retrieval: §4.5/§4.7 ranking, bounded only by the prompt window (the policy's retrieval
block is beyond the reference; its defaults are the hybrid ranker within 2,000 tokens)."""


@pytest.fixture
def spec_retrieval(monkeypatch: pytest.MonkeyPatch):
    """Run a test under the reference's retrieval whatever learning policy it stores."""
    from learnings import retrieval
    from learnings.learning_policy import RetrievalConfig

    config = RetrievalConfig(**SPEC_RETRIEVAL)
    monkeypatch.setattr(retrieval, "current_retrieval", lambda: config)
    return config
