"""The broker-less default (kombu ``filesystem://``): how fast a real worker drains a backlog.

A ``celery -A kheish worker`` subprocess (``--concurrency 2``, the Procfile's) with the settings' broker
options, on a throw-away broker folder and the benchmark's throw-away database, drains a backlog of no-op
tasks (each appends a line to a file); tasks/s = backlog / time from the worker being ready to the last line.
Measured once with the shipped polling interval and once with kombu's default (1 s, what ran before).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from celery import Celery, shared_task
from django.db import connection
from kombu import Connection

from benchmarks.harness import Results

NOOP = "benchmarks.broker.noop"


@shared_task(name=NOOP, acks_late=True)
def noop(path: str) -> None:
    with open(path, "a") as out:
        out.write("x\n")


def _database_url() -> str:
    """DATABASE_URL with the benchmark's throw-away database as its name (the worker's start-up repair must
    not touch the real one)."""
    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path="/" + connection.settings_dict["NAME"]))


def _folders(root: Path) -> dict[str, str]:
    queue, processed, control = root / "queue", root / "processed", root / "control"
    for folder in (queue, processed, control):
        folder.mkdir(parents=True, exist_ok=True)
    return {"data_folder_in": str(queue), "data_folder_out": str(queue), "processed_folder": str(processed),
            "control_folder": str(control), "store_processed": False}


def drain(backlog: int, *, poll_s: str | None, timeout_s: float = 120) -> tuple[float, float]:
    """(enqueue tasks/s, drain tasks/s) for ``backlog`` no-op tasks."""
    with tempfile.TemporaryDirectory(prefix="kheish-broker-") as tmp:
        root = Path(tmp)
        var_dir = root / "var"
        options = _folders(var_dir / "celery")
        done = root / "done"
        done.touch()
        producer = Celery("bench-producer")
        started = time.perf_counter()
        # An explicit connection: Celery's broker_url gives way to a CELERY_BROKER_URL in the environment
        # (the benchmark process's memory://).
        with Connection("filesystem://", transport_options=options) as conn:
            for _ in range(backlog):
                producer.send_task(NOOP, args=[str(done)], connection=conn)
        enqueue_rate = backlog / (time.perf_counter() - started)
        env = dict(os.environ, KHEISH_VAR_DIR=str(var_dir), CELERY_BROKER_URL="filesystem://",
                   DATABASE_URL=_database_url(), LOG_LEVEL="WARNING")
        if poll_s is None:
            env.pop("KHEISH_BROKER_POLL_S", None)
        else:
            env["KHEISH_BROKER_POLL_S"] = poll_s
        debug = bool(os.environ.get("BENCH_DEBUG"))  # the worker's log on stderr
        worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "kheish", "worker",
                                   "-l", "info" if debug else "warning", "--concurrency", "2",
                                   "-I", "benchmarks.broker", "--without-heartbeat", "--without-mingle",
                                   "--without-gossip"],
                                  env=env, stdout=subprocess.DEVNULL, stderr=None if debug else subprocess.DEVNULL)
        try:
            first = None
            deadline = time.monotonic() + timeout_s
            while True:
                count = done.read_text().count("\n")
                if count and first is None:
                    first = time.perf_counter()
                if count >= backlog:
                    break
                if worker.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"worker drained {count}/{backlog} tasks (exit {worker.returncode})")
                time.sleep(0.01)
            # From the first task done (the worker is up) to the last: backlog - 1 tasks in that time.
            drain_rate = (backlog - 1) / max(time.perf_counter() - first, 1e-9)
        finally:
            worker.terminate()
            worker.wait(timeout=60)
    return enqueue_rate, drain_rate


def run(results: Results, *, scale: int = 1) -> None:
    backlog = max(400 // scale, 40)
    size = f"{backlog} queued no-op tasks, worker --concurrency 2"
    enqueue_rate, drain_rate = drain(backlog, poll_s=None)
    results.add("broker.filesystem_enqueue", enqueue_rate, "tasks/s", size)
    results.add("broker.filesystem_drain", drain_rate, "tasks/s", size)
    slow = max(backlog // 10, 20)
    _, before = drain(slow, poll_s="1.0")
    results.add("broker.filesystem_drain_poll_1s", before, "tasks/s", f"{slow} tasks, kombu's default polling")
