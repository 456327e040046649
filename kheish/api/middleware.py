"""Reject oversized /v1 bodies before anything reads them (413 problem+json)."""

from __future__ import annotations

import json

from django.conf import settings
from django.http import HttpResponse

from kheish.api.errors import PROBLEM_CONTENT_TYPE, problem


class BodySizeLimitMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path.startswith("/v1/"):
            limit = settings.KHEISH_MAX_BODY_BYTES
            try:
                length = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                length = 0
            if length > limit:
                body = problem(413, domain="api", code="body_too_large",
                               detail=f"request body exceeds the {limit} byte limit", field="body")
                return HttpResponse(json.dumps(body), status=413, content_type=PROBLEM_CONTENT_TYPE)
        return self.get_response(request)
