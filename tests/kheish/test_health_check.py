"""The per-request health check (``CONN_HEALTH_CHECKS``) costs no round trip on a healthy idle connection, and
still finds a connection the server has dropped before a request uses it (kheish/postgres/base.py).

Real connections on the test server: the dropped one is ended by ``pg_terminate_backend`` from another
connection, as an administrator, a restart or an idle timeout ends it."""

from __future__ import annotations

import select
import time

import psycopg
import pytest
from django.db import connection
from django.db.backends.postgresql import base as django_postgresql

from kheish.postgres.base import quiet_and_idle

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def server_checks(monkeypatch):
    """Counts the health checks that asked the server (Django's own ``SELECT 1``)."""
    asked: list[int] = []
    original = django_postgresql.DatabaseWrapper.is_usable

    def counted(self):
        asked.append(1)
        return original(self)

    monkeypatch.setattr(django_postgresql.DatabaseWrapper, "is_usable", counted)
    return asked


def fresh_request_check() -> None:
    """What the first query of a request does with health checks on (Django's ``_cursor``)."""
    connection.health_check_done = False
    connection.close_if_health_check_failed()


def terminate_from_outside(pid: int) -> None:
    params = connection.get_connection_params()
    params = {k: v for k, v in params.items() if k not in ("cursor_factory", "prepare_threshold")}
    with psycopg.connect(**params) as c:
        c.execute("SELECT pg_terminate_backend(%s)", [pid])


def test_the_backend_is_the_projects():
    assert connection.settings_dict["ENGINE"] == "kheish.postgres"
    assert connection.settings_dict["CONN_HEALTH_CHECKS"] is True


def test_a_healthy_idle_connection_is_checked_without_a_statement(server_checks):
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    raw = connection.connection
    for _ in range(5):
        fresh_request_check()
        assert connection.connection is raw  # kept
    assert server_checks == []


def test_a_connection_the_server_dropped_is_replaced_before_the_request_uses_it(server_checks):
    connection.ensure_connection()
    raw = connection.connection
    terminate_from_outside(raw.info.backend_pid)
    poller = select.poll()
    poller.register(raw.pgconn.socket, select.POLLIN)
    deadline = time.monotonic() + 5
    while not poller.poll(50) and time.monotonic() < deadline:  # the server's closing error arrives
        pass
    assert not quiet_and_idle(raw)
    fresh_request_check()
    assert server_checks == [1]  # in doubt, the server was asked, and the answer was no
    assert connection.connection is None or connection.connection is not raw
    with connection.cursor() as cursor:  # the request goes on, on a new connection
        cursor.execute("SELECT 41 + 1")
        assert cursor.fetchone() == (42,)


def test_a_connection_in_a_transaction_or_after_an_error_is_asked(server_checks):
    connection.ensure_connection()
    raw = connection.connection
    connection.set_autocommit(False)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        assert not quiet_and_idle(raw)  # a transaction is open
    finally:
        connection.rollback()
        connection.set_autocommit(True)
    assert quiet_and_idle(raw)
    connection.errors_occurred = True
    try:
        fresh_request_check()
    finally:
        connection.errors_occurred = False
    assert server_checks == [1]
    assert connection.connection is raw  # the server said it was fine


def test_a_closed_connection_is_not_quiet():
    connection.ensure_connection()
    raw = connection.connection
    connection.close()
    assert not quiet_and_idle(raw)
