"""The embedded default broker (``database://``, kheish.broker) with a real worker: drain rate, loss under
concurrent producers, and how soon claimed work comes back after ``kill -9`` of the worker (issue 22.1).

A ``celery -A kheish worker`` subprocess (``--concurrency 2``, the Procfile's) on the benchmark's throw-away
database runs tasks that append their id to a file, so every figure is checked against what was sent:

* ``broker.database_enqueue`` / ``broker.database_drain``: a backlog published from one connection, then
  drained; tasks/s from the first task done to the last;
* ``broker.database_concurrent_*``: 8 producer threads (8 connections) publish while the worker consumes;
  throughput from the first send to the last task done, and the tasks lost or run twice (both must be 0);
* ``broker.database_recovery``: the worker is killed with SIGKILL while it holds two claimed tasks; a new
  worker starts at once; seconds from the kill until both are running again (the lease, 30 s by default, and
  one claim cycle).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from celery import Celery, shared_task
from django.db import connection
from kombu import Connection

from benchmarks.harness import Results

RECORD = "benchmarks.broker.record"
HOLD = "benchmarks.broker.hold"
DEFAULT_LEASE_S = 30.0


@shared_task(name=RECORD, acks_late=True)
def record(path: str, ident: str) -> None:
    with open(path, "a") as out:
        out.write(ident + "\n")


@shared_task(name=HOLD, acks_late=True)
def hold(path: str, ident: str, seconds: float) -> None:
    with open(path, "a") as out:
        out.write(f"start {ident}\n")
    time.sleep(seconds)


def _database_url() -> str:
    """DATABASE_URL with the benchmark's throw-away database as its name (the worker's start-up repair must
    not touch the real one)."""
    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path="/" + connection.settings_dict["NAME"]))


def _connection() -> Connection:
    # An explicit connection: Celery's broker_url gives way to a CELERY_BROKER_URL in the environment
    # (the benchmark process's memory://).
    return Connection("database://", transport_options={"lease_seconds": DEFAULT_LEASE_S})


def _purge() -> None:
    from kheish import broker

    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {broker.TABLE}")  # a constant


class _Worker:
    def __init__(self, var_dir: Path):
        self.env = dict(
            os.environ,
            KHEISH_VAR_DIR=str(var_dir),
            CELERY_BROKER_URL="database://",
            DATABASE_URL=_database_url(),
            LOG_LEVEL="WARNING",
        )
        self.env.pop("KHEISH_BROKER_LEASE_S", None)
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        debug = bool(os.environ.get("BENCH_DEBUG"))  # the worker's log on stderr
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "kheish",
                "worker",
                "-l",
                "info" if debug else "warning",
                "--concurrency",
                "2",
                "-I",
                "benchmarks.broker",
            ],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=None if debug else subprocess.DEVNULL,
            start_new_session=True,
        )

    def kill(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line]


def _wait_for(path: Path, count: int, worker: _Worker, timeout_s: float) -> float:
    """Time at which ``path`` held ``count`` distinct lines; raises when the worker died or time ran out."""
    deadline = time.monotonic() + timeout_s
    while True:
        if len(set(_lines(path))) >= count:
            return time.perf_counter()
        if worker.proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"worker ran {len(set(_lines(path)))}/{count} tasks (exit {worker.proc.returncode})")
        time.sleep(0.01)


def drain(backlog: int, *, timeout_s: float = 300) -> tuple[float, float]:
    """(enqueue tasks/s, drain tasks/s) for a backlog of ``backlog`` tasks."""
    _purge()
    with tempfile.TemporaryDirectory(prefix="kheish-broker-") as tmp:
        done = Path(tmp) / "done"
        done.touch()
        producer = Celery("bench-producer")
        started = time.perf_counter()
        with _connection() as conn:
            for n in range(backlog):
                producer.send_task(RECORD, args=[str(done), f"t{n}"], connection=conn)
        enqueue_rate = backlog / (time.perf_counter() - started)
        worker = _Worker(Path(tmp) / "var")
        worker.start()
        try:
            deadline = time.monotonic() + timeout_s
            while not _lines(done):
                if worker.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the worker never ran a task")
                time.sleep(0.01)
            first = time.perf_counter()
            last = _wait_for(done, backlog, worker, timeout_s)
        finally:
            worker.stop()
    return enqueue_rate, (backlog - 1) / max(last - first, 1e-9)


def concurrent(producers: int, per_producer: int, *, timeout_s: float = 300) -> tuple[float, int, int]:
    """(tasks/s from the first send to the last task done, lost, duplicated) with ``producers`` threads
    publishing while the worker consumes."""
    _purge()
    total = producers * per_producer
    with tempfile.TemporaryDirectory(prefix="kheish-broker-") as tmp:
        done = Path(tmp) / "done"
        done.touch()
        worker = _Worker(Path(tmp) / "var")
        worker.start()
        try:
            with _connection() as conn:  # the worker is up once it has run one task
                Celery("bench-producer").send_task(RECORD, args=[str(done), "warm-up"], connection=conn)
            _wait_for(done, 1, worker, timeout_s)
            errors: list[BaseException] = []

            def produce(index: int) -> None:
                try:
                    app = Celery("bench-producer")
                    with _connection() as conn:
                        for n in range(per_producer):
                            app.send_task(RECORD, args=[str(done), f"p{index}-{n}"], connection=conn)
                except BaseException as exc:  # noqa: BLE001 - reported below
                    errors.append(exc)

            threads = [threading.Thread(target=produce, args=(i,)) for i in range(producers)]
            started = time.perf_counter()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout_s)
            if errors:
                raise RuntimeError(f"producers failed: {errors[:3]}")
            try:
                last = _wait_for(done, total + 1, worker, timeout_s)
            except RuntimeError:
                last = time.perf_counter()
            time.sleep(1.0)  # anything run twice shows up now
        finally:
            worker.stop()
        counts = Counter(line for line in _lines(done) if line != "warm-up")
    lost = total - len(counts)
    duplicated = sum(n - 1 for n in counts.values())
    return total / (last - started), lost, duplicated


def recovery(*, timeout_s: float = 300) -> float:
    """Seconds from kill -9 of a worker holding two claimed tasks until both run again on a new worker."""
    _purge()
    with tempfile.TemporaryDirectory(prefix="kheish-broker-") as tmp:
        log = Path(tmp) / "log"
        log.touch()
        first = _Worker(Path(tmp) / "var")
        first.start()
        second = _Worker(Path(tmp) / "var")
        try:
            with _connection() as conn:
                app = Celery("bench-producer")
                for ident in ("a", "b"):
                    app.send_task(HOLD, args=[str(log), ident, 3600], connection=conn)
            _wait_for(log, 2, first, timeout_s)  # both running: claimed, unacknowledged
            first.kill()
            killed = time.perf_counter()
            second.start()
            deadline = time.monotonic() + timeout_s
            while len(_lines(log)) < 4:
                if second.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"claimed work did not come back: {_lines(log)}")
                time.sleep(0.05)
            return time.perf_counter() - killed
        finally:
            first.kill()
            second.kill()
            _purge()


def run(results: Results, *, scale: int = 1) -> None:
    backlog = max(400 // scale, 40)
    size = f"{backlog} queued tasks, worker --concurrency 2"
    enqueue_rate, drain_rate = drain(backlog)
    results.add("broker.database_enqueue", enqueue_rate, "tasks/s", size)
    results.add("broker.database_drain", drain_rate, "tasks/s", size)
    producers, per_producer = 8, max(100 // scale, 10)
    rate, lost, duplicated = concurrent(producers, per_producer)
    size = f"{producers} producer threads x {per_producer} tasks while the worker consumes"
    results.add("broker.database_concurrent_throughput", rate, "tasks/s", size)
    results.add("broker.database_concurrent_lost", lost, "tasks", size)
    results.add("broker.database_concurrent_duplicated", duplicated, "tasks", size)
    results.add(
        "broker.database_recovery",
        recovery(),
        "s",
        f"kill -9 of a worker holding 2 claimed tasks, lease {DEFAULT_LEASE_S:.0f} s (the default)",
    )
