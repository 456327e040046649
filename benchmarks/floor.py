"""The request floor (issue 23): ``GET /v1/sessions/{id}``, the cheapest authenticated read, end to end.

Measured in-process through Django's WSGI handler (no test client, no socket) with a per-stage breakdown -
middleware, authentication, permissions, throttles, the view, rendering - and the statements each request
runs; then over gunicorn on loopback with keep-alive, as a client sees it. The breakdown times each stage by
wrapping it (so the stages add up to a little less than the whole: what is left is Django's own routing and
the WSGI response)."""

from __future__ import annotations

import functools
import http.client
import io
import time
from collections import defaultdict
from contextlib import ExitStack, contextmanager

from django.core.handlers.wsgi import WSGIHandler
from django.db import connection
from rest_framework import renderers, views

from benchmarks.harness import Results, gunicorn_server, gunicorn_worker_rss_mib, percentile
from memory.identity import api_key_create
from memory.sessions import session_create

STAGES = {
    "authentication": (views.APIView, "perform_authentication"),
    "permissions": (views.APIView, "check_permissions"),
    "throttles": (views.APIView, "check_throttles"),
    "view (queries + serializer)": None,  # the handler, wrapped per view below
    "rendering (JSON)": (renderers.JSONRenderer, "render"),
}


@contextmanager
def staged(view_class) -> dict[str, list[float]]:
    """Wrap each stage's function with a timer; yields {stage: [ms per call]}."""
    spent: dict[str, list[float]] = defaultdict(list)
    targets = dict(STAGES)
    targets["view (queries + serializer)"] = (view_class, "retrieve")
    with ExitStack() as stack:
        for stage, (owner, name) in targets.items():
            original = getattr(owner, name)

            def timed(*args, _original=original, _stage=stage, **kwargs):
                start = time.perf_counter()
                try:
                    return _original(*args, **kwargs)
                finally:
                    spent[_stage].append((time.perf_counter() - start) * 1000)

            setattr(owner, name, functools.wraps(original)(timed))
            stack.callback(setattr, owner, name, original)
        yield spent


def wsgi_get(handler: WSGIHandler, path: str, key: str) -> int:
    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "80",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_HOST": "127.0.0.1",
        "HTTP_AUTHORIZATION": f"Bearer {key}",
        "wsgi.input": io.BytesIO(b""),
        "wsgi.url_scheme": "http",
        "wsgi.errors": io.StringIO(),
        "SERVER_PROTOCOL": "HTTP/1.1",
    }
    status = []
    body = handler(environ, lambda s, h, exc_info=None: status.append(s))
    b"".join(body)
    getattr(body, "close", lambda: None)()
    return int(status[0].split()[0])


def count_statements(func) -> int:
    statements = []

    def record(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        func()
    return len(statements)


def run(results: Results, *, scale: int = 1) -> None:
    from kheish.api.sessions import SessionViewSet

    issued = api_key_create(name="bench-floor", role="agent", actor="bench")
    session = session_create(owner=issued.api_key.user)
    path = f"/v1/sessions/{session.public_id}"
    handler = WSGIHandler()
    count = 2000 // scale
    for _ in range(50):
        assert wsgi_get(handler, path, issued.plaintext) == 200
    size = "one agent, one session"
    results.add(
        "floor.statements_per_request",
        count_statements(lambda: wsgi_get(handler, path, issued.plaintext)),
        "stmts",
        size + "; GET /v1/sessions/{id}, warm process",
    )
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        wsgi_get(handler, path, issued.plaintext)
        samples.append((time.perf_counter() - start) * 1000)
    results.latency("floor.inprocess_session_read", samples, size + "; through WSGIHandler, no socket")
    with staged(SessionViewSet) as spent:
        for _ in range(count):
            wsgi_get(handler, path, issued.plaintext)
    for stage, values in spent.items():
        results.add(f"floor.stage.{stage.split(' ')[0]}.p50", percentile(values, 50), "ms", f"{stage}; {size}")
    with gunicorn_server(connection.settings_dict) as port:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        headers = {"Authorization": f"Bearer {issued.plaintext}"}
        samples = []
        for i in range(count // 2 + 50):
            start = time.perf_counter()
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            response.read()
            if response.status != 200:
                raise RuntimeError(f"{path}: {response.status}")
            if i >= 50:
                samples.append((time.perf_counter() - start) * 1000)
        conn.close()
        rss = gunicorn_worker_rss_mib(port)
    results.add("floor.web_worker_rss", rss, "MiB", "largest gunicorn worker after the session reads")
    results.latency("floor.http_session_read", samples, size + "; gunicorn 2 workers, loopback, keep-alive")
