"""The embedded PostgreSQL runs with ``shared_buffers`` sized for the recall indexes (``launcher.shared_buffers_mb``:
``KHEISH_PG_SHARED_BUFFERS_MB``, else a quarter of the machine's memory between 128 MB and 1 GB), set by the
launcher that starts it."""

from __future__ import annotations

import os

import pytest
from django.db import connection

from kheish import launcher
from kheish.service_config import PGDATA


def test_the_size_is_a_quarter_of_memory_between_128_mb_and_1_gb(monkeypatch):
    monkeypatch.delenv(launcher.SHARED_BUFFERS_ENV, raising=False)
    page = 4096
    for memory_mb, expected in ((256, 128), (2048, 512), (24 * 1024, 1024)):
        pages = memory_mb * 1024 * 1024 // page
        monkeypatch.setattr(os, "sysconf", lambda name, pages=pages: page if name == "SC_PAGE_SIZE" else pages)
        assert launcher.shared_buffers_mb() == expected


def test_the_setting_wins(monkeypatch):
    monkeypatch.setenv(launcher.SHARED_BUFFERS_ENV, "300")
    assert launcher.shared_buffers_mb() == 300
    monkeypatch.setenv(launcher.SHARED_BUFFERS_ENV, "1")
    assert launcher.shared_buffers_mb() == 16  # never below a working minimum


@pytest.mark.django_db
def test_the_embedded_server_runs_with_it():
    host = str(connection.settings_dict.get("HOST") or connection.get_connection_params().get("host") or "")
    if str(PGDATA) not in host:
        pytest.skip("the tests run on a PostgreSQL server the launcher did not start (DATABASE_URL)")
    with connection.cursor() as cursor:
        cursor.execute("SELECT setting::bigint * 8 / 1024 FROM pg_settings WHERE name = 'shared_buffers'")
        assert cursor.fetchone()[0] == launcher.shared_buffers_mb()
