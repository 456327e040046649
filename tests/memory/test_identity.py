"""API-key authentication (memory.identity.authenticate_key): the one query every /v1 request runs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memory import identity
from memory.identity import api_key_create, api_key_revoke, authenticate_key, clear_verified
from memory.models import ApiKey

pytestmark = pytest.mark.django_db


def test_valid_key_returns_key_and_user():
    issued = api_key_create(name="robot", role="agent")
    key = authenticate_key(issued.plaintext)
    assert key.pk == issued.api_key.pk and key.role == "agent" and key.prefix == issued.api_key.prefix
    assert key.user.pk == issued.api_key.user.pk and key.user.username == "robot"


@pytest.mark.parametrize(
    "mangle",
    [
        lambda k: k[:-1] + ("0" if k[-1] != "0" else "1"),  # right prefix, wrong secret
        lambda k: k.replace("khm_", "xyz_"),
        lambda k: k.rsplit("_", 1)[0],
        lambda k: "khm_unknownprefix_" + "a" * 48,
    ],
)
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
    clear_verified()  # as another process sees it (this one remembers the key it verified, with its touch)
    authenticate_key(issued.plaintext)
    assert ApiKey.objects.get().last_used_at > old + timedelta(seconds=90)


# ---- the verified-key cache (issue 23: the request floor) ------------------------------------------------


def test_a_verified_key_is_answered_without_a_statement(django_assert_num_queries):
    issued = api_key_create(name="robot", role="agent")
    clear_verified()
    with django_assert_num_queries(2):  # the lookup and the first last_used_at touch
        assert authenticate_key(issued.plaintext).pk == issued.api_key.pk
    with django_assert_num_queries(0):
        key = authenticate_key(issued.plaintext)
    assert key.pk == issued.api_key.pk and key.user.username == "robot"


def test_the_cache_is_keyed_by_the_whole_secret(django_assert_num_queries):
    issued = api_key_create(name="robot", role="agent")
    assert authenticate_key(issued.plaintext) is not None
    wrong = issued.plaintext[:-1] + ("0" if issued.plaintext[-1] != "0" else "1")
    with django_assert_num_queries(1):  # same prefix, other secret: looked up, and refused
        assert authenticate_key(wrong) is None


def test_a_revocation_in_this_process_takes_effect_at_once():
    issued = api_key_create(name="robot", role="agent")
    assert authenticate_key(issued.plaintext) is not None
    api_key_revoke(api_key=ApiKey.objects.get(pk=issued.api_key.pk), actor="tester")
    assert authenticate_key(issued.plaintext) is None


def test_a_saved_user_or_key_leaves_the_cache():
    issued = api_key_create(name="robot", role="agent")
    assert authenticate_key(issued.plaintext) is not None
    user = issued.api_key.user
    user.is_active = False
    user.save()
    assert authenticate_key(issued.plaintext) is None
    boss = api_key_create(name="boss", role="operator")
    assert authenticate_key(boss.plaintext) is not None
    key = ApiKey.objects.get(pk=boss.api_key.pk)
    key.revoked_at = timezone.now()
    key.save()
    assert authenticate_key(boss.plaintext) is None


def test_a_revocation_elsewhere_takes_effect_within_the_cache_time(monkeypatch, settings):
    settings.KHEISH_API_KEY_CACHE_SECONDS = 5.0
    clock = [1000.0]
    monkeypatch.setattr(identity.time, "monotonic", lambda: clock[0])
    issued = api_key_create(name="robot", role="agent")
    assert authenticate_key(issued.plaintext) is not None
    # Another process revokes it: a bare UPDATE, no signal reaches this one.
    ApiKey.objects.filter(pk=issued.api_key.pk).update(revoked_at=timezone.now())
    clock[0] += 4.9
    assert authenticate_key(issued.plaintext) is not None  # the bounded staleness the setting documents
    clock[0] += 0.2
    assert authenticate_key(issued.plaintext) is None


def test_cache_time_zero_looks_the_key_up_every_time(settings, django_assert_num_queries):
    settings.KHEISH_API_KEY_CACHE_SECONDS = 0
    issued = api_key_create(name="robot", role="agent")
    authenticate_key(issued.plaintext)
    with django_assert_num_queries(1):
        assert authenticate_key(issued.plaintext) is not None


def test_each_caller_gets_its_own_instances():
    issued = api_key_create(name="robot", role="agent")
    first = authenticate_key(issued.plaintext)
    first.user.username = "changed by a view"
    first.name = "changed"
    second = authenticate_key(issued.plaintext)
    assert second.user.username == "robot" and second.name == "robot" and second.user is not first.user
