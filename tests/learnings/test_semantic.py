"""Semantic keys (§4.13) and evidence support (§4.12)."""

from __future__ import annotations

import pytest

from learnings.semantic import (
    SemanticKeys,
    evidence_terms,
    normalise_content,
    run_memory_supports_content,
    semantic_keys,
)

# --- §4.13 semantic keys ------------------------------------------------------------------------------


def test_normalise_content_collapses_trims_strips_punctuation_and_lowercases():
    assert normalise_content("  The  Project\tcodename is Atlas. ") == "the project codename is atlas"
    assert normalise_content("Atlas;,.") == "atlas"
    assert normalise_content("") == ""


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ("The project codename is Atlas.", "project codename: atlas"),
        ("Preferred editor = Helix", "preferred editor is Helix."),
        ("Le projet est Atlas", "projet: atlas"),
        ("The  project   codename is   ATLAS", "the project codename = atlas;"),
    ],
)
def test_semantic_keys_are_equal_for_subject_value_variants(left, right):
    assert semantic_keys(left) == semantic_keys(right)


def test_semantic_keys_of_a_subject_value_statement():
    assert semantic_keys("The project codename is Atlas.") == SemanticKeys(
        content_key="project codename=atlas", subject_key="project codename"
    )


def test_french_est_gives_subject_without_article():
    assert semantic_keys("Le projet est Atlas").subject_key == "projet"
    assert semantic_keys("La couleur est rouge").subject_key == "couleur"
    assert semantic_keys("Les couleurs sont rouge et bleu").subject_key == "couleurs"


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ("Project codename is Atlas.", "Project codename is Borealis."),
        ("Preferred editor is Helix.", "Preferred editor is Vim."),
    ],
)
def test_conflicting_values_share_subject_but_not_content_key(left, right):
    assert semantic_keys(left).subject_key == semantic_keys(right).subject_key
    assert semantic_keys(left).content_key != semantic_keys(right).content_key


def test_content_without_usable_delimiter_is_keyed_by_all_tokens():
    assert semantic_keys("Always answer in French!") == SemanticKeys("always answer in french", None)
    # Subject too short / a pronoun, value too short: no subject.
    assert semantic_keys("It is raining.").subject_key is None
    assert semantic_keys("This is fine").subject_key is None
    assert semantic_keys("Go is x").subject_key is None
    assert semantic_keys("Project codename is A").subject_key is None
    assert semantic_keys("").content_key == ""


def test_delimiters_are_tried_in_order_is_before_colon():
    keys = semantic_keys("Editor setting: the editor is Helix")
    assert keys.subject_key is None  # " is " comes first; its left side holds a colon: not one short statement
    # Beyond the reference: a one-word label before a statement is not part of the subject.
    keys = semantic_keys("Note: the editor is Helix")
    assert keys.subject_key == "editor"
    assert keys.content_key == "editor=helix"
    assert semantic_keys("codename: atlas").subject_key == "codename"


def test_later_delimiter_used_when_earlier_one_is_unusable():
    # " is " gives the unusable subject "x" (fewer than 3 characters); "=" then qualifies.
    assert semantic_keys("x is build timeout=30").subject_key == "x is build timeout"


@pytest.mark.parametrize(
    "text",
    [
        "it is set: timeout=30",  # a clause that starts with a pronoun is no subject
        "What is the best way to store old sneakers?",
        "How long is the drive from Paris to Lyon?",
        "User: what is the best way to learn the piano?",
        "I think the main problem is the router.",
        "Thanks, the recipe is great",
        "The weather was nice. The plan is to hike tomorrow morning",
        "My plan is to travel across Japan next spring with my two brothers and visit every famous temple",
    ],
)
def test_prose_has_no_subject(text):
    """Beyond the reference: questions, speaker labels, clauses and long prose are not `subject is value`
    statements, so chat turns of the same shape never conflict with each other."""
    assert semantic_keys(text).subject_key is None


def test_short_statements_keep_their_subject():
    assert semantic_keys("My favourite colour is blue.").subject_key == "my favourite colour"
    assert semantic_keys("The deploy window is Tuesday mornings").subject_key == "deploy window"
    assert semantic_keys("User: my favourite colour is blue").subject_key == "my favourite colour"


# --- §4.12 evidence support ---------------------------------------------------------------------------


def test_evidence_terms_drop_stop_words():
    terms = evidence_terms("Fact: the project codename is Atlas.")
    assert {"fact", "project", "codename", "atlas"} == terms
    assert "the" not in terms and "is" not in terms


RECORD_FIELDS = [
    "Preference: Preferred editor is Helix",
    "Remembered Preferred editor is Helix",
    "Result: Preferred editor is Helix",
    "marker",
]


def test_support_check_exact_containment():
    assert run_memory_supports_content(RECORD_FIELDS, "Preferred editor is Helix")


def test_support_check_through_evidence_terms():
    assert run_memory_supports_content(RECORD_FIELDS, "The preferred editor: Helix")


def test_support_check_rejects_unrelated_content():
    assert not run_memory_supports_content(RECORD_FIELDS, "Atlas")


def test_support_check_edge_cases():
    assert not run_memory_supports_content(RECORD_FIELDS, "   ")
    # Needle is trimmed before the containment check.
    assert run_memory_supports_content(RECORD_FIELDS, "  Preferred editor is Helix  ")
    # Missing fields are skipped.
    assert run_memory_supports_content([None, "Fact: Project codename is Atlas"], "Project codename is Atlas")
    # Containment is case-sensitive; a single-term needle needs exact containment.
    assert not run_memory_supports_content(["helix everywhere"], "Helix")
    # Two or more terms: all must be terms of one field.
    assert not run_memory_supports_content(["preferred editor", "Helix"], "preferred editor Helix")
    assert not run_memory_supports_content([], "Preferred editor is Helix")
