"""Issue 23.1: the per-principal ceiling on the database counter costs an upsert about once in ``LEASE_MAX``
requests (each process counts a lease of requests at a time), and the ceiling still holds exactly: never
more than the limit in a window across processes, and near the limit every request is counted on its own."""

from __future__ import annotations

import pytest
from django.core.cache import caches
from django.db import connection
from django.test.utils import CaptureQueriesContext

from kheish.api import throttling
from kheish.api.throttling import LEASE_MAX, PrincipalRateThrottle, Rate, _Leases
from memory.sessions import session_create
from tests.conftest import client_for
from tests.memory.test_concurrency_pg import run_threads

pytestmark = pytest.mark.django_db


@pytest.fixture
def fresh_leases(monkeypatch):
    leases = _Leases()
    monkeypatch.setattr(PrincipalRateThrottle, "leases", leases)
    caches["throttle"].clear()
    return leases


def _upserts(captured) -> int:
    return sum("kheish_rate_counter" in (q["sql"] or "") for q in captured.captured_queries)


def test_far_from_the_limit_most_requests_cost_no_counter_statement(agent_key, fresh_leases):
    session = session_create(owner=agent_key.api_key.user)
    client = client_for(agent_key.plaintext)
    with CaptureQueriesContext(connection) as captured:
        for _ in range(48):
            assert client.get(f"/v1/sessions/{session.public_id}").status_code == 200
    # the first request counts one (this process has not seen the window's count), then leases of LEASE_MAX
    assert _upserts(captured) == 1 + -(-47 // LEASE_MAX)
    with connection.cursor() as cursor:
        cursor.execute("SELECT value FROM kheish_rate_counter WHERE key LIKE %s", ["%kheish:throttle:agent:%"])
        counted = cursor.fetchone()[0]
    assert 48 <= counted < 48 + LEASE_MAX  # every request made is counted; the rest is this process's lease


def _decide(leases: _Leases, key: str, rate: Rate) -> bool:
    throttle = PrincipalRateThrottle()
    throttle.leases = leases
    return throttle._allow_leased(caches["throttle"].hit, key, rate, 60)


def test_processes_sharing_a_principal_never_pass_the_limit(fresh_leases):
    """Three processes (three lease holders) alternate over one window of 3,000: no more than 3,000 pass,
    and no fewer than the limit less what the others may hold unspent."""
    rate = Rate(3000, 60)
    processes = [_Leases() for _ in range(3)]
    allowed = sum(_decide(processes[i % 3], "k:shared-window", rate) for i in range(3600))
    assert rate.limit - 3 * LEASE_MAX <= allowed <= rate.limit


def test_near_the_limit_each_request_is_counted_on_its_own(fresh_leases):
    rate = Rate(40, 60)  # (40 - count) // LEASE_SHARE is 0: a lease of one, as without leases
    allowed = [_decide(fresh_leases, "k:small", rate) for _ in range(45)]
    assert allowed == [True] * 40 + [False] * 5
    assert fresh_leases.size_for("k:small", rate.limit) == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_processes_hold_the_limit_exactly():
    """Four threads, each its own database session and lease holder, race through one window: the total let
    through never exceeds the limit (the upsert is atomic; a lease is never more than what is left)."""
    caches["throttle"].clear()
    rate = Rate(2000, 60)
    allowed = [0] * 4

    def hammer(i: int) -> None:
        leases = _Leases()
        allowed[i] = sum(_decide(leases, "k:race", rate) for _ in range(700))

    assert run_threads(4, hammer) == []
    assert rate.limit - 4 * LEASE_MAX <= sum(allowed) <= rate.limit


def test_a_window_starts_without_tokens(fresh_leases):
    rate = Rate(6000, 60)
    assert _decide(fresh_leases, "k:w:1", rate)
    assert _decide(fresh_leases, "k:w:1", rate)  # leased LEASE_MAX
    assert fresh_leases.take("k:w:1")
    assert not fresh_leases.take("k:w:2")  # the next window's key: nothing held for it
    assert throttling.LEASE_SHARE >= 1
