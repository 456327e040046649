"""API-key authentication (memory.identity.authenticate_key): the one query every /v1 request runs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memory.identity import api_key_create, api_key_revoke, authenticate_key
from memory.models import ApiKey

pytestmark = pytest.mark.django_db


def test_valid_key_returns_key_and_user():
    issued = api_key_create(name="robot", role="agent")
    key = authenticate_key(issued.plaintext)
    assert key.pk == issued.api_key.pk and key.role == "agent" and key.prefix == issued.api_key.prefix
    assert key.user.pk == issued.api_key.user.pk and key.user.username == "robot"


@pytest.mark.parametrize("mangle", [
    lambda k: k[:-1] + ("0" if k[-1] != "0" else "1"),  # right prefix, wrong secret
    lambda k: k.replace("khm_", "xyz_"),
    lambda k: k.rsplit("_", 1)[0],
    lambda k: "khm_unknownprefix_" + "a" * 48,
])
def test_wrong_keys_are_refused(mangle):
    issued = api_key_create(name="robot", role="agent")
    assert authenticate_key(mangle(issued.plaintext)) is None


def test_revoked_key_and_inactive_user_are_refused():
    issued = api_key_create(name="robot", role="agent")
    api_key_revoke(api_key=issued.api_key, actor="tester")
    assert authenticate_key(issued.plaintext) is None
    other = api_key_create(name="robot2", role="agent")
    other.api_key.user.is_active = False
    other.api_key.user.save()
    assert authenticate_key(other.plaintext) is None


def test_operator_key_needs_a_staff_user():
    issued = api_key_create(name="boss", role="operator")
    assert authenticate_key(issued.plaintext).role == "operator"
    issued.api_key.user.is_staff = False
    issued.api_key.user.save()
    assert authenticate_key(issued.plaintext) is None


def test_last_used_is_touched_at_most_once_a_minute():
    issued = api_key_create(name="robot", role="agent")
    assert ApiKey.objects.get().last_used_at is None
    authenticate_key(issued.plaintext)
    first = ApiKey.objects.get().last_used_at
    assert first is not None
    authenticate_key(issued.plaintext)
    assert ApiKey.objects.get().last_used_at == first  # within the minute: no write
    old = timezone.now() - timedelta(minutes=2)
    ApiKey.objects.update(last_used_at=old)
    authenticate_key(issued.plaintext)
    assert ApiKey.objects.get().last_used_at > old + timedelta(seconds=90)
