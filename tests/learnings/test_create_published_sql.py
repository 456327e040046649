"""Issue 23.3: ``POST /v1/learnings`` in two statements. The equivalence and conflict reads are one
hand-written SELECT (``selectors.find_equivalent_or_conflict`` / ``equivalent_or_conflict_ids``) that answers
what the two ORM reads answer; the candidate, its audit row, the scope lock and the learning's key are one
statement; the reads with - where they find nothing - the learning, the candidate's move and both publish audit
rows are the other: the same rows as the service's step-by-step path, and a failure leaves nothing behind."""

from __future__ import annotations

import itertools
import random

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from learnings import services
from learnings.models import CandidateState, Learning, LearningCandidate
from learnings.selectors import find_conflict, find_equivalent, find_equivalent_or_conflict
from learnings.services.candidates import new_api_candidate, store_new_candidate
from learnings.services.publish import _store_fresh_unless_found
from learnings.validation import LearningScope
from memory import sql as memory_sql
from memory.clock import now_ms
from memory.errors import Conflict
from memory.models import AuditEvent

pytestmark = pytest.mark.django_db

URL = "/v1/learnings"
ATLAS = {"kind": "project", "id": "atlas"}


@pytest.fixture(autouse=True)
def atlas():
    from tests.factories import ProjectFactory

    return ProjectFactory(project_id="atlas")


# ---- the one SELECT against the two ORM reads ------------------------------------------------------------------


def _rows(count: int) -> None:
    """Learnings over every gate the two reads apply: scope, kind, keys, status, tier, sensitivity, verification,
    decision and expiry (rows the table's constraints refuse are skipped)."""
    rng = random.Random(23)
    at = now_ms()
    made = 0
    while made < count:
        status = rng.choice(["active", "provisional", "revoked"])
        decision = rng.choice([None, "manual", "automatic", "escalated"])
        row = Learning(
            scope_kind="project",
            scope_id=rng.choice(["atlas", "zeus"]),
            kind=rng.choice(["fact", "preference", "procedure"]),
            sensitivity=rng.choice(["scoped", "sensitive"]),
            content="row",
            confidence=80,
            content_key=rng.choice(["k1", "k2", "k3"]),
            subject_key=rng.choice(["s1", "s2", ""]),
            created_at_ms=at,
            published_at_ms=at,
            updated_at_ms=at,
            expires_at_ms=rng.choice([None, at - 1000, at + 100_000]),
            status=status,
            publish_tier=rng.choice(["active", "provisional"]),
            policy_decision=decision,
            policy_actor=None if decision is None else "operator",
            verification_status=rng.choice(["unverified", "verified", "failed", "pending"]),
            revoked_at_ms=at if status == "revoked" else None,
        )
        row.scope_key = f"project:{row.scope_id}"
        try:
            with transaction.atomic():
                row.save()
        except IntegrityError:
            continue
        made += 1


def _assert_published_alike(fast, fast_candidate, slow, slow_candidate) -> None:
    """The one-request path's learning and candidate stored as the step-by-step service stored its own."""
    fast.refresh_from_db()
    slow_candidate.refresh_from_db()
    assert _row(fast, "status", "revoked_at_ms") == _row(slow, "status", "revoked_at_ms")
    assert fast.embedding == slow.embedding and fast.embedding is not None
    assert _row(fast_candidate, "published_learning_id") == _row(slow_candidate, "published_learning_id")


def test_one_select_answers_what_the_two_orm_reads_answer():
    _rows(400)
    at = now_ms()
    checked = 0
    for scope, kind, content, subject in itertools.product(
        ["project:atlas", "project:zeus", "project:none"],
        ["fact", "preference", "procedure"],
        ["k1", "k2", "k3", "k9"],
        ["s1", "s2", "", "s9"],
    ):
        expected_equivalent = find_equivalent(scope_key=scope, kind=kind, content_key=content, at_ms=at)
        expected_conflict = find_conflict(
            scope_key=scope, kind=kind, subject_key=subject, content_key=content, at_ms=at
        )
        equivalent, conflict = find_equivalent_or_conflict(
            scope_key=scope, kind=kind, subject_key=subject, content_key=content, at_ms=at
        )
        assert equivalent == expected_equivalent, (scope, kind, content, subject)
        assert conflict == expected_conflict, (scope, kind, content, subject)
        if equivalent is not None:  # a complete stored instance, as the ORM's
            assert {f.attname: getattr(equivalent, f.attname) for f in Learning._meta.concrete_fields} == {
                f.attname: getattr(expected_equivalent, f.attname) for f in Learning._meta.concrete_fields
            }
        checked += expected_equivalent is not None or expected_conflict is not None
    assert checked > 20  # the data exercises both reads


# ---- the same rows as the step-by-step path ---------------------------------------------------------------------


def _row(instance, *skip: str) -> dict:
    ignored = {"id", "source_candidate_id", "created_at_ms", "published_at_ms", "updated_at_ms", "at_ms", *skip}
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields} | {
        name: None for name in ignored if hasattr(instance, name)
    }


def _audit(subject_id: str) -> list[tuple]:
    return list(
        AuditEvent.objects.filter(subject_id=subject_id)
        .order_by("id")
        .values_list("subject_type", "action", "from_state", "to_state", "actor", "reason", "data")
    )


def test_one_request_writes_the_rows_the_service_writes_step_by_step(operator_client, operator):
    text = "The deploy window is Tuesday."
    response = operator_client.post(
        URL, {"scope": ATLAS, "kind": "fact", "content": text, "stated_at_ms": 1_700_000_000_000}, format="json"
    )
    assert response.status_code == 201, response.content
    fast = Learning.objects.get(pk=int(response.json()["learning_id"].rsplit("-", 1)[1]))
    fast_candidate = LearningCandidate.objects.get(pk=fast.source_candidate_id)
    Learning.objects.filter(pk=fast.pk).update(status="revoked", revoked_at_ms=now_ms())  # not an equivalent

    slow_candidate = services.candidate_create(
        actor=operator,
        scope=LearningScope("project", "atlas"),
        kind="fact",
        content=text,
        stated_at_ms=1_700_000_000_000,
        operator=True,
    )
    slow = services.candidate_publish(candidate=slow_candidate, actor=operator)
    _assert_published_alike(fast, fast_candidate, slow, slow_candidate)
    assert fast_candidate.state == CandidateState.PUBLISHED and fast_candidate.published_learning_id == fast.pk

    def shape(rows, learning, candidate):  # the public ids of each pair in place
        return [
            (*row[:6], {k: v.replace(learning, "L").replace(candidate, "C") for k, v in row[6].items()}) for row in rows
        ]

    for subject in ("learning", "candidate"):
        fast_rows = _audit(fast.public_id if subject == "learning" else fast_candidate.public_id)
        slow_rows = _audit(slow.public_id if subject == "learning" else slow_candidate.public_id)
        assert shape(fast_rows, fast.public_id, fast_candidate.public_id) == shape(
            slow_rows, slow.public_id, slow_candidate.public_id
        )
    assert [row[1] for row in _audit(fast_candidate.public_id)] == ["create", "publish"]


def test_an_equivalent_is_reused_with_the_candidates_audit_rows(operator_client):
    first = operator_client.post(URL, {"scope": ATLAS, "kind": "fact", "content": "Lunch is at noon."}, format="json")
    again = operator_client.post(URL, {"scope": ATLAS, "kind": "fact", "content": "Lunch is at noon."}, format="json")
    assert first.status_code == 201 and again.status_code == 200
    assert again.json()["learning_id"] == first.json()["learning_id"]
    assert Learning.objects.count() == 1
    reused = LearningCandidate.objects.order_by("-id").first()
    assert (
        reused.state == CandidateState.PUBLISHED and reused.published_learning.public_id == first.json()["learning_id"]
    )
    assert [(row[1], row[5]) for row in _audit(reused.public_id)] == [
        ("create", ""),
        ("publish", f"equivalent to {first.json()['learning_id']}"),
    ]


# ---- the combined statements ------------------------------------------------------------------------------------


def test_the_candidate_and_its_audit_row_are_one_statement(operator):
    candidate = new_api_candidate(
        actor=operator, scope=LearningScope("project", "atlas"), kind="fact", content="Backups run at 2am."
    )
    with CaptureQueriesContext(connection) as captured:
        store_new_candidate(candidate, actor=operator)
    assert len(captured.captured_queries) == 1
    stored = LearningCandidate.objects.get(pk=candidate.pk)
    assert stored.content == "Backups run at 2am." and stored.state == CandidateState.PENDING
    assert _audit(candidate.public_id) == [
        (
            "learning_candidate",
            "create",
            "",
            "pending",
            operator.get_username(),
            "",
            {"origin": "api", "kind": "fact", "scope": "project:atlas"},
        )
    ]


def _fresh(operator, content: str, content_key: str = "k") -> tuple[LearningCandidate, Learning, int]:
    candidate = new_api_candidate(actor=operator, scope=LearningScope("project", "atlas"), kind="fact", content=content)
    (key,) = store_new_candidate(candidate, actor=operator, also=f", {memory_sql.next_key_sql(Learning)}")
    learning = Learning(
        scope_kind="project",
        scope_id="atlas",
        scope_key="project:atlas",
        kind="fact",
        content=content,
        confidence=80,
        content_key=content_key,
        subject_key="",
        created_at_ms=now_ms(),
        source_candidate=candidate,
        policy_decision="manual",
        policy_actor="operator",
    )
    learning.derive_embedding()
    return candidate, learning, key


def test_a_candidate_that_moved_leaves_no_learning_and_no_audit_row(operator):
    candidate, learning, key = _fresh(operator, "The office is in Lyon.")
    LearningCandidate.objects.filter(pk=candidate.pk).update(state=CandidateState.REJECTED)
    audits = AuditEvent.objects.count()
    with pytest.raises(Conflict) as refused, transaction.atomic():
        _store_fresh_unless_found(candidate, learning, key, actor=operator, reason="published by an operator")
    assert refused.value.code == "candidate_changed"
    assert not Learning.objects.filter(pk=key).exists() and AuditEvent.objects.count() == audits


def test_what_the_reads_find_is_returned_and_nothing_is_written(operator):
    existing, learning, key = _fresh(operator, "The office is in Lyon.", content_key="lyon")
    assert _store_fresh_unless_found(existing, learning, key, actor=operator, reason="r") == []
    stored = Learning.objects.get(pk=key)
    assert stored.source_candidate_id == existing.pk and stored.embedding == learning.embedding
    assert LearningCandidate.objects.get(pk=existing.pk).published_learning_id == key

    candidate, again, other_key = _fresh(operator, "The office is in Lyon.", content_key="lyon")
    audits = AuditEvent.objects.count()
    assert _store_fresh_unless_found(candidate, again, other_key, actor=operator, reason="r") == [stored]
    assert not Learning.objects.filter(pk=other_key).exists() and AuditEvent.objects.count() == audits
    assert LearningCandidate.objects.get(pk=candidate.pk).state == CandidateState.PENDING


def test_a_learning_inserted_under_a_drawn_key_is_the_row_insert_writes():
    def built(content: str) -> Learning:
        row = Learning(
            scope_kind="project",
            scope_id="atlas",
            scope_key="project:atlas",
            kind="fact",
            content=content,
            confidence=70,
            content_key="k",
            subject_key="s",
            created_at_ms=1,
            evidence_refs=[{"run_id": "run-1"}],
            source={"agent_id": "a"},
        )
        row.derive_embedding()
        return row

    plain = memory_sql.insert(built("The deploy window is Friday."))
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {memory_sql.next_key_sql(Learning)}")
        (key,) = cursor.fetchone()
    keyed = built("The deploy window is Friday.")
    keyed.pk = key
    assert memory_sql.run_together([memory_sql.insert_with_key_statement(keyed)]) == [1]
    rows = {row.pk: row for row in Learning.objects.filter(pk__in=[plain.pk, key])}
    assert _row(rows[plain.pk]) == _row(rows[key])
    assert rows[key].embedding == keyed.embedding


def test_a_conflict_leaves_no_candidate_and_no_audit_row(operator_client):
    first = operator_client.post(
        URL, {"scope": ATLAS, "kind": "fact", "content": "The staging database is db-3."}, format="json"
    )
    assert first.status_code == 201
    candidates, audits = LearningCandidate.objects.count(), AuditEvent.objects.count()
    other = operator_client.post(
        URL, {"scope": ATLAS, "kind": "fact", "content": "The staging database is db-9."}, format="json"
    )
    assert other.status_code == 409 and other.json()["code"] == "learning_conflict"
    assert LearningCandidate.objects.count() == candidates and AuditEvent.objects.count() == audits
    assert Learning.objects.count() == 1


_AWKWARD = [
    {"kind": "fact", "content": "NULL"},
    {
        "kind": "preference",
        "content": 'I prefer "tabs", {not} spaces; a\\b, c\nd — naïve café 😀',
        "sensitivity": "sensitive",
        "confidence": 55,
        "source": {"agent_id": "ops", "derivation_id": 'd "1", {x}'},
        "evidence_refs": [{"note": 'see "the wiki", {page} \\ 2'}, {"artifact_id": "NULL"}],
        "expires_at_ms": 4_000_000_000_000,
        "stated_at_ms": 1_600_000_000_123,
    },
    {"kind": "procedure", "content": '  To deploy: run make release, then ,,{}"" check.  ', "confidence": 0},
]


@pytest.mark.parametrize("body", _AWKWARD, ids=["null-text", "semantic-with-everything", "procedure-trimmed"])
def test_the_packed_rows_are_the_rows_of_the_step_by_step_service(operator_client, operator, body):
    """``POST /v1/learnings`` passes each row's values as one text array (``publish._packed_values``): quotes,
    braces, commas, backslashes, a literal NULL, JSON, enums, booleans, numbers and the embedding reach the same
    columns as the service's step-by-step path writes them."""
    response = operator_client.post(URL, {"scope": ATLAS, **body}, format="json")
    assert response.status_code == 201, response.content
    fast = Learning.objects.get(pk=int(response.json()["learning_id"].rsplit("-", 1)[1]))
    fast_candidate = LearningCandidate.objects.get(pk=fast.source_candidate_id)
    Learning.objects.filter(pk=fast.pk).update(status="revoked", revoked_at_ms=now_ms())  # not an equivalent
    fields = {k: v for k, v in body.items() if k not in ("kind", "content")}
    slow_candidate = services.candidate_create(
        actor=operator,
        scope=LearningScope("project", "atlas"),
        kind=body["kind"],
        content=body["content"],
        operator=True,
        **fields,
    )
    slow = services.candidate_publish(candidate=slow_candidate, actor=operator)
    _assert_published_alike(fast, fast_candidate, slow, slow_candidate)
    assert fast_candidate.content == body["content"].strip() and fast_candidate.screen_flagged is False
    ids = {fast.public_id: "L", fast_candidate.public_id: "C", slow.public_id: "L", slow_candidate.public_id: "C"}

    def shape(rows):  # the public ids of each pair in place
        return [(*row[:6], {k: ids.get(v, v) for k, v in row[6].items()}) for row in rows]

    for fast_id, slow_id in ((fast.public_id, slow.public_id), (fast_candidate.public_id, slow_candidate.public_id)):
        assert shape(_audit(fast_id)) == shape(_audit(slow_id))


def test_the_fresh_statement_text_is_cached_by_psycopg():
    """Both shapes of the fresh statement (with and without the conflict read) stay within what psycopg caches
    the conversion of (text length and parameter count): past either, it would split the text on every fact."""
    from psycopg import _queries

    from learnings.selectors import equivalent_or_conflict_ids
    from learnings.services.publish import _FRESH_ROWS, _fresh_statement

    for kind, subject in (("fact", ""), ("preference", "subject")):
        sql, params = equivalent_or_conflict_ids(
            scope_key="k", kind=kind, subject_key=subject, content_key="c", at_ms=1
        )
        text = _fresh_statement(sql)
        assert len(text.encode()) <= _queries.MAX_CACHED_STATEMENT_LENGTH, len(text)
        assert len(params) + len(_FRESH_ROWS) <= _queries.MAX_CACHED_STATEMENT_PARAMS
        assert text.count("%s") == len(params) + len(_FRESH_ROWS)
