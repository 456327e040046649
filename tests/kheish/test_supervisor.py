"""Issue 14.11: ``make run`` supervises its children. A crashed worker (kill -9) is restarted within seconds
while the web server keeps answering; Ctrl-C still stops everything, the embedded PostgreSQL last."""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

from kheish import supervisor
from kheish.service_config import REPO_DIR
from tests.support.shell import Output, free_port, shell_env, start_launcher


def _pids(output: Output, name: str) -> list[int]:
    return [
        int(m.group(1))
        for line in list(output.lines)
        if (m := re.search(rf"\[kheish\] {name} started \(pid (\d+)\)", line))
    ]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is dead too
        return stat.read().split(") ", 1)[1][0] != "Z"


def test_the_procfile_parses_in_order():
    names = [name for name, _ in supervisor.parse_procfile(REPO_DIR / "Procfile")]
    assert names == ["web", "worker", "beat"]


def test_a_bad_procfile_line_is_refused(tmp_path):
    (tmp_path / "Procfile").write_text("# comment\n\nweb: true\nnot a line\n")
    with pytest.raises(ValueError, match="expected 'name: command'"):
        supervisor.parse_procfile(tmp_path / "Procfile")


@pytest.mark.slow  # starts processes
def test_a_crashing_process_is_restarted_with_backoff_and_the_others_keep_running(tmp_path):
    marker = tmp_path / "starts"
    lines: list[str] = []
    sup = supervisor.Supervisor(
        [("steady", "sleep 30"), ("crashy", f"sh -c 'echo x >> {marker}; exit 3'")],
        cwd=tmp_path,
        log=lines.append,
        stop_timeout=5,
        out=io.StringIO(),
    )
    stopper = threading.Timer(4.5, sup.request_stop)
    stopper.start()
    sup.run()
    stopper.cancel()
    starts = marker.read_text().count("x")
    assert 3 <= starts <= 4, lines  # t=0, +1 s, +2 s, +4 s: doubling backoff
    assert sum("steady started" in line for line in lines) == 1
    assert any("crashy exited (exit code 3)" in line and "restarting in 2s" in line for line in lines), lines
    assert any("steady stopped" in line for line in lines)


@pytest.mark.integration
def test_kill_9_of_the_worker_restarts_it_and_the_api_keeps_answering(tmp_path):
    var_dir = tmp_path / "var"
    port = free_port()
    proc, output = start_launcher(dict(shell_env(var_dir), PORT=str(port), LOG_LEVEL="WARNING"))
    base = f"http://127.0.0.1:{port}"
    children: list[int] = []
    try:
        output.wait_for("Kheish Memory is up.", timeout=180)
        output.wait_for("celery@", timeout=60)  # the worker is up
        web, worker, beat = (_pids(output, name) for name in ("web", "worker", "beat"))
        assert len(web) == len(worker) == len(beat) == 1
        children = [web[0], worker[0], beat[0]]
        assert requests.get(f"{base}/admin/login/", timeout=10).status_code == 200

        os.kill(worker[0], signal.SIGKILL)
        deadline = time.monotonic() + 15
        answered = 0
        while len(_pids(output, "worker")) < 2:
            assert time.monotonic() < deadline, "\n".join(output.lines[-40:])
            assert requests.get(f"{base}/admin/login/", timeout=10).status_code == 200
            answered += 1
            time.sleep(0.3)
        new_worker = _pids(output, "worker")[1]
        children.append(new_worker)
        assert new_worker != worker[0] and _alive(new_worker) and not _alive(worker[0])
        assert _pids(output, "web") == web and _alive(web[0]) and _alive(beat[0])
        assert answered >= 1
        assert requests.get(f"{base}/admin/login/", timeout=10).status_code == 200
        assert any("worker exited (signal SIGKILL)" in line for line in output.lines)
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        try:
            returncode = proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    assert returncode == 0, "\n".join(output.lines[-40:])
    assert not any(_alive(pid) for pid in children)
    stopped = [
        i
        for i, line in enumerate(output.lines)
        if "embedded PostgreSQL stopped" in line or "embedded PostgreSQL left running" in line
    ]
    last_child = max(i for i, line in enumerate(output.lines) if re.search(r"\[kheish\] \w+ stopped \(", line))
    assert stopped and stopped[-1] > last_child
    assert not Path(var_dir / "pgdata" / "postmaster.pid").exists() or "left running" in output.lines[stopped[-1]]


@pytest.mark.slow  # starts processes
def test_stop_lets_a_process_finish_its_in_flight_work(tmp_path):
    """SIGTERM, then as long as KHEISH_STOP_TIMEOUT for in-flight work (honcho killed after 5 s)."""
    finished = tmp_path / "finished"
    slow = f"sh -c 'trap \"sleep 6; echo done > {finished}; exit 0\" TERM; while true; do sleep 0.1; done'"
    lines: list[str] = []
    sup = supervisor.Supervisor([("worker", slow)], cwd=tmp_path, log=lines.append, stop_timeout=30, out=io.StringIO())
    threading.Timer(1.0, sup.request_stop).start()
    started = time.monotonic()
    sup.run()
    assert finished.read_text() == "done\n", lines
    assert 6 <= time.monotonic() - started < 30
    assert any("worker stopped (exit code 0)" in line for line in lines), lines
    assert not any("SIGKILL" in line for line in lines)


class _FlakyService(supervisor.Watched):
    """Dies once; its first two restarts fail (as PostgreSQL's do while the killed server's backends linger)."""

    name = "flaky"

    def __init__(self) -> None:
        self.up = True
        self.attempts = 0

    def alive(self) -> bool:
        return self.up

    def restart(self) -> None:
        self.attempts += 1
        if self.attempts <= 2:
            raise RuntimeError("old processes still run")
        self.up = True


@pytest.mark.slow  # starts processes
def test_a_watched_service_that_dies_is_restarted_with_backoff(tmp_path, monkeypatch):
    monkeypatch.setattr(supervisor, "WATCH_EVERY_S", 0.2)
    service = _FlakyService()
    lines: list[str] = []
    sup = supervisor.Supervisor(
        [("steady", "sleep 30")], cwd=tmp_path, log=lines.append, stop_timeout=5, out=io.StringIO(), watched=[service]
    )
    threading.Timer(0.5, lambda: setattr(service, "up", False)).start()
    stopper = threading.Timer(6, sup.request_stop)
    stopper.start()
    sup.run()
    stopper.cancel()
    assert service.up and service.attempts == 3, lines  # t≈0.6 fails, +1 s fails, +2 s succeeds
    assert any("flaky is gone" in line for line in lines), lines
    assert sum("flaky did not start" in line for line in lines) == 2, lines
    assert any("next try in 2s" in line for line in lines), lines
    assert any("flaky restarted after" in line for line in lines), lines
    assert sum("steady started" in line for line in lines) == 1  # the processes were left alone


def test_roles_select_the_procfile_processes(monkeypatch):
    from kheish import launcher

    assert launcher.selected_roles("") == ["web", "worker", "beat"]
    assert launcher.selected_roles("all") == ["web", "worker", "beat"]
    assert launcher.selected_roles("beat, web") == ["web", "beat"]
    assert launcher.selected_roles("WORKER") == ["worker"]
    with pytest.raises(SystemExit, match="unknown: scheduler"):
        launcher.selected_roles("web,scheduler")
    monkeypatch.setenv("KHEISH_ROLE", "worker,beat")
    assert launcher.selected_roles() == ["worker", "beat"]
