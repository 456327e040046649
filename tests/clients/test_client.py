"""The Python client against the live server on loopback: agent surface, operator surface, errors, retries."""

from __future__ import annotations

import json

import httpx2
import pytest

from tests.clients.conftest import PREFERENCE, PREFERENCE_CONTENT

pytestmark = pytest.mark.django_db(transaction=True)


def test_agent_loop_and_worked_scenario(agent_client, ops_client, heuristic_capture):
    from kheish_memory import begin_turn, finish_turn

    assert heuristic_capture.learning_policy["capture"]["semantic_candidates"]["enabled"] is True
    session = agent_client.create_session(metadata={"purpose": "client test"})
    assert session.session_id.startswith("session-") and f"session:{session.session_id}" in session.learning_scopes

    first = begin_turn(agent_client, session.session_id, PREFERENCE)
    assert first.run.status == "running" and first.memory == "" and first.prompt == PREFERENCE
    done = finish_turn(agent_client, first, output="Noted.")
    assert done.status == "completed" and done.terminal

    # The heuristic captured the labelled preference as a pending daemon candidate; it is not published.
    queue = ops_client.review_queue(kind="preference")
    assert [c.content for c in queue.results] == [PREFERENCE_CONTENT]
    candidate = queue.results[0]
    assert (candidate.origin, candidate.state, candidate.confidence) == ("daemon", "pending", 98)
    assert candidate.source.run_id == first.run_id
    assert agent_client.memory_context(session.session_id, query="sizes").learned_context is None

    learning = ops_client.publish_candidate(candidate.candidate_id)
    assert (learning.status, learning.policy_actor, learning.content) == ("active", "operator", PREFERENCE_CONTENT)

    second = begin_turn(agent_client, session.session_id, "Report the disk usage sizes for /var.")
    assert PREFERENCE_CONTENT in second.memory
    assert second.run.prompt.section("learned_context").entries == [learning.learning_id]
    assert second.memory in second.prompt and second.prompt.endswith("Report the disk usage sizes for /var.")
    assert second.messages("You are terse.")[0]["content"].startswith("You are terse.\n\n# Learned Context")
    failed = finish_turn(agent_client, second, error="model timed out")
    assert (failed.status, failed.error) == ("failed", "model timed out")

    search = agent_client.memory_search(session.session_id, query="gigabytes")
    assert any(r.kind == "learning" and r.source_id == learning.learning_id for r in search.results)
    context = agent_client.memory_context(session.session_id, query="disk sizes")
    assert PREFERENCE_CONTENT in context.rendered()


def test_every_run_action(agent_client):
    session = agent_client.create_session()
    run = agent_client.open_run(session.session_id, "do the thing", metadata={"k": "v"})
    assert run.status == "queued" and run.input_metadata == {"k": "v"}
    assert agent_client.start_run(run.run_id).status == "running"
    agent_client.tool_call_started(run.run_id, "call-1", "shell", input={"cmd": "ls"})
    agent_client.tool_call_finished(run.run_id, "call-1", output="a b", is_error=False)
    assert agent_client.record_output(run.run_id, "partial").status == "running"
    assert agent_client.wait_for_approval(run.run_id, ["req-1"]).status == "waiting_for_approval"
    assert agent_client.resume_run(run.run_id).status == "running"
    waiting = agent_client.wait_for_user_question(run.run_id, ["q-1"], question="which dir?")
    assert waiting.status == "waiting_for_user_question"
    assert agent_client.resume_run(run.run_id, resolution={"answer": "/var"}).status == "running"
    assert agent_client.interrupt_run(run.run_id).status == "interrupted"

    other = agent_client.open_run(session.session_id, "second")
    assert agent_client.cancel_run(other.run_id).status == "cancelled"
    third = agent_client.open_run(session.session_id, "third")
    agent_client.start_run(third.run_id)
    assert agent_client.complete_run(third.run_id, output="ok").status == "completed"

    assert agent_client.get_run(third.run_id).outputs
    runs = agent_client.list_runs(session_id=session.session_id)
    assert runs.count == 3 and {r.status for r in runs.results} == {"interrupted", "cancelled", "completed"}
    events = agent_client.run_events(run.run_id)
    assert events.count > 0 and events.results[0].event["type"] == "input_received"
    assert agent_client.session_events(session.session_id, after_offset=0).count >= events.count
    assert agent_client.session_context(session.session_id).session_id == session.session_id
    assert agent_client.list_sessions().count == 1


def test_problem_fields_on_errors(agent_client, other_agent_client):
    from kheish_memory import KheishError

    session = agent_client.create_session()
    run = agent_client.open_run(session.session_id, "x")
    with pytest.raises(KheishError) as conflict:
        agent_client.complete_run(run.run_id, output="too early")
    assert conflict.value.status == 409 and conflict.value.problem_code == "runs/invalid_transition"
    assert "queued" in conflict.value.detail

    with pytest.raises(KheishError) as busy:
        agent_client.open_run(session.session_id, "y")
    assert busy.value.problem_code == "sessions/session_busy"

    with pytest.raises(KheishError) as invalid:
        agent_client.propose_candidate(scope_kind="session", scope_id=session.session_id, kind="fact", content="")
    assert invalid.value.status == 400 and invalid.value.detail

    with pytest.raises(KheishError) as hidden:
        other_agent_client.get_session(session.session_id)
    assert hidden.value.status == 404

    with pytest.raises(KheishError) as forbidden:
        agent_client.get_learning_policy()
    assert (forbidden.value.status, forbidden.value.problem_code) == (403, "auth/forbidden")


def test_bad_key_and_unreachable_server(base_url):
    from kheish_memory import KheishClient, KheishError

    with KheishClient(base_url, "khm_nope_nope") as client, pytest.raises(KheishError) as denied:
        client.list_sessions()
    assert (denied.value.status, denied.value.problem_code) == (401, "auth/unauthenticated")

    with KheishClient("http://127.0.0.1:9", "k", retries=1, backoff=0) as client, pytest.raises(KheishError) as down:
        client.list_sessions()
    assert (down.value.status, down.value.code) == (0, "unreachable")


def test_open_run_is_retried_with_one_idempotency_key(base_url, agent_key, agent_client):
    """A 503 on the first attempt (from a proxy in front of the service) is retried with the same body, so the
    same idempotency key; a non-idempotent call that gets a 503 is not retried."""
    from kheish_memory import KheishClient, KheishError

    session = agent_client.create_session()
    real = httpx2.HTTPTransport()
    seen: list[tuple[str, str, bytes]] = []
    fail_next = [True]

    def flaky(request: httpx2.Request) -> httpx2.Response:
        seen.append((request.method, request.url.path, request.read()))
        if fail_next[0]:
            fail_next[0] = False
            return httpx2.Response(
                503, json={"status": 503, "code": "unavailable", "domain": "proxy", "detail": "try again"}
            )
        return real.handle_request(request)

    with KheishClient(base_url, agent_key.plaintext, transport=httpx2.MockTransport(flaky), backoff=0) as client:
        run = client.open_run(session.session_id, "hello")
        assert len(seen) == 2 and seen[0] == seen[1] and b'"idempotency_key"' in seen[0][2]
        assert client.list_runs(session_id=session.session_id).count == 1
        key = json.loads(seen[0][2])["idempotency_key"]

        seen.clear()
        fail_next[0] = True
        with pytest.raises(KheishError) as once:
            client.start_run(run.run_id)
        assert (once.value.status, once.value.problem_code, len(seen)) == (503, "proxy/unavailable", 1)
        assert client.get_run(run.run_id).status == "queued"

    # What makes the retry safe: the same key answers the first run instead of opening a second one.
    assert agent_client.open_run(session.session_id, "hello", idempotency_key=key).run_id == run.run_id


def test_operator_surface(ops_client, agent_client):
    from kheish_memory import KheishError

    session = agent_client.create_session()
    candidate = agent_client.propose_candidate(
        scope_kind="session",
        scope_id=session.session_id,
        kind="fact",
        content="The project codename is Atlas.",
        confidence=90,
    )
    assert (candidate.origin, candidate.state) == ("api", "pending")
    other = agent_client.propose_candidate(scope_kind="workspace", kind="decision", content="Ship on Fridays.")
    assert ops_client.reject_candidate(other.candidate_id).state == "rejected"

    learning = ops_client.publish_candidate(candidate.candidate_id, publish_tier="active")
    assert agent_client.get_learning(learning.learning_id).content == "The project codename is Atlas."
    replacement = ops_client.supersede_learning(learning.learning_id, "The project codename is Borealis.")
    assert replacement.supersedes == learning.learning_id
    assert ops_client.get_learning(learning.learning_id).status == "superseded"
    revoked = ops_client.revoke_learning(replacement.learning_id, reason="wrong project")
    assert (revoked.status, revoked.revoked_reason) == ("revoked", "wrong project")

    third = agent_client.propose_candidate(scope_kind="workspace", kind="fact", content="The build uses Bazel.")
    ops_client.publish_candidate(third.candidate_id)
    matched = ops_client.revoke_matching(query="bazel", reason="migrated")
    assert [learn.content for learn in matched] == ["The build uses Bazel."]
    assert ops_client.list_learnings(status="revoked").count == 2

    run_policy = ops_client.get_run_memory_policy()
    settings = ops_client.set_run_memory_policy(run_policy.model_copy(update={"max_prompt_entries": 2}))
    assert settings.run_memory_policy["max_prompt_entries"] == 2
    with pytest.raises(KheishError) as stale:
        ops_client.set_run_memory_policy(run_policy, expected_revision=0)
    assert stale.value.problem_code == "runtime/runtime_revision_conflict"
    preview = ops_client.redaction_preview("mail me at a@example.com")
    assert preview.redaction_count >= 1 and "a@example.com" not in preview.text
    assert ops_client.status().health["ok"] in (True, False)

    with pytest.raises(KheishError) as denied:
        agent_client.publish_candidate(candidate.candidate_id)
    assert denied.value.status == 403


def test_skill_rollout_surface(ops_client, agent_client):
    procedure = ops_client.propose_candidate(
        scope_kind="workspace", kind="procedure", content="To rotate logs: run logrotate -f /etc/logrotate.conf."
    )
    learning = ops_client.publish_candidate(procedure.candidate_id)
    skill = ops_client.promote_skill(
        learning.learning_id,
        skill_name="rotate-logs",
        instructions="Run logrotate -f /etc/logrotate.conf and report the result.",
        description="rotate the logs",
    )
    assert (skill.status, skill.source_learning_id) == ("draft", learning.learning_id)

    session = agent_client.create_session()
    run = agent_client.open_run(session.session_id, "rotate the logs")
    agent_client.start_run(run.run_id)
    agent_client.complete_run(run.run_id, output="rotated: OK")
    verified = ops_client.record_rollout_result(
        "rotate-logs", kind="verification", run_id=run.run_id, expected_output_contains="rotated: OK"
    )
    assert verified.verification_status == "verified" and verified.successful_run_count == 1
    assert (
        ops_client.promote_skill(
            learning.learning_id,
            skill_name="rotate-logs",
            status="verified",
            instructions=skill.instructions,
            description="rotate the logs",
        ).status
        == "verified"
    )
    assert [s.skill_name for s in ops_client.list_learning_skills(status="verified").results] == ["rotate-logs"]
    assert ops_client.revoke_skill("rotate-logs", reason="not needed").status == "revoked"
    assert ops_client.get_learning_skill("rotate-logs").revoked_reason == "not needed"


LIST_CALLS = [
    # (method, arguments, the path and query it sends, the page's model)
    ("list_sessions", {"persona_id": "p", "limit": 5}, "/v1/sessions?persona_id=p&limit=5", "Session"),
    ("session_events", {"session_id": "s-1", "after_offset": 3}, "/v1/sessions/s-1/events?after_offset=3", "LogEntry"),
    ("session_skills", {"session_id": "s-1"}, "/v1/sessions/s-1/skills", "SkillSummary"),
    ("list_runs", {"status": "failed", "offset": 2}, "/v1/runs?status=failed&offset=2", "RunView"),
    ("run_events", {"run_id": "run-1", "limit": 1}, "/v1/runs/run-1/events?limit=1", "LogEntry"),
    ("list_candidates", {"origin": "api"}, "/v1/learning-candidates?origin=api", "LearningCandidateView"),
    ("review_queue", {}, "/v1/learning-candidates?state=pending", "LearningCandidateView"),
    ("list_learnings", {"matched_rule_name": "r"}, "/v1/learnings?matched_rule_name=r", "LearningView"),
    ("list_personas", {}, "/v1/personas", "Persona"),
    ("list_projects", {}, "/v1/projects", "Project"),
    ("list_skills", {"query": "logs"}, "/v1/skills?query=logs", "SkillSummary"),
    ("list_learning_skills", {"status": "active"}, "/v1/learning-skills?status=active", "LearningSkillView"),
]


def test_every_list_sends_its_filters_and_reads_a_page_in_both_flavours():
    """Each list method is one ``GET`` with the filters the caller gave (the ``None`` ones left out), read as a
    ``Page`` of its model, by the sync client and the async one alike."""
    import anyio
    from kheish_memory import AsyncKheishClient, KheishClient

    sent: list[str] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        assert request.method == "GET"
        query = request.url.query.decode()
        sent.append(request.url.path + (f"?{query}" if query else ""))
        return httpx2.Response(200, json={"count": 0, "next": None, "previous": None, "results": []})

    sync = KheishClient("http://kheish.invalid", "k", transport=httpx2.MockTransport(answer))
    pages = [getattr(sync, name)(**arguments) for name, arguments, _, _ in LIST_CALLS]

    async def run_async() -> list:
        async with AsyncKheishClient("http://kheish.invalid", "k", transport=httpx2.MockTransport(answer)) as client:
            return [await getattr(client, name)(**arguments) for name, arguments, _, _ in LIST_CALLS]

    pages += anyio.run(run_async)
    expected = [path for _, _, path, _ in LIST_CALLS]
    assert sent == expected + expected
    models = [f"Page[{model}]" for _, _, _, model in LIST_CALLS]
    assert [type(page).__name__ for page in pages] == models + models
