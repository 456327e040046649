"""Issue 23.3: writes. ``POST /v1/learnings`` creates and publishes an operator's fact in one request (every
gate, audit row and the embedding kept); ``manage.py import_memories`` publishes files in batches with the
same gates, idempotent per external id, with readers for Kheish JSONL, mem0 ``get_all`` and LangGraph items."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from learnings.models import Learning, LearningCandidate
from learnings.services.imports import ImportItem, import_batch
from learnings.validation import LearningScope
from memory.models import AuditEvent
from tests.conftest import assert_problem
from tests.support.learnings import learning

pytestmark = pytest.mark.django_db

URL = "/v1/learnings"
ATLAS = {"kind": "project", "id": "atlas"}


@pytest.fixture(autouse=True)
def atlas():
    from tests.factories import ProjectFactory

    return ProjectFactory(project_id="atlas")


# ---- POST /v1/learnings -----------------------------------------------------------------------------------


def test_an_operator_creates_and_publishes_in_one_request(operator_client):
    response = operator_client.post(
        URL,
        {"scope": ATLAS, "kind": "fact", "content": "The deploy window is Tuesday.", "stated_at_ms": 1_700_000_000_000},
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    stored = Learning.objects.get(pk=int(body["learning_id"].rsplit("-", 1)[1]))
    assert stored.status == "active" and stored.policy_decision == "manual" and stored.embedding is not None
    assert stored.stated_at_ms == 1_700_000_000_000 and stored.scope_key == "project:atlas"
    candidate = LearningCandidate.objects.get(pk=stored.source_candidate_id)
    assert candidate.state == "published" and candidate.published_learning_id == stored.pk
    assert candidate.stated_at_ms == 1_700_000_000_000
    actions = set(AuditEvent.objects.values_list("subject_type", "action"))
    assert {("learning_candidate", "create"), ("learning", "publish"), ("learning_candidate", "publish")} <= actions


def test_one_request_is_not_queued_for_review(operator_client, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        response = operator_client.post(
            URL, {"scope": ATLAS, "kind": "fact", "content": "Backups run at 2am."}, format="json"
        )
    assert response.status_code == 201 and callbacks == []


def test_an_equivalent_learning_is_reused_and_a_conflict_refused(operator_client):
    existing = learning("The staging database is db-3.", scope=("project", "atlas"))
    again = operator_client.post(
        URL, {"scope": ATLAS, "kind": "fact", "content": "The staging database is db-3."}, format="json"
    )
    assert again.status_code == 200 and again.json()["learning_id"] == existing.public_id
    other = operator_client.post(
        URL, {"scope": ATLAS, "kind": "fact", "content": "The staging database is db-9."}, format="json"
    )
    assert_problem(other, 409, "learnings/learning_conflict")
    assert Learning.objects.count() == 1
    replaced = operator_client.post(
        URL,
        {"scope": ATLAS, "kind": "fact", "content": "The staging database is db-9.", "supersedes": existing.public_id},
        format="json",
    )
    assert replaced.status_code == 201 and replaced.json()["supersedes"] == existing.public_id


def test_the_gates_hold_and_nothing_is_half_written(operator_client, api_client):
    secret = operator_client.post(
        URL,
        {"scope": ATLAS, "kind": "fact", "content": "the api key is sk-live-4f9b2c8d7e6a5b4c3d2e1f0a9b8c7d6e"},
        format="json",
    )
    assert secret.status_code == 400 and secret.json()["field"] == "content"
    bad_tier = operator_client.post(
        URL, {"scope": ATLAS, "kind": "fact", "content": "x is y", "publish_tier": "gold"}, format="json"
    )
    assert bad_tier.status_code == 400 and bad_tier.json()["field"] == "publish_tier"
    assert api_client.post(URL, {"scope": ATLAS, "kind": "fact", "content": "x is y"}, format="json").status_code == 403
    assert Learning.objects.count() == 0 and LearningCandidate.objects.count() == 0


def test_one_fact_costs_a_bounded_number_of_statements(operator_client):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    operator_client.post(URL, {"scope": ATLAS, "kind": "fact", "content": "Warm-up fact one."}, format="json")
    with CaptureQueriesContext(connection) as captured:
        response = operator_client.post(
            URL, {"scope": ATLAS, "kind": "fact", "content": "Lunch is at noon."}, format="json"
        )
    assert response.status_code == 201
    statements = [
        q["sql"]
        for q in captured.captured_queries
        if "SAVEPOINT" not in q["sql"] and "kheish_rate_counter" not in q["sql"]
    ]  # the throttle's count
    # candidate + its audit row, the scope lock, the equivalence and conflict reads, the learning, the
    # candidate's move, the two publish audit rows in one statement: one request instead of two, no key lookup.
    assert len(statements) <= 8, statements
    opened = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("SAVEPOINT")]
    assert len(opened) == 1, opened  # one transaction (here a savepoint inside the test's), none nested in it


def test_the_fresh_statement_is_prepared_once_per_connection(operator_client):
    """The lock with its keys and the one write bind their values on the server: psycopg prepares each (its text
    is the same for every fact of one shape) and PostgreSQL plans it once per connection."""
    from django.db import connection

    for n in range(3):
        response = operator_client.post(
            URL, {"scope": ATLAS, "kind": "fact", "content": f"Server {n} runs the nightly build."}, format="json"
        )
        assert response.status_code == 201, response.content
    prepared = [query for query, _types in connection.connection._prepared._names]
    assert any(query.startswith(b"WITH s0 AS") and b"learnings_learning" in query for query in prepared), prepared
    assert any(b"pg_advisory_xact_lock" in query and b"nextval" in query for query in prepared), prepared
    stored = Learning.objects.order_by("id").last()
    assert stored.content == "Server 2 runs the nightly build." and stored.embedding is not None
    assert LearningCandidate.objects.get(pk=stored.source_candidate_id).published_learning_id == stored.pk
    assert AuditEvent.objects.filter(subject_id=stored.public_id, action="publish").count() == 1


def test_the_request_fields_are_built_once_and_bound_to_each_request():
    """``reuse_fields``: the second body's serializer reuses the first's field objects, bound to itself, and
    validates (and refuses) exactly as a fresh one does."""
    from kheish.api.learnings import CreateLearningSerializer

    first = CreateLearningSerializer(data={"scope": ATLAS, "kind": "fact", "content": "A first fact."})
    assert first.is_valid(), first.errors
    second = CreateLearningSerializer(data={"scope": {"kind": "planet"}, "kind": "fact", "content": 7, "extra": 1})
    assert not second.is_valid()
    assert second.errors == {"extra": ["unknown field"]}
    third = CreateLearningSerializer(data={"scope": {"kind": "planet"}, "kind": "fact", "content": 7})
    assert not third.is_valid()
    assert set(third.errors) == {"scope", "content"}
    assert all(third.fields[name] is first.fields[name] for name in first.fields)
    assert all(field.parent is third for field in third.fields.values())
    assert third.fields["scope"].fields["kind"].root is third
    fourth = CreateLearningSerializer(data={"scope": ATLAS, "kind": "fact", "content": " Trimmed later. "})
    assert fourth.is_valid(), fourth.errors
    assert fourth.validated_data["content"] == " Trimmed later. " and fourth.validated_data["confidence"] == 80
    assert fourth.validated_data["source"] == {} and fourth.validated_data["evidence_refs"] == []
    assert fourth.validated_data["source"] is not first.validated_data["source"]  # each default a new object


# ---- bulk import ------------------------------------------------------------------------------------------


def items(*contents: str, scope=("project", "atlas")) -> list[ImportItem]:
    return [
        ImportItem(
            external_id=f"ext-{i}",
            content=text,
            kind="fact",
            scope=LearningScope(*scope),
            stated_at_ms=1_600_000_000_000 + i,
        )
        for i, text in enumerate(contents)
    ]


def test_a_batch_publishes_with_audit_rows_and_embeddings():
    outcome = import_batch(items("The cat is called Miso.", "The office is in Lyon."), actor="operator:tests")
    assert outcome.published == 2 and not outcome.invalid
    rows = Learning.objects.order_by("id")
    assert [r.content for r in rows] == ["The cat is called Miso.", "The office is in Lyon."]
    assert all(r.embedding is not None and len(r.embedding) == 256 for r in rows)
    assert [r.stated_at_ms for r in rows] == [1_600_000_000_000, 1_600_000_000_001]
    assert set(LearningCandidate.objects.values_list("state", "external_id")) == {
        ("published", "ext-0"),
        ("published", "ext-1"),
    }
    assert AuditEvent.objects.filter(action="publish").count() == 4  # learning + candidate, each fact
    assert AuditEvent.objects.filter(action="create", subject_type="learning_candidate").count() == 2


def test_the_import_is_idempotent_per_external_id():
    import_batch(items("The cat is called Miso."), actor="tests")
    again = import_batch(items("The cat is called Miso.", "The office is in Lyon."), actor="tests")
    assert again.already_imported == 1 and again.published == 1
    assert Learning.objects.count() == 2 and LearningCandidate.objects.count() == 2


def test_the_gates_hold_in_bulk():
    existing = learning("The staging database is db-3.", scope=("project", "atlas"))
    outcome = import_batch(
        items(
            "The staging database is db-3.",  # equivalent: reused
            "The staging database is db-9.",  # same subject, another value: held for review
            "the api key is sk-live-4f9b2c8d7e6a5b4c3d2e1f0a9b8c7d6e",  # the secret guard
            "x" * 1601,  # the content rule
            "The build server is ci-2.",
            "The build server is ci-2.",  # the same fact twice in one batch: one learning
        ),
        actor="tests",
    )
    assert outcome.published == 1 and outcome.reused == 2 and outcome.held == 1 and len(outcome.invalid) == 2
    assert Learning.objects.filter(content="The staging database is db-9.").count() == 0
    assert LearningCandidate.objects.get(external_id="ext-1").state == "pending"
    assert LearningCandidate.objects.get(external_id="ext-0").published_learning_id == existing.pk
    assert Learning.objects.filter(content="The build server is ci-2.").count() == 1
    assert {message.split(" (")[0] for _, message in outcome.invalid} and not LearningCandidate.objects.filter(
        external_id__in=["ext-2", "ext-3"]
    ).exists()


def run_import(path, *args) -> str:
    out, err = StringIO(), StringIO()
    call_command("import_memories", str(path), *args, stdout=out, stderr=err)
    return out.getvalue() + err.getvalue()


def test_the_command_reads_kheish_jsonl_and_resumes(tmp_path):
    lines = [
        {
            "external_id": "a",
            "content": "The cat is called Miso.",
            "kind": "fact",
            "scope": "project:atlas",
            "stated_at": "2024-05-01T10:00:00Z",
        },
        {"id": "b", "content": "I prefer Helix.", "kind": "preference", "scope": ATLAS},
        {"content": "no scope here"},
    ]
    path = tmp_path / "memories.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\nnot json\n")
    output = run_import(path, "--batch", "1")
    assert "2 published" in output and "line 3: no scope" in output and "line 4: not JSON" in output
    assert Learning.objects.get(content="The cat is called Miso.").stated_at_ms == 1714557600000
    assert Learning.objects.get(kind="preference").content == "I prefer Helix."
    assert "already there" in run_import(path) and Learning.objects.count() == 2


def test_the_command_reads_mem0_get_all(tmp_path):
    path = tmp_path / "mem0.json"
    path.write_text(
        json.dumps(
            {
                "results": [
                    {
                        "id": "9f1c",
                        "memory": "Likes oat milk in coffee",
                        "hash": "x",
                        "metadata": None,
                        "created_at": "2025-01-02T03:04:05.000000-08:00",
                        "updated_at": None,
                        "user_id": "alice",
                    },
                    {
                        "id": "9f1d",
                        "memory": "Works at Acme",
                        "metadata": {"kind": "fact"},
                        "created_at": None,
                        "user_id": "alice",
                    },
                ]
            }
        )
    )
    assert "2 published" in run_import(path, "--format", "mem0", "--scope", "project:atlas", "--kind", "preference")
    assert set(LearningCandidate.objects.values_list("external_id", "kind")) == {
        ("9f1c", "preference"),
        ("9f1d", "fact"),
    }
    assert Learning.objects.get(content="Likes oat milk in coffee").stated_at_ms == 1735815845000


def test_the_command_reads_langgraph_items(tmp_path):
    path = tmp_path / "store.jsonl"
    items_ = [
        {
            "namespace": ["memories", "alice"],
            "key": "k1",
            "value": {"content": "Lives in Lyon"},
            "created_at": "2025-03-01T00:00:00+00:00",
            "updated_at": "2025-03-01T00:00:00+00:00",
        },
        {
            "namespace": ["memories", "alice"],
            "key": "k2",
            "value": {"text": "Has a cat called Miso"},
            "created_at": "2025-03-02T00:00:00+00:00",
            "updated_at": "2025-03-02T00:00:00+00:00",
        },
        {"namespace": ["memories", "alice"], "key": "k3", "value": {"other": 1}},
    ]
    path.write_text("\n".join(json.dumps(i) for i in items_))
    output = run_import(path, "--format", "langgraph", "--scope", "project:atlas")
    assert "2 published" in output and "line 3: no text" in output
    assert set(LearningCandidate.objects.values_list("external_id", flat=True)) == {
        "memories/alice/k1",
        "memories/alice/k2",
    }
