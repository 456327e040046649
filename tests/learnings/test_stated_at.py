"""When a statement was made (issue 24.5): ``stated_at_ms`` accepted on candidates (optional, never in the
future), carried to the learning, shown by memory-context (publication time when none was given), and a
question that names a time prefers what was stated then."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kheish import composition
from learnings import retrieval, when
from learnings.models import Learning
from memory.clock import now_ms
from memory.sessions import learning_scope_keys
from tests.conftest import assert_problem
from tests.factories import ProjectFactory, SessionFactory
from tests.support.learnings import learning, set_policy, terminal_run

pytestmark = pytest.mark.django_db


def ms(*args) -> int:
    return int(datetime(*args, tzinfo=UTC).timestamp() * 1000)


def test_stated_at_is_accepted_carried_and_shown(api_client, operator_client, session_id):
    stated = ms(2023, 5, 7, 14)
    created = api_client.post(
        "/v1/learning-candidates",
        {
            "scope": {"kind": "session", "id": session_id},
            "kind": "fact",
            "content": "The team dinner was at the Lebanese place on Rue Oberkampf.",
            "stated_at_ms": stated,
        },
        format="json",
    )
    assert created.status_code == 200, created.content
    assert created.json()["stated_at_ms"] == stated
    published = operator_client.post(
        f"/v1/learning-candidates/{created.json()['candidate_id']}/publish", {"publish_tier": "active"}, format="json"
    ).json()
    assert published["stated_at_ms"] == stated
    plain = api_client.post(
        "/v1/learning-candidates",
        {
            "scope": {"kind": "session", "id": session_id},
            "kind": "fact",
            "content": "The team dinner budget is 40 euros.",
        },
        format="json",
    ).json()
    assert plain["stated_at_ms"] == plain["created_at_ms"]  # none given: its creation time
    other = operator_client.post(
        f"/v1/learning-candidates/{plain['candidate_id']}/publish", {"publish_tier": "active"}, format="json"
    ).json()
    assert other["stated_at_ms"] == other["published_at_ms"]
    assert Learning.objects.get(content__contains="budget").stated_at_ms is None  # stored as "not given"
    context = api_client.get(f"/v1/sessions/{session_id}/memory-context", {"query": "team dinner"}).json()
    shown = {e["learning_id"]: e["stated_at_ms"] for e in context["learned_context"]["entries"]}
    assert shown == {published["learning_id"]: stated, other["learning_id"]: other["published_at_ms"]}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "stated_at_ms"),
        ("yesterday", "stated_at_ms"),
        (True, "stated_at_ms"),
        (now_ms() + 3 * 86_400_000, "stated_at_ms cannot be in the future"),
    ],
    ids=["negative", "a word", "a boolean", "three days ahead"],  # stable ids: xdist workers collect alike
)
def test_bad_stated_at_is_a_400_naming_the_field(api_client, session_id, value, message):
    response = api_client.post(
        "/v1/learning-candidates",
        {"scope": {"kind": "session", "id": session_id}, "kind": "fact", "content": "A fact.", "stated_at_ms": value},
        format="json",
    )
    body = assert_problem(response, 400, field="stated_at_ms")
    assert message in body["detail"] or body["field"] == message
    assert not Learning.objects.exists()


def test_captured_candidates_are_stated_when_the_input_was_sent(llm_unconfigured):
    from learnings import capture
    from learnings.models import LearningCandidate

    set_policy({"mode": "manual_only", "capture": {"semantic_candidates": {"enabled": True}}})
    run = terminal_run(SessionFactory(), "Preference: answer in French.")
    capture.capture_run(run.pk)
    candidate = LearningCandidate.objects.get(kind="preference")
    assert candidate.stated_at_ms == run.submitted_at_ms


REFERENCE = ms(2023, 8, 20, 12)  # a Sunday


@pytest.mark.parametrize(
    ("question", "start", "end"),
    [
        ("What did I eat yesterday?", ms(2023, 8, 19), ms(2023, 8, 20)),
        ("Where did we go last month?", ms(2023, 7, 1), ms(2023, 8, 1)),
        ("What happened in May?", ms(2023, 5, 1), ms(2023, 6, 1)),
        ("What did Caroline say on 7 May 2023?", ms(2023, 5, 7), ms(2023, 5, 8)),
        ("What did we decide on May 7?", ms(2023, 5, 7), ms(2023, 5, 8)),
        ("What did I buy last Saturday?", ms(2023, 8, 19), ms(2023, 8, 20)),
        ("Which film did I watch in 2022?", ms(2022, 1, 1), ms(2023, 1, 1)),
    ],
)
def test_time_windows(question, start, end):
    found = when.window(question, REFERENCE)
    slack = when.SLACK_DAYS * when.DAY_MS
    assert found is not None and (found.start_ms, found.end_ms) == (start - slack, end + slack), found


def test_no_time_named_means_no_window():
    for question in ("How big is the disk?", "What is my dog called?", "May I ask something?", "", None):
        assert when.window(question, REFERENCE) is None, question


def test_a_question_naming_a_time_prefers_what_was_stated_then():
    project = ProjectFactory(project_id="diary")
    for n, text in enumerate(
        [
            "Caroline said the printer on floor two is broken again.",
            "Caroline said her sister is moving to Leeds.",
            "Caroline said the quarterly report is due on Friday.",
            "Caroline said she started learning the cello.",
            "Caroline said the parking permit costs forty pounds.",
            "Caroline said the new intern is called Sam.",
        ]
    ):
        learning(text, scope=("project", "diary"), candidate_extra={"stated_at_ms": ms(2023, 3 + n, 2)})
    may = learning(
        "Caroline said the team dinner was at a Lebanese place.",
        scope=("project", "diary"),
        candidate_extra={"stated_at_ms": ms(2023, 5, 12)},
    )
    august = learning(
        "Caroline said the team dinner was at a sushi bar.",
        scope=("project", "diary"),
        candidate_extra={"stated_at_ms": ms(2023, 8, 3)},
    )
    session = SessionFactory(projects=[project], metadata={"reference_time_ms": REFERENCE})
    keys = learning_scope_keys(session)

    def first(question):
        records, _ = retrieval.learned_records(session=session, scope_keys=keys, query=question)
        return records[0].learning_id

    assert first("Where was the team dinner in May?") == may.public_id
    assert first("Where was the team dinner earlier this month?") == august.public_id
    assert {first("Where was the team dinner in May?"), first("Where was the team dinner on August 3?")} == {
        may.public_id,
        august.public_id,
    }
    context = composition.memory_context(session, "Where was the team dinner in May?")
    assert context["learned_context"]["entries"][0]["stated_at_ms"] == ms(2023, 5, 12)


def test_a_statement_naming_its_own_day_is_in_that_window():
    """ "I ran the half marathon last Sunday", said on Wednesday 17 May 2023, is about Sunday 14 May."""
    said = ms(2023, 5, 17, 18)
    on_the_day = when.window("What did Nate do on 14 May 2023?", REFERENCE)
    assert when.mentioned_in("I ran the city half marathon last Sunday!", said, on_the_day)
    assert when.mentioned_in("Yesterday I finished the race.", ms(2023, 5, 15, 9), on_the_day)
    assert not when.mentioned_in("I ran the city half marathon last Sunday!", ms(2023, 6, 7), on_the_day)
    assert not when.mentioned_in("I ran a lot in 2023.", said, when.window("in May 2023", REFERENCE))
    assert not when.mentioned_in("I ran the half marathon.", said, on_the_day)
    # stated outside the window, named inside it: in_window counts it only when given the texts
    assert when.in_window([said], on_the_day) == [False]
    assert when.in_window([said], on_the_day, ["Last Sunday I ran the half marathon."]) == [True]


def test_a_question_naming_a_day_finds_the_turn_that_named_it_relatively():
    project = ProjectFactory(project_id="races")
    scope = ("project", "races")
    for n, text in enumerate(
        [
            "Nate: I ran along the canal before work, as usual.",
            "Nate: I ran the charity 10K in the rain, soaked to the bone.",
            "Nate: The race season starts soon, I need new shoes.",
            "Nate: I ran the harbour fun run with my niece, she won.",
        ]
    ):
        learning(text, scope=scope, candidate_extra={"stated_at_ms": ms(2023, 3 + n, 5)})
    target = learning(
        "Nate: Last Sunday I ran the trail race, my legs are still sore.",
        scope=scope,
        candidate_extra={"stated_at_ms": ms(2023, 5, 17, 18)},
    )
    session = SessionFactory(projects=[project], metadata={"reference_time_ms": REFERENCE})
    records, _ = retrieval.learned_records(
        session=session, scope_keys=learning_scope_keys(session), query="Which race did Nate run on 14 May 2023?"
    )
    assert records[0].learning_id == target.public_id
