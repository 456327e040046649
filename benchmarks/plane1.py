"""Plane 1 at 10,000 sessions × 20 events: journal append (in-process API and gunicorn over loopback) and
context reads."""

from __future__ import annotations

import http.client
import json
import random
import time

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from rest_framework.test import APIClient

from benchmarks.harness import Results, gunicorn_server, percentile, time_calls
from memory.clock import now_ms
from memory.identity import api_key_create
from memory.models import JournalEvent, Session


def seed(sessions: int, events_per_session: int) -> tuple[str, list[int]]:
    issued = api_key_create(name="bench-agent", role="agent", actor="bench")
    owner = issued.api_key.user
    ts = now_ms()
    batch = [
        Session(owner=owner, last_offset=events_per_session, created_at_ms=ts, updated_at_ms=ts)
        for _ in range(sessions)
    ]
    Session.objects.bulk_create(batch, batch_size=2000)
    ids = list(Session.objects.filter(owner=owner).values_list("pk", flat=True))
    rows = []
    for sid in ids:
        for offset in range(1, events_per_session + 1):
            kind = "input_received" if offset % 2 else "message_appended"
            event = (
                {"type": kind, "input": {"content": f"question {offset} about disks and certificates"}}
                if kind == "input_received"
                else {"type": kind, "message": {"role": "assistant", "content": f"answer {offset}: 12 GB free"}}
            )
            rows.append(JournalEvent(session_id=sid, offset=offset, timestamp_ms=ts, type=kind, event=event))
        if len(rows) >= 20000:
            JournalEvent.objects.bulk_create(rows, batch_size=5000)
            rows = []
    JournalEvent.objects.bulk_create(rows, batch_size=5000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return issued.plaintext, ids


def running_runs(client: APIClient, ids: list[int], count: int) -> list[str]:
    runs = []
    for sid in ids[:count]:
        rid = client.post(f"/v1/sessions/session-{sid}/runs", {"input": {"content": "bench"}}, format="json").json()[
            "run_id"
        ]
        client.post(f"/v1/runs/{rid}/start", {}, format="json")
        runs.append(rid)
    return runs


def gunicorn_appends(key: str, runs: list[str], count: int) -> list[float]:
    with gunicorn_server(connection.settings_dict) as port:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        samples = []
        for i in range(count + 10):
            body = json.dumps({"content": f"loopback output {i}"})
            start = time.perf_counter()
            conn.request("POST", f"/v1/runs/{runs[i % len(runs)]}/output", body=body, headers=headers)
            response = conn.getresponse()
            response.read()
            if response.status != 200:
                raise RuntimeError(f"gunicorn append failed: {response.status}")
            if i >= 10:
                samples.append((time.perf_counter() - start) * 1000)
        conn.close()
        return samples


def run(results: Results, *, scale: int = 1) -> None:
    sessions, events = 10_000 // scale, 20
    size = f"{sessions} sessions x {events} events"
    print(f"plane 1: seeding {size}…", flush=True)
    start = time.perf_counter()
    with transaction.atomic():
        key, ids = seed(sessions, events)
    print(f"  seeded in {time.perf_counter() - start:.1f}s", flush=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    random.seed(7)
    runs = running_runs(client, random.sample(ids, 50), 50)

    def append(i: int) -> None:
        response = client.post(f"/v1/runs/{runs[i % len(runs)]}/output", {"content": f"output {i}"}, format="json")
        assert response.status_code == 200, response.content

    results.latency("plane1.journal_append_inprocess", time_calls(append, 1000 // scale + 20), size)
    samples = gunicorn_appends(key, runs, 500 // scale + 10)
    results.latency("plane1.journal_append_gunicorn", samples, size + ", 2 workers, keep-alive")
    results.add(
        "plane1.journal_append_gunicorn.throughput",
        1000 / max(percentile(samples, 50), 1e-9),
        "ops/s",
        size + ", one client",
    )

    def context(i: int) -> None:
        response = client.get(f"/v1/sessions/session-{ids[(i * 7919) % len(ids)]}/context")
        assert response.status_code == 200

    results.latency("plane1.context_read", time_calls(context, 500 // scale + 20), size)
    get_user_model()
