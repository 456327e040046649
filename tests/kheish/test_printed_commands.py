"""Issue 13.1: every command the service prints works in a second shell, with nothing exported.

The service is started the way the README does (``python -m kheish.launcher run``, what ``make run`` runs),
with its own ``KHEISH_VAR_DIR`` so that it never touches this checkout's ``var/`` (data, secret key, embedded
PostgreSQL): that one variable stands for "this checkout" and is the same in both shells. The commands are
parsed from the banner and run exactly as printed, in a separate process whose environment has no
DATABASE_URL, SECRET_KEY or PORT.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from kheish.service_config import REPO_DIR

pytestmark = pytest.mark.integration

_NOT_IN_A_NEW_SHELL = (
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _shell_env(var_dir: Path) -> dict[str, str]:
    """A fresh shell in this checkout: nothing of the test run's configuration."""
    env = {k: v for k, v in os.environ.items() if k not in _NOT_IN_A_NEW_SHELL and not k.startswith("PYTEST")}
    env["KHEISH_VAR_DIR"] = str(var_dir)
    return env


class _Output:
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


@pytest.fixture
def service(tmp_path):
    """``python -m kheish.launcher run`` on a free port with a var dir of its own (embedded PostgreSQL)."""
    var_dir = tmp_path / "var"
    port = _free_port()
    env = dict(_shell_env(var_dir), PORT=str(port), LOG_LEVEL="WARNING")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kheish.launcher", "run"],
        cwd=REPO_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    output = _Output(proc.stdout)
    try:
        output.wait_for("Kheish Memory is up.", timeout=180)
        output.wait_for("operator password:", timeout=5)
        yield {"base": f"http://127.0.0.1:{port}", "output": output, "var_dir": var_dir}
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C: web, worker, beat and the embedded PostgreSQL stop
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _run_printed(command: str, var_dir: Path, *, stdin: str | None = None) -> subprocess.CompletedProcess:
    # start_new_session: no controlling terminal, so a password prompt reads stdin (as a pipe to it would).
    return subprocess.run(
        shlex.split(command),
        cwd=REPO_DIR,
        env=_shell_env(var_dir),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,
    )


def test_printed_key_and_password_commands_work_in_another_shell(service):
    base, output, var_dir = service["base"], service["output"], service["var_dir"]

    key_command = output.printed_command("new API key")
    assert key_command == "make key NAME=my-agent ROLE=agent"
    done = _run_printed(key_command, var_dir)
    assert done.returncode == 0, done.stderr
    key = done.stdout.strip()
    assert re.fullmatch(r"khm_[0-9a-f]{12}_[0-9a-f]{48}", key), done.stdout
    headers = {"Authorization": f"Bearer {key}"}
    created = requests.post(f"{base}/v1/sessions", json={}, headers=headers, timeout=10)
    assert created.status_code == 201, created.text
    listed = requests.get(f"{base}/v1/sessions", headers=headers, timeout=10)
    assert [s["session_id"] for s in listed.json()["results"]] == [created.json()["session_id"]]

    password_command = output.printed_command("operator password")
    assert password_command == "make password OPERATOR=operator"
    # Issue 25.6: no terminal and nothing on stdin: one line saying what to do, no EOFError traceback.
    for nothing in ("", "\n"):
        refused = _run_printed(password_command, var_dir, stdin=nothing)
        assert refused.returncode != 0
        assert "Traceback" not in refused.stderr and "EOFError" not in refused.stderr, refused.stderr
        assert "no password given: run `make password` in a terminal" in refused.stderr, refused.stderr
        ours = [line for line in refused.stderr.splitlines() if line.strip() and not line.startswith("make:")]
        assert len(ours) == 1, refused.stderr
    mismatch = _run_printed(password_command, var_dir, stdin="one-Pw-8731x\nother-Pw-8731x\n")
    assert mismatch.returncode != 0 and "differ" in mismatch.stderr
    new_password = "first-hour-Pw-8731"
    done = _run_printed(password_command, var_dir, stdin=f"{new_password}\n{new_password}\n")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Password changed successfully for user 'operator'" in done.stdout
    browser = requests.Session()
    login = f"{base}/admin/login/"
    browser.get(login, timeout=10)
    answer = browser.post(
        login,
        data={
            "username": "operator",
            "password": new_password,
            "next": "/admin/",
            "csrfmiddlewaretoken": browser.cookies["csrftoken"],
        },
        headers={"Referer": login},
        timeout=10,
    )
    assert answer.status_code == 200 and answer.url == f"{base}/admin/", answer.url
    assert "Log out" in answer.text or "logout" in answer.text


def test_without_a_database_the_settings_refuse_naming_what_to_run(tmp_path):
    """No DATABASE_URL and no embedded server running: a loud error, never another database."""
    env = dict(_shell_env(tmp_path / "var"), SECRET_KEY="x")
    done = subprocess.run(
        [sys.executable, "-c", "import django; from django.conf import settings; settings.DATABASES"],
        cwd=REPO_DIR,
        env=dict(env, DJANGO_SETTINGS_MODULE="kheish.settings"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "No database configured: DATABASE_URL is unset" in done.stderr
    assert "make run" in done.stderr and ".venv/bin/python manage.py" in done.stderr


def test_a_database_other_than_postgresql_is_refused(tmp_path):
    env = dict(
        _shell_env(tmp_path / "var"),
        SECRET_KEY="x",
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        DJANGO_SETTINGS_MODULE="kheish.settings",
    )
    done = subprocess.run(
        [sys.executable, "-c", "from django.conf import settings; settings.DATABASES"],
        cwd=REPO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "runs on PostgreSQL only" in done.stderr
    assert not (tmp_path / "db.sqlite3").exists()


def test_without_a_secret_key_the_settings_refuse_naming_what_to_run(tmp_path):
    env = dict(
        _shell_env(tmp_path / "var"),
        DATABASE_URL="postgres://nobody@127.0.0.1:1/none",
        DJANGO_SETTINGS_MODULE="kheish.settings",
    )
    done = subprocess.run(
        [sys.executable, "-c", "from django.conf import settings; settings.SECRET_KEY"],
        cwd=REPO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "No secret key" in done.stderr and "make run" in done.stderr


def _readme_block(marker: str) -> str:
    """The fenced ```bash block that follows ``marker`` in the README, as a reader copies it."""
    text = (REPO_DIR / "README.md").read_text()
    after = text[text.index(marker) :]
    match = re.search(r"```bash\n(.*?)\n```", after, re.S)
    assert match, f"no bash block after {marker!r}"
    return match.group(1)


def test_readme_blocks_run_as_printed_end_with_the_preference_in_the_next_prompt(service):
    """Issue 25.1: the README's "First steps" block, pasted into a second shell of the checkout while the
    service runs (on the port it chose, here a free one rather than 8000), goes from nothing to a run whose
    learned_context holds the published preference; so does the README's quickstart-example block."""
    base, output, var_dir = service["base"], service["output"], service["var_dir"]
    assert output.printed_command("service URL").startswith("export KHEISH_URL=$(make -s url)")
    assert f"(prints {base})" in output.printed_command("service URL")
    block = _readme_block("<!-- first-steps:")
    assert "localhost:8000" not in block and "$KEY" not in block
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", block],
        cwd=REPO_DIR,
        env=_shell_env(var_dir),
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "completed", done.stdout
    assert re.fullmatch(r"captured: learning-candidate-\d+", lines[1]), done.stdout
    assert lines[2] == "active", done.stdout
    assert "# Learned Context" in done.stdout and "always report sizes in gigabytes" in done.stdout.lower()
    assert lines[-1] == "completed", done.stdout

    # The README's next block, the runnable example, in the same second shell.
    example = _readme_block("<!-- quickstart:")
    assert "make -s url" in example and "127.0.0.1:8000" not in example
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", example],
        cwd=REPO_DIR,
        env=_shell_env(var_dir),
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: the preference came back in the next run's learned_context" in done.stdout


def test_make_url_refuses_in_one_line_without_a_running_service(tmp_path):
    done = subprocess.run(
        ["make", "-s", "url"],
        cwd=REPO_DIR,
        env=_shell_env(tmp_path / "var"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and done.stdout == ""
    assert "not running from this checkout: start it with `make run`" in done.stderr
