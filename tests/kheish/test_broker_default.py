"""The shipped default broker (whatever ``kheish.settings`` configures when ``CELERY_BROKER_URL`` is unset) gives
back a message whose consumer was killed holding it, unacknowledged (issue 22.1). Real processes: a producer, a
consumer killed with SIGKILL, a second consumer. On 9c22193 the default (``filesystem://``) removed the message
file when it delivered it, so the second consumer never got it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid

import pytest

from tests.kheish.test_operability import _database_url

pytestmark = pytest.mark.django_db(transaction=True)

LEASE_S = 3.0
SCRIPT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import django
    django.setup()
    from django.conf import settings
    from kombu import Connection, Consumer, Exchange, Producer, Queue
    name, mode = sys.argv[1], sys.argv[2]
    options = dict(getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", None) or {})
    for key, value in options.items():  # a folder-based transport needs its folders
        if "folder" in key and isinstance(value, str):
            Path(value).mkdir(parents=True, exist_ok=True)
    queue = Queue(name, Exchange(name, type="direct"), routing_key=name)
    with Connection(settings.CELERY_BROKER_URL, transport_options=options) as conn:
        if mode == "publish":
            Producer(conn.channel(), exchange=queue.exchange, routing_key=name).publish(
                {"id": "only"}, serializer="json", declare=[queue])
            sys.exit(0)
        def on_message(body, message):
            if mode == "ack":
                message.ack()
            print("got", body["id"], flush=True)
        with Consumer(conn.channel(), queues=[queue], callbacks=[on_message], prefetch_count=1):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    conn.drain_events(timeout=0.2)
                except Exception:
                    pass
""")


def _run(var: str, name: str, mode: str) -> subprocess.Popen:
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="kheish.settings",
        DATABASE_URL=_database_url(),
        SECRET_KEY="broker-default-test",
        LOG_LEVEL="WARNING",
        KHEISH_VAR_DIR=var,
        KHEISH_BROKER_LEASE_S=str(LEASE_S),
    )
    env.pop("CELERY_BROKER_URL", None)  # the shipped default
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT, name, mode], env=env, stdout=subprocess.PIPE, text=True, start_new_session=True
    )


def _first_line(proc: subprocess.Popen, timeout: float) -> str:
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return lines[0].strip() if lines else ""


def _kill(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


@pytest.mark.slow  # starts a process
def test_the_default_broker_gives_back_what_a_killed_consumer_held():
    name = f"t-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="kheish-broker-default-") as var:
        publisher = _run(var, name, "publish")
        assert publisher.wait(60) == 0
        holder = _run(var, name, "hold")
        try:
            assert _first_line(holder, 30) == "got only"
        finally:
            _kill(holder)  # kill -9 while it holds the message, unacknowledged
        second = _run(var, name, "ack")
        try:
            started = time.monotonic()
            line = _first_line(second, LEASE_S + 15)
            took = time.monotonic() - started
        finally:
            _kill(second)
    assert line == "got only", "the message the killed consumer held was lost"
    assert took <= LEASE_S + 15
