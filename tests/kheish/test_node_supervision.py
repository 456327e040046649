"""Issue 22.3 and 22.6 on one node started as ``make run`` starts it (embedded PostgreSQL, two gunicorn workers).

* 22.3: kill -9 of the embedded postmaster; the supervisor restarts it and the API answers again by itself.
* 22.6: ``/metrics`` sums every gunicorn worker (consecutive scrapes agree, and count every request), and the
  per-principal request ceiling counts once for all workers (the default throttle cache is the database).
"""

from __future__ import annotations

import os
import signal
import time

import pytest
import requests

from tests.support.nodes import away_from_midnight, fresh_get, make_node, request_count, wait_until

pytestmark = pytest.mark.integration

RESTART_BOUND_S = 45


@pytest.fixture
def node(tmp_path):
    node = make_node(
        "node", tmp_path, KHEISH_WEB_WORKERS="2", KHEISH_THROTTLE_AGENT="24/d", KHEISH_WORKER_CONCURRENCY="1"
    )
    node.start()
    try:
        node.wait_up()
        yield node
    finally:
        node.stop()


def _postmaster_pid(node) -> int:
    return int((node.var_dir / "pgdata" / "postmaster.pid").read_text().splitlines()[0])


def test_kill_9_of_the_embedded_postgres_restarts_it_and_the_api_comes_back(node):
    operator = {"Authorization": f"Bearer {node.key('ops', 'operator')}"}
    assert requests.get(f"{node.base}/v1/sessions", headers=operator, timeout=10).status_code == 200
    old = _postmaster_pid(node)

    killed_at = time.monotonic()
    os.kill(old, signal.SIGKILL)

    def restarted() -> bool:
        # A backend the killed postmaster leaves behind can still answer one request on a worker's open
        # connection before it notices: "back" is a new postmaster and the API answering through it.
        try:
            moved = _postmaster_pid(node) != old
        except (FileNotFoundError, ValueError, IndexError):  # the pid file between two servers
            return False
        return moved and requests.get(f"{node.base}/v1/sessions", headers=operator, timeout=5).status_code == 200

    wait_until(restarted, "the API to answer again through a new postmaster", timeout=RESTART_BOUND_S, every=0.5)
    back_after = time.monotonic() - killed_at

    new = _postmaster_pid(node)
    assert new != old
    created = requests.post(f"{node.base}/v1/sessions", json={}, headers=operator, timeout=10)
    assert created.status_code == 201, created.text  # writes too, not only reads
    lines = "\n".join(node.output.lines)
    assert f"postgres is gone (pid {old})" in lines, node.log()
    assert "postgres restarted after" in lines, node.log()
    assert back_after < RESTART_BOUND_S
    restarted = next(line for line in node.output.lines if "postgres restarted after" in line)
    print(f"\nAPI answering again {back_after:.1f}s after kill -9 of the postmaster ({restarted.split('] ')[-1]})")
    # the other processes were never restarted for it
    assert sum("web started (pid" in line for line in node.output.lines) == 1, node.log()


def test_metrics_and_the_request_ceiling_cover_every_gunicorn_worker(node):
    operator = {"Authorization": f"Bearer {node.key('ops', 'operator')}"}
    agent = {"Authorization": f"Bearer {node.key('agent-a')}"}

    # /metrics: every scrape shows the requests every worker served, never one worker's share
    for _ in range(30):
        assert fresh_get(f"{node.base}/healthz").status_code == 200
    seen = []
    for _ in range(6):
        scrape = fresh_get(f"{node.base}/metrics", headers=operator)
        assert scrape.status_code == 200, scrape.text
        seen.append(request_count(scrape.text, "healthz"))
    assert seen == [30.0] * 6, seen
    scrapes = [request_count(fresh_get(f"{node.base}/metrics", headers=operator).text, "metrics") for _ in range(4)]
    assert scrapes == sorted(scrapes) and scrapes[-1] - scrapes[0] == 3, scrapes  # monotonic, nothing skipped

    # the request ceiling (24/d here) counts once for the whole server, whichever worker answers
    away_from_midnight()
    statuses = [fresh_get(f"{node.base}/v1/sessions", headers=agent).status_code for _ in range(24)]
    assert statuses == [200] * 24, statuses
    for _ in range(3):
        refused = fresh_get(f"{node.base}/v1/sessions", headers=agent)
        assert refused.status_code == 429, refused.text
        assert refused.json()["code"] == "throttled"
