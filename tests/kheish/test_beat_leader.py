"""Scale-out: one beat schedules across every node. Beat sends only while it holds a PostgreSQL advisory lock
on a session of its own; another beat stands by and takes over when that session ends (the leader stopped,
was killed, or lost the database). Real PostgreSQL sessions; the sending itself is recorded, not brokered."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connection

from kheish.beat import LeaderLock, LeaderScheduler
from kheish.celery import app

pytestmark = pytest.mark.django_db(transaction=True)


def _backend_pid(lock: LeaderLock) -> int:
    with lock._conn.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def test_beat_uses_the_leader_scheduler():
    assert settings.CELERY_BEAT_SCHEDULER == "kheish.beat:LeaderScheduler"


def test_one_lock_holder_at_a_time_and_a_standby_takes_over_when_it_dies():
    first, second = LeaderLock(), LeaderLock()
    try:
        assert first.held() is True
        assert second.held() is False
        assert first.held() is True and second.held() is False  # asking again changes nothing
        with connection.cursor() as cursor:  # the leader's session ends (kill -9, network cut, restart)
            cursor.execute("SELECT pg_terminate_backend(%s, 10000)", [_backend_pid(first)])  # waits for it
        assert second.held() is True
        assert first.held() is False  # it notices before it would send anything
        assert first.held() is False
        second.release()
        assert first.held() is True
    finally:
        first.release()
        second.release()


def test_a_standby_scheduler_sends_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("KHEISH_BEAT_STANDBY_S", "7")
    saved = app.conf.beat_schedule
    app.conf.beat_schedule = {"every-tick": {"task": "kheish.tests.noop", "schedule": 0.01}}
    sent: dict[str, list[str]] = {"a": [], "b": []}

    def scheduler(name: str) -> LeaderScheduler:
        sched = LeaderScheduler(app=app, schedule_filename=str(tmp_path / f"beat-{name}"))
        sched.apply_entry = lambda entry, producer=None, _n=name: sent[_n].append(entry.name)
        return sched

    a, b = scheduler("a"), scheduler("b")
    try:
        for _ in range(20):
            a.tick()
            assert b.tick() == 7.0
        assert "every-tick" in sent["a"] and sent["b"] == []
        a.close()  # the leader stops: the standby takes over on its next tick
        for _ in range(20):
            b.tick()
        assert "every-tick" in sent["b"]
    finally:
        a.close()
        b.close()
        app.conf.beat_schedule = saved
