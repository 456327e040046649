"""Issue 22.4: malformed ``Transfer-Encoding: chunked`` framing (bad chunk size, a chunk shorter or longer than it
says, no terminating chunk) and a body not decodable in the charset its Content-Type names are 4xx
problem+json, never a 500 - under a real gunicorn, with raw requests."""

from __future__ import annotations

import json
import socket

import pytest

from tests.conftest import client_for
from tests.kheish.test_operability import _free_port, _start_server

BODY = b'{"metadata": {"n": 1}}'


def _raw(port: int, key: str, framed: bytes, *, close_write: bool = False) -> tuple[int, dict[str, str], bytes]:
    head = (
        f"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(head + framed)
        if close_write:
            sock.shutdown(socket.SHUT_WR)
        data = b""
        while True:
            try:
                part = sock.recv(65536)
            except ConnectionResetError:
                break
            if not part:
                break
            data += part
    header, _, payload = data.partition(b"\r\n\r\n")
    lines = header.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    if headers.get("transfer-encoding", "").lower() == "chunked":
        out, rest = b"", payload
        while rest:
            size, _, rest = rest.partition(b"\r\n")
            n = int(size, 16)
            if n == 0:
                break
            out, rest = out + rest[:n], rest[n + 2 :]
        payload = out
    return int(lines[0].split()[1]), headers, payload


@pytest.mark.slow  # starts a process
@pytest.mark.django_db(transaction=True)
def test_malformed_chunked_framing_is_a_400_problem_under_gunicorn(make_key):
    key = make_key("framing-agent").plaintext
    port = _free_port()
    server = _start_server(port)
    cases = {
        "bad chunk size": (b"zz\r\n" + BODY + b"\r\n0\r\n\r\n", False),
        "chunk longer than it says": (b"5\r\n" + BODY + b"\r\n0\r\n\r\n", False),
        "chunk shorter than it says": (b"%x\r\n" % (len(BODY) + 40) + BODY + b"\r\n0\r\n\r\n", True),
        "no terminating chunk": (b"%x\r\n" % len(BODY) + BODY + b"\r\n", True),
    }
    try:
        for name, (framed, close_write) in cases.items():
            status, headers, payload = _raw(port, key, framed, close_write=close_write)
            assert status == 400, (name, status, payload[:300])
            assert headers["content-type"] == "application/problem+json", (name, headers)
            problem = json.loads(payload)
            assert problem["code"] == "malformed_chunked_body" and problem["field"] == "body", (name, problem)
        status, _, payload = _raw(port, key, b"%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY))
        assert status == 201, payload  # a well-framed body still works
    finally:
        server.terminate()
        server.wait(timeout=20)


@pytest.mark.django_db
@pytest.mark.parametrize("charset", ["utf-16", "utf-32"])
def test_a_body_not_in_its_declared_charset_is_a_400_problem(make_key, charset):
    client = client_for(make_key("charset-agent").plaintext)
    client.raise_request_exception = False
    response = client.generic("POST", "/v1/sessions", BODY, content_type=f"application/json; charset={charset}")
    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["field"] == "body" and charset in response.json()["detail"]


@pytest.mark.django_db
def test_a_body_in_its_declared_charset_is_read(make_key):
    client = client_for(make_key("charset-agent").plaintext)
    response = client.generic(
        "POST", "/v1/sessions", BODY.decode().encode("utf-16"), content_type="application/json; charset=utf-16"
    )
    assert response.status_code == 201 and response.json()["metadata"] == {"n": 1}
