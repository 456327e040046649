"""The page a locked-out admin sign-in gets (django-axes' AXES_LOCKOUT_CALLABLE, issue 14.3).

429 with Retry-After and a message that says what happened, for how long, and how an operator with shell
access clears it now. The lockout itself is axes': AXES_FAILURE_LIMIT failures from one address lock that
address for AXES_COOLOFF_TIME (settings KHEISH_ADMIN_LOCKOUT_FAILURES / KHEISH_ADMIN_LOCKOUT_MINUTES)."""

from __future__ import annotations

import math

from django.conf import settings
from django.shortcuts import render

from kheish.api.throttling import client_address


def lockout_response(request, original_response=None, credentials=None):
    cooloff = settings.AXES_COOLOFF_TIME
    seconds = max(1, math.ceil(cooloff.total_seconds())) if cooloff else None
    address = client_address(request) or "unknown"
    from django.contrib import admin

    context = {
        **admin.site.each_context(request),
        "title": "Sign-in locked",
        "failure_limit": settings.AXES_FAILURE_LIMIT,
        "minutes": math.ceil(seconds / 60) if seconds else None,
        "address": address,
        "reset_ip_command": f"python manage.py axes_reset_ip {address}",
        "reset_all_command": "python manage.py axes_reset",
    }
    response = render(request, "admin/lockout.html", context, status=settings.AXES_HTTP_RESPONSE_CODE)
    if seconds:
        response["Retry-After"] = str(seconds)
    return response
