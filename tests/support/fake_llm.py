"""A scriptable OpenAI-compatible chat-completions server on loopback, for tests.

    with FakeModelServer() as server:
        server.reply_json({"action": "publish", "reason": "ok"})
        ...  # point KHEISH_LLM_BASE_URL at server.base_url
        assert server.requests[0]["model"] == "fake-model"

Replies are consumed in order, one per ``POST /v1/chat/completions``. When the queue is empty the server
answers with the responder set by :meth:`FakeModelServer.respond_with` if any, else HTTP 500 (so a test that
forgot to script a reply fails closed and visibly). ``GET /v1/models`` lists one model.
"""

from __future__ import annotations

import collections
import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "fake-model"


@dataclass
class Reply:
    status: int = 200
    content: str | None = None  # the assistant message content (a completion is built around it)
    body: str | None = None  # a raw HTTP body, sent verbatim instead of a completion
    delay: float = 0.0
    content_type: str = "application/json"


def completion(content: str, *, model: str = MODEL) -> dict:
    return {
        "id": f"chatcmpl-fake-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class FakeModelServer:
    """Real HTTP on 127.0.0.1 with an ephemeral port, served from a background thread."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.requests: list[dict] = []  # received JSON bodies, in order
        self.paths: list[str] = []
        self._replies: collections.deque[Reply] = collections.deque()
        self._responder: Callable[[dict], Any] | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> FakeModelServer:
        if self._httpd is not None:
            return self
        self._stopping.clear()
        self._httpd = ThreadingHTTPServer((self.host, 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-llm", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._stopping.set()  # wakes delayed replies
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> FakeModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("FakeModelServer is not started")
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    # -- script ------------------------------------------------------------------------------------------
    def reply_json(self, obj: Any) -> FakeModelServer:
        """The next completion's content is ``json.dumps(obj)``."""
        return self._push(Reply(content=json.dumps(obj)))

    def reply_text(self, text: str) -> FakeModelServer:
        """The next completion's content is ``text`` (prose, or deliberately not JSON)."""
        return self._push(Reply(content=text))

    def reply_raw(self, body: str, *, status: int = 200, content_type: str = "application/json") -> FakeModelServer:
        """The next HTTP response body is ``body`` verbatim (e.g. broken JSON instead of a completion)."""
        return self._push(Reply(status=status, body=body, content_type=content_type))

    def reply_delay(self, seconds: float, obj: Any) -> FakeModelServer:
        """Wait ``seconds`` before answering ``obj`` as JSON content (client timeouts)."""
        return self._push(Reply(content=json.dumps(obj), delay=seconds))

    def reply_status(self, status: int, message: str = "scripted failure") -> FakeModelServer:
        """Answer the next request with an HTTP error in the OpenAI error shape."""
        body = json.dumps({"error": {"message": message, "type": "server_error", "code": status}})
        return self._push(Reply(status=status, body=body))

    def respond_with(self, responder: Callable[[dict], Any] | None) -> FakeModelServer:
        """Answer from ``responder(request_body)`` whenever the queue is empty: a ``str`` is the content,
        anything else is sent as JSON content, a :class:`Reply` is used as is."""
        self._responder = responder
        return self

    def reset(self) -> None:
        with self._lock:
            self._replies.clear()
            self.requests.clear()
            self.paths.clear()
        self._responder = None

    @property
    def pending(self) -> int:
        return len(self._replies)

    def _push(self, reply: Reply) -> FakeModelServer:
        with self._lock:
            self._replies.append(reply)
        return self

    def _next_reply(self, body: dict) -> Reply:
        with self._lock:
            self.requests.append(body)
            if self._replies:
                return self._replies.popleft()
        if self._responder is not None:
            answer = self._responder(body)
            if isinstance(answer, Reply):
                return answer
            return Reply(content=answer if isinstance(answer, str) else json.dumps(answer))
        return Reply(status=500, body=json.dumps({"error": {"message": "fake model: no scripted reply"}}))


def _handler_for(server: FakeModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet test output
            return

        def _send(self, status: int, body: str, content_type: str = "application/json") -> None:
            payload = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up (timeouts)
                self.wfile.write(payload)

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                self._send(200, json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}))
            else:
                self._send(404, json.dumps({"error": {"message": "not found"}}))

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            server.paths.append(self.path)
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, json.dumps({"error": {"message": f"no route {self.path}"}}))
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send(400, json.dumps({"error": {"message": "request body is not JSON"}}))
                return
            reply = server._next_reply(body)
            if reply.delay and server._stopping.wait(reply.delay):
                return  # server stopping: drop the request
            if reply.body is not None:
                self._send(reply.status, reply.body, reply.content_type)
            else:
                answer = completion(reply.content or "", model=body.get("model", MODEL))
                self._send(reply.status, json.dumps(answer))

    return Handler
