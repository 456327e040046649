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
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from kheish.service_config import REPO_DIR
from tests.support.shell import free_port, run_printed, shell_env, start_launcher

pytestmark = pytest.mark.integration


@pytest.fixture
def service(tmp_path):
    """``python -m kheish.launcher run`` on a free port with a var dir of its own (embedded PostgreSQL)."""
    var_dir = tmp_path / "var"
    port = free_port()
    proc, output = start_launcher(dict(shell_env(var_dir), PORT=str(port), LOG_LEVEL="WARNING"))
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


def test_printed_key_and_password_commands_work_in_another_shell(service):
    base, output, var_dir = service["base"], service["output"], service["var_dir"]

    key_command = output.printed_command("new API key")
    assert key_command == "make key NAME=my-agent ROLE=agent"
    done = run_printed(key_command, var_dir)
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
        refused = run_printed(password_command, var_dir, stdin=nothing)
        assert refused.returncode != 0
        assert "Traceback" not in refused.stderr and "EOFError" not in refused.stderr, refused.stderr
        assert "no password given: run `make password` in a terminal" in refused.stderr, refused.stderr
        ours = [line for line in refused.stderr.splitlines() if line.strip() and not line.startswith("make:")]
        assert len(ours) == 1, refused.stderr
    mismatch = run_printed(password_command, var_dir, stdin="one-Pw-8731x\nother-Pw-8731x\n")
    assert mismatch.returncode != 0 and "differ" in mismatch.stderr
    new_password = "first-hour-Pw-8731"
    done = run_printed(password_command, var_dir, stdin=f"{new_password}\n{new_password}\n")
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


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``python -c CODE`` under the service's settings (``kheish.settings``) and ``env``."""
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_DIR,
        env=dict(env, DJANGO_SETTINGS_MODULE="kheish.settings"),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_without_a_database_the_settings_refuse_naming_what_to_run(tmp_path):
    """No DATABASE_URL and no embedded server running: a loud error, never another database."""
    env = dict(shell_env(tmp_path / "var"), SECRET_KEY="x")
    done = _python("import django; from django.conf import settings; settings.DATABASES", env)
    assert done.returncode != 0
    assert "No database configured: DATABASE_URL is unset" in done.stderr
    assert "make run" in done.stderr and ".venv/bin/python manage.py" in done.stderr


def test_a_database_other_than_postgresql_is_refused(tmp_path):
    env = dict(
        shell_env(tmp_path / "var"),
        SECRET_KEY="x",
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
    )
    done = _python("from django.conf import settings; settings.DATABASES", env)
    assert done.returncode != 0
    assert "runs on PostgreSQL only" in done.stderr
    assert not (tmp_path / "db.sqlite3").exists()


def test_without_a_secret_key_the_settings_refuse_naming_what_to_run(tmp_path):
    env = dict(
        shell_env(tmp_path / "var"),
        DATABASE_URL="postgres://nobody@127.0.0.1:1/none",
    )
    done = _python("from django.conf import settings; settings.SECRET_KEY", env)
    assert done.returncode != 0
    assert "No secret key" in done.stderr and "make run" in done.stderr


def _readme_block(marker: str) -> str:
    """The fenced ```bash block that follows ``marker`` in the README, as a reader copies it."""
    text = (REPO_DIR / "README.md").read_text()
    after = text[text.index(marker) :]
    match = re.search(r"```bash\n(.*?)\n```", after, re.S)
    assert match, f"no bash block after {marker!r}"
    return match.group(1)


def _bash(block: str, var_dir: Path) -> subprocess.CompletedProcess:
    """A README block pasted into a second shell of the checkout (``bash -e -o pipefail``)."""
    return subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", block],
        cwd=REPO_DIR,
        env=shell_env(var_dir),
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,
    )


def test_readme_blocks_run_as_printed_end_with_the_preference_in_the_next_prompt(service):
    """Issue 25.1: the README's "First steps" block, pasted into a second shell of the checkout while the
    service runs (on the port it chose, here a free one rather than 8000), goes from nothing to a run whose
    learned_context holds the published preference; so does the README's quickstart-example block."""
    base, output, var_dir = service["base"], service["output"], service["var_dir"]
    assert output.printed_command("service URL").startswith("export KHEISH_URL=$(make -s url)")
    assert f"(prints {base})" in output.printed_command("service URL")
    block = _readme_block("<!-- first-steps:")
    assert "localhost:8000" not in block and "$KEY" not in block
    done = _bash(block, var_dir)
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
    done = _bash(example, var_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: the preference came back in the next run's learned_context" in done.stdout


def test_make_url_refuses_in_one_line_without_a_running_service(tmp_path):
    done = subprocess.run(
        ["make", "-s", "url"],
        cwd=REPO_DIR,
        env=shell_env(tmp_path / "var"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and done.stdout == ""
    assert "not running from this checkout: start it with `make run`" in done.stderr
