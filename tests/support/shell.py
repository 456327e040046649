"""A second shell of this checkout, for the tests that run the service the way ``make run`` does and the
commands it prints: an environment with nothing of the test run's configuration, a free port, the launcher
started in a process group of its own with its output collected, and a printed command run as printed.

Used by tests/kheish/test_printed_commands.py, tests/kheish/test_supervisor.py and tests/support/nodes.py.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from kheish.service_config import REPO_DIR

NOT_IN_A_NEW_SHELL = (
    "DATABASE_URL",
    "SECRET_KEY",
    "PORT",
    "DJANGO_SETTINGS_MODULE",
    "MAKEFLAGS",
    "MFLAGS",
    "MAKELEVEL",
    "KHEISH_VAR_DIR",
    "KHEISH_OPERATOR_PASSWORD",
    "KHEISH_OPERATOR_USERNAME",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shell_env(var_dir: Path) -> dict[str, str]:
    """A fresh shell in this checkout: nothing of the test run's configuration."""
    env = {k: v for k, v in os.environ.items() if k not in NOT_IN_A_NEW_SHELL and not k.startswith("PYTEST")}
    env["KHEISH_VAR_DIR"] = str(var_dir)
    return env


class Output:
    """Collects a process's output lines in a thread (so the pipe never fills)."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream) -> None:
        for line in stream:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()

    def wait_for(self, needle: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not any(needle in line for line in self.lines):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{needle!r} not printed in {timeout}s:\n" + "\n".join(self.lines[-60:]))
                self._changed.wait(left)

    def printed_command(self, label: str) -> str:
        for line in self.lines:
            match = re.match(rf"^\s+{re.escape(label)}\s*: (.+)$", line)
            if match:
                return match.group(1).strip()
        raise AssertionError(f"no {label!r} line in the banner:\n" + "\n".join(self.lines[-60:]))


def start_launcher(env: dict[str, str]) -> tuple[subprocess.Popen, Output]:
    """``python -m kheish.launcher run`` (what ``make run`` runs) in a session of its own, its output (stdout
    and stderr) collected."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kheish.launcher", "run"],
        cwd=REPO_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    return proc, Output(proc.stdout)


def run_printed(command: str, var_dir: Path, *, stdin: str | None = None) -> subprocess.CompletedProcess:
    """A command the service printed, run as printed in a second shell of the checkout."""
    # start_new_session: no controlling terminal, so a password prompt reads stdin (as a pipe to it would).
    return subprocess.run(
        shlex.split(command),
        cwd=REPO_DIR,
        env=shell_env(var_dir),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,
    )
