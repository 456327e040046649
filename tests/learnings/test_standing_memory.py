"""Standing memory (issue 24.1): the preferences and decisions of a session's scopes reach its prompt whatever
the input's words, within a bounded share of learned_context; facts stay query-ranked."""

from __future__ import annotations

import pytest

from kheish import composition
from learnings import retrieval, standing
from learnings.learning_policy import RetrievalConfig
from memory.sections import estimate_tokens
from memory.sessions import learning_scope_keys
from tests.conftest import assert_problem
from tests.factories import ProjectFactory, SessionFactory
from tests.support.learnings import learning, set_policy

pytestmark = pytest.mark.django_db

FOLLOW_UPS = (
    "How big is the disk?",
    "How big is /var/log?",
    "hello",
    "What's eating the space in my home folder?",
    "Can you check the usage of /srv/backups",
    "thanks!",
)


def _run(client, session_id: str, content: str) -> dict:
    run = client.post(f"/v1/sessions/{session_id}/runs", {"input": {"content": content}}, format="json")
    assert run.status_code == 202, run.content
    body = run.json()
    assert client.post(f"/v1/runs/{body['run_id']}/start", {}, format="json").status_code == 200
    done = client.post(f"/v1/runs/{body['run_id']}/complete", {"output": {"content": "Noted."}}, format="json")
    assert done.status_code == 200, done.content
    return body


def _learned(run: dict) -> dict | None:
    return {s["name"]: s for s in run["prompt"]["sections"]}.get("learned_context")


def test_the_worked_scenario_works_for_differently_worded_follow_ups(
    api_client, operator_client, session_id, llm_unconfigured, django_capture_on_commit_callbacks
):
    """README: capture on, "Preference: always report sizes in gigabytes.", publish the candidate; every later
    input of the session gets it, whatever its words (old code: only "How big is the disk?")."""
    policy = operator_client.get("/v1/runtime/learning-policy").json()
    policy["capture"]["semantic_candidates"]["enabled"] = True
    assert operator_client.post("/v1/runtime/learning-policy", {"policy": policy}, format="json").status_code == 200
    with django_capture_on_commit_callbacks(execute=True):  # the capture task, queued when the run completes
        _run(api_client, session_id, "Preference: always report sizes in gigabytes.")
    found = operator_client.get("/v1/learning-candidates?kind=preference&state=pending").json()["results"]
    assert [c["content"] for c in found] == ["always report sizes in gigabytes"]
    published = operator_client.post(
        f"/v1/learning-candidates/{found[0]['candidate_id']}/publish", {"publish_tier": "active"}, format="json"
    )
    assert published.status_code == 200, published.content
    learning_id = published.json()["learning_id"]
    for question in FOLLOW_UPS:
        section = _learned(_run(api_client, session_id, question))
        assert section is not None and learning_id in section["entries"], question
        assert "always report sizes in gigabytes" in section["content"]
        context = api_client.get(f"/v1/sessions/{session_id}/memory-context", {"query": question}).json()
        entry = next(e for e in context["learned_context"]["entries"] if e["learning_id"] == learning_id)
        assert entry["standing"] is True and entry["stated_at_ms"] < entry["published_at_ms"]  # said in run 1


@pytest.fixture
def workspace():
    """Many preferences and decisions about unrelated things, and facts, in one project."""
    project = ProjectFactory(project_id="ops")
    prefs = [
        "Always report sizes in gigabytes.",
        "Use British spelling in every document.",
        "Prefer tabs over spaces for indentation.",
        "Keep answers to three sentences at most.",
        "Show every time in UTC.",
        "Never use emoji in replies.",
        "Use metric units for distances.",
        "Write commit messages in the imperative mood.",
        "Quote prices in euros.",
        "Prefer pytest over unittest for new tests.",
    ]
    for text in prefs:
        learning(text, kind="preference", scope=("project", "ops"))
    learning("We decided to deploy on Tuesday mornings only.", kind="decision", scope=("project", "ops"))
    learning("The backup server is called Nimbus.", scope=("project", "ops"))
    learning("The office cat is named Miso.", scope=("project", "ops"))
    return SessionFactory(projects=[project])


def _select(session, query, **config):
    config = RetrievalConfig(**{"ranker": "hybrid", "max_tokens": 2000, "max_entries": 24, **config})
    return retrieval.learned_selection(
        session=session, scope_keys=learning_scope_keys(session), query=query, config=config
    )


def test_standing_is_relevant_first_and_bounded_for_unrelated_inputs(workspace):
    sizes = _select(workspace, "How big is /var/log?")
    first = sizes.records[0]
    assert first.content == "Always report sizes in gigabytes." and first.learning_id in sizes.standing_ids
    unrelated = _select(workspace, "hello")
    standing_records = [r for r in unrelated.records if r.learning_id in unrelated.standing_ids]
    # Nothing is really relevant to "hello": at most the few nearest and the ambient one, never all eleven.
    assert 1 <= len(standing_records) <= standing.AMBIENT_ENTRIES + standing.SEMANTIC_ENTRIES
    assert all(r.kind in ("preference", "decision") for r in standing_records)
    assert not any(r.kind == "fact" for r in unrelated.records)  # facts stay query-ranked: none for "hello"
    facts = _select(workspace, "what is the backup server called")
    assert any(r.content == "The backup server is called Nimbus." for r in facts.records)
    assert "The office cat is named Miso." not in [r.content for r in facts.records]


def test_the_standing_share_is_bounded_and_can_be_turned_off(workspace):
    for budget in (40, 120, 400):
        chosen = _select(workspace, "Report everything", standing_tokens=budget)
        used = sum(estimate_tokens(r.block.text) for r in chosen.records if r.learning_id in chosen.standing_ids)
        assert used <= standing.budget_for(budget, 2000)
    half = standing.budget_for(5000, 300)
    assert half == 150  # never more than half of the section
    off = _select(workspace, "hello", standing_tokens=0)
    assert off.records == [] and off.standing_ids == frozenset()  # the old behaviour: the floor empties it


def test_the_prompt_section_stays_within_its_budget(api_client, session_id):
    for n in range(12):
        learning(
            f"Preference number {n}: always format table {n} with " + "many careful words " * 4,
            kind="preference",
            scope=("session", session_id),
        )
    set_policy({"mode": "shadow", "retrieval": {"max_tokens": 300, "standing_tokens": 400}})
    section = _learned(_run(api_client, session_id, "hello"))
    assert section is not None and estimate_tokens(section["content"]) <= 300


def test_lexical_ranker_has_no_standing_step(workspace):
    chosen = retrieval.learned_selection(
        session=workspace,
        scope_keys=learning_scope_keys(workspace),
        query="hello",
        config=RetrievalConfig(ranker="lexical"),
    )
    assert chosen.records == [] and chosen.standing_ids == frozenset()


def test_memory_context_marks_standing_entries(workspace):
    context = composition.memory_context(workspace, "what is the backup server called")
    entries = context["learned_context"]["entries"]
    nimbus = next(e for e in entries if "Nimbus" in e["content"])
    assert nimbus["standing"] is False
    assert context["retrieval"]["standing_tokens"] == 400


@pytest.mark.parametrize("value", [-1, 150_001, "many", 1.5, None])
def test_standing_tokens_is_validated(operator_client, value):
    response = operator_client.post(
        "/v1/runtime/learning-policy", {"policy": {"retrieval": {"standing_tokens": value}}}, format="json"
    )
    assert_problem(response, 400, field="policy.retrieval.standing_tokens")
