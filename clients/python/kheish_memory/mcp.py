"""An MCP server for Kheish Memory, built on the /v1 client (install the ``[mcp]`` extra).

Tools: ``recall`` (memory-context + memory-search for a session), ``remember`` (propose a learning candidate:
the learning policy and operators decide, it is never published by this tool) and ``record_run`` (one run and
its outcome). Resources: ``kheish://session/memory`` (the current session's memory card) and
``kheish://sessions/{session_id}/memory``.

Nothing here is trusted beyond the caller's API key: every tool is /v1 calls made with that key, so an agent key
can do through MCP exactly what it can do through /v1 (another agent's session is a 404, operator actions are
403, and there is no tool that publishes, revokes or changes a policy).

Transports:

* stdio (default): ``kheish-memory-mcp`` with ``KHEISH_BASE_URL`` and ``KHEISH_API_KEY`` in the environment;
  ``KHEISH_SESSION_ID`` pins the current session (else one is created on first use, with ``KHEISH_PERSONA_ID``
  and ``KHEISH_PROJECT_IDS`` (comma-separated) when set).
* streamable HTTP: ``kheish-memory-mcp --transport http --port 8765`` with ``KHEISH_BASE_URL``; each request
  must carry ``Authorization: Bearer <api key>`` (no or an invalid key: 401; past /v1's auth-failure limit:
  429 with ``Retry-After``, as /v1 answers), and that key is what the /v1 calls use. The server holds no key
  of its own. The current session is the ``X-Kheish-Session`` header when sent, else one session per key,
  created on first use.

Logging: quiet by default over stdio (warnings and errors only, on stderr: an MCP host shows stderr to its user);
``--log-level INFO`` or ``KHEISH_MCP_LOG_LEVEL=INFO`` logs every /v1 call. Over HTTP the default is ``INFO``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections import OrderedDict
from typing import Any, Literal

from pydantic import BaseModel

from kheish_memory.client import AsyncKheishClient
from kheish_memory.errors import KheishError
from kheish_memory.models import Session, SessionMemoryContextView

try:
    from mcp.server.auth.middleware.auth_context import get_access_token
    from mcp.server.auth.provider import AccessToken
    from mcp.server.auth.settings import AuthSettings
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ResourceError, ToolError
    from mcp.types import ToolAnnotations
except ImportError as exc:  # pragma: no cover
    raise ImportError("the MCP server needs the 'mcp' extra: pip install 'kheish-memory-client[mcp]'") from exc

SESSION_HEADER = "x-kheish-session"
INSTRUCTIONS = (
    "Kheish Memory keeps what this agent may remember. Call `recall` before answering to get the memory that "
    "applies (durable learnings and recent runs of this session), `record_run` after a task to report the "
    "input and its outcome (completed runs feed recovered memory and learning capture), and `remember` to "
    "propose something worth keeping: it becomes a candidate that the learning policy and an operator review; "
    "it is never published directly."
)


def _fingerprint(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _tool_error(exc: KheishError) -> ToolError:
    field = f" (field {exc.field})" if exc.field else ""
    return ToolError(f"{exc.status} {exc.problem_code}: {exc.detail}{field}")


class Principal:
    """One API key: its /v1 client and its current session."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        session_id: str | None = None,
        persona_id: str | None = None,
        project_ids: list[str] | None = None,
    ):
        self.client = AsyncKheishClient(base_url, api_key)
        self.session_id = session_id
        self.persona_id = persona_id
        self.project_ids = project_ids

    async def current_session(self, requested: str | None) -> Session:
        if requested:
            return await self.client.get_session(requested)
        if self.session_id is None:
            try:
                session = await self.client.create_session(
                    persona_id=self.persona_id,
                    project_ids=self.project_ids,
                    metadata={"created_by": "kheish-memory-mcp"},
                )
            except KheishError as exc:
                setting = {"project_ids": "KHEISH_PROJECT_IDS", "persona_id": "KHEISH_PERSONA_ID"}.get(exc.field or "")
                if setting is None:
                    raise
                raise ToolError(
                    f"{_tool_error(exc)} [the session this server creates binds {setting} from its "
                    f"configuration: fix the ids there, or have an operator create and grant them]"
                ) from exc
            self.session_id = session.session_id
            return session
        return await self.client.get_session(self.session_id)


class Backend:
    """Where a tool call's key and session come from: the environment (stdio) or the HTTP request (HTTP)."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        session_id: str | None = None,
        persona_id: str | None = None,
        project_ids: list[str] | None = None,
        max_principals: int = 256,
    ):
        self.base_url = base_url.rstrip("/")
        self.fixed = (
            Principal(self.base_url, api_key, session_id=session_id, persona_id=persona_id, project_ids=project_ids)
            if api_key
            else None
        )
        self.persona_id, self.project_ids = persona_id, project_ids
        self._principals: OrderedDict[str, Principal] = OrderedDict()
        self._max = max_principals

    def principal(self, ctx: Context | None) -> Principal:
        if self.fixed is not None:
            return self.fixed
        token = get_access_token()
        if token is None:  # the HTTP app refuses unauthenticated requests before they get here
            raise ToolError("401 auth/unauthenticated: no API key on this request")
        fp = _fingerprint(token.token)
        principal = self._principals.get(fp)
        if principal is None:
            principal = Principal(self.base_url, token.token, persona_id=self.persona_id, project_ids=self.project_ids)
            self._principals[fp] = principal
            if len(self._principals) > self._max:
                self._principals.popitem(last=False)
        self._principals.move_to_end(fp)
        return principal

    @staticmethod
    def requested_session(ctx: Context | None, session_id: str | None) -> str | None:
        if session_id:
            return session_id
        headers = ctx.headers if ctx is not None else None
        return headers.get(SESSION_HEADER) if headers else None


class ApiKeyVerifier:
    """The HTTP transport's token verifier: a bearer token is valid when /v1 accepts it (cached briefly)."""

    def __init__(self, base_url: str, ttl_seconds: float = 30.0):
        self.base_url = base_url
        self.ttl = ttl_seconds
        self._valid: dict[str, float] = {}

    async def check(self, token: str) -> KheishError | None:
        """None when /v1 accepts ``token`` (cached for ``ttl_seconds``), else the /v1 error: 401/403 for a bad
        key, 429 once /v1's auth-failure limits trip, 5xx or status 0 when the service is unavailable."""
        fp = _fingerprint(token)
        now = time.monotonic()
        if self._valid.get(fp, 0.0) >= now:
            return None
        try:
            async with AsyncKheishClient(self.base_url, token) as client:
                await client.list_sessions(limit=1)
        except KheishError as exc:
            self._valid.pop(fp, None)
            return exc
        self._valid[fp] = now + self.ttl
        return None

    async def verify_token(self, token: str) -> AccessToken | None:
        error = await self.check(token)
        if error is not None:
            if error.status in (401, 403):
                return None
            raise error
        return AccessToken(token=token, client_id=f"kheish-key-{_fingerprint(token)[:12]}", scopes=[])


class AuthPassThrough:
    """ASGI wrapper of the HTTP transport: a bearer key /v1 refuses is answered here with /v1's own status and
    problem (401 with ``WWW-Authenticate``, 429 with ``Retry-After`` once /v1's per-address auth-failure limit
    trips, 503 when the service cannot be reached), instead of the SDK's auth layer turning anything but a
    401 into a 500. Requests without a bearer key and accepted keys go on to the SDK (which finds the key in the
    verifier's cache)."""

    def __init__(self, app, verifier: ApiKeyVerifier):
        self.app = app
        self.verifier = verifier

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {name.lower(): value for name, value in scope.get("headers") or []}
        scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return await self.app(scope, receive, send)
        error = await self.verifier.check(token.strip())
        if error is None:
            return await self.app(scope, receive, send)
        await self._refuse(error, send)

    @staticmethod
    async def _refuse(error: KheishError, send) -> None:
        status = error.status if error.status in (401, 403, 429) else 503
        problem = (
            dict(error.problem)
            if error.problem
            else {
                "status": status,
                "code": "service_unavailable" if status == 503 else error.code,
                "domain": error.domain,
                "detail": error.detail,
            }
        )
        problem["status"] = status
        extra: list[tuple[bytes, bytes]] = []
        if status == 401:
            extra.append((b"www-authenticate", b'Bearer realm="kheish"'))
        retry_after = problem.get("retry_after")
        if status in (429, 503):
            wait = retry_after if isinstance(retry_after, int) and retry_after > 0 else 5
            extra.append((b"retry-after", str(wait).encode()))
        body = json.dumps(problem).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/problem+json"),
                    (b"content-length", str(len(body)).encode()),
                    *extra,
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


# ---- tool payloads ------------------------------------------------------------------------------------------


class ToolCallRecord(BaseModel):
    """One tool call made during the run, reported with it."""

    name: str
    input: Any = None
    output: Any = None
    is_error: bool = False


def _card(context: SessionMemoryContextView) -> str:
    learned = (context.learned_context or {}).get("entries") or []
    recovered = (context.recovered_memory or {}).get("entries") or []
    head = (
        f"Session {context.session_id}: {len(learned)} learnings · {len(recovered)} recovered runs eligible "
        f"for the next prompt.\nScopes: {', '.join(context.learning_scopes)}"
    )
    body = context.rendered()
    return f"{head}\n\n{body}" if body else head


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def build_server(
    backend: Backend,
    *,
    auth: AuthSettings | None = None,
    token_verifier: ApiKeyVerifier | None = None,
    log_level: str = "WARNING",
) -> MCPServer:
    server = MCPServer(
        "kheish-memory",
        instructions=INSTRUCTIONS,
        version="0.1.0",
        auth=auth,
        token_verifier=token_verifier,
        log_level=log_level,
    )

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False))
    async def recall(
        ctx: Context, query: str | None = None, session_id: str | None = None, limit: int = 8
    ) -> dict[str, Any]:
        """Recall what this agent may use for a task: the memory the next run of the session would receive
        (published learnings and recovered runs, rendered as prompt sections) and, with a query, the best
        matching learnings, runs and skills. Read-only."""
        principal = backend.principal(ctx)
        try:
            session = await principal.current_session(backend.requested_session(ctx, session_id))
            context = await principal.client.memory_context(session.session_id, query=query)
            search = (
                await principal.client.memory_search(session.session_id, query=query, limit=limit) if query else None
            )
        except KheishError as exc:
            raise _tool_error(exc) from exc
        return {
            "session_id": session.session_id,
            "memory": context.rendered(),
            "learnings": (context.learned_context or {}).get("entries") or [],
            "recovered_runs": (context.recovered_memory or {}).get("entries") or [],
            "matches": [
                r.model_dump(include={"kind", "source_id", "title", "excerpt", "score", "scope", "prompt_eligible"})
                for r in (search.results if search else [])
            ],
        }

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False))
    async def remember(
        ctx: Context,
        content: str,
        kind: Literal["preference", "fact", "decision"] = "fact",
        scope: Literal["session", "persona", "project", "workspace"] = "session",
        project_id: str | None = None,
        confidence: int | None = None,
        session_id: str | None = None,
    ) -> dict[str, Any]:
        """Propose a durable learning (a preference, fact or decision) in a scope of the session. It becomes a
        *candidate*: the learning policy and an operator review it, and only a published learning ever reaches
        prompts. This tool never publishes, and secrets are refused."""
        principal = backend.principal(ctx)
        try:
            session = await principal.current_session(backend.requested_session(ctx, session_id))
            scope_id: str | None
            if scope == "session":
                scope_id = session.session_id
            elif scope == "persona":
                if not session.persona_id:
                    raise ToolError(f"session {session.session_id} has no persona; use scope session or project")
                scope_id = session.persona_id
            elif scope == "project":
                scope_id = project_id or (session.project_ids[0] if len(session.project_ids) == 1 else None)
                if not scope_id:
                    raise ToolError(f"name the project_id (session projects: {session.project_ids or 'none'})")
            else:
                scope_id = None
            candidate = await principal.client.propose_candidate(
                scope_kind=scope,
                scope_id=scope_id,
                kind=kind,
                content=content,
                confidence=confidence,
                source={"session_id": session.session_id, "agent_id": session.agent_id},
            )
        except KheishError as exc:
            raise _tool_error(exc) from exc
        return {
            "candidate_id": candidate.candidate_id,
            "state": candidate.state,
            "scope": f"{candidate.scope.kind}:{candidate.scope.id}",
            "kind": candidate.kind,
            "content": candidate.content,
            "note": "proposed for review; it reaches prompts only once published by the learning policy or an operator",
        }

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False))
    async def record_run(
        ctx: Context,
        input: str,
        output: str | None = None,
        status: Literal["completed", "failed", "cancelled", "interrupted"] = "completed",
        error: str | None = None,
        tool_calls: list[ToolCallRecord] | None = None,
        session_id: str | None = None,
    ) -> dict[str, Any]:
        """Record one run of the session and its outcome: the user's input, the tool calls made, the final
        output, and how it ended. A completed run becomes recovered memory for later runs and may yield
        learning candidates (for review, never published directly). Returns the memory the run was given."""
        principal = backend.principal(ctx)
        client = principal.client
        try:
            session = await principal.current_session(backend.requested_session(ctx, session_id))
            run = await client.open_run(session.session_id, input)
            if status == "cancelled":
                final = await client.cancel_run(run.run_id)
            else:
                await client.start_run(run.run_id)
                for index, call in enumerate(tool_calls or []):
                    call_id = f"call-{index + 1}"
                    await client.tool_call_started(run.run_id, call_id, call.name, input=call.input)
                    await client.tool_call_finished(run.run_id, call_id, output=call.output, is_error=call.is_error)
                if status == "completed":
                    final = await client.complete_run(run.run_id, output=output)
                else:
                    if output:
                        await client.record_output(run.run_id, output)
                    final = (
                        await client.fail_run(run.run_id, error or "failed")
                        if status == "failed"
                        else await client.interrupt_run(run.run_id)
                    )
        except KheishError as exc:
            raise _tool_error(exc) from exc
        sections = run.prompt.sections if run.prompt else []
        return {
            "session_id": session.session_id,
            "run_id": final.run_id,
            "status": final.status,
            "memory_given": {s.name: s.entries for s in sections},
        }

    async def _memory_card(ctx: Context | None, session_id: str | None) -> str:
        principal = backend.principal(ctx)
        try:
            session = await principal.current_session(backend.requested_session(ctx, session_id))
            return _card(await principal.client.memory_context(session.session_id))
        except KheishError as exc:
            raise ResourceError(f"{exc.status} {exc.problem_code}: {exc.detail}") from exc

    @server.resource("kheish://session/memory", name="session-memory", mime_type="text/markdown")
    async def current_memory() -> str:
        """The current session's memory card: what its next run would receive."""
        return await _memory_card(None, None)

    @server.resource("kheish://sessions/{session_id}/memory", name="memory-of-session", mime_type="text/markdown")
    async def session_memory(session_id: str, ctx: Context) -> str:
        """A session's memory card (your own sessions only)."""
        return await _memory_card(ctx, session_id)

    return server


def _env_list(name: str) -> list[str] | None:
    raw = os.environ.get(name, "")
    items = [item.strip() for item in raw.split(",") if item.strip()]
    return items or None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="kheish-memory-mcp", description="Kheish Memory MCP server")
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--path", default="/mcp", help="streamable HTTP endpoint path")
    parser.add_argument("--base-url", default=os.environ.get("KHEISH_BASE_URL"))
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default=(os.environ.get("KHEISH_MCP_LOG_LEVEL") or "").upper() or None,
        help="stderr log level (KHEISH_MCP_LOG_LEVEL); default WARNING over stdio, INFO over HTTP",
    )
    args = parser.parse_args(argv)
    if args.log_level is not None and args.log_level not in LOG_LEVELS:
        parser.error(f"KHEISH_MCP_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}")
    if not args.base_url:
        parser.error("set KHEISH_BASE_URL (or --base-url) to the Kheish Memory service, e.g. http://127.0.0.1:8000")
    persona_id, project_ids = os.environ.get("KHEISH_PERSONA_ID") or None, _env_list("KHEISH_PROJECT_IDS")

    if args.transport == "stdio":
        api_key = os.environ.get("KHEISH_API_KEY")
        if not api_key:
            parser.error("set KHEISH_API_KEY to the agent's API key")
        backend = Backend(
            args.base_url,
            api_key=api_key,
            session_id=os.environ.get("KHEISH_SESSION_ID") or None,
            persona_id=persona_id,
            project_ids=project_ids,
        )
        build_server(backend, log_level=args.log_level or "WARNING").run("stdio")
        return

    # HTTP: no key of its own; the caller's bearer key is verified against /v1 and used for every call.
    backend = Backend(args.base_url, persona_id=persona_id, project_ids=project_ids)
    auth = AuthSettings(issuer_url=args.base_url, resource_server_url=None, required_scopes=[])
    verifier = ApiKeyVerifier(args.base_url)
    server = build_server(backend, auth=auth, token_verifier=verifier, log_level=args.log_level or "INFO")
    app = AuthPassThrough(
        server.streamable_http_app(streamable_http_path=args.path, stateless_http=True, host=args.host), verifier
    )
    print(f"kheish-memory-mcp: streamable HTTP on http://{args.host}:{args.port}{args.path}", file=sys.stderr)
    import uvicorn  # a dependency of the mcp SDK's HTTP transport

    uvicorn.run(app, host=args.host, port=args.port, log_level=server.settings.log_level.lower())


if __name__ == "__main__":  # pragma: no cover
    main()
