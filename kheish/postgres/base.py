"""Django's PostgreSQL backend, with two changes. The per-request health check (``CONN_HEALTH_CHECKS``) asks the
socket before it asks the server.

And what query logs show: a statement psycopg runs as a prepared statement (``memory.sql.prepared_cursor``:
the hot reads and writes) keeps no text on the cursor, so Django logged and captured it as ``None``; it is
logged with its parameters (as ``connection.ops.compose_sql`` writes them) or, failing that, as written.

Django checks a persistent connection at the first query of every request with a ``SELECT 1``: one round trip
per request, for a connection that is almost always fine. A connection the server has dropped (a restart, an
administrator's ``pg_terminate_backend``, an idle timeout) has been told so: the server sends its closing error
and closes the socket, which is then readable. An idle connection that nobody has written to has nothing to
read otherwise. So: an idle connection (no transaction open, none broken, no error seen in this request) whose
socket has nothing to read is usable without a statement; anything else - something to read, a transaction
status other than idle, a query that failed - gets Django's ``SELECT 1``, which reads what is waiting (a closing
error, a notice) and decides as before. A server that vanished without a word (a host gone, a network cut) is
found by the first statement, as it is by ``SELECT 1``: that statement's error answers 503
(``kheish.api.errors``), and Django drops the connection at the end of the request."""

from __future__ import annotations

import select
from typing import Any

from django.db.backends.postgresql import base, operations
from psycopg import Connection, pq


class DatabaseOperations(operations.DatabaseOperations):
    def last_executed_query(self, cursor: Any, sql: Any, params: Any) -> str:
        found: str | None = super().last_executed_query(cursor, sql, params)
        if found is not None or sql is None:
            return found  # type: ignore[return-value]  # Django's own answer, None included
        try:
            return self.compose_sql(str(sql), params)
        except Exception:  # noqa: BLE001 - a log line: the text as written is still worth showing
            return str(sql)


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations

    def is_usable(self) -> bool:
        if self.connection is not None and not self.errors_occurred and quiet_and_idle(self.connection):
            return True
        return super().is_usable()


def quiet_and_idle(connection: Connection[Any]) -> bool:
    """Whether a psycopg connection is open, outside any transaction, and has nothing waiting on its socket."""
    try:
        if connection.closed or connection.broken:
            return False
        pgconn = connection.pgconn
        if pgconn.transaction_status != pq.TransactionStatus.IDLE:
            return False
        poller = select.poll()
        poller.register(pgconn.socket, select.POLLIN | select.POLLERR | select.POLLHUP)
        return not poller.poll(0)
    except Exception:  # noqa: BLE001 - any doubt (a closed handle, an unsupported platform): ask the server
        return False
