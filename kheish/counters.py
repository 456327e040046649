"""``DatabaseCounterCache``: a Django cache for integer counters in PostgreSQL, one statement per operation.

The per-principal throttle (``kheish.api.throttling``) counts every /v1 request. Counted in local memory,
each gunicorn worker (and each node) keeps its own count, so the ceiling multiplies with the workers. Django's
own database cache is shared but costs several statements per write (a ``COUNT(*)`` for culling, a read, then
an insert or update, in a transaction) and its ``incr`` is a read then a write, which loses counts under
concurrency. This backend keeps one row per key in the UNLOGGED table ``kheish_rate_counter``
(``kheish.models.RateCounter``) and does each operation in one atomic statement:

* ``hit(key, timeout, delta=1)``: count ``delta`` and return the new count, starting a fresh window when the row
  expired (``INSERT ... ON CONFLICT DO UPDATE ... RETURNING``): the throttle's only round trip, which counts a
  lease of several requests at once (``kheish.api.throttling``);
* ``add``, ``incr``, ``get``, ``get_many``, ``set``, ``delete``, ``touch``, ``has_key``, ``clear`` with Django's
  semantics, for integer values only (anything else is a ``TypeError``: this is not a general cache).

Expired rows are deleted every ``CULL_EVERY`` writes of a process (one indexed ``DELETE``). Expiry is checked against
``clock_timestamp()``, not the transaction's start. It runs on the
``default`` database connection, in the caller's transaction when there is one.

Choose it (or Redis, or local memory) for the throttle with ``KHEISH_THROTTLE_CACHE_URL`` (kheish.settings).
"""

from __future__ import annotations

import itertools

from django.core.cache.backends.base import DEFAULT_TIMEOUT, BaseCache
from django.db import connection

TABLE = "kheish_rate_counter"
CULL_EVERY = 500
_FOREVER = "infinity"


class DatabaseCounterCache(BaseCache):
    def __init__(self, location=None, params=None):
        super().__init__(params or {})
        self._writes = itertools.count(1)

    # ---- helpers ----------------------------------------------------------------------------------------
    @staticmethod
    def _int(value) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"DatabaseCounterCache stores integer counters only, not {type(value).__name__}")
        return value

    def _expires_sql(self, timeout) -> tuple[str, list]:
        """SQL for the expiry of a write with ``timeout`` and its parameters."""
        if timeout is DEFAULT_TIMEOUT:
            timeout = self.default_timeout
        if timeout is None:
            return f"'{_FOREVER}'::timestamptz", []
        return "clock_timestamp() + make_interval(secs => %s)", [float(timeout) if timeout else -1.0]

    def _after_write(self) -> None:
        if next(self._writes) % CULL_EVERY == 0:
            with connection.cursor() as cursor:
                cursor.execute(f"DELETE FROM {TABLE} WHERE expires < clock_timestamp()")  # noqa: S608 - constant table

    # ---- the counter ------------------------------------------------------------------------------------
    def hit(self, key, timeout=DEFAULT_TIMEOUT, version=None, delta: int = 1) -> int:
        """Add ``delta`` to the live count of ``key`` (a missing or expired one starts at ``delta`` and gets
        ``timeout``); return the new count. One statement, atomic under concurrent callers."""
        key = self.make_and_validate_key(key, version=version)
        expires, params = self._expires_sql(timeout)
        delta = self._int(delta)
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {TABLE} AS c (key, value, expires) VALUES (%s, %s, {expires}) "  # noqa: S608
                "ON CONFLICT (key) DO UPDATE SET "
                "value = CASE WHEN c.expires < clock_timestamp() THEN EXCLUDED.value "
                "ELSE c.value + EXCLUDED.value END, "
                "expires = CASE WHEN c.expires < clock_timestamp() THEN EXCLUDED.expires ELSE c.expires END "
                "RETURNING value",
                [key, delta, *params],
            )
            count = cursor.fetchone()[0]
        self._after_write()
        return int(count)

    # ---- Django's cache API -----------------------------------------------------------------------------
    def add(self, key, value, timeout=DEFAULT_TIMEOUT, version=None) -> bool:
        key = self.make_and_validate_key(key, version=version)
        expires, params = self._expires_sql(timeout)
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {TABLE} AS c (key, value, expires) VALUES (%s, %s, {expires}) "  # noqa: S608
                "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, expires = EXCLUDED.expires "
                "WHERE c.expires < clock_timestamp() RETURNING 1",
                [key, self._int(value), *params],
            )
            added = cursor.fetchone() is not None
        self._after_write()
        return added

    def set(self, key, value, timeout=DEFAULT_TIMEOUT, version=None) -> None:
        key = self.make_and_validate_key(key, version=version)
        expires, params = self._expires_sql(timeout)
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {TABLE} (key, value, expires) VALUES (%s, %s, {expires}) "  # noqa: S608
                "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, expires = EXCLUDED.expires",
                [key, self._int(value), *params],
            )
        self._after_write()

    def incr(self, key, delta=1, version=None) -> int:
        key = self.make_and_validate_key(key, version=version)
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {TABLE} SET value = value + %s WHERE key = %s AND expires >= clock_timestamp() "  # noqa: S608
                "RETURNING value",
                [self._int(delta), key],
            )
            row = cursor.fetchone()
        if row is None:
            raise ValueError(f"Key '{key}' not found")
        return int(row[0])

    def get(self, key, default=None, version=None):
        key = self.make_and_validate_key(key, version=version)
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT value FROM {TABLE} WHERE key = %s AND expires >= clock_timestamp()", [key])  # noqa: S608
            row = cursor.fetchone()
        return default if row is None else int(row[0])

    def get_many(self, keys, version=None) -> dict:
        made = {self.make_and_validate_key(key, version=version): key for key in keys}
        if not made:
            return {}
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT key, value FROM {TABLE} WHERE key = ANY(%s) AND expires >= clock_timestamp()",  # noqa: S608
                [list(made)],
            )
            return {made[key]: int(value) for key, value in cursor.fetchall()}

    def has_key(self, key, version=None) -> bool:
        return self.get(key, version=version) is not None

    def touch(self, key, timeout=DEFAULT_TIMEOUT, version=None) -> bool:
        key = self.make_and_validate_key(key, version=version)
        expires, params = self._expires_sql(timeout)
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {TABLE} SET expires = {expires} WHERE key = %s AND expires >= clock_timestamp()",  # noqa: S608
                [*params, key],
            )
            return cursor.rowcount > 0

    def delete(self, key, version=None) -> bool:
        key = self.make_and_validate_key(key, version=version)
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {TABLE} WHERE key = %s", [key])  # noqa: S608
            return cursor.rowcount > 0

    def clear(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {TABLE}")  # noqa: S608
