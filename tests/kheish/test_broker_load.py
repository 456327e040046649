"""Load with a killed worker (issue 22.1, "Done when"): 16 concurrent clients complete runs through a real
gunicorn while the real Celery worker is killed with SIGKILL twice and restarted (as ``make run``'s supervisor
does); every completed run's capture (its run_summary candidate) then happens, within a bounded time.

The default broker (``database://``) and the default leases; no beat, so the capture replay cannot mask a lost
message: what a killed worker held must come back through the broker's lease. On 9c22193 (``filesystem://``)
a message the killed worker had taken was gone until the 10-minute claim lapsed and a replay ran."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import requests

from tests.kheish.test_operability import _database_url, _free_port

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]  # slow: starts worker processes

BROKER_TABLE = "kheish_broker_message"  # kheish.broker.TABLE (not imported: the test also runs on 9c22193)
CLIENTS = 16
RUNS_PER_CLIENT = 6
CAPTURE_BOUND_S = 120  # after the last completion: broker lease (30 s) + a backlog drained on a loaded machine


def _env(var: Path) -> dict[str, str]:
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="kheish.settings",
        DATABASE_URL=_database_url(),
        SECRET_KEY="load-test",
        ALLOWED_HOSTS="127.0.0.1",
        LOG_LEVEL="WARNING",
        LOG_JSON="0",
        KHEISH_VAR_DIR=str(var),
        KHEISH_THROTTLE_AGENT="off",
    )
    for name in ("CELERY_BROKER_URL", "KHEISH_BROKER_LEASE_S", "KHEISH_QUEUE_LEASE_S", "KHEISH_BROKER_POLL_S"):
        env.pop(name, None)  # the shipped defaults
    return env


def _start_worker(env: dict, log: Path) -> subprocess.Popen:
    with log.open("a") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "kheish", "worker", "-l", "warning", "--concurrency", "2"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _kill_worker(worker: subprocess.Popen) -> None:
    os.kill(worker.pid, signal.SIGKILL)  # kill -9 of the worker process
    worker.wait(10)
    with contextlib.suppress(ProcessLookupError):  # what it left (its pool processes), as the supervisor does
        os.killpg(worker.pid, signal.SIGKILL)


def _start_web(env: dict, port: int) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "kheish.wsgi:application",
            "-c",
            "kheish/gunicorn_conf.py",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "2",
            "--access-logfile",
            "/dev/null",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _wait_for_web(port: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2).ok:
                return
        except requests.RequestException:
            time.sleep(0.3)


def _captured(run_ids: list[str]) -> set[str]:
    from learnings.models import LearningCandidate, LearningKind

    pks = {int(rid.rpartition("-")[2]): rid for rid in run_ids}
    return {
        pks[pk]
        for pk in LearningCandidate.objects.filter(kind=LearningKind.RUN_SUMMARY, source_run_id__in=pks).values_list(
            "source_run_id", flat=True
        )
    }


def _held_messages() -> int:
    """Work the worker holds now: the messages it has claimed (the database broker's leased rows); with a broker
    that keeps no such rows (9c22193's ``filesystem://``), the captures queued and not done yet."""
    from django.db import connection

    from memory.models import RunMemoryRecord

    if BROKER_TABLE in connection.introspection.table_names():
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT count(*) FROM {BROKER_TABLE} WHERE lease_until > clock_timestamp()")
            return cursor.fetchone()[0]
    return RunMemoryRecord.objects.filter(capture_queued_at_ms__isnull=False).count()


def test_sixteen_clients_and_a_killed_worker_lose_no_capture(make_key):
    from learnings.models import LearningCandidate, LearningKind

    key = make_key("load-agent").plaintext
    headers = {"Authorization": f"Bearer {key}"}
    with tempfile.TemporaryDirectory(prefix="kheish-load-") as tmp:
        var = Path(tmp)
        env = _env(var)
        port = _free_port()
        web = _start_web(env, port)
        worker_log = var / "worker.log"
        worker = _start_worker(env, worker_log)
        base = f"http://127.0.0.1:{port}/v1"
        completed: list[str] = []
        failures: list[str] = []
        lock = threading.Lock()
        try:
            _wait_for_web(port)

            def client(index: int) -> None:
                with requests.Session() as http:
                    http.headers.update(headers)
                    sid = http.post(f"{base}/sessions", json={}, timeout=60).json()["session_id"]
                    for n in range(RUNS_PER_CLIENT):
                        rid = http.post(
                            f"{base}/sessions/{sid}/runs",
                            json={"input": {"content": f"client {index} task {n}: tidy the logs"}},
                            timeout=60,
                        ).json()["run_id"]
                        http.post(f"{base}/runs/{rid}/start", json={}, timeout=60)
                        done = http.post(
                            f"{base}/runs/{rid}/complete",
                            json={"output": {"content": f"client {index} done {n}"}},
                            timeout=60,
                        )
                        with lock:
                            (completed if done.status_code == 200 else failures).append(
                                rid if done.status_code == 200 else f"{rid}: {done.status_code} {done.text[:200]}"
                            )

            threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
            for thread in threads:
                thread.start()
            total = CLIENTS * RUNS_PER_CLIENT
            kills, held_at_kill = 0, 0
            for fraction in (1 / 3, 2 / 3):
                while len(completed) + len(failures) < total * fraction and any(t.is_alive() for t in threads):
                    time.sleep(0.05)
                wait_until = time.monotonic() + 15  # kill it while it holds claimed, unacknowledged messages
                while not (held := _held_messages()) and time.monotonic() < wait_until:
                    time.sleep(0.01)
                _kill_worker(worker)
                kills += 1
                held_at_kill += held
                time.sleep(1.0)  # the supervisor's first restart backoff
                worker = _start_worker(env, worker_log)
            for thread in threads:
                thread.join(300)
            last_completed_at = time.monotonic()
            assert not failures, failures[:5]
            assert len(completed) == total and kills == 2
            assert held_at_kill >= 1  # the kills did take messages from a worker in the middle of them

            run_pks = {int(rid.rpartition("-")[2]): rid for rid in completed}

            def captured() -> set[str]:
                return {
                    run_pks[pk]
                    for pk in LearningCandidate.objects.filter(
                        kind=LearningKind.RUN_SUMMARY, source_run_id__in=run_pks
                    ).values_list("source_run_id", flat=True)
                }

            while len(captured()) < total and time.monotonic() - last_completed_at < CAPTURE_BOUND_S:
                time.sleep(1)
            missing = set(completed) - captured()
            took = time.monotonic() - last_completed_at
        finally:
            for proc in (web, worker):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        log = worker_log.read_text(errors="replace")
        assert not missing, (f"{len(missing)} of {total} completed runs never captured", log[-3000:])
        assert "Unrecoverable error" not in log, log[-3000:]
        print(
            f"{total} runs by {CLIENTS} clients, worker killed twice holding {held_at_kill} messages: "
            f"all captured {took:.1f}s after the last completion"
        )


def test_broker_connections_cut_by_the_database_are_reopened_and_nothing_is_lost(make_key):
    """The database drops every broker connection (as on a restart of the server): the web processes' producers
    and the worker's consumer reconnect by themselves, and every completed run is still captured."""
    from django.db import connection

    headers = {"Authorization": f"Bearer {make_key('reconnect-agent').plaintext}"}
    with tempfile.TemporaryDirectory(prefix="kheish-load-") as tmp:
        var = Path(tmp)
        env = _env(var)
        port = _free_port()
        web = _start_web(env, port)
        worker_log = var / "worker.log"
        worker = _start_worker(env, worker_log)
        base = f"http://127.0.0.1:{port}/v1"
        completed: list[str] = []
        try:
            _wait_for_web(port)
            with requests.Session() as http:
                http.headers.update(headers)
                sid = http.post(f"{base}/sessions", json={}, timeout=60).json()["session_id"]

                def complete_runs(count: int) -> None:
                    for n in range(count):
                        rid = http.post(
                            f"{base}/sessions/{sid}/runs", json={"input": {"content": f"task {n}"}}, timeout=60
                        ).json()["run_id"]
                        http.post(f"{base}/runs/{rid}/start", json={}, timeout=60)
                        done = http.post(f"{base}/runs/{rid}/complete", json={"output": {"content": "ok"}}, timeout=60)
                        assert done.status_code == 200, done.text
                        completed.append(rid)

                complete_runs(4)
                deadline = time.monotonic() + 60
                while len(_captured(completed)) < 4 and time.monotonic() < deadline:
                    time.sleep(0.5)
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE application_name = 'kheish-broker' AND pid <> pg_backend_pid()"
                    )
                    assert cursor.fetchone()[0] >= 2  # the web's producers and the worker's consumer
                complete_runs(4)
            deadline = time.monotonic() + CAPTURE_BOUND_S
            while len(_captured(completed)) < len(completed) and time.monotonic() < deadline:
                time.sleep(0.5)
            missing = set(completed) - _captured(completed)
            worker_alive = worker.poll() is None
        finally:
            for proc in (web, worker):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        log = worker_log.read_text(errors="replace")
        assert not missing, (missing, log[-3000:])
        assert worker_alive, log[-3000:]
