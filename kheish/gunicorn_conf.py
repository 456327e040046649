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
* ``/metrics`` sums every worker (prometheus-client's multiprocess mode): ``PROMETHEUS_MULTIPROC_DIR`` is set
  here, before any worker imports prometheus-client (default ``var/prometheus/web-<port>``: one per gunicorn
  instance), emptied when the master starts (``on_starting``: counts start from zero with the server, as
  Prometheus expects after a restart), and a dead worker's live gauges are dropped (``child_exit``); its
  counters and histograms stay in the sums, so they never go backwards while the server runs.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from kheish import service_config

# Loopback by default; a node behind a load balancer listens where the balancer reaches it
# (KHEISH_WEB_BIND=0.0.0.0:8000, comma-separated for several addresses).
bind = [address.strip() for address in (os.environ.get("KHEISH_WEB_BIND") or "").split(",") if address.strip()] or [
    f"127.0.0.1:{os.environ.get('PORT') or '8000'}"
]
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


def _metrics_dir() -> Path:
    return Path(
        os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        or service_config.VAR_DIR / "prometheus" / f"web-{os.environ.get('PORT') or '8000'}"
    )


def on_starting(server) -> None:
    """The master, before any worker is forked (they inherit the variable and import prometheus-client after):
    no file of a previous server may leak into the sums. Set here, not when this file is read, so that
    loading the configuration elsewhere (a test) leaves that process alone."""
    path = _metrics_dir()
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(path)


def child_exit(server, worker) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)
