"""`Authorization: Bearer <api key>` authentication. request.auth is the ApiKey (its role decides).

A credential that fails is counted per client address and per key prefix (kheish.api.throttling); past a
limit the failure is answered 429 with Retry-After instead of 401. A valid key is never counted nor refused."""

from __future__ import annotations

from rest_framework import authentication, exceptions

from kheish.api.throttling import auth_failures
from memory.identity import authenticate_key


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "bearer"

    def authenticate(self, request):
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

    def authenticate_header(self, request):
        return 'Bearer realm="kheish"'


try:
    from drf_spectacular.extensions import OpenApiAuthenticationExtension

    class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
        target_class = "kheish.api.authentication.ApiKeyAuthentication"
        name = "apiKey"

        def get_security_definition(self, auto_schema):
            return {"type": "http", "scheme": "bearer", "bearerFormat": "khm_<prefix>_<secret>"}
except ImportError:  # pragma: no cover
    pass
