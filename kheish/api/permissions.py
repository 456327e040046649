"""Roles: an operator is a staff user in the admin, or a caller holding an operator-role API key."""

from __future__ import annotations

from rest_framework.permissions import BasePermission

from memory.models import ApiKey, ApiKeyRole


def caller_is_operator(request) -> bool:
    user = getattr(request, "user", None)
    if not getattr(user, "is_authenticated", False):
        return False
    if isinstance(getattr(request, "auth", None), ApiKey):
        return request.auth.role == ApiKeyRole.OPERATOR and user.is_staff
    return bool(user.is_staff)


class IsOperator(BasePermission):
    message = "this action is reserved for operators"

    def has_permission(self, request, view) -> bool:
        return caller_is_operator(request)


class OperatorWritesOnly(BasePermission):
    message = "only operators may change this resource"

    def has_permission(self, request, view) -> bool:
        if not getattr(request.user, "is_authenticated", False):
            return False
        return request.method in ("GET", "HEAD", "OPTIONS") or caller_is_operator(request)
