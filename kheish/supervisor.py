"""The process supervisor behind ``make run``: the Procfile's processes, kept running until Ctrl-C.

Standard library only (``subprocess`` and a monitor loop). honcho stopped every process when one died and
restarted none; supervisord and circus are daemons with their own configuration, more than three children of
one command need. The Procfile stays the declaration of the processes.

* Each process runs as ``/bin/sh -c 'exec COMMAND'`` (so ``${PORT:-8000}`` expands and the pid is the
  process's own) in a session of its own: a Ctrl-C in the terminal reaches the supervisor only, which stops
  the children in order. Output lines are prefixed with the process name.
* A process that exits while the service runs is restarted after a backoff (1 s, doubled per quick crash,
  at most 30 s; back to 1 s after it ran 60 s), and each exit and restart is logged. What it left in its
  process group (a crashed Celery worker's pool processes) is killed first. The other processes go on: a
  crashed worker never takes the web server down.
* A *watched service* (``Watched``: the embedded PostgreSQL, which ``pg_ctl`` daemonises, so it is no child of
  ours) is checked once a second and restarted with the same backoff when it is gone; the processes keep
  running and reconnect (Django's ``CONN_HEALTH_CHECKS``) once it is back.
* Ctrl-C / SIGTERM / SIGHUP: SIGTERM to every process (gunicorn's graceful shutdown, Celery's warm shutdown:
  in-flight tasks finish), then up to ``KHEISH_STOP_TIMEOUT`` seconds (default 60) before SIGKILL. A second
  Ctrl-C kills at once.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0
STABLE_AFTER_S = 60.0
POLL_S = 0.2

_LINE = re.compile(r"^([A-Za-z0-9_-]+):\s*(.+)$")


def parse_procfile(path: Path) -> list[tuple[str, str]]:
    """``name: command`` lines, in order; blank lines and ``#`` comments skipped."""
    entries: list[tuple[str, str]] = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if not match:
            raise ValueError(f"{path}:{number}: expected 'name: command', got {raw!r}")
        if any(name == match.group(1) for name, _ in entries):
            raise ValueError(f"{path}:{number}: process {match.group(1)!r} declared twice")
        entries.append((match.group(1), match.group(2)))
    if not entries:
        raise ValueError(f"{path}: no processes declared")
    return entries


@dataclass
class _Process:
    name: str
    command: str
    popen: subprocess.Popen | None = None
    started_at: float = 0.0
    restarts: int = 0
    quick_crashes: int = 0
    restart_at: float | None = None
    pumps: list[threading.Thread] = field(default_factory=list)


class Watched:
    """A service the supervisor keeps alive without owning its process: ``alive()`` is polled once a second;
    when it is False, ``restart()`` is called (it raises when the service could not be started: retried with
    the supervisor's backoff). Subclasses set ``name`` and may describe the process in ``describe()``."""

    name = "service"

    def alive(self) -> bool:  # pragma: no cover - interface
        raise NotImplementedError

    def restart(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def describe(self) -> str:
        return ""


@dataclass
class _WatchState:
    service: Watched
    down_since: float | None = None
    attempts: int = 0
    next_try: float = 0.0
    last_check: float = 0.0
    restarts: int = 0


WATCH_EVERY_S = 1.0


class Supervisor:
    def __init__(
        self,
        entries: Sequence[tuple[str, str]],
        *,
        cwd: Path,
        env: dict[str, str] | None = None,
        log: Callable[[str], None],
        stop_timeout: float = 60.0,
        out=None,
        watched: Sequence[Watched] = (),
    ) -> None:
        self.processes = [_Process(name, command) for name, command in entries]
        self.watched = [_WatchState(service) for service in watched]
        self.cwd = cwd
        self.env = env
        self.log = log
        self.stop_timeout = stop_timeout
        self.out = out or sys.stdout
        self.width = max(len(p.name) for p in self.processes)
        self._stop = threading.Event()
        self._kill_now = False
        self._write = threading.Lock()

    # ---- signals ----------------------------------------------------------------------------------------
    def _on_signal(self, signum, frame) -> None:
        if self._stop.is_set():
            self._kill_now = True
        self._stop.set()

    def request_stop(self) -> None:
        self._stop.set()

    # ---- children ---------------------------------------------------------------------------------------
    def _pump(self, name: str, stream) -> None:
        prefix = f"{time.strftime('%H:%M:%S')} {name.ljust(self.width)} | "
        for line in stream:
            prefix = f"{time.strftime('%H:%M:%S')} {name.ljust(self.width)} | "
            with self._write:
                self.out.write(prefix + line if line.endswith("\n") else prefix + line + "\n")
                self.out.flush()
        stream.close()

    def _start(self, proc: _Process) -> None:
        proc.popen = subprocess.Popen(
            ["/bin/sh", "-c", f"exec {proc.command}"],
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
            start_new_session=True,
        )
        proc.started_at = time.monotonic()
        proc.restart_at = None
        pump = threading.Thread(
            target=self._pump, args=(proc.name, proc.popen.stdout), daemon=True, name=f"out-{proc.name}"
        )
        pump.start()
        proc.pumps.append(pump)
        self.log(f"{proc.name} started (pid {proc.popen.pid}): {proc.command}")

    @staticmethod
    def _kill_group(pid: int) -> None:
        """Whatever is left in a process's session (its group: pid == pgid) after it exited."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)

    @staticmethod
    def _describe(returncode: int) -> str:
        if returncode < 0:
            with contextlib.suppress(ValueError):
                return f"signal {signal.Signals(-returncode).name}"
            return f"signal {-returncode}"
        return f"exit code {returncode}"

    def _check(self, proc: _Process, now: float) -> None:
        if proc.popen is None:
            if proc.restart_at is not None and now >= proc.restart_at:
                proc.restarts += 1
                self.log(f"restarting {proc.name} (restart #{proc.restarts})")
                self._start(proc)
            return
        returncode = proc.popen.poll()
        if returncode is None:
            return
        ran = now - proc.started_at
        self._kill_group(proc.popen.pid)
        proc.popen = None
        proc.quick_crashes = 0 if ran >= STABLE_AFTER_S else proc.quick_crashes + 1
        delay = min(BACKOFF_FIRST_S * 2 ** max(proc.quick_crashes - 1, 0), BACKOFF_MAX_S)
        proc.restart_at = now + delay
        self.log(
            f"{proc.name} exited ({self._describe(returncode)}) after {ran:.1f}s; "
            f"restarting in {delay:.0f}s, the other processes keep running"
        )

    def _check_watched(self, state: _WatchState, now: float) -> None:
        if now - state.last_check < WATCH_EVERY_S or now < state.next_try:
            return
        state.last_check = now
        service = state.service
        if state.down_since is None:
            if service.alive():
                return
            state.down_since = now
            self.log(
                f"{service.name} is gone{f' ({service.describe()})' if service.describe() else ''}; "
                "restarting it, the processes keep running and reconnect once it is back"
            )
        state.attempts += 1
        try:
            service.restart()
        except Exception as exc:  # noqa: BLE001 - any failure: try again after the backoff
            delay = min(BACKOFF_FIRST_S * 2 ** (state.attempts - 1), BACKOFF_MAX_S)
            state.next_try = now + delay
            self.log(
                f"{service.name} did not start (attempt {state.attempts}: {type(exc).__name__}: "
                f"{(str(exc).strip().splitlines() or [''])[-1][:200]}); next try in {delay:.0f}s"
            )
            return
        state.restarts += 1
        self.log(
            f"{service.name} restarted after {time.monotonic() - state.down_since:.1f}s "
            f"(restart #{state.restarts}{f', {service.describe()}' if service.describe() else ''})"
        )
        state.down_since = None
        state.attempts = 0

    # ---- the loop ---------------------------------------------------------------------------------------
    def run(self) -> int:
        """Start every process, restart those that exit, stop all on a signal. Returns 0 after a requested
        stop."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            for proc in self.processes:
                if not self._stop.is_set():
                    self._start(proc)
            while not self._stop.wait(POLL_S):
                now = time.monotonic()
                for proc in self.processes:
                    self._check(proc, now)
                for state in self.watched:
                    self._check_watched(state, now)
        finally:
            self._shutdown()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return 0

    def _shutdown(self) -> None:
        running = [(p.name, child) for p in self.processes if (child := p.popen) is not None and child.poll() is None]
        self.log(
            f"stopping {', '.join(name for name, _ in running) or 'nothing'} (SIGTERM; up to "
            f"{self.stop_timeout:.0f}s for in-flight work, Ctrl-C again to kill)"
        )
        for _, child in running:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        while any(child.poll() is None for _, child in running):
            if self._kill_now or time.monotonic() > deadline:
                late = [(name, child) for name, child in running if child.poll() is None]
                self.log(f"killing {', '.join(name for name, _ in late)} (SIGKILL)")
                for _, child in late:
                    self._kill_group(child.pid)
                break
            time.sleep(POLL_S)
        for proc in self.processes:
            if proc.popen is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.popen.wait(timeout=5)
                self._kill_group(proc.popen.pid)
                code = proc.popen.returncode
                self.log(f"{proc.name} stopped ({self._describe(code) if code is not None else 'still running'})")
            for pump in proc.pumps:
                pump.join(timeout=2)
