"""The deterministic stand-in for memory.scrubbing.looks_like_secret used by the pure learning-logic tests.

Those tests pin the learning rules to a tiny marker list, so they do not depend on the scrubber's corpus;
tests that ask for `real_secret_classifier` run against the real one.
"""

from __future__ import annotations

import importlib
import sys
import types

import pytest


def secret_classifier_fixtures(markers: tuple[str, ...]):
    """(fake_secret_classifier [autouse], real_secret_classifier) fixtures for a test module."""

    def fake_looks_like_secret(text: str) -> bool:
        lowered = text.lower()
        return any(marker in lowered for marker in markers)

    @pytest.fixture(autouse=True)
    def fake_secret_classifier(request, monkeypatch):
        if "real_secret_classifier" in request.fixturenames:
            return
        module = types.ModuleType("memory.scrubbing")
        module.looks_like_secret = fake_looks_like_secret
        monkeypatch.setitem(sys.modules, "memory.scrubbing", module)

    @pytest.fixture
    def real_secret_classifier():
        return importlib.import_module("memory.scrubbing").looks_like_secret

    return fake_secret_classifier, real_secret_classifier
