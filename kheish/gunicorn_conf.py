"""gunicorn settings for the web process (the Procfile's ``web`` line: ``gunicorn -c kheish/gunicorn_conf.py``).

Everything here can be overridden on the command line or with ``GUNICORN_CMD_ARGS``; the environment names
below are this project's.

* ``keepalive`` 75 s (``KHEISH_WEB_KEEPALIVE``): longer than the idle timeout of common client pools and load
  balancers (60 s), so the client always closes an idle connection first. gunicorn's default (2 s) closes it
  while a client that waited ~2 s is already sending its next request on it, and that request fails.
  gthread workers park idle keep-alive connections in their poller, so they hold no thread.
* ``control_socket``: gunicorn >= 25.1 opens ``~/.gunicorn/gunicorn.ctl`` by default, one path for every
  instance on the host. Off unless ``KHEISH_WEB_CONTROL_SOCKET`` names a per-instance path (for
  ``gunicornc``).
* ``graceful_timeout`` 30 s: on SIGTERM/SIGINT workers finish in-flight requests before they are killed.
* ``limit_request_line`` 8190 bytes (``KHEISH_WEB_LIMIT_REQUEST_LINE``), gunicorn's largest bounded value (its
  default, 4094, answered an HTML 414 before the API saw a long ``query``). The API's search texts are at most
  600 characters (``kheish.api.pagination.MAX_QUERY_CHARS``), which fit it even percent-encoded 12 bytes each.
"""

from __future__ import annotations

import os

bind = [f"127.0.0.1:{os.environ.get('PORT') or '8000'}"]
workers = int(os.environ.get("KHEISH_WEB_WORKERS") or 2)
threads = int(os.environ.get("KHEISH_WEB_THREADS") or 4)
worker_class = "gthread"
timeout = 60
graceful_timeout = 30
keepalive = int(os.environ.get("KHEISH_WEB_KEEPALIVE") or 75)
accesslog = "-"
limit_request_line = int(os.environ.get("KHEISH_WEB_LIMIT_REQUEST_LINE") or 8190)

_control_socket = os.environ.get("KHEISH_WEB_CONTROL_SOCKET") or ""
if _control_socket:
    control_socket = _control_socket
else:
    control_socket_disable = True
