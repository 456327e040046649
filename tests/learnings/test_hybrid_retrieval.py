"""The hybrid recall path (issue 12): candidate pools from the full-text and vector indexes, the same gates as
the ORM's querysets, fused ranking, the policy's retrieval bounds through a real run, memory-context and
memory-search, on PostgreSQL with and without pgvector."""

from __future__ import annotations

import pytest

from kheish import composition
from learnings import recall_sql, retrieval
from learnings.learning_policy import RetrievalConfig
from learnings.models import Learning
from memory.clock import now_ms
from memory.sessions import learning_scope_keys
from tests.factories import ProjectFactory, SessionFactory
from tests.support.learnings import learning, set_policy

pytestmark = pytest.mark.django_db

HAYSTACK = [
    "My old sneakers are stored under the bed for now.",
    "I bought a new espresso machine for the office kitchen.",
    "The quarterly invoices go to the accounting team every March.",
    "I adopted a grey cat called Miso last spring.",
    "We decided the deploy window is Tuesday mornings.",
    "I practise the guitar for about forty minutes each evening.",
]


@pytest.fixture
def session():
    project = ProjectFactory(project_id="atlas")
    for text in HAYSTACK:
        learning(text, scope=("project", "atlas"))
    return SessionFactory(projects=[project])


def ids_of(records):
    return [record.learning_id for record in records]


def content_of(learning_id: str) -> str:
    return Learning.objects.get(pk=int(learning_id.rsplit("-", 1)[1])).content


def test_published_learnings_carry_their_embedding(session):
    stored = Learning.objects.values_list("embedding", flat=True)
    assert all(vector is not None and len(vector) == 256 for vector in stored)


def test_a_paraphrase_finds_the_learning(session, vectors):
    keys = learning_scope_keys(session)
    records, _ = retrieval.learned_records(session=session, scope_keys=keys, query="Where do I keep my shoes?")
    assert records and "sneakers" in records[0].content
    records, _ = retrieval.learned_records(session=session, scope_keys=keys, query="what is my pet's name")
    assert records and "Miso" in records[0].content


def test_an_unrelated_input_gets_nothing_unless_it_asks_for_memory(session, vectors):
    keys = learning_scope_keys(session)
    records, _ = retrieval.learned_records(session=session, scope_keys=keys, query="zxqv plorb")
    assert records == []
    records, _ = retrieval.learned_records(session=session, scope_keys=keys, query="zxqv recall plorb")
    assert len(records) == len(HAYSTACK)  # the explicit-memory fallback (§4.7): scope and recency order


def test_max_entries_bounds_the_selection(session, vectors):
    keys = learning_scope_keys(session)
    config = RetrievalConfig(ranker="hybrid", max_tokens=2000, max_entries=2)
    records, truncated = retrieval.learned_records(
        session=session, scope_keys=keys, query="recall everything", config=config
    )
    assert len(records) == 2 and truncated


def test_gates_are_the_querysets(session, vectors):
    """Ranking chooses among the prompt-visible set only: what the pool SQL admits is what the ORM's
    for_prompt / search_visible admit (sensitive, provisional, failed, expired, shadowed rows included)."""
    learning("A sensitive note about the sneakers.", scope=("project", "atlas"), sensitivity="sensitive")
    learning("A provisional note about the sneakers.", scope=("project", "atlas"), tier="provisional")
    learning("An expired note about the sneakers.", scope=("project", "atlas"), expires_at_ms=now_ms() + 1)
    learning("Other project sneakers note.", scope=("project", "other"))
    keys = learning_scope_keys(session)
    at = now_ms() + 5
    for shape, queryset in (
        ("prompt", Learning.objects.for_prompt(keys, at)),
        ("search", Learning.objects.search_visible(keys, at)),
    ):
        expected = set(queryset.values_list("pk", flat=True))
        got = {row[0] for row in recall_sql.recent(shape, scope_keys=keys, at_ms=at, limit=1000)}
        assert got == expected, shape
        pool = recall_sql.pool(
            shape,
            scope_keys=keys,
            at_ms=at,
            words=["sneakers", "note"],
            query_vector=retrieval.embedding.embed_many(["sneakers"])[0].astype(float),
        )
        assert {row[0] for row in pool.rows} <= expected
        assert len(pool.cosines) == len(pool.rows)


def test_the_run_section_is_bounded_by_the_policy(api_client, agent, operator_client):
    budget = ProjectFactory(project_id="budget")
    for n in range(40):
        learning(
            f"Note {n}: the sneakers story number {n} " + "with many extra words " * 6, scope=("project", "budget")
        )
    set_policy({"mode": "shadow", "retrieval": {"ranker": "hybrid", "max_tokens": 600, "max_entries": 24}})
    session = SessionFactory(owner=agent, projects=[ProjectFactory(project_id="budget2"), budget])  # bound, granted
    run = api_client.post(
        f"/v1/sessions/{session.public_id}/runs", {"input": {"content": "tell me the sneakers story"}}, format="json"
    ).json()
    section = {s["name"]: s for s in run["prompt"]["sections"]}["learned_context"]
    assert section["truncated"] and 1 <= len(section["entries"]) < 40
    assert composition.estimate_tokens(section["content"]) <= 600
    context = api_client.get(f"/v1/sessions/{session.public_id}/memory-context").json()
    assert context["retrieval"] == {"ranker": "hybrid", "max_tokens": 600, "max_entries": 24, "standing_tokens": 400}


def test_memory_search_ranks_with_the_same_ranker(session, vectors):
    hits = composition.memory_search(session, "where are my shoes", 10)["results"]
    learning_hits = [hit for hit in hits if hit["kind"] == "learning"]
    assert learning_hits and "sneakers" in learning_hits[0]["excerpt"]
    assert learning_hits[0]["score"] >= learning_hits[-1]["score"]


def test_the_lexical_ranker_stays_selectable(session):
    set_policy({"mode": "shadow", "retrieval": {"ranker": "lexical", "max_tokens": 2000, "max_entries": 24}})
    keys = learning_scope_keys(session)
    records, _ = retrieval.learned_records(session=session, scope_keys=keys, query="Where do I keep my shoes?")
    assert records == []  # §4.7: no shared word, no explicit memory request
    records, _ = retrieval.learned_records(session=session, scope_keys=keys, query="sneakers")
    assert [r.content for r in records] == [HAYSTACK[0]]


def test_policy_rejects_out_of_bound_retrieval(operator_client):
    response = operator_client.post(
        "/v1/runtime/learning-policy", {"policy": {"retrieval": {"max_entries": 0}}}, format="json"
    )
    assert response.status_code == 400
    body = response.json()
    assert body["field"] == "policy.retrieval.max_entries"
    assert body["detail"] == "learning retrieval max_entries must be between 1 and 500"
    response = operator_client.post(
        "/v1/runtime/learning-policy", {"policy": {"retrieval": {"ranker": "magic"}}}, format="json"
    )
    assert response.status_code == 400 and response.json()["field"] == "policy.retrieval.ranker"


def test_backfill_fills_missing_embeddings(session):
    from learnings import embedding_backfill

    Learning.objects.update(embedding=None)
    assert embedding_backfill.missing_count() == len(HAYSTACK)
    seen = []
    filled = embedding_backfill.backfill(batch=4, progress=lambda done, total: seen.append((done, total)))
    assert filled == len(HAYSTACK)
    assert embedding_backfill.missing_count() == 0 and seen[-1] == (len(HAYSTACK), len(HAYSTACK))


def test_recovered_memory_is_ranked_by_the_hybrid_ranker(agent):
    """Within the session, the hybrid ranker orders run-memory records by relevance (stored embeddings) and
    leaves irrelevant ones out; the §4.5 ranker keeps them all, newest first on equal scores."""
    from memory import run_memory
    from memory.models import RunMemoryRecord
    from tests.support.learnings import terminal_run

    session = SessionFactory(owner=agent)
    terminal_run(session, "Rotate the TLS certificate on web-3 before Friday.")
    terminal_run(session, "Summarise the quarterly sales figures for the board.")
    terminal_run(session, "Water the office plants on Monday.")
    assert all(record.embedding and len(record.embedding) == 256 for record in RunMemoryRecord.objects.all())
    bundle = run_memory.recovered_bundle(session, "when does the certificate expire", ranker="hybrid")
    assert bundle.entries and "TLS certificate" in bundle.entries[0].request_preview
    assert all("plants" not in (entry.request_preview or "") for entry in bundle.entries)
    lexical = run_memory.recovered_bundle(session, "when does the certificate expire", ranker="lexical")
    assert len(lexical.entries) == 3
