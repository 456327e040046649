"""Issue 19: many agents, one service - tried as a hostile agent would, through every /v1 route.

Three agents: ``a`` is granted project atlas and persona ops-bot, ``b`` project borealis and persona admin-bot,
``c`` project atlas (it shares a project with ``a``). Each test names the defect it pins (19.2 a withdrawn
grant, 19.3 run records through the workspace, 19.4 pending candidates, 19.6 the existence oracle, 19.7 skill
paths); the sweep at the end checks that nothing of ``a``'s - its sessions, runs, run records, pending candidates,
ungranted projects' learnings and skills - reaches ``b`` through any list, detail, filter or search.
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from learnings import services
from learnings.models import LearningCandidate
from memory.models import Run
from tests.conftest import assert_problem, client_for
from tests.factories import LearningFactory, LearningSkillFactory
from tests.support.api import finish
from tests.support.schema import served_schema

pytestmark = pytest.mark.django_db

MARK = "zephyrmark"  # a word only agent a's data holds: it must never appear in a response to b


@pytest.fixture(autouse=True)
def skill_dirs(settings, tmp_path):
    """A private skill root and catalog (never the shared var/test-skills)."""
    from skills import catalog

    settings.KHEISH_SKILLS_DIR = tmp_path / "skill-root"
    settings.KHEISH_CATALOG_DIR = tmp_path / "catalog"
    settings.KHEISH_SKILLS_DIR.mkdir()
    settings.KHEISH_CATALOG_DIR.mkdir()
    catalog.clear_cache()
    yield settings.KHEISH_CATALOG_DIR
    catalog.clear_cache()


@pytest.fixture
def world(operator_client, api_client, other_client, agent, other_agent_key, make_key, grant):
    for pid in ("atlas", "borealis"):
        operator_client.post("/v1/projects", {"project_id": pid, "name": pid.title()}, format="json")
    for pid in ("ops-bot", "admin-bot"):
        operator_client.post("/v1/personas", {"persona_id": pid, "display_name": pid}, format="json")
    c_key = make_key("agent-three")
    b, c = other_agent_key.api_key.user, c_key.api_key.user
    grant(agent, projects=["atlas"], personas=["ops-bot"])
    grant(b, projects=["borealis"], personas=["admin-bot"])
    grant(c, projects=["atlas"])
    c_client = client_for(c_key.plaintext)

    def session(client, body):
        response = client.post("/v1/sessions", body, format="json")
        assert response.status_code == 201, response.content
        return response.json()["session_id"]

    return SimpleNamespace(
        a=agent,
        b=b,
        c=c,
        a_client=api_client,
        b_client=other_client,
        c_client=c_client,
        ops=operator_client,
        sa=session(api_client, {"project_ids": ["atlas"], "persona_id": "ops-bot", "metadata": {"note": MARK}}),
        sa_bare=session(api_client, {}),
        sb=session(other_client, {"project_ids": ["borealis"], "persona_id": "admin-bot"}),
        sb_bare=session(other_client, {}),
        sc=session(c_client, {"project_ids": ["atlas"]}),
    )


def _policy(ops, **values):
    current = ops.get("/v1/runtime/run-memory-policy").json()
    response = ops.post("/v1/runtime/run-memory-policy", {"policy": {**current, **values}}, format="json")
    assert response.status_code == 200, response.content
    return response


def _context(client, session_id, query=None):
    response = client.get(f"/v1/sessions/{session_id}/memory-context", {"query": query} if query else {})
    assert response.status_code == 200, response.content
    return response.json()


def _learned_ids(context) -> list[str]:
    return [e["learning_id"] for e in (context["learned_context"] or {}).get("entries", [])]


def _search(client, session_id, query):
    response = client.get(f"/v1/sessions/{session_id}/memory-search", {"query": query, "limit": 50})
    assert response.status_code == 200, response.content
    return response.json()


def _hits(search, kind) -> list[str]:
    return sorted(r["source_id"] for r in search["results"] if r["kind"] == kind)


def _new_run_prompt(client, session_id, content) -> dict:
    response = client.post(f"/v1/sessions/{session_id}/runs", {"input": {"content": content}}, format="json")
    assert response.status_code in (200, 201, 202), response.content
    run = response.json()
    client.post(f"/v1/runs/{run['run_id']}/cancel", {}, format="json")
    return {s["name"]: s for s in (run["prompt"] or {}).get("sections", [])}


def _names(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [item["name"] for item in response.json()["results"]]


# ---- 19.2: a withdrawn grant narrows a live session at once ---------------------------------------------------


def test_withdrawn_grant_cuts_off_a_session_already_bound(world):
    atlas = LearningFactory(
        scope_kind="project",
        scope_id="atlas",
        kind="preference",
        content="Atlas deploys always go through the blue pipeline.",
    )
    persona = LearningFactory(
        scope_kind="persona", scope_id="ops-bot", kind="fact", content="The ops-bot pager rotation starts on Monday."
    )
    skill = LearningSkillFactory(
        active=True,
        skill_name="atlas:release",
        source_learning=LearningFactory(scope_kind="project", scope_id="atlas", procedure=True),
    )
    a, sa = world.a_client, world.sa
    query = "blue pipeline deploys pager rotation"
    assert set(_learned_ids(_context(a, sa, query))) == {atlas.public_id, persona.public_id}
    assert a.get("/v1/learnings", {"scope_kind": "project", "scope_id": "atlas"}).json()["count"] == 2
    assert "atlas:release" in _names(a.get(f"/v1/sessions/{sa}/skills"))

    assert (
        world.ops.put(
            f"/v1/agents/{world.a.username}/grants", {"project_ids": [], "persona_ids": []}, format="json"
        ).status_code
        == 200
    )

    session = a.get(f"/v1/sessions/{sa}").json()
    assert session["learning_scopes"] == [f"session:{sa}", "workspace:default"]
    assert (session["project_ids"], session["persona_id"]) == (["atlas"], "ops-bot")  # the binding stays
    context = _context(a, sa, query)
    assert _learned_ids(context) == [] and context["learning_scopes"] == [f"session:{sa}", "workspace:default"]
    assert _hits(_search(a, sa, query), "learning") == []
    assert "learned_context" not in _new_run_prompt(a, sa, "How do atlas deploys and the pager rotation work?")
    for params in (
        {"scope_kind": "project", "scope_id": "atlas"},
        {"scope_kind": "persona", "scope_id": "ops-bot"},
        {"query": "blue pipeline"},
        {},
    ):
        assert a.get("/v1/learnings", params).json()["count"] == 0, params
    assert_problem(a.get(f"/v1/learnings/{atlas.public_id}"), 404, "learnings/learning_not_found")
    assert_problem(
        a.post(
            "/v1/learning-candidates",
            {"scope": {"kind": "project", "id": "atlas"}, "kind": "fact", "content": "Atlas has a new owner."},
            format="json",
        ),
        403,
        "learnings/scope_forbidden",
        field="scope",
    )
    assert_problem(
        a.post(
            "/v1/learning-candidates",
            {"scope": {"kind": "persona", "id": "ops-bot"}, "kind": "fact", "content": "Ops-bot has a new owner."},
            format="json",
        ),
        403,
        "learnings/scope_forbidden",
        field="scope",
    )
    assert "atlas:release" not in _names(a.get(f"/v1/sessions/{sa}/skills"))
    assert "atlas:release" not in _names(a.get("/v1/skills"))
    assert_problem(a.get("/v1/skills/atlas:release"), 404)
    assert a.get("/v1/learning-skills").json()["count"] == 0
    assert_problem(a.get("/v1/learning-skills/atlas:release"), 404)
    assert [s["name"] for s in _context(a, sa)["visible_skills"]] == []
    # the operator still sees everything, and c (still granted atlas) still has the project
    assert world.ops.get("/v1/learnings", {"scope_kind": "project", "scope_id": "atlas"}).json()["count"] == 2
    assert _learned_ids(_context(world.c_client, world.sc, query)) == [atlas.public_id]

    # granted again, the same session sees the project again (its binding never changed)
    world.ops.put(f"/v1/agents/{world.a.username}/grants", {"project_ids": ["atlas"], "persona_ids": []}, format="json")
    assert _learned_ids(_context(a, sa, query)) == [atlas.public_id]
    assert skill.skill_name in _names(a.get(f"/v1/sessions/{sa}/skills"))


# ---- 19.3: run records cross only through a persona or project both agents are granted -------------------------


def test_learning_scopes_search_shares_run_records_only_through_granted_projects(world):
    _policy(world.ops, search_visibility="learning_scopes")
    run_a = finish(world.a_client, world.sa, "Deploy atlas billing alpha", output="atlas alpha deployed")
    run_a_bare = finish(world.a_client, world.sa_bare, "Rotate the bare alpha credentials", output="alpha rotated")
    run_b = finish(world.b_client, world.sb, "Deploy borealis alpha", output="borealis alpha deployed")
    run_c = finish(world.c_client, world.sc, "Check atlas alpha health", output="atlas alpha healthy")

    def runs(client, session_id):
        return _hits(_search(client, session_id, "alpha"), "recovered_run")

    assert runs(world.b_client, world.sb) == [run_b]  # nothing through workspace:default
    assert runs(world.b_client, world.sb_bare) == []
    assert runs(world.a_client, world.sa_bare) == sorted([run_a_bare])
    assert runs(world.a_client, world.sa) == sorted([run_a, run_c])  # atlas: both a and c are granted it
    assert runs(world.c_client, world.sc) == sorted([run_a, run_c])

    # c loses atlas: its runs leave a's search and a's leave its own, though both sessions stay bound
    world.ops.put(f"/v1/agents/{world.c.username}/grants", {"project_ids": [], "persona_ids": []}, format="json")
    assert runs(world.a_client, world.sa) == [run_a]
    assert runs(world.c_client, world.sc) == [run_c]

    # workspace-wide run search is a separate value an operator chooses explicitly
    _policy(world.ops, search_visibility="workspace")
    assert runs(world.b_client, world.sb) == sorted([run_a, run_a_bare, run_b, run_c])
    _policy(world.ops, search_visibility="session_only")
    assert runs(world.a_client, world.sa) == [run_a]


def test_search_visibility_values_are_validated(operator_client):
    current = operator_client.get("/v1/runtime/run-memory-policy").json()
    for value in ("everything", "", None, 1):
        assert_problem(
            operator_client.post(
                "/v1/runtime/run-memory-policy", {"policy": {**current, "search_visibility": value}}, format="json"
            ),
            400,
            field="policy.search_visibility",
        )
    assert operator_client.get("/v1/runtime/run-memory-policy").json() == current
    response = operator_client.post(
        "/v1/runtime/run-memory-policy", {"policy": {**current, "search_visibility": "workspace"}}, format="json"
    )
    assert response.status_code == 200, response.content
    assert operator_client.get("/v1/runtime/run-memory-policy").json()["search_visibility"] == "workspace"
    doc = served_schema(operator_client)
    operation = doc["paths"]["/v1/runtime/run-memory-policy"]["get"]
    node = operation["responses"]["200"]["content"]["application/json"]["schema"]
    while "$ref" in node or "allOf" in node:
        ref = node["$ref"] if "$ref" in node else node["allOf"][0]["$ref"]
        node = doc["components"]["schemas"][ref.rsplit("/", 1)[1]]
        node = node.get("properties", {}).get("search_visibility", node)
    assert node["enum"] == ["session_only", "learning_scopes", "workspace"], node


# ---- 19.4: pending candidates are their proposer's --------------------------------------------------------------


def test_pending_candidates_are_private_to_their_proposer(world):
    a, b = world.a_client, world.b_client
    proposed = a.post(
        "/v1/learning-candidates",
        {
            "scope": {"kind": "workspace"},
            "kind": "fact",
            "content": f"The {MARK} vault sits behind the second gateway.",
        },
        format="json",
    ).json()
    run = Run.objects.get(pk=int(finish(a, world.sa, f"Note the {MARK} build", output="ok").split("-")[1]))
    captured, _ = services.daemon_candidate_create(
        run=run, kind="fact", content=f"The {MARK} build runs nightly.", confidence=70
    )
    mine = {proposed["candidate_id"], captured.public_id}
    assert mine <= {c["candidate_id"] for c in a.get("/v1/learning-candidates").json()["results"]}
    for candidate_id in mine:
        assert a.get(f"/v1/learning-candidates/{candidate_id}").status_code == 200
        assert_problem(b.get(f"/v1/learning-candidates/{candidate_id}"), 404, "learnings/learning_candidate_not_found")
        assert_problem(world.c_client.get(f"/v1/learning-candidates/{candidate_id}"), 404)
    for params in (
        {},
        {"scope_kind": "workspace"},
        {"query": MARK},
        {"state": "pending"},
        {"origin": "daemon"},
        {"scope_kind": "session", "scope_id": world.sa},
    ):
        listed = b.get("/v1/learning-candidates", params)
        assert listed.status_code == 200 and listed.json()["count"] == 0, (params, listed.content)
    assert {c["candidate_id"] for c in world.ops.get("/v1/learning-candidates").json()["results"]} >= mine
    assert LearningCandidate.objects.get(pk=captured.pk).proposed_by == world.a

    # once an operator publishes it, the learning follows scope visibility (workspace: everyone) - the candidate
    # with its provenance stays a's
    learning = world.ops.post(f"/v1/learning-candidates/{proposed['candidate_id']}/publish", {}, format="json").json()
    assert b.get(f"/v1/learnings/{learning['learning_id']}").status_code == 200
    assert_problem(b.get(f"/v1/learning-candidates/{proposed['candidate_id']}"), 404)


# ---- 19.6: no existence oracle -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "existing", "unknown"),
    [("persona_id", "ops-bot", "no-such-persona"), ("project_ids", "atlas", "no-such-project")],
)
def test_unknown_and_ungranted_bindings_answer_alike(world, field, existing, unknown):
    def attempt(value):
        body = {field: [value] if field == "project_ids" else value}
        response = world.b_client.post("/v1/sessions", body, format="json")
        problem = assert_problem(response, 403, "sessions/binding_not_granted", field=field)
        return {k: (v.replace(value, "<id>") if isinstance(v, str) else v) for k, v in problem.items()}

    assert attempt(existing) == attempt(unknown)
    # an operator is told what does not exist
    body = {field: [unknown] if field == "project_ids" else unknown}
    assert_problem(world.ops.post("/v1/sessions", body, format="json"), 400, field=field)


# ---- 19.7: no server paths to agents -------------------------------------------------------------------------


def test_memory_context_never_gives_agents_server_paths(world, skill_dirs, tmp_path):
    from tests.support.skills import write_catalog_skill

    write_catalog_skill(skill_dirs, "code-review", "---\nname: code-review\ndescription: Review code.\n---\nReview.")
    skills = _context(world.a_client, world.sa)["visible_skills"]
    assert [s["name"] for s in skills] == ["code-review"], skills
    assert skills[0]["skill_path"] == "code-review/SKILL.md" and skills[0]["skill_root"] == "code-review"
    assert str(tmp_path) not in json.dumps(skills)
    operator_view = _context(world.ops, world.sa)["visible_skills"]
    assert operator_view[0]["skill_path"].startswith(str(tmp_path))


# ---- the sweep: nothing of a's reaches b through any route ------------------------------------------------------


def test_a_hostile_agent_sees_nothing_of_another_agents_through_any_route(world):
    """b (granted borealis and admin-bot only) probes every /v1 read and write with a's ids, under the widest
    sharing short of ``workspace``; no response carries a's data (the marker word), and every probe of a's ids is
    a 404 or 403 problem."""
    a, b, sa = world.a_client, world.b_client, world.sa
    _policy(world.ops, search_visibility="learning_scopes")
    run_id = finish(a, sa, f"Deploy the {MARK} atlas service", output=f"{MARK} deployed")
    open_run = a.post(f"/v1/sessions/{sa}/runs", {"input": {"content": f"Audit {MARK} again"}}, format="json").json()[
        "run_id"
    ]
    candidate = a.post(
        "/v1/learning-candidates",
        {"scope": {"kind": "workspace"}, "kind": "fact", "content": f"The {MARK} key lives in vault four."},
        format="json",
    ).json()["candidate_id"]
    project_learning = LearningFactory(
        scope_kind="project", scope_id="atlas", kind="fact", content=f"Atlas {MARK} runs on port 8443."
    )
    persona_learning = LearningFactory(
        scope_kind="persona", scope_id="ops-bot", kind="preference", content=f"Ops-bot answers {MARK} pages in French."
    )
    session_learning = LearningFactory(
        scope_kind="session", scope_id=sa, kind="fact", content=f"This session's {MARK} ticket is 42."
    )
    skill = LearningSkillFactory(
        active=True,
        skill_name="atlas:zephyr",
        description=f"Release {MARK} atlas builds",
        source_learning=LearningFactory(scope_kind="project", scope_id="atlas", procedure=True),
    )
    hidden_learnings = [project_learning, persona_learning, session_learning, skill.source_learning]

    responses = []

    def probe(method, url, body=None, params=None, *, denied=False):
        if method == "get":
            response = b.get(url, params or {})
        else:
            response = getattr(b, method)(url, body if body is not None else {}, format="json")
        responses.append((method, url, response))
        if denied:
            assert response.status_code in (403, 404), (method, url, response.status_code, response.content)
            assert response["Content-Type"].startswith("application/problem+json")
        return response

    # a's session, its runs and its projects and persona by id
    for suffix in ("", "/context", "/events", "/memory-context", "/memory-search", "/skills"):
        probe("get", f"/v1/sessions/{sa}{suffix}", denied=True)
    for action in ("runs", "compact"):
        probe("post", f"/v1/sessions/{sa}/{action}", {"input": {"content": "mine now"}}, denied=True)
    for rid in (run_id, open_run):
        for suffix in ("", "/outputs", "/events"):
            probe("get", f"/v1/runs/{rid}{suffix}", denied=True)
        for action, body in (
            ("start", {}),
            ("output", {"content": "x"}),
            ("complete", {}),
            ("fail", {"error": "x"}),
            ("cancel", {}),
            ("interrupt", {}),
            ("resume", {}),
        ):
            probe("post", f"/v1/runs/{rid}/{action}", body, denied=True)
    probe("get", "/v1/projects/atlas", denied=True)
    probe("get", "/v1/personas/ops-bot", denied=True)
    for learning in hidden_learnings:
        probe("get", f"/v1/learnings/{learning.public_id}", denied=True)
    probe("get", f"/v1/learning-candidates/{candidate}", denied=True)
    probe("get", f"/v1/skills/{skill.skill_name}", denied=True)
    probe("get", f"/v1/learning-skills/{skill.skill_name}", denied=True)
    # proposing into a's scopes, or claiming a's work
    for scope in (
        {"kind": "project", "id": "atlas"},
        {"kind": "persona", "id": "ops-bot"},
        {"kind": "session", "id": sa},
        {"kind": "project", "id": "no-such-project"},
    ):
        probe("post", "/v1/learning-candidates", {"scope": scope, "kind": "fact", "content": "Mine now."}, denied=True)
    probe(
        "post",
        "/v1/learning-candidates",
        {
            "scope": {"kind": "workspace"},
            "kind": "fact",
            "content": "Mine.",
            "source": {"run_id": run_id, "session_id": sa},
        },
        denied=True,
    )
    for body in ({"project_ids": ["atlas"]}, {"persona_id": "ops-bot"}):
        probe("post", "/v1/sessions", body, denied=True)

    # every list and filter, and b's own session's context, search and new runs
    lists = {
        "/v1/sessions": [{}, {"persona_id": "ops-bot"}],
        "/v1/runs": [{}, {"session_id": sa}, {"status": "completed"}, {"status": "queued"}],
        "/v1/projects": [{}],
        "/v1/personas": [{}],
        "/v1/learnings": [
            {},
            {"scope_kind": "project", "scope_id": "atlas"},
            {"scope_kind": "persona", "scope_id": "ops-bot"},
            {"scope_kind": "session", "scope_id": sa},
            {"query": MARK},
            {"kind": "fact"},
        ],
        "/v1/learning-candidates": [{}, {"scope_kind": "workspace"}, {"query": MARK}, {"state": "pending"}],
        "/v1/skills": [{}, {"query": MARK}],
        "/v1/learning-skills": [{}, {"status": "active"}],
    }
    for url, variants in lists.items():
        for params in variants:
            response = probe("get", url, params=params)
            assert response.status_code == 200, (url, params, response.content)
    for session_id in (world.sb, world.sb_bare):
        probe("get", f"/v1/sessions/{session_id}/memory-context", params={"query": f"{MARK} atlas deploy"})
        probe("get", f"/v1/sessions/{session_id}/memory-search", params={"query": MARK, "limit": 50})
        probe("get", f"/v1/sessions/{session_id}/memory-search", params={"query": "atlas deploy", "limit": 50})
        probe("get", f"/v1/sessions/{session_id}/skills", params={"query": "atlas"})
        response = probe(
            "post", f"/v1/sessions/{session_id}/runs", {"input": {"content": f"What about {MARK} and atlas deploys?"}}
        )
        assert response.status_code in (200, 201, 202), response.content
        run = response.json()
        probe("post", f"/v1/runs/{run['run_id']}/cancel")
        probe("get", f"/v1/runs/{run['run_id']}")

    # what only a's data holds (b's probes type the marker and a's ids, so a refusal may echo those)
    secrets = [
        "8443",
        "vault four",
        "in French",
        "ticket is 42",
        "atlas service",
        f"{MARK} deployed",
        f"Release {MARK}",
        f"Audit {MARK}",
    ]
    ids = [
        sa,
        world.sa_bare,
        run_id,
        open_run,
        candidate,
        skill.skill_name,
        *(learning.public_id for learning in hidden_learnings),
    ]
    leaked = []
    for method, url, response in responses:
        text = response.content.decode()
        leaked += [(method, url, secret) for secret in secrets if secret in text]
        if response.status_code == 200:
            leaked += [(method, url, i) for i in ids if re.search(rf"(?<![\w-]){re.escape(i)}(?![\w-])", text)]
    assert leaked == []
    # a itself sees its own (the probes above were refused for b, not broken)
    assert MARK in json.dumps(_context(a, sa, MARK))
    assert a.get(f"/v1/learning-candidates/{candidate}").status_code == 200
    assert a.get(f"/v1/skills/{skill.skill_name}").status_code == 200


def test_the_migration_gives_existing_candidates_their_proposer(world):
    """Candidates written before ``proposed_by`` existed: captured ones belong to their run's session owner,
    API ones to the actor of their ``create`` audit row; the rest stay operator-only."""
    import importlib

    from django.apps import apps
    from django.db import connection

    from memory.audit import record_audit
    from tests.factories import LearningCandidateFactory, TerminalRunFactory

    run = TerminalRunFactory(session=world.a.agent_sessions.first())
    captured = LearningCandidateFactory(daemon=True, source_run=run)
    proposed = LearningCandidateFactory()
    record_audit(
        subject_type="learning_candidate",
        subject_id=proposed.public_id,
        action="create",
        actor=world.b,
        to_state="pending",
    )
    orphan = LearningCandidateFactory()
    assert {c.proposed_by_id for c in (captured, proposed, orphan)} == {None}
    migration = importlib.import_module("learnings.migrations.0004_candidate_proposed_by")
    with connection.schema_editor() as editor:
        migration.backfill(apps, editor)
    owners = dict(
        LearningCandidate.objects.filter(pk__in=[captured.pk, proposed.pk, orphan.pk]).values_list("pk", "proposed_by")
    )
    assert owners == {captured.pk: world.a.pk, proposed.pk: world.b.pk, orphan.pk: None}
    assert world.b_client.get(f"/v1/learning-candidates/{proposed.public_id}").status_code == 200
    assert world.b_client.get(f"/v1/learning-candidates/{orphan.public_id}").status_code == 404
