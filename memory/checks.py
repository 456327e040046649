"""System checks with stable ids, run by `manage.py check` and `manage.py doctor`."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, Warning, register


@register("kheish")
def configuration_checks(app_configs=None, **kwargs):
    issues = []
    if not settings.DEBUG and settings.SECRET_KEY in ("", "debug-only-insecure-key"):
        issues.append(Error("SECRET_KEY is not set", hint="Set SECRET_KEY in the environment.", id="memory.E001"))
    if settings.KHEISH_LLM_BASE_URL and not settings.KHEISH_LLM_MODEL:
        issues.append(
            Warning(
                "KHEISH_LLM_BASE_URL is set but KHEISH_LLM_MODEL is not; model-backed steps stay off",
                hint="Set KHEISH_LLM_MODEL.",
                id="memory.W001",
            )
        )
    return issues
