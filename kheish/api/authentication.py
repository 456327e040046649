"""`Authorization: Bearer <api key>` authentication. request.auth is the ApiKey (its role decides).

A credential that fails is counted per client address and per key prefix (kheish.api.throttling); past a
limit the failure is answered 429 with Retry-After instead of 401. A valid key is never counted nor refused."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rest_framework import authentication, exceptions

from kheish.api.throttling import auth_failures
from memory.identity import authenticate_key

if TYPE_CHECKING:  # rest_framework.views imports this module (DEFAULT_AUTHENTICATION_CLASSES): annotations only
    from django.contrib.auth.models import User
    from drf_spectacular.openapi import AutoSchema
    from rest_framework.request import Request

    from memory.models import ApiKey


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "bearer"

    def authenticate(self, request: Request) -> tuple[User, ApiKey] | None:
        header = authentication.get_authorization_header(request).decode("latin-1", "replace")
        if not header:
            return None
        parts = header.split()
        if not parts or parts[0].lower() != self.keyword:
            return None
        if len(parts) != 2:
            auth_failures.record_failure(request, "")
            raise exceptions.AuthenticationFailed("Authorization header must be 'Bearer <api key>'")
        key = authenticate_key(parts[1])
        if key is None:
            auth_failures.record_failure(request, parts[1])
            raise exceptions.AuthenticationFailed("invalid or revoked API key")
        return key.user, key

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="kheish"'


try:
    from drf_spectacular.extensions import OpenApiAuthenticationExtension

    class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]  # an unannotated __init_subclass__
        target_class = "kheish.api.authentication.ApiKeyAuthentication"
        name = "apiKey"

        def get_security_definition(self, auto_schema: AutoSchema) -> dict[str, str]:
            return {"type": "http", "scheme": "bearer", "bearerFormat": "khm_<prefix>_<secret>"}
except ImportError:  # pragma: no cover
    pass
