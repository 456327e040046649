"""Commands, admin pages for Plane 1/2, worker-start repair, and restart safety."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import time

import pytest
import requests
from django.core.management import call_command
from django.db import connection

from memory.identity import authenticate_key
from memory.models import ApiKey, AuditEvent, RunMemoryRecord


@pytest.mark.django_db
def test_create_api_key_prints_only_the_key():
    out = io.StringIO()
    call_command("create_api_key", "robot", "--role", "operator", stdout=out)
    key = out.getvalue().strip()
    assert "\n" not in key and key.startswith("khm_")
    api_key = authenticate_key(key)
    assert api_key is not None and api_key.role == "operator" and api_key.user.is_staff
    assert ApiKey.objects.get().key_hash != key  # stored hashed
    assert AuditEvent.objects.filter(subject_type="api_key", action="create").exists()


@pytest.mark.django_db
def test_ensure_operator_creates_once():
    out = io.StringIO()
    call_command("ensure_operator", stdout=out)
    assert "Created operator account 'operator'" in out.getvalue()
    assert "http://127.0.0.1:" in out.getvalue() and "make key NAME=my-agent ROLE=agent" in out.getvalue()
    out = io.StringIO()
    call_command("ensure_operator", stdout=out)
    assert "exists" in out.getvalue() and "make password OPERATOR=operator" in out.getvalue()


@pytest.fixture
def staff_client(client, django_user_model):
    user = django_user_model.objects.create_superuser("admin", "", "pw-123456789")
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_admin_pages_for_sessions_runs_and_run_memory(staff_client, api_client, session_id):
    rid = api_client.post(
        f"/v1/sessions/{session_id}/runs", {"input": {"content": "hello admin"}}, format="json"
    ).json()["run_id"]
    api_client.post(f"/v1/runs/{rid}/start", {}, format="json")
    api_client.post(f"/v1/runs/{rid}/complete", {"output": {"content": "hi there"}}, format="json")
    pk = session_id.split("-")[1]
    page = staff_client.get(f"/admin/memory/session/{pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Journal (newest first, read-only)" in html and "input_received" in html
    assert html.index("run_lifecycle") < html.index("input_received")  # newest first
    assert "1 recovered run eligible for the next prompt" in html
    for url in [
        "/admin/memory/run/?status__exact=completed",
        "/admin/memory/run/?kind__exact=input",
        f"/admin/memory/run/{rid.split('-')[1]}/change/",
        "/admin/memory/runmemoryrecord/",
        "/admin/memory/apikey/",
        "/admin/memory/policyrevision/",
        "/admin/memory/auditevent/",
        "/admin/memory/persona/",
        "/admin/memory/project/",
    ]:
        assert staff_client.get(url).status_code == 200, url
    record = RunMemoryRecord.objects.get()
    assert staff_client.get(f"/admin/memory/runmemoryrecord/{record.pk}/change/").status_code == 200


@pytest.mark.django_db
def test_admin_creates_api_key_and_shows_it_once(staff_client, django_user_model):
    agent = django_user_model.objects.create_user("bot")
    response = staff_client.post(
        "/admin/memory/apikey/add/", {"name": "bot-key", "role": "agent", "user": agent.pk}, follow=True
    )
    assert response.status_code == 200
    html = response.content.decode()
    start = html.index("id='new-api-key'>") + len("id='new-api-key'>")
    key = html[start : html.index("</code>", start)]
    assert authenticate_key(key).user == agent
    listing = staff_client.get("/admin/memory/apikey/").content.decode()
    assert key not in listing


@pytest.mark.django_db
def test_repair_runs_when_a_worker_starts(api_client, session_id):
    from kheish.tasks import repair_on_worker_start
    from memory import run_memory

    rid = api_client.post(f"/v1/sessions/{session_id}/runs", {"input": {"content": "x"}}, format="json").json()
    api_client.post(f"/v1/runs/{rid['run_id']}/cancel", {}, format="json")
    RunMemoryRecord.objects.update(scope_keys=["stale"])
    repair_on_worker_start()
    assert run_memory.latest_report()["source"] == "startup"
    assert RunMemoryRecord.objects.get().scope_keys[0] == f"session:{session_id}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _database_url() -> str:
    db = connection.settings_dict
    host = db.get("HOST") or ""
    port = db.get("PORT") or (db.get("OPTIONS") or {}).get("port")
    if not host and (db.get("OPTIONS") or {}).get("host"):
        host = db["OPTIONS"]["host"]
    user = db.get("USER") or "postgres"
    if host.startswith("/"):
        return f"postgres://{user}@/{db['NAME']}?host={host}" + (f"&port={port}" if port else "")
    return f"postgres://{user}@{host or '127.0.0.1'}{':' + str(port) if port else ''}/{db['NAME']}"


def _start_server(port: int) -> subprocess.Popen:
    env = dict(
        os.environ,
        DATABASE_URL=_database_url(),
        SECRET_KEY="restart-test",
        ALLOWED_HOSTS="127.0.0.1",
        DJANGO_SETTINGS_MODULE="kheish.settings",
        CELERY_BROKER_URL="memory://",
        LOG_LEVEL="WARNING",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "kheish.wsgi:application", "--bind", f"127.0.0.1:{port}", "--workers", "1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("gunicorn did not start")


@pytest.mark.slow  # starts a process
@pytest.mark.django_db(transaction=True)
def test_restarting_the_server_loses_nothing(make_key):
    key = make_key("restart-agent").plaintext
    headers = {"Authorization": f"Bearer {key}"}
    port = _free_port()
    server = _start_server(port)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        sid = requests.post(f"{base}/sessions", json={}, headers=headers, timeout=10).json()["session_id"]
        for i in range(3):
            rid = requests.post(
                f"{base}/sessions/{sid}/runs", json={"input": {"content": f"step {i}"}}, headers=headers, timeout=10
            ).json()["run_id"]
            requests.post(f"{base}/runs/{rid}/start", json={}, headers=headers, timeout=10)
            requests.post(
                f"{base}/runs/{rid}/complete", json={"output": {"content": f"done {i}"}}, headers=headers, timeout=10
            )
        requests.post(
            f"{base}/sessions/{sid}/compact",
            json={"strategy": "snip", "budget_tokens": 200},
            headers=headers,
            timeout=10,
        )
        before = requests.get(f"{base}/sessions/{sid}/context", headers=headers, timeout=10).json()
    finally:
        server.terminate()
        server.wait(timeout=20)
    server = _start_server(port)
    try:
        after = requests.get(f"{base}/sessions/{sid}/context", headers=headers, timeout=10).json()
    finally:
        server.terminate()
        server.wait(timeout=20)
    assert before["events"] and before["checkpoint"] is not None
    assert after == before
