"""Identity: API keys for agents and operators. Operators are staff users; agents are API principals."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from memory import sql
from memory.audit import record_audit
from memory.errors import ValidationFailed
from memory.models import ApiKey, ApiKeyRole

KEY_PREFIX = "khm"


def is_operator(user: object) -> bool:
    return bool(getattr(user, "is_authenticated", False) and getattr(user, "is_staff", False))


def hash_key(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


@dataclass(frozen=True)
class IssuedKey:
    api_key: ApiKey
    plaintext: str


@transaction.atomic
def api_key_create(*, name: str, role: str, user: AbstractBaseUser | None = None,
                   actor: object = "system") -> IssuedKey:
    """Create a key (and its principal when no user is given). The plaintext is returned once."""
    name = (name or "").strip()
    if not name:
        raise ValidationFailed("API key name is required", field="name")
    if role not in ApiKeyRole.values:
        raise ValidationFailed(f"role must be one of {', '.join(ApiKeyRole.values)}", field="role")
    if user is None:
        user_model = get_user_model()
        user, created = user_model.objects.get_or_create(username=name)
        if created:
            user.set_unusable_password()
        if role == ApiKeyRole.OPERATOR and not user.is_staff:
            user.is_staff = True
        user.save()
    elif role == ApiKeyRole.OPERATOR and not user.is_staff:
        raise ValidationFailed("operator keys can only be issued to staff users", field="role")
    prefix = f"{KEY_PREFIX}_{secrets.token_hex(6)}"
    plaintext = f"{prefix}_{secrets.token_hex(24)}"
    key = ApiKey.objects.create(user=user, name=name, role=role, prefix=prefix, key_hash=hash_key(plaintext))
    record_audit(subject_type="api_key", subject_id=prefix, action="create", actor=actor, to_state="active",
                 data={"role": role, "user": user.get_username()})
    return IssuedKey(api_key=key, plaintext=plaintext)


@transaction.atomic
def api_key_revoke(*, api_key: ApiKey, actor: object) -> ApiKey:
    if api_key.revoked_at is None:
        ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        api_key.refresh_from_db()
        record_audit(subject_type="api_key", subject_id=api_key.prefix, action="revoke", actor=actor,
                     from_state="active", to_state="revoked")
    return api_key


LAST_USED_RESOLUTION_S = 60


def authenticate_key(plaintext: str) -> ApiKey | None:
    """Return the active key for a presented secret, touching last_used_at (at most once a minute).

    Every /v1 request passes here, so the key and its user - complete instances of both - come back in one
    hand-written query (``memory.sql.active_key_with_user``) rather than a compiled ORM join."""
    parts = plaintext.rsplit("_", 1)
    if len(parts) != 2 or not parts[0].startswith(f"{KEY_PREFIX}_"):
        return None
    now = timezone.now()
    found = sql.active_key_with_user(parts[0], stale_before=now - timedelta(seconds=LAST_USED_RESOLUTION_S))
    if found is None:
        return None
    key, touch_due = found
    if not secrets.compare_digest(key.key_hash, hash_key(plaintext)):
        return None
    if not key.user.is_active:
        return None
    if key.role == ApiKeyRole.OPERATOR and not key.user.is_staff:
        return None
    if touch_due:
        sql.update(ApiKey, key.pk, last_used_at=now)
        key.last_used_at = now
    return key
