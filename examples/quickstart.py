#!/usr/bin/env python3
"""One full conversation with Kheish Memory over plain HTTP (standard library only; docs/agents.md explains
every call).

    KHEISH_BASE_URL=http://127.0.0.1:8000 \\
    KHEISH_AGENT_KEY=khm_... KHEISH_OPERATOR_KEY=khm_... \\
    python3 examples/quickstart.py

What it does, with the agent key unless it says "operator":
1. opens a session;
2. (operator) turns semantic capture on in the learning policy: with no model configured this is the heuristic
   path, which turns labelled statements (``Preference:``/``Fact:``/``Decision:``) into candidates;
3. runs a turn whose input is "Preference: always report sizes in gigabytes.": start, a tool call, an output,
   complete; on the way it shows the one-active-run rule (409 ``session_busy``) and a problem+json error;
4. proposes a learning of its own (a candidate an operator reviews);
5. (operator) waits for the captured preference candidate and publishes it;
6. runs a second turn and checks that its ``prompt.sections`` ``learned_context`` holds the preference.
Exits 0 when the preference came back, 1 otherwise.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request

BASE_URL = os.environ.get("KHEISH_BASE_URL", "http://127.0.0.1:8000").rstrip("/")
if not BASE_URL.startswith(("http://", "https://")):
    raise SystemExit("KHEISH_BASE_URL must be an http(s) URL")
AGENT_KEY = os.environ.get("KHEISH_AGENT_KEY", "")
OPERATOR_KEY = os.environ.get("KHEISH_OPERATOR_KEY", "")
PREFERENCE = "Preference: always report sizes in gigabytes."


class Problem(Exception):
    """An ``application/problem+json`` answer: ``status``, ``code``, ``domain``, ``detail`` and maybe ``field``."""

    def __init__(self, body: dict):
        super().__init__(f"{body.get('status')} {body.get('domain')}/{body.get('code')}: {body.get('detail')}")
        self.body = body
        self.status = body.get("status")
        self.code = body.get("code")


def call(method: str, path: str, body: dict | None = None, *, key: str = "") -> dict:
    """One /v1 call; JSON in, JSON out; a problem+json answer raises Problem."""
    data = None if body is None else json.dumps(body).encode()
    headers = {
        "Authorization": f"Bearer {key or AGENT_KEY}",
        "Content-Type": "application/json",
        "Accept": "application/json",
    }
    request = urllib.request.Request(BASE_URL + path, data=data, method=method, headers=headers)  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        payload = error.read()
        try:
            raise Problem(json.loads(payload)) from None
        except json.JSONDecodeError:
            raise Problem({"status": error.code, "code": "http_error", "detail": payload[:200]}) from None


def render_prompt(run: dict, user_message: str) -> list[dict]:
    """The chat messages for the model call: the memory sections the service packed for this input (already
    within the budget), then the user's message. The sections are never stored in the journal's input."""
    sections = (run.get("prompt") or {}).get("sections") or []
    memory = "\n\n".join(f"## {s['name']}\n{s['content']}" for s in sections if s.get("content"))
    messages = [{"role": "system", "content": "You are a helpful agent." + (f"\n\n{memory}" if memory else "")}]
    return [*messages, {"role": "user", "content": user_message}]


def fake_model(messages: list[dict]) -> str:
    """Stands in for your model call."""
    if "gigabytes" in messages[0]["content"]:
        return "The log directory holds 1.5 GB."
    return "Noted: sizes in gigabytes from now on."


def turn(session_id: str, user_message: str, *, show_rules: bool = False) -> dict:
    run = call("POST", f"/v1/sessions/{session_id}/runs", {"input": {"content": user_message}})
    print(
        f"  opened {run['run_id']} ({run['status']}); prompt sections:",
        [s["name"] for s in (run["prompt"] or {}).get("sections", [])],
    )
    run_id = run["run_id"]
    if show_rules:
        try:  # one active run per session: a second open while this one is in flight is refused
            call("POST", f"/v1/sessions/{session_id}/runs", {"input": {"content": "meanwhile..."}})
        except Problem as problem:
            print(f"  second open refused as documented: {problem}")
    call("POST", f"/v1/runs/{run_id}/start", {})
    try:
        messages = render_prompt(run, user_message)
        call(
            "POST",
            f"/v1/runs/{run_id}/tool-call-started",
            {"call_id": "call-1", "name": "disk_usage", "input": {"path": "/var/log"}},
        )
        call(
            "POST",
            f"/v1/runs/{run_id}/tool-call-finished",
            {"call_id": "call-1", "output": {"bytes": 1_610_612_736}, "is_error": False},
        )
        reply = fake_model(messages)
        if show_rules:
            try:  # a body the server does not accept: 400 naming the field
                call("POST", f"/v1/runs/{run_id}/output", {"text": reply})
            except Problem as problem:
                print(f"  bad body refused as documented: {problem} (field {problem.body.get('field')!r})")
        call("POST", f"/v1/runs/{run_id}/output", {"content": reply})
        done = call("POST", f"/v1/runs/{run_id}/complete", {})
    except Exception as exc:
        call("POST", f"/v1/runs/{run_id}/fail", {"error": str(exc)[:2000]})  # never leave a run in flight
        raise
    again = call("POST", f"/v1/runs/{run_id}/complete", {})  # terminal actions are idempotent
    assert again["finished_at_ms"] == done["finished_at_ms"]
    print(f"  {run_id} {done['status']}; reply: {reply}")
    return run


def enable_heuristic_capture() -> None:
    policy = call("GET", "/v1/runtime/learning-policy", key=OPERATOR_KEY)
    policy["capture"]["semantic_candidates"]["enabled"] = True
    answer = call("POST", "/v1/runtime/learning-policy", {"policy": policy}, key=OPERATOR_KEY)
    print(f"operator: semantic capture on (learning policy revision {answer['revision']})")


def wait_for_candidate(run_id: str, timeout_s: float = 60.0) -> dict:
    """Capture runs in the worker after the run completes: poll the review queue for the run's candidate."""
    deadline = time.monotonic() + timeout_s
    while True:
        page = call("GET", "/v1/learning-candidates?kind=preference&state=pending&limit=50", key=OPERATOR_KEY)
        for candidate in page["results"]:
            if candidate["source"].get("run_id") == run_id:
                return candidate
        if time.monotonic() > deadline:
            raise SystemExit(f"no preference candidate for {run_id} after {timeout_s:.0f} s: is the worker up?")
        time.sleep(0.5)


def main() -> int:
    if not AGENT_KEY or not OPERATOR_KEY:
        print(
            "set KHEISH_AGENT_KEY and KHEISH_OPERATOR_KEY (make key NAME=my-agent ROLE=agent; "
            "make key NAME=my-ops ROLE=operator)",
            file=sys.stderr,
        )
        return 2
    session_id = call("POST", "/v1/sessions", {})["session_id"]
    print(f"agent: opened {session_id}")
    enable_heuristic_capture()

    print("agent: turn 1")
    first = turn(session_id, PREFERENCE, show_rules=True)

    proposal = call(
        "POST",
        "/v1/learning-candidates",
        {
            "scope": {"kind": "session", "id": session_id},
            "kind": "fact",
            "content": "The log directory is /var/log.",
            "source": {"run_id": first["run_id"]},
        },
    )
    print(f"agent: proposed {proposal['candidate_id']} ({proposal['state']}); an operator reviews it")

    candidate = wait_for_candidate(first["run_id"])
    print(f"operator: captured {candidate['candidate_id']}: {candidate['content']!r}")
    learning = call(
        "POST",
        f"/v1/learning-candidates/{candidate['candidate_id']}/publish",
        {"publish_tier": "active"},
        key=OPERATOR_KEY,
    )
    print(f"operator: published {learning['learning_id']} ({learning['status']})")

    print("agent: turn 2")
    second = turn(session_id, "How big is the log directory?")
    sections = {s["name"]: s["content"] for s in (second["prompt"] or {}).get("sections", [])}
    learned = sections.get("learned_context", "")
    print("learned_context of turn 2:\n" + (learned or "(empty)"))
    if "gigabytes" not in learned:
        print("the preference did not come back", file=sys.stderr)
        return 1
    print("ok: the preference came back in the next run's learned_context")
    return 0


if __name__ == "__main__":
    sys.exit(main())
