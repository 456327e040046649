"""Issue 14.8: a ``Transfer-Encoding: chunked`` body is read whole under gunicorn (a real server, a raw chunked
request), never accepted as empty; oversized chunked bodies are 413; a server that cannot frame them says 411."""

from __future__ import annotations

import json
import socket

import pytest

from tests.kheish.test_operability import _free_port, _start_server


def _chunked_request(port: int, method: str, path: str, key: str, body: bytes, pieces: int = 3) -> tuple[int, dict]:
    size = max(1, len(body) // pieces)
    chunks = [body[i : i + size] for i in range(0, len(body), size)]
    framed = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(head + framed)
        data = b""
        while True:
            part = sock.recv(65536)
            if not part:
                break
            data += part
    header, _, payload = data.partition(b"\r\n\r\n")
    status = int(header.split()[1])
    if b"transfer-encoding: chunked" in header.lower():  # de-chunk the response
        out, rest = b"", payload
        while rest:
            line, _, rest = rest.partition(b"\r\n")
            n = int(line, 16)
            if n == 0:
                break
            out, rest = out + rest[:n], rest[n + 2 :]
        payload = out
    return status, json.loads(payload)


@pytest.mark.slow  # starts a process
@pytest.mark.django_db(transaction=True)
def test_chunked_bodies_are_read_under_gunicorn(make_key, settings):
    key = make_key("chunked-agent").plaintext
    port = _free_port()
    server = _start_server(port)
    try:
        status, view = _chunked_request(
            port, "POST", "/v1/sessions", key, json.dumps({"metadata": {"from": "chunked", "n": 7}}).encode()
        )
        assert status == 201, view
        assert view["metadata"] == {"from": "chunked", "n": 7}
        sid = view["session_id"]
        status, run = _chunked_request(
            port, "POST", f"/v1/sessions/{sid}/runs", key, json.dumps({"input": {"content": "chunked input"}}).encode()
        )
        assert status == 202, run
        rid = run["run_id"]
        assert _chunked_request(port, "POST", f"/v1/runs/{rid}/start", key, b"{}")[0] == 200
        status, done = _chunked_request(
            port,
            "POST",
            f"/v1/runs/{rid}/complete",
            key,
            json.dumps({"output": {"content": "chunked output"}}).encode(),
        )
        assert status == 200, done
        assert [o["content"] for o in done["outputs"]] == ["chunked output"]
        status, problem = _chunked_request(
            port,
            "POST",
            "/v1/sessions",
            key,
            b'{"metadata": {"pad": "' + b"x" * (settings.KHEISH_MAX_BODY_BYTES + 10) + b'"}}',
            pieces=40,
        )
        assert status == 413 and problem["code"] == "body_too_large"
    finally:
        server.terminate()
        server.wait(timeout=20)


def test_a_server_that_does_not_frame_chunked_bodies_gets_411(rf, settings):
    from kheish.api.middleware import BodySizeLimitMiddleware

    request = rf.post("/v1/sessions", data=b"", content_type="application/json", HTTP_TRANSFER_ENCODING="chunked")
    request.META.pop("wsgi.input_terminated", None)
    response = BodySizeLimitMiddleware(lambda r: pytest.fail("reached the view"))(request)
    assert response.status_code == 411
    assert json.loads(response.content)["code"] == "length_required"
