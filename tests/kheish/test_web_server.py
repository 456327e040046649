"""Issue 14.14: the web server's production settings (kheish/gunicorn_conf.py, named by the Procfile).

gunicorn's default keep-alive (2 s) closes an idle connection just as a client that waited ~2 s sends its
next request on it, and that request fails; every instance on a host also shared ``~/.gunicorn/gunicorn.ctl``.
"""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gunicorn.app.base import Application

from kheish.service_config import REPO_DIR

CONF = REPO_DIR / "kheish" / "gunicorn_conf.py"
APP = "tests.kheish.wsgi_hello:app"


class _Loaded(Application):
    def __init__(self, path: Path) -> None:
        self.path = path
        super().__init__()

    def init(self, parser, opts, args):
        return None

    def load_config(self):
        self.load_config_from_file(str(self.path))

    def load(self):  # pragma: no cover - never served
        raise AssertionError


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_procfile_names_the_config_file():
    web = next(line for line in (REPO_DIR / "Procfile").read_text().splitlines() if line.startswith("web:"))
    assert "-c kheish/gunicorn_conf.py" in web and "--keep-alive" not in web


def test_the_config_loads_with_the_installed_gunicorn(monkeypatch):
    monkeypatch.setenv("PORT", "8765")
    monkeypatch.delenv("KHEISH_WEB_CONTROL_SOCKET", raising=False)
    cfg = _Loaded(CONF).cfg
    assert cfg.keepalive >= 65  # beyond the 60 s idle timeout of common client pools and load balancers
    assert cfg.graceful_timeout >= 10
    assert cfg.bind == ["127.0.0.1:8765"]
    assert cfg.worker_class_str == "gthread" and cfg.threads >= 2
    assert cfg.control_socket_disable is True  # no socket shared by every instance on the host
    monkeypatch.setenv("KHEISH_WEB_CONTROL_SOCKET", "/tmp/kheish-test.ctl")
    cfg = _Loaded(CONF).cfg
    assert cfg.control_socket_disable is False and cfg.control_socket == "/tmp/kheish-test.ctl"


@pytest.fixture
def web_server(tmp_path):
    port = _free_port()
    env = dict(os.environ, PORT=str(port), KHEISH_WEB_WORKERS="1")
    env.pop("KHEISH_WEB_CONTROL_SOCKET", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", str(CONF), APP],
        cwd=REPO_DIR,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"gunicorn did not listen: {proc.stderr.read()}") from None
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=40)


def test_requests_two_seconds_apart_reuse_one_connection(web_server):
    conn = http.client.HTTPConnection("127.0.0.1", web_server, timeout=10)
    try:
        conn.request("GET", "/")
        assert conn.getresponse().read() == b"hello"
        local = conn.sock.getsockname()
        for gap in (1.9, 2.0, 2.1, 1.95, 2.05):  # bounded: ~10 s, loopback only
            time.sleep(gap)
            conn.request("GET", "/")
            response = conn.getresponse()
            assert response.status == 200 and response.read() == b"hello"
            assert response.getheader("Connection", "").lower() != "close"
            assert conn.sock.getsockname() == local  # the same keep-alive connection, never a new one
    finally:
        conn.close()


def test_the_loaded_application_is_out_of_the_garbage_collectors_reach():
    """kheish.wsgi freezes what loading made (``gc.freeze``): a full collection no longer scans the ~140,000
    objects every worker holds from start (~65 ms a pause), only what requests made since."""
    env = dict(os.environ, SECRET_KEY="gc-test", DJANGO_SETTINGS_MODULE="kheish.settings", LOG_LEVEL="WARNING")
    probe = (
        "import gc, time; import kheish.wsgi; frozen = gc.get_freeze_count(); "
        "t = time.perf_counter(); gc.collect(); print(frozen, (time.perf_counter() - t) * 1000)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    frozen, full_collection_ms = out.stdout.split()
    assert int(frozen) > 50_000
    assert float(full_collection_ms) < 20
