"""Issue 13.4: examples/quickstart.py, run exactly as docs/agents.md says (``python3 examples/quickstart.py`` with
three environment variables), drives one full conversation against the test suite's live server and sees the
published preference in the next run's learned_context."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from learnings.models import Learning

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db(transaction=True)
def test_the_quickstart_example_runs_to_completion(live_server, agent_key, operator_key, llm_unconfigured):
    python3 = shutil.which("python3") or sys.executable
    env = {
        **os.environ,
        "KHEISH_BASE_URL": live_server.url,
        "KHEISH_AGENT_KEY": agent_key.plaintext,
        "KHEISH_OPERATOR_KEY": operator_key.plaintext,
    }
    done = subprocess.run(
        [python3, "examples/quickstart.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    # the documented rules showed up: one active run per session, a problem+json naming the field
    assert "sessions/session_busy" in out and "api/validation_failed: text: unknown field" in out, out
    assert "ok: the preference came back in the next run's learned_context" in out
    learning = Learning.objects.get(kind="preference")
    assert "gigabytes" in learning.content and learning.status == "active"


def test_the_example_needs_both_keys():
    env = {k: v for k, v in os.environ.items() if not k.startswith("KHEISH_")}
    done = subprocess.run(
        [sys.executable, "examples/quickstart.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2 and "make key NAME=my-agent ROLE=agent" in done.stderr
