"""Identity: API keys for agents and operators. Operators are staff users; agents are API principals."""

from __future__ import annotations

import copy
import hashlib
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from memory import sql
from memory.audit import record_audit
from memory.errors import ValidationFailed
from memory.models import ApiKey, ApiKeyRole

if TYPE_CHECKING:
    from django.contrib.auth.models import User

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
def api_key_create(*, name: str, role: str, user: User | None = None, actor: object = "system") -> IssuedKey:
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
    record_audit(
        subject_type="api_key",
        subject_id=prefix,
        action="create",
        actor=actor,
        to_state="active",
        data={"role": role, "user": user.get_username()},
    )
    return IssuedKey(api_key=key, plaintext=plaintext)


@transaction.atomic
def api_key_revoke(*, api_key: ApiKey, actor: object) -> ApiKey:
    if api_key.revoked_at is None:
        ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        api_key.refresh_from_db()
        record_audit(
            subject_type="api_key",
            subject_id=api_key.prefix,
            action="revoke",
            actor=actor,
            from_state="active",
            to_state="revoked",
        )
    forget_verified(key_pk=api_key.pk)
    transaction.on_commit(lambda: forget_verified(key_pk=api_key.pk))  # a lookup racing the revoke
    return api_key


LAST_USED_RESOLUTION_S = 60
VERIFIED_KEYS_CACHED = 4096


class _VerifiedKeys:
    """Keys this process verified in the last ``KHEISH_API_KEY_CACHE_SECONDS``, by the SHA-256 of the presented
    secret (the digest stored as ``key_hash``, so an entry can only be found again with the very secret that
    was checked against the database). Only successes are kept; an entry is dropped when its time is up, and
    at once when this process revokes the key or saves or deletes the key or its user - a revocation made by
    another process takes effect here within the cache time. Least recently used dropped past the bound."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[str, tuple[float, ApiKey]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, digest: str, now: float) -> ApiKey | None:
        with self._lock:
            entry = self._entries.get(digest)
            if entry is None:
                return None
            if entry[0] <= now:
                del self._entries[digest]
                return None
            self._entries.move_to_end(digest)
            return entry[1]

    def put(self, digest: str, key: ApiKey, expires: float) -> None:
        with self._lock:
            self._entries[digest] = (expires, key)
            self._entries.move_to_end(digest)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def forget(self, *, key_pk: int | None = None, user_pk: int | None = None) -> None:
        with self._lock:
            for digest, (_, key) in list(self._entries.items()):
                if key.pk == key_pk or key.user_id == user_pk:
                    del self._entries[digest]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


_VERIFIED = _VerifiedKeys(VERIFIED_KEYS_CACHED)


def forget_verified(*, key_pk: int | None = None, user_pk: int | None = None) -> None:
    """Drop this process's verified entries of a key or of every key of a user (signals call it on save)."""
    _VERIFIED.forget(key_pk=key_pk, user_pk=user_pk)


def clear_verified() -> None:
    _VERIFIED.clear()


def _cache_seconds() -> float:
    return float(getattr(settings, "KHEISH_API_KEY_CACHE_SECONDS", 5.0))


def _copy(key: ApiKey) -> ApiKey:
    """A request's own instances (a view may change ``request.user``; the cached ones stay as read)."""
    fresh = copy.copy(key)  # Model.__getstate__ copies the instance's state too
    fresh.user = copy.copy(key.user)
    return fresh


def authenticate_key(plaintext: str) -> ApiKey | None:
    """Return the active key for a presented secret, touching last_used_at (at most once a minute).

    Every /v1 request passes here. A secret verified in the last ``KHEISH_API_KEY_CACHE_SECONDS`` (5 by default,
    0 turns the cache off) is answered from this process's memory (``_VerifiedKeys``), without a statement;
    otherwise the key and its user - complete instances of both - come back in one hand-written query
    (``memory.sql.active_key_with_user``) rather than a compiled ORM join."""
    parts = plaintext.rsplit("_", 1)
    if len(parts) != 2 or not parts[0].startswith(f"{KEY_PREFIX}_"):
        return None
    digest = hash_key(plaintext)
    ttl = _cache_seconds()
    clock = time.monotonic()
    now = timezone.now()
    stale_before = now - timedelta(seconds=LAST_USED_RESOLUTION_S)
    cached = _VERIFIED.get(digest, clock) if ttl > 0 else None
    if cached is not None:
        if cached.last_used_at is None or cached.last_used_at < stale_before:
            sql.update(ApiKey, cached.pk, last_used_at=now)
            cached.last_used_at = now
        return _copy(cached)
    found = sql.active_key_with_user(parts[0], stale_before=stale_before)
    if found is None:
        return None
    key, touch_due = found
    if not secrets.compare_digest(key.key_hash, digest):
        return None
    if not key.user.is_active:
        return None
    if key.role == ApiKeyRole.OPERATOR and not key.user.is_staff:
        return None
    if touch_due:
        sql.update(ApiKey, key.pk, last_used_at=now)
        key.last_used_at = now
    if ttl > 0:
        _VERIFIED.put(digest, key, clock + ttl)
        return _copy(key)
    return key
