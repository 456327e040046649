"""The embedded default broker: a kombu virtual transport over a table in the service's own PostgreSQL
(``CELERY_BROKER_URL=database://``, the default; Redis stays the production broker).

Why not kombu's own transports: ``filesystem://`` lets a consumer read a message file before its writer has
filled it (the worker dies on ``JSONDecodeError`` and the message is gone) and, like ``sqla+postgresql://``,
removes a message from the queue when it is *delivered*; with ``acks_late`` an unacknowledged message then lives
only in the worker's memory, so a worker killed with ``-9`` loses it. The SQLAlchemy transport also claims with
a plain ``FOR UPDATE`` (concurrent consumers queue behind one another) and adds SQLAlchemy for one table.

This transport keeps a message in the table until it is acknowledged:

* **publish**: one ``INSERT`` in autocommit (plus a ``pg_notify`` in the same statement, which wakes idle
  consumers): a message is either wholly there or not at all, and no consumer can see it before it is committed.
* **claim**: one ``UPDATE … FROM (SELECT … FOR UPDATE SKIP LOCKED)``: concurrent consumers (threads, processes,
  nodes) never take the same message and never wait on each other. The claimed row gets a lease
  (``lease_until``, ``KHEISH_BROKER_LEASE_S``, 30 s by default, on the database's clock) and its consumer's id.
* **while the task runs** the consumer renews the leases of what it holds every third of the lease, so a long
  task is not handed to a second worker.
* **ack** deletes the row; **reject with requeue** and a warm shutdown's restore clear the lease (the message
  is at once claimable again); a consumer that dies (``kill -9``, a lost machine) stops renewing, and its
  messages are claimable again once their lease lapses.

``_restore`` (the virtual transport's re-publish of an unacknowledged message) never copies a message: it only
clears the lease of the row, and only if this consumer still holds it.

Fan-out exchanges (``celery inspect``/``control`` broadcasts) are not supported, as with the other database
transports; Celery turns gossip and mingle off for it by itself.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import OrderedDict
from queue import Empty
from typing import Any, cast

import psycopg
from kombu.transport import TRANSPORT_ALIASES, virtual

logger = logging.getLogger(__name__)

TABLE = "kheish_broker_message"
CHANNEL = "kheish_broker"
DEFAULT_LEASE_S = 30.0
DEFAULT_POLL_S = 1.0  # the longest an idle consumer waits between claims when no notification wakes it
FULL_PREFETCH_POLL_S = 0.02  # how often a consumer whose prefetch is full looks whether an ack freed a slot

# Django-specific keys of DATABASES["default"]["OPTIONS"] that libpq does not know.
_DJANGO_ONLY_OPTIONS = {"isolation_level", "server_side_binding", "assume_role", "pool"}


def register() -> None:
    """Make ``database://`` name this transport (kombu resolves a scheme through ``TRANSPORT_ALIASES``)."""
    TRANSPORT_ALIASES.setdefault("database", "kheish.broker:Transport")


def connection_params() -> dict:
    """libpq parameters of Django's default database (whatever ``DATABASE_URL`` or the embedded server is)."""
    from django.db import connections

    db = connections["default"].settings_dict
    params = {key: value for key, value in (db.get("OPTIONS") or {}).items() if key not in _DJANGO_ONLY_OPTIONS}
    params["dbname"] = db.get("NAME") or "postgres"
    for key, name in (("USER", "user"), ("PASSWORD", "password"), ("HOST", "host"), ("PORT", "port")):
        if db.get(key):
            params[name] = db[key]
    params.setdefault("connect_timeout", 5)
    params["application_name"] = "kheish-broker"
    return params


def connect() -> psycopg.Connection:
    return psycopg.connect(**connection_params(), autocommit=True)


_PUT = (
    f"WITH m AS (INSERT INTO {TABLE} (queue, priority, payload, deliveries, created_at) "  # noqa: S608 - constants
    "VALUES (%s, %s, %s, 0, clock_timestamp()) RETURNING queue) "
    f"SELECT pg_notify('{CHANNEL}', m.queue) FROM m"
)
_CLAIM = (
    f"UPDATE {TABLE} AS t SET lease_until = clock_timestamp() + make_interval(secs => %s), owner = %s, "  # noqa: S608
    "deliveries = t.deliveries + 1 "
    f"FROM (SELECT id FROM {TABLE} WHERE queue = %s AND (lease_until IS NULL OR lease_until < clock_timestamp()) "
    "ORDER BY priority DESC, id LIMIT 1 FOR UPDATE SKIP LOCKED) AS picked "
    "WHERE t.id = picked.id RETURNING t.id, t.payload, t.deliveries"
)
_ACK = f"DELETE FROM {TABLE} WHERE id = %s"  # noqa: S608
_RELEASE = f"UPDATE {TABLE} SET lease_until = NULL, owner = NULL WHERE id = %s AND owner = %s"  # noqa: S608
_RENEW = (
    f"UPDATE {TABLE} SET lease_until = clock_timestamp() + make_interval(secs => %s) "  # noqa: S608
    "WHERE id = ANY(%s) AND owner = %s"
)
_SIZE = (
    f"SELECT count(*) FROM {TABLE} WHERE queue = %s "  # noqa: S608
    "AND (lease_until IS NULL OR lease_until < clock_timestamp())"
)
_PURGE = (
    f"DELETE FROM {TABLE} WHERE queue = %s "  # noqa: S608
    "AND (lease_until IS NULL OR lease_until < clock_timestamp())"
)
_DELETE = f"DELETE FROM {TABLE} WHERE queue = %s"  # noqa: S608


def _row_id(delivery_tag: str) -> int:
    return int(str(delivery_tag).partition(".")[0])


class QoS(virtual.QoS):
    """Acknowledging deletes the row (from whichever thread acks: psycopg connections are thread-safe)."""

    # kombu's __init__ sets both (its class-level defaults are None)
    _delivered: OrderedDict[str, Any]
    _dirty: set[str]

    def ack(self, delivery_tag):
        self.channel._ack(delivery_tag)
        super().ack(delivery_tag)

    def held_row_ids(self) -> list[int]:
        """The rows of the messages delivered and not yet acknowledged. Acks may land from another thread (they
        only add to ``_dirty``) while this copies: retry a copy that raced with one."""
        for _ in range(5):
            try:
                dirty = set(self._dirty)
                return [_row_id(tag) for tag in list(self._delivered) if tag not in dirty]
            except RuntimeError:  # "changed size during iteration"
                continue
        return []


class Channel(virtual.Channel):
    QoS = QoS
    do_restore = True
    supports_fanout = False

    def __init__(self, connection, **kwargs):
        options = connection.client.transport_options
        self.lease_s = float(options.get("lease_seconds") or DEFAULT_LEASE_S)
        self.owner = uuid.uuid4().hex
        self._db = connect()  # fails with OperationalError when the database is down: a connection error
        self._lock = threading.Lock()
        self._renewed_at = time.monotonic()
        super().__init__(connection, **kwargs)

    # ---- the database ------------------------------------------------------------------------------------
    def _execute(self, sql: str, params) -> list[tuple]:
        with self._lock, self._db.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if cursor.description else []

    # ---- virtual.Channel's storage API -------------------------------------------------------------------
    def _put(self, queue, message, **kwargs):
        priority = self._get_message_priority(message)
        self._execute(_PUT, [queue, priority, json.dumps(message)])

    def _get(self, queue, timeout=None):
        rows = self._execute(_CLAIM, [self.lease_s, self.owner, queue])
        if not rows:
            raise Empty()
        row_id, payload, deliveries = rows[0]
        message = json.loads(payload)
        # The row is the message: its tag names the row (and this delivery), so ack and restore find it.
        message["properties"]["delivery_tag"] = f"{row_id}.{deliveries}"
        if deliveries > 1:  # Celery reads it from delivery_info (as AMQP's redelivered flag)
            message["properties"].setdefault("delivery_info", {})["redelivered"] = True
        return message

    def _size(self, queue):
        return int(self._execute(_SIZE, [queue])[0][0])

    def _purge(self, queue):
        with self._lock, self._db.cursor() as cursor:
            cursor.execute(_PURGE, [queue])
            return cursor.rowcount

    def _delete(self, queue, *args, **kwargs):
        self._execute(_DELETE, [queue])

    def _new_queue(self, queue, **kwargs):
        """Queues are rows' ``queue`` column: nothing to create."""

    def _has_queue(self, queue, **kwargs):
        return True

    def _restore(self, message):
        """Back to the queue: clear this consumer's lease (the row was never removed)."""
        self._execute(_RELEASE, [_row_id(message.delivery_tag), self.owner])

    def _ack(self, delivery_tag) -> None:
        self._execute(_ACK, [_row_id(delivery_tag)])

    # ---- leases ------------------------------------------------------------------------------------------
    def renew_leases(self, *, force: bool = False) -> None:
        """Extend the leases of the messages this channel holds, every third of the lease."""
        if self.closed or (not force and time.monotonic() - self._renewed_at < self.lease_s / 3):
            return
        self._renewed_at = time.monotonic()
        held = cast(QoS, self.qos).held_row_ids() if self._qos is not None else []  # self.QoS is ours
        if held:
            self._execute(_RENEW, [self.lease_s, held, self.owner])

    def close(self):
        try:
            super().close()  # restores what this channel still holds
        finally:
            if not self._db.closed:
                self._db.close()


class Transport(virtual.Transport):
    Channel = Channel
    polling_interval = DEFAULT_POLL_S
    default_port = None
    driver_type = "postgresql"
    driver_name = "psycopg"
    connection_errors = virtual.Transport.connection_errors + (psycopg.OperationalError, psycopg.InterfaceError)
    channel_errors = virtual.Transport.channel_errors + (psycopg.DatabaseError,)
    implements = virtual.Transport.implements.extend(exchange_type=frozenset(["direct", "topic"]))

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        self._listener: psycopg.Connection | None = None

    @property
    def default_connection_params(self):
        """No host of its own: the database is Django's (kombu would otherwise warn and show ``localhost``)."""
        return {"port": None}

    def driver_version(self):
        return psycopg.__version__

    def _wait_for_messages(self, seconds: float) -> None:
        """Sleep up to ``seconds``, or less when a producer notifies a new message."""
        try:
            if self._listener is None or self._listener.closed:
                self._listener = connect()
                self._listener.execute(f"LISTEN {CHANNEL}")
            for _ in self._listener.notifies(timeout=seconds, stop_after=1):
                break
        except psycopg.Error:
            if self._listener is not None:
                self._listener.close()
            self._listener = None
            time.sleep(seconds)

    def drain_events(self, connection, timeout=None):
        started = time.monotonic()
        wait = self.polling_interval
        if timeout and wait > timeout:
            wait = timeout
        while True:
            for channel in list(self.channels):
                channel.renew_leases()
            try:
                self.cycle.get(self._deliver, timeout=timeout)
            except Empty:
                if timeout is not None and time.monotonic() - started >= timeout:
                    raise TimeoutError() from None
                if any(channel._consumers and channel.qos.can_consume() for channel in list(self.channels)):
                    self._wait_for_messages(wait)
                else:  # every consumer's prefetch is full: its next ack frees a slot, no database to ask
                    time.sleep(min(wait, FULL_PREFETCH_POLL_S))
            else:
                return

    def close_connection(self, connection):
        try:
            super().close_connection(connection)
        finally:
            if self._listener is not None:
                self._listener.close()
                self._listener = None
