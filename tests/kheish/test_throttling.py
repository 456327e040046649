"""Issue 14.3: throttling. Wrong API keys are limited per client address and per key prefix (429 problem+json
with Retry-After), a valid key is never counted nor refused because of failures; requests per principal are
capped (DRF throttle); admin sign-ins lock out after repeated failures and the lockout can be cleared.

The failure counts live in the database cache (one count for every gunicorn worker): these tests write them
inside the test's transaction, so each test starts from zero."""

from __future__ import annotations

import pytest
from django.core.cache import caches
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from kheish.api.throttling import Rate, parse_rate
from tests.conftest import assert_problem, client_for

pytestmark = pytest.mark.django_db


def wrong_key_client(prefix: str = "khm_0123456789ab", *, address: str = "127.0.0.1") -> APIClient:
    client = APIClient(REMOTE_ADDR=address)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {prefix}_{'0' * 48}")
    return client


def assert_throttled(response, code: str):
    assert_problem(response, 429, code)
    assert response["Content-Type"].startswith("application/problem+json")
    retry_after = int(response["Retry-After"])
    assert 1 <= retry_after <= 300
    assert response.json()["retry_after"] == retry_after
    return retry_after


def test_rates_parse():
    assert parse_rate("6000/m") == Rate(6000, 60)
    assert parse_rate("100/5m") == Rate(100, 300)
    assert parse_rate("10/hour") == Rate(10, 3600)
    assert parse_rate("off") is None and parse_rate("") is None
    with pytest.raises(ValueError):
        parse_rate("lots")


def test_the_failure_counter_is_shared_by_every_worker(settings):
    """LocMem would give each gunicorn worker its own count; the failure counts are in the database."""
    assert settings.CACHES["auth_failures"]["BACKEND"] == "django.core.cache.backends.db.DatabaseCache"


def test_wrong_keys_from_one_address_get_429_after_the_limit(settings):
    settings.KHEISH_AUTH_FAILURES_PER_ADDRESS = "5/5m"
    settings.KHEISH_AUTH_FAILURES_PER_PREFIX = "off"
    for n in range(5):  # a different made-up prefix each time: only the address limit applies
        response = wrong_key_client(f"khm_{n:012x}").get("/v1/sessions")
        assert_problem(response, 401, "unauthenticated")
    response = wrong_key_client("khm_00000000ffff").get("/v1/sessions")
    assert_throttled(response, "too_many_auth_failures")
    assert response.json()["domain"] == "auth" and "client address" in response.json()["detail"]
    # malformed credentials count too
    malformed = APIClient(REMOTE_ADDR="127.0.0.1")
    malformed.credentials(HTTP_AUTHORIZATION="Bearer not-a-key")
    assert_throttled(malformed.get("/v1/sessions"), "too_many_auth_failures")
    # another address is not affected
    assert_problem(wrong_key_client(address="10.9.9.9").get("/v1/sessions"), 401, "unauthenticated")


def test_a_valid_key_from_a_throttled_address_still_works(settings, agent_key):
    settings.KHEISH_AUTH_FAILURES_PER_ADDRESS = "3/5m"
    settings.KHEISH_AUTH_FAILURES_PER_PREFIX = "3/5m"
    own_prefix = agent_key.api_key.prefix
    for _ in range(6):  # wrong secrets sent with the valid key's own prefix, from the same address
        wrong_key_client(own_prefix).get("/v1/sessions")
    assert_throttled(wrong_key_client(own_prefix).get("/v1/sessions"), "too_many_auth_failures")
    assert_throttled(wrong_key_client("khm_aaaaaaaaaaaa").get("/v1/sessions"), "too_many_auth_failures")
    good = client_for(agent_key.plaintext)
    for _ in range(3):
        response = good.get("/v1/sessions")
        assert response.status_code == 200, response.content
    # and its successes did not count as failures nor lift the limit for the bad ones
    assert_throttled(wrong_key_client(own_prefix).get("/v1/sessions"), "too_many_auth_failures")


def test_wrong_secrets_for_one_prefix_are_limited_across_addresses(settings):
    settings.KHEISH_AUTH_FAILURES_PER_ADDRESS = "off"
    settings.KHEISH_AUTH_FAILURES_PER_PREFIX = "4/5m"
    for n in range(4):
        response = wrong_key_client("khm_bbbbbbbbbbbb", address=f"10.0.0.{n}").get("/v1/sessions")
        assert_problem(response, 401, "unauthenticated")
    response = wrong_key_client("khm_bbbbbbbbbbbb", address="10.0.0.99").get("/v1/sessions")
    assert_throttled(response, "too_many_auth_failures")
    assert "key prefix" in response.json()["detail"]
    assert_problem(wrong_key_client("khm_cccccccccccc", address="10.0.0.99").get("/v1/sessions"), 401)


def test_default_limits_leave_an_honest_client_alone(agent_key):
    """A few wrong keys (a rotated key still configured somewhere) stay plain 401s with the defaults."""
    for _ in range(10):
        assert_problem(wrong_key_client().get("/v1/sessions"), 401, "unauthenticated")
    assert client_for(agent_key.plaintext).get("/v1/sessions").status_code == 200


def test_requests_per_principal_are_capped_with_429_and_retry_after(settings, agent_key, other_agent_key):
    settings.KHEISH_THROTTLE_AGENT = "5/m"
    caches["throttle"].clear()
    client = client_for(agent_key.plaintext)
    for _ in range(5):
        assert client.get("/v1/sessions").status_code == 200
    response = client.get("/v1/sessions")
    retry_after = assert_throttled(response, "throttled")
    assert retry_after <= 60 and response.json()["domain"] == "api"
    # per principal: another agent is not affected
    assert client_for(other_agent_key.plaintext).get("/v1/sessions").status_code == 200


def test_operators_have_their_own_rate(settings, agent_key, operator_key):
    settings.KHEISH_THROTTLE_AGENT = "2/m"
    settings.KHEISH_THROTTLE_OPERATOR = "off"
    caches["throttle"].clear()
    operator = client_for(operator_key.plaintext)
    for _ in range(5):
        assert operator.get("/v1/sessions").status_code == 200


def test_default_rates_are_far_above_a_busy_agent(settings):
    for name in ("KHEISH_THROTTLE_AGENT", "KHEISH_THROTTLE_OPERATOR"):
        rate = parse_rate(getattr(settings, name))
        assert rate is not None and rate.limit / rate.period >= 50  # requests a second


# --- admin sign-in lockout (django-axes) ---------------------------------------------------------------


@pytest.fixture
def staff_user(django_user_model):
    return django_user_model.objects.create_user(
        "ops-person", password="right-password-123", is_staff=True, is_superuser=True
    )


def sign_in(client: Client, password: str):
    return client.post("/admin/login/?next=/admin/", {"username": "ops-person", "password": password})


def test_admin_sign_in_locks_out_after_repeated_failures(settings, staff_user):
    settings.AXES_FAILURE_LIMIT = 3
    client = Client(REMOTE_ADDR="192.0.2.7")
    for _ in range(2):
        response = sign_in(client, "wrong")
        assert response.status_code == 200  # the form again, with Django's error
    response = sign_in(client, "wrong")
    assert response.status_code == 429
    response = sign_in(client, "right-password-123")  # even the right password, while locked
    assert response.status_code == 429
    assert "_auth_user_id" not in client.session
    page = response.content.decode()
    assert "Sign-in locked" in page and "axes_reset_ip 192.0.2.7" in page and "15 minutes" in page
    assert int(response["Retry-After"]) == 15 * 60
    # another address signs in normally
    other = Client(REMOTE_ADDR="192.0.2.8")
    assert sign_in(other, "right-password-123").status_code == 302


def test_the_lockout_is_cleared_by_the_management_command(settings, staff_user):
    settings.AXES_FAILURE_LIMIT = 2
    client = Client(REMOTE_ADDR="192.0.2.9")
    sign_in(client, "wrong")
    assert sign_in(client, "wrong").status_code == 429
    call_command("axes_reset_ip", "192.0.2.9")
    response = sign_in(client, "right-password-123")
    assert response.status_code == 302 and response["Location"] == "/admin/"


def test_a_success_resets_the_count(settings, staff_user):
    settings.AXES_FAILURE_LIMIT = 3
    client = Client(REMOTE_ADDR="192.0.2.10")
    sign_in(client, "wrong")
    sign_in(client, "wrong")
    assert sign_in(client, "right-password-123").status_code == 302
    client.logout()
    sign_in(client, "wrong")
    sign_in(client, "wrong")
    assert sign_in(client, "right-password-123").status_code == 302


def test_wrong_keys_on_metrics_are_counted_and_limited_like_v1(settings, operator_key):
    """Issue 22.4: /metrics counted bad keys but never answered 429; the limit is one count with /v1."""
    settings.KHEISH_AUTH_FAILURES_PER_ADDRESS = "4/5m"
    settings.KHEISH_AUTH_FAILURES_PER_PREFIX = "off"
    settings.KHEISH_METRICS_TOKEN = "the-metrics-token"
    for n in range(2):
        assert wrong_key_client(f"khm_{n:012x}").get("/metrics").status_code == 401
    for n in range(2, 4):  # /v1 failures from the same address add to the same count
        assert_problem(wrong_key_client(f"khm_{n:012x}").get("/v1/sessions"), 401, "unauthenticated")
    assert_throttled(wrong_key_client("khm_00000000ffff").get("/metrics"), "too_many_auth_failures")
    assert_throttled(wrong_key_client("khm_00000000fffe").get("/v1/sessions"), "too_many_auth_failures")
    # a valid operator key and the metrics token are never refused because of failures
    assert client_for(operator_key.plaintext).get("/metrics").status_code == 200
    token = APIClient(REMOTE_ADDR="127.0.0.1")
    token.credentials(HTTP_AUTHORIZATION="Bearer the-metrics-token")
    assert token.get("/metrics").status_code == 200
