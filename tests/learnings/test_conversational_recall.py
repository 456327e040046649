"""Multi-speaker turns (issue 24.5): a question that names a speaker prefers that speaker's turns; the
development set generator rewrites conversations with named speakers, dates and known evidence."""

from __future__ import annotations

import pytest

from benchmarks import conversations
from benchmarks.conversation_bank import BANKS
from learnings import retrieval, speakers
from learnings.models import Learning
from memory.sessions import learning_scope_keys
from tests.factories import ProjectFactory, SessionFactory
from tests.support.learnings import learning

pytestmark = pytest.mark.django_db


def test_a_named_speaker_is_preferred():
    project = ProjectFactory(project_id="chat")
    scope = ("project", "chat")
    melanie = learning("Melanie: I painted a sunrise over the lake last weekend.", scope=scope)
    caroline = learning("Caroline: I painted a sunset over the lake last weekend.", scope=scope)
    for text in (
        "Melanie: The kids loved the museum trip.",
        "Caroline: The support group meets on Tuesdays.",
        "Melanie: I ran a charity race in the rain.",
        "Caroline: I am researching adoption agencies.",
    ):
        learning(text, scope=scope)
    session = SessionFactory(projects=[project])
    keys = learning_scope_keys(session)
    for name, expected in (("Caroline", caroline), ("Melanie", melanie)):
        records, _ = retrieval.learned_records(
            session=session, scope_keys=keys, query=f"What did {name} paint over the lake?"
        )
        assert records[0].learning_id == expected.public_id, name


def test_one_speaker_pools_get_no_speaker_bonus():
    assert retrieval._speaker_priors("What did Caroline paint?", ["Caroline: a sunset", "Caroline: a lake"]) is None
    assert retrieval._speaker_priors("What did Caroline paint?", ["a sunset", "a lake"]) is None
    bonus = retrieval._speaker_priors("What did Caroline's sister say?", ["Caroline: a", "Melanie said: b", "c"])
    assert list(bonus) == [retrieval.SPEAKER_PRIOR, 0.0, 0.0]


def test_the_generator_names_speakers_dates_and_evidence():
    question = {
        "question_id": "q1",
        "question_type": "temporal-reasoning",
        "question": "What did I buy in May?",
        "question_date": "2023/06/01 (Thu) 10:00",
        "answer_session_ids": ["s2"],
        "haystack_session_ids": ["s1", "s2"],
        "haystack_dates": ["2023/04/02 (Sun) 09:00", "2023/05/03 (Wed) 18:30"],
        "haystack_sessions": [
            [{"role": "user", "content": "Hi there."}, {"role": "assistant", "content": "Hello!"}],
            [
                {"role": "user", "content": "I bought a kayak.", "has_answer": True},
                {"role": "assistant", "content": "Nice."},
            ],
        ],
    }
    [generated] = conversations.generate([question])
    speaker, other = generated["speakers"]
    assert generated["question"] == f"What did {speaker} buy in May?"
    assert generated["sessions"][1]["rounds"][0] == {
        "round": 0,
        "speaker": speaker,
        "evidence": True,
        "text": f"{speaker}: I bought a kayak.",
        "reply": f"{other}: Nice.",
    }
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


def test_speaker_labels_are_who_said_it():
    assert speakers.speaker_of("Caroline: I adopted a corgi.") == "Caroline"
    assert speakers.speaker_of("Melanie said: the lake was cold.") == "Melanie"
    assert speakers.speaker_of("Note: the editor is Helix.") is None
    assert speakers.speaker_of("I adopted a corgi.") is None
    assert speakers.without_label("Caroline: I adopted a corgi.") == "I adopted a corgi."
    assert speakers.without_label("Preference: always use metric units.") == "Preference: always use metric units."
    assert speakers.named_in("What did Caroline's sister say?", {"Caroline", "Melanie"}) == {"Caroline"}
    assert speakers.without_names("What kind of dog did Caroline take in?", {"Caroline"}).split() == [
        "What",
        "kind",
        "of",
        "dog",
        "did",
        "take",
        "in?",
    ]


def test_the_stored_embedding_is_the_statement_without_its_label():
    labelled = learning("Caroline: We brought home a corgi from the rescue centre.", scope=("project", "emb"))
    plain = learning("We brought home a corgi from the rescue centre.", scope=("project", "emb2"))
    assert Learning.objects.get(pk=labelled.pk).embedding == Learning.objects.get(pk=plain.pk).embedding


def test_a_named_speakers_statement_beats_their_small_talk():
    """Old code: the name was a BM25 term and an embedding component every turn of the speaker shared, so
    Caroline's shortest small talk outranked what she said about the question's subject."""
    project = ProjectFactory(project_id="chat3")
    scope = ("project", "chat3")
    for text in (
        "Caroline: Haha, that's so typical of you.",
        "Caroline: I need to get more sleep, honestly.",
        "Caroline: We should plan something together soon.",
        "Caroline: Wow, I didn't expect that.",
        "Melanie: We adopted a little spaniel from the shelter.",
        "Melanie: Work has been hectic.",
        "Caroline: Work has been hectic, three deadlines in one week.",
    ):
        learning(text, scope=scope)
    dog = learning("Caroline: We finally brought home a corgi from the rescue centre.", scope=scope)
    session = SessionFactory(projects=[project])
    records, _ = retrieval.learned_records(
        session=session, scope_keys=learning_scope_keys(session), query="What kind of dog did Caroline take in?"
    )
    assert records[0].learning_id == dog.public_id
    texts = [Learning.objects.get(pk=int(r.learning_id.rsplit("-", 1)[1])).content for r in records]
    assert all(text.startswith("Caroline:") for text in texts[:5]), texts  # her turns first, none dropped


def test_the_synthetic_set_is_seeded_with_evidence_paraphrased_and_split():
    first, again = conversations.synthesize("dev", 2), conversations.synthesize("dev", 2)
    assert first == again and first != conversations.synthesize("dev", 2, seed=7)
    dev, held_out = BANKS["dev"], BANKS["held_out"]
    assert not {t["id"] for t in dev["topics"]} & {t["id"] for t in held_out["topics"]}
    assert not set(dev["names"]) & set(held_out["names"]) and not set(dev["filler"]) & set(held_out["filler"])
    types = set()
    for conversation in conversations.synthesize("held_out", 2):
        turns = {(s["session_id"], t["round"]): t for s in conversation["sessions"] for t in s["rounds"]}
        dates = [s["date_ms"] for s in conversation["sessions"]]
        assert dates == sorted(dates) and len(conversation["speakers"]) == 2
        for question in conversation["questions"]:
            types.add(question["question_type"])
            assert question["evidence"] and all(tuple(item) in turns for item in question["evidence"])
            named = [who for who in conversation["speakers"] if who in question["question"]]
            assert len(named) == 1 and all(turns[tuple(i)]["speaker"] == named[0] for i in question["evidence"])
            assert question["question_date_ms"] > dates[-1]
            if question["question_type"] == "multi-hop":
                assert len(question["evidence"]) == 2
    assert types == {"single-hop", "multi-hop", "temporal", "temporal-relative"}
