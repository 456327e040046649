"""Roles: an operator is a staff user in the admin, or a caller holding an operator-role API key."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from rest_framework.permissions import BasePermission

from memory.models import ApiKey, ApiKeyRole

if TYPE_CHECKING:  # rest_framework.views imports this module (DEFAULT_PERMISSION_CLASSES): annotations only
    from django.contrib.auth.models import User
    from django.http import HttpRequest
    from rest_framework.request import Request
    from rest_framework.views import APIView


def caller_is_operator(request: Request | HttpRequest) -> bool:
    """``request``: DRF's, or Django's once an authentication set its ``user`` and ``auth`` (kheish.ops)."""
    user: Any = getattr(request, "user", None)
    if not getattr(user, "is_authenticated", False):
        return False
    auth = getattr(request, "auth", None)
    if isinstance(auth, ApiKey):
        return auth.role == ApiKeyRole.OPERATOR and bool(user.is_staff)
    return bool(user.is_staff)


def authenticated_user(request: Request) -> User:
    """``request.user`` in a /v1 view: a User, since every view requires an authenticated caller (the default
    ``IsAuthenticated``, or a stricter class); the stubs type it ``User | AnonymousUser``."""
    return cast("User", request.user)


class IsOperator(BasePermission):
    message = "this action is reserved for operators"

    def has_permission(self, request: Request, view: APIView) -> bool:
        return caller_is_operator(request)


class OperatorWritesOnly(BasePermission):
    message = "only operators may change this resource"

    def has_permission(self, request: Request, view: APIView) -> bool:
        if not getattr(request.user, "is_authenticated", False):
            return False
        return request.method in ("GET", "HEAD", "OPTIONS") or caller_is_operator(request)
