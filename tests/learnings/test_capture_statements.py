"""Capture reads the whole input (issue 24.2) and, without a model, finds unlabelled first-person statements
(issue 24.3): preferences, facts about the user and their work, decisions, "remember that …" requests, below
the labelled path's 98; the model extractor is asked only when neither finds anything."""

from __future__ import annotations

import pytest

from learnings import capture, statements
from learnings.models import LearningCandidate
from tests.factories import SessionFactory
from tests.learnings.statement_corpus import (
    EVENT_NON_STATEMENTS,
    EVENTS,
    HELD_OUT_NON_STATEMENTS,
    HELD_OUT_STATEMENTS,
    NARRATIVE_NON_STATEMENTS,
    NARRATIVE_STATEMENTS,
    NON_STATEMENTS,
    STATEMENTS,
)
from tests.support.learnings import set_policy, terminal_run

pytestmark = pytest.mark.django_db


def capture_on(max_candidates=8):
    set_policy(
        {
            "mode": "manual_only",
            "capture": {"semantic_candidates": {"enabled": True, "max_candidates_per_run": max_candidates}},
        }
    )


def drafted(run):
    return [
        (c.kind, c.content, c.confidence)
        for c in LearningCandidate.objects.filter(source_run=run).exclude(kind="run_summary").order_by("id")
    ]


def test_a_labelled_statement_past_the_preview_is_captured(llm_unconfigured):
    """Old code read the 160-character request preview only: a label at character 163 yielded nothing."""
    capture_on()
    opening = "Some context about the servers we run and the logs they write every night, and more, " * 2
    assert len(opening) > 160
    run = terminal_run(SessionFactory(), opening + "Preference: always report sizes in gigabytes.")
    capture.capture_run(run.pk)
    assert drafted(run) == [("preference", "always report sizes in gigabytes", 98)]


def test_one_candidate_per_labelled_statement_anywhere(llm_unconfigured):
    capture_on()
    text = (
        "Preference: answer in British English. Now, about the build: it is slow and the cache is cold, "
        "and the logs show nothing useful.\n\nA long paragraph "
        + "about other things " * 30
        + "\nDecision: we ship on Fridays.\nFact: the staging host is called Nimbus. Thanks!"
    )
    run = terminal_run(SessionFactory(), text)
    capture.capture_run(run.pk)
    assert drafted(run) == [
        ("preference", "answer in British English", 98),
        ("decision", "we ship on Fridays", 98),
        ("fact", "the staging host is called Nimbus", 98),
    ]


def test_the_captured_input_is_scrubbed(llm_unconfigured):
    capture_on()
    text = (
        "x " * 120 + "Fact: the deploy token is ghp_abcdefghijklmnopqrstuvwxyz0123456789. "
        "Fact: the wiki lives at wiki.example.org"
    )
    run = terminal_run(SessionFactory(), text)
    capture.capture_run(run.pk)
    contents = [content for _, content, _ in drafted(run)]
    assert contents == ["the wiki lives at wiki.example.org"]
    assert not LearningCandidate.objects.filter(content__contains="ghp_").exists()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I prefer dark mode in every editor.", [("preference", "I prefer dark mode in every editor", 90)]),
        ("My name is Dana and I work at Initech.", [("fact", "My name is Dana and I work at Initech", 90)]),
        (
            "We decided to use PostgreSQL 16 for analytics.",
            [("decision", "We decided to use PostgreSQL 16 for analytics", 90)],
        ),
        ("Remember that the staging database is read-only.", [("fact", "The staging database is read-only", 90)]),
        (
            "Hi! Quick one. I prefer short answers. Also, what's the capital of Peru?",
            [("preference", "I prefer short answers", 90)],
        ),
    ],
)
def test_unlabelled_statements_are_captured_without_a_model(llm_unconfigured, text, expected):
    capture_on()
    run = terminal_run(SessionFactory(), text)
    capture.capture_run(run.pk)
    assert drafted(run) == expected
    assert all(confidence < 98 for _, _, confidence in drafted(run))


@pytest.mark.parametrize(
    "text",
    [
        "Do I prefer dark mode?",
        "If I lived in Paris I would cycle.",
        "She said she works at Initech.",
        "Write a story where my name is Dana.",
        "I don't prefer dark mode anymore.",
        "How big is /var/log?",
        "Hypothetically, I prefer the cheaper plan.",
        "According to the docs, we use port 8080.",
        "Any hotel tips? My friend told me, I should stay near the old town.",
    ],
)
def test_non_statements_yield_nothing(llm_unconfigured, text):
    capture_on()
    run = terminal_run(SessionFactory(), text)
    capture.capture_run(run.pk)
    assert drafted(run) == []


def test_the_model_is_not_asked_when_the_extractor_found_statements(fake_model):
    capture_on()
    run = terminal_run(SessionFactory(), "I prefer dark mode in every editor.")
    capture.capture_run(run.pk)
    assert drafted(run) == [("preference", "I prefer dark mode in every editor", 90)]
    assert fake_model.requests == []


def _scores(positives, negatives):
    found = [bool(statements.extract(text, 4)) for text, _ in positives]
    false = [bool(statements.extract(text, 4)) for text in negatives]
    kinds = [statements.extract(text, 4)[0].kind == kind for text, kind in positives if statements.extract(text, 4)]
    true_positives = sum(found)
    precision = true_positives / (true_positives + sum(false)) if true_positives + sum(false) else 0.0
    return precision, true_positives / len(positives), sum(kinds) / max(1, len(kinds))


@pytest.mark.parametrize("split", ["tuned", "held_out", "narrative"])
def test_extractor_precision_and_recall_on_the_corpus(split):
    """Target: precision ≥ 0.95 at recall ≥ 0.6, on the corpus it was tuned on, on the held-out part and on
    the long narrative messages."""
    positives, negatives = {
        "tuned": (STATEMENTS + EVENTS, NON_STATEMENTS + EVENT_NON_STATEMENTS),
        "held_out": (HELD_OUT_STATEMENTS, HELD_OUT_NON_STATEMENTS),
        "narrative": (NARRATIVE_STATEMENTS, NARRATIVE_NON_STATEMENTS),
    }[split]
    least = 12 if split == "narrative" else 30
    assert len(negatives) >= least and len(positives) >= least
    precision, recall, kind_accuracy = _scores(positives, negatives)
    assert precision >= 0.95 and recall >= 0.6 and kind_accuracy >= 0.9, (precision, recall, kind_accuracy)


def test_events_of_the_users_life_are_facts_but_work_chatter_is_not(llm_unconfigured):
    capture_on()
    run = terminal_run(
        SessionFactory(),
        "I'm looking for pitch advice. I met the CEO of StartUpX, Alex Chen, and "
        "discussed a partnership today. I ran the tests and they failed.",
    )
    capture.capture_run(run.pk)
    assert drafted(run) == [("fact", "I met the CEO of StartUpX, Alex Chen, and discussed a partnership today", 85)]


def test_a_narrative_statement_past_the_preview_is_attested_by_the_run_input(llm_unconfigured):
    """The run-memory record keeps a 160-character preview; a statement captured further into the input is
    attested by the input it was read from (verified, so prompt-visible), and a content the input does not
    hold is not."""
    from benchmarks.loop import CAREFUL_OPERATOR
    from learnings.capture import input_attests
    from learnings.models import Learning
    from learnings.review import review_candidate

    set_policy(CAREFUL_OPERATOR)
    text = (
        "I've read a lot about hiking boots and I'm still comparing the big brands on price and weight, "
        "and the reviews do not agree at all. Can you suggest a few? By the way, I've been keeping my "
        "climbing gear in the garage since the move, and it smells of damp."
    )
    run = terminal_run(SessionFactory(), text)
    outcome = capture.capture_run(run.pk)
    for candidate_id in outcome.created:
        review_candidate(int(candidate_id.rsplit("-", 1)[1]))
    [learned] = Learning.objects.filter(source_run_id=run.pk)
    assert learned.content.startswith("I've been keeping my climbing gear in the garage")
    assert (learned.status, learned.verification_status) == ("active", "verified")
    assert not input_attests(run.pk, "I keep my climbing gear in the attic")
    assert not input_attests(None, learned.content)
