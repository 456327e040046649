"""Start the service the way ``make run`` does (``python -m kheish.launcher run``) as a process tree of its own,
with its own ``KHEISH_VAR_DIR`` and port, and talk to it over HTTP. Used by the supervision and two-node tests.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import requests

from kheish.service_config import REPO_DIR
from tests.support.shell import Output, free_port, shell_env, start_launcher


@dataclass
class Node:
    name: str
    var_dir: Path
    port: int
    env: dict[str, str]
    proc: subprocess.Popen | None = None
    output: Output | None = None
    keys: dict[str, str] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Node:
        self.proc, self.output = start_launcher(self.env)
        return self

    def wait_up(self, timeout: float = 240) -> Node:
        self.output.wait_for("Kheish Memory is up.", timeout=timeout)
        return self

    def log(self, last: int = 80) -> str:
        return f"--- {self.name} ---\n" + "\n".join(self.output.lines[-last:]) if self.output else ""

    def manage(self, *args: str, timeout: float = 120) -> str:
        """``manage.py ARGS`` beside the node (its configuration: the node's environment)."""
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=REPO_DIR,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout.strip()

    def key(self, name: str, role: str = "agent") -> str:
        if name not in self.keys:
            self.keys[name] = self.manage("create_api_key", name, "--role", role)
        return self.keys[name]

    def tree(self) -> list[psutil.Process]:
        """The launcher and everything it started (the supervised processes run in sessions of their own)."""
        try:
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def kill_tree(self) -> list[int]:
        """kill -9 of the whole process tree, as a machine losing power would see it."""
        procs = self.tree()
        for proc in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        psutil.wait_procs(procs, timeout=10)
        self.proc.wait(timeout=10)
        return [proc.pid for proc in procs]

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill_tree()


def make_node(name: str, tmp_path: Path, **env: str) -> Node:
    var_dir = tmp_path / name
    port = free_port()
    node_env = dict(shell_env(var_dir), PORT=str(port), LOG_LEVEL="WARNING", **env)
    return Node(name=name, var_dir=var_dir, port=port, env=node_env)


def wait_until(probe, what: str, timeout: float, every: float = 0.3):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except requests.RequestException as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$")


def metric_samples(text: str, name: str) -> dict[frozenset, float]:
    """``{frozenset(labels): value}`` of one sample name in Prometheus text."""
    found: dict[frozenset, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match or match["name"] != name:
            continue
        labels = frozenset(re.findall(r'(\w+)="([^"]*)"', match["labels"] or ""))
        found[labels] = float(match["value"])
    return found


def request_count(text: str, route: str, method: str = "GET", status: str = "2xx") -> float:
    samples = metric_samples(text, "kheish_http_request_duration_seconds_count")
    return samples.get(frozenset({("method", method), ("route", route), ("status", status)}), 0.0)


def seconds_left_in_day() -> float:
    return 86400 - time.time() % 86400


def away_from_midnight(margin: float = 150) -> None:
    """Rates of N/d count in a window that ends at 00:00 UTC: do not straddle it."""
    left = seconds_left_in_day()
    if left < margin:
        time.sleep(left + 1)


def fresh_get(url: str, **kwargs) -> requests.Response:
    """A request on a new connection (so gunicorn may hand it to any of its workers)."""
    with requests.Session() as session:
        return session.get(url, timeout=15, headers={"Connection": "close", **kwargs.pop("headers", {})}, **kwargs)
