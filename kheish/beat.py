"""Celery beat that schedules exactly once across every node: a leader lock in PostgreSQL.

Every node may run a beat process (``KHEISH_ROLE=all`` on two machines, or a spare beat kept warm); only the
one holding the PostgreSQL session-level advisory lock ``BEAT_LOCK_KEY`` sends anything. The others stand by
and try to take the lock every ``KHEISH_BEAT_STANDBY_S`` seconds (5 by default).

* The lock lives as long as the database session that took it: it is released when the leader stops, is
  killed (kill -9: the server sees the connection close) or loses its connection. Nothing has to expire.
* Before each scheduling step the leader proves its session is still alive (``SELECT 1`` on the lock's own
  connection: while the session lives, so does the lock). A leader whose connection broke (database
  restarted, network cut) becomes a standby before it sends anything, so two beats never both send.
* A beat that takes over sends the entries its own schedule file says are due - after a failover the
  periodic sweeps may run once early. They are idempotent.

The lock uses its own connection (``connections.create_connection``), never the one Django code in the beat
process might close or reuse.
"""

from __future__ import annotations

import contextlib
import logging
import os

from celery.beat import PersistentScheduler

logger = logging.getLogger("kheish.beat")

# "kheish:beat" as a bigint, fixed: every node of one database must agree on it.
BEAT_LOCK_KEY = 0x6B68656973686274


def _standby_interval() -> float:
    raw = os.environ.get("KHEISH_BEAT_STANDBY_S") or "5"
    try:
        value = float(raw)
    except ValueError:
        raise SystemExit(f"KHEISH_BEAT_STANDBY_S must be a number of seconds, got {raw!r}") from None
    return max(value, 0.1)


class LeaderLock:
    """The beat lock on a connection of its own. ``held()`` says whether this process leads right now,
    taking the lock when it is free."""

    def __init__(self, key: int = BEAT_LOCK_KEY) -> None:
        self.key = key
        self._conn = None
        self.leading = False

    def _connection(self):
        from django.db import connections

        if self._conn is None:
            self._conn = connections.create_connection("default")
        return self._conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # already broken: nothing to close
                conn.close()

    def held(self) -> bool:
        try:
            conn = self._connection()
            with conn.cursor() as cursor:
                if self.leading:  # the session is alive, so the lock it took is still ours
                    cursor.execute("SELECT 1")
                    cursor.fetchone()
                    return True
                cursor.execute("SELECT pg_try_advisory_lock(%s)", [self.key])
                self.leading = bool(cursor.fetchone()[0])
        except Exception as exc:  # noqa: BLE001 - no database: not the leader, try again later
            if self.leading:
                logger.warning("beat: lost the schedule lock (%s: %s); standing by", type(exc).__name__, exc)
            self.leading = False
            self._drop()
            return False
        if self.leading:
            logger.warning("beat: leader (holds the schedule lock; other beats stand by)")
        return self.leading

    def release(self) -> None:
        if self.leading and self._conn is not None:
            try:
                with self._conn.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s)", [self.key])
            except Exception:  # noqa: BLE001,S110 - the session ends below anyway, which releases it
                pass
        self.leading = False
        self._drop()


class LeaderScheduler(PersistentScheduler):
    """``PersistentScheduler`` (the schedule file of ``-s``) that only sends while it holds ``LeaderLock``."""

    def __init__(self, *args, **kwargs) -> None:
        self.leader_lock = LeaderLock()
        self.standby_interval = _standby_interval()
        self._said_standby = False
        super().__init__(*args, **kwargs)

    def tick(self, *args, **kwargs):
        if not self.leader_lock.held():
            if not self._said_standby:
                logger.warning(
                    "beat: standby (another beat holds the schedule lock, or no database); retrying every %.0fs",
                    self.standby_interval,
                )
                self._said_standby = True
            return self.standby_interval
        self._said_standby = False
        return super().tick(*args, **kwargs)

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.leader_lock.release()
