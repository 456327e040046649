"""Multi-speaker turns (issue 24.5): a question that names a speaker prefers that speaker's turns; the
development set generator rewrites conversations with named speakers, dates and known evidence."""

from __future__ import annotations

import pytest

from benchmarks import conversations
from learnings import retrieval
from memory.sessions import learning_scope_keys
from tests.factories import ProjectFactory, SessionFactory
from tests.support.learnings import learning

pytestmark = pytest.mark.django_db


def test_a_named_speaker_is_preferred():
    project = ProjectFactory(project_id="chat")
    scope = ("project", "chat")
    melanie = learning("Melanie: I painted a sunrise over the lake last weekend.", scope=scope)
    caroline = learning("Caroline: I painted a sunset over the lake last weekend.", scope=scope)
    for text in ("Melanie: The kids loved the museum trip.", "Caroline: The support group meets on Tuesdays.",
                 "Melanie: I ran a charity race in the rain.", "Caroline: I am researching adoption agencies."):
        learning(text, scope=scope)
    session = SessionFactory(projects=[project])
    keys = learning_scope_keys(session)
    for name, expected in (("Caroline", caroline), ("Melanie", melanie)):
        records, _ = retrieval.learned_records(session=session, scope_keys=keys,
                                               query=f"What did {name} paint over the lake?")
        assert records[0].learning_id == expected.public_id, name


def test_one_speaker_pools_get_no_speaker_bonus():
    assert retrieval._speaker_priors("What did Caroline paint?", ["Caroline: a sunset", "Caroline: a lake"]) is None
    assert retrieval._speaker_priors("What did Caroline paint?", ["a sunset", "a lake"]) is None
    bonus = retrieval._speaker_priors("What did Caroline's sister say?", ["Caroline: a", "Melanie said: b", "c"])
    assert list(bonus) == [retrieval.SPEAKER_PRIOR, 0.0, 0.0]


def test_the_generator_names_speakers_dates_and_evidence():
    question = {
        "question_id": "q1", "question_type": "temporal-reasoning", "question": "What did I buy in May?",
        "question_date": "2023/06/01 (Thu) 10:00", "answer_session_ids": ["s2"],
        "haystack_session_ids": ["s1", "s2"], "haystack_dates": ["2023/04/02 (Sun) 09:00", "2023/05/03 (Wed) 18:30"],
        "haystack_sessions": [
            [{"role": "user", "content": "Hi there."}, {"role": "assistant", "content": "Hello!"}],
            [{"role": "user", "content": "I bought a kayak.", "has_answer": True},
             {"role": "assistant", "content": "Nice."}]],
    }
    [generated] = conversations.generate([question])
    speaker, other = generated["speakers"]
    assert generated["question"] == f"What did {speaker} buy in May?"
    assert generated["sessions"][1]["rounds"][0] == {"round": 0, "speaker": speaker, "evidence": True,
                                                     "text": f"{speaker}: I bought a kayak.",
                                                     "reply": f"{other}: Nice."}
    assert generated["sessions"][1]["date_ms"] == conversations.parse_date("2023/05/03 (Wed) 18:30") > 0
    assert generated["question_date_ms"] > generated["sessions"][1]["date_ms"]


def test_turns_of_one_speaker_do_not_conflict():
    """Old code keyed "Caroline: …" by the subject "caroline": every later turn of the same speaker was refused
    as a conflict with the first, so a conversation kept one turn per speaker."""
    from learnings.semantic import semantic_keys

    first = learning("Caroline: I went to the LGBTQ support group yesterday.", scope=("project", "chat2"))
    second = learning("Caroline: The support group meets on Tuesdays.", scope=("project", "chat2"))
    assert first.status == second.status == "active"
    assert semantic_keys("Caroline: I went to the support group.").subject_key is None
    assert semantic_keys("codename: atlas").subject_key == "codename"  # a label-value statement keeps its key
