"""The lexical ranker: prompt scoring and selection, and search ranking (§4.7)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from learnings.lexical_ranking import (
    STOP_WORDS,
    is_explicit_memory_request,
    normalise_query,
    query_terms,
    rank_for_search,
    scope_priority,
    score_for_prompt,
    select_for_prompt,
)

# --- §4.7 query terms ---------------------------------------------------------------------------------


def test_query_terms_drop_stop_words_and_split_on_non_alphanumerics():
    assert query_terms("What color is Atlas?") == ["color", "atlas"]
    assert query_terms("Quelle est la couleur d'Atlas ?") == ["couleur", "d", "atlas"]
    assert query_terms("the the") == []
    assert query_terms("東京 office") == ["東京", "office"]


def test_normalise_query():
    assert normalise_query("  Hello WORLD ") == "hello world"
    assert normalise_query("   ") is None
    assert normalise_query(None) is None
    assert normalise_query("ÉTÉ") == "été"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("Use durable learning if it exists.", True),
        ("use durable memory", True),
        ("Do you remember my editor?", True),
        ("Qu'as-tu appris ?", True),
        ("Montre ta mémoire", True),
        ("show the learned context", True),
        ("What is the deployment status?", False),
        ("memorise this", False),
        ("", False),
    ],
)
def test_explicit_memory_requests(query, expected):
    assert is_explicit_memory_request(query) is expected


# --- §4.7 prompt scoring ------------------------------------------------------------------------------


def test_prompt_score_counts_terms_and_whole_query():
    content = "Atlas project color is vermilion."
    assert score_for_prompt(content, "What color is Atlas?") == 80
    assert score_for_prompt(content, "atlas project") == 400 + 2 * 40
    assert score_for_prompt("Default snack preference is banana.", "What color is Atlas?") == 0


def test_prompt_score_is_zero_without_query_or_terms():
    assert score_for_prompt("Atlas", None) == 0
    assert score_for_prompt("Atlas", "   ") == 0
    # Only stop-words left: no terms, no score, even though the content contains the query.
    assert score_for_prompt("what is the plan", "what is the") == 0


def test_prompt_score_counts_repeated_query_terms_each_time():
    assert score_for_prompt("atlas", "atlas, atlas") == 2 * 40


def test_whole_query_is_a_substring_match_but_terms_are_whole_words():
    assert score_for_prompt("Atlases are maps.", "atlas") == 400
    assert score_for_prompt("Atlases are maps.", "atlas maps") == 40


def test_kind_and_scope_terms_do_not_count_for_prompt_but_do_for_search():
    assert score_for_prompt("Default editor is vim.", "workspace fact") == 0
    score, fields = rank_for_search("Default editor is vim.", "fact", "workspace", "workspace fact")
    assert score == 20
    assert fields == ["kind", "scope"]


# --- §4.7 search ranking ------------------------------------------------------------------------------


def test_search_ranking_matches_unicode_content():
    assert rank_for_search("東京 office color is vermilion.", "fact", "workspace", "東京") == (
        440,
        ["content"],
    )
    assert rank_for_search("Default snack preference is banana.", "fact", "session", "東京") == (0, [])


def test_search_ranking_weights_and_labels():
    score, fields = rank_for_search("Atlas project color is vermilion.", "run_summary", "project", "project summary")
    # content: "project" term (+40); kind label "run summary": "summary" term (+10); scope "project": +10.
    assert score == 60
    assert fields == ["content", "kind", "scope"]
    # Whole query contained in the kind label: +100 on top of the term.
    assert rank_for_search("x", "run_summary", "session", "run summary") == (100 + 2 * 10, ["kind"])


def test_search_ranking_without_query():
    assert rank_for_search("Atlas", "fact", "session", None) == (0, [])
    assert rank_for_search("Atlas", "fact", "session", "the") == (0, [])


# --- §4.7 selection for the prompt --------------------------------------------------------------------


@dataclass
class Rec:
    learning_id: str
    content: str
    scope_kind: str = "session"
    published_at_ms: int = 1
    kind: str = "fact"


def ids(records):
    return [record.learning_id for record in records]


def test_scope_priority():
    assert [scope_priority(k) for k in ("session", "persona", "project", "workspace")] == [0, 1, 2, 3]
    assert scope_priority("unknown") == 4


def test_without_query_orders_by_scope_then_recency_then_id_and_skips_ineligible_kinds():
    records = [
        Rec("learning-workspace", "w", "workspace", 3),
        Rec("learning-procedure", "p", "session", 9, kind="procedure"),
        Rec("learning-summary", "s", "session", 9, kind="run_summary"),
        Rec("learning-project", "p", "project", 4),
        Rec("learning-b", "b", "session", 5),
        Rec("learning-a", "a", "session", 5),
        Rec("learning-old", "o", "session", 1),
        Rec("learning-persona", "x", "persona", 1, kind="preference"),
    ]
    assert ids(select_for_prompt(records, None)) == [
        "learning-a",
        "learning-b",
        "learning-old",
        "learning-persona",
        "learning-project",
        "learning-workspace",
    ]
    assert ids(select_for_prompt(records, "  ")) == ids(select_for_prompt(records, None))


SESSION_IRRELEVANT = Rec("learning-session-irrelevant", "Default snack preference is banana.", "session", 30)


def test_query_keeps_only_relevant_records():
    relevant = Rec("learning-workspace-relevant", "Atlas project color is vermilion.", "workspace", 10)
    records = [SESSION_IRRELEVANT, relevant]
    assert ids(select_for_prompt(records, None)) == [
        "learning-session-irrelevant",
        "learning-workspace-relevant",
    ]
    assert ids(select_for_prompt(records, "What color is Atlas?")) == ["learning-workspace-relevant"]


def test_unicode_query():
    unicode = Rec("learning-workspace-unicode", "東京 office color is vermilion.", "workspace", 10)
    assert ids(select_for_prompt([SESSION_IRRELEVANT, unicode], "東京")) == ["learning-workspace-unicode"]


def test_explicit_memory_request_keeps_recency_fallback():
    workspace = Rec("learning-workspace", "Default editor is vim.", "workspace", 10)
    selected = select_for_prompt([workspace, SESSION_IRRELEVANT], "Use durable learning if it exists.")
    assert ids(selected) == ["learning-session-irrelevant", "learning-workspace"]


def test_unrelated_query_selects_nothing():
    workspace = Rec("learning-workspace", "Default editor is vim.", "workspace", 10)
    assert select_for_prompt([SESSION_IRRELEVANT, workspace], "What is the deployment status?") == []


def test_kind_and_scope_words_do_not_select_a_learning():
    workspace_fact = Rec("learning-workspace", "Default editor is vim.", "workspace", 10)
    assert select_for_prompt([workspace_fact], "workspace fact") == []


def test_query_sort_is_score_then_scope_then_recency_then_id():
    records = [
        Rec("learning-ws", "editor helix", "workspace", 50),
        Rec("learning-best", "the editor is helix", "project", 1),
        Rec("learning-s2", "editor", "session", 20),
        Rec("learning-s1", "editor", "session", 20),
        Rec("learning-s0", "editor", "session", 30),
        Rec("learning-none", "banana", "session", 99),
    ]
    selected = select_for_prompt(records, "editor is helix")
    # best: whole query (+400) and two terms; ws: two terms; the three sessions: one term each.
    assert ids(selected) == ["learning-best", "learning-ws", "learning-s0", "learning-s1", "learning-s2"]


def test_selection_excludes_ineligible_kinds_even_when_they_score():
    records = [Rec("learning-proc", "Deploy Atlas with make", kind="procedure"), Rec("learning-f", "Atlas")]
    assert ids(select_for_prompt(records, "atlas")) == ["learning-f"]


# --- the fast paths against a straightforward reading of §4.7 ------------------------------------------

_VOCAB = [
    "atlas",
    "Atlas",
    "atl",
    "disk",
    "usage",
    "sizes",
    "GiB",
    "東京",
    "école",
    "ÉCOLE",
    "the",
    "is",
    "a_b",
    "memory",
    "remember",
    "durable",
    "learning",
    "x1",
    "İstanbul",
    "straße",
    "-",
    ".",
    "?",
    "  ",
    "kind",
    "fact",
    "run",
    "summary",
    "workspace",
    "project",
    "editor",
    "helix",
    "Ⅻ",
    "٣",
    "ǅ",
]


def _reference_terms(text: str) -> list[str]:
    """§4.7 terms, character by character: split on non-alphanumerics, drop empties and stop-words."""
    tokens = "".join(char if char.isalnum() else " " for char in text.lower()).split()
    return [token for token in tokens if token not in STOP_WORDS]


def _reference_field_score(value: str, query: str, weight: int) -> int:
    lowered = value.lower()
    value_terms = set(_reference_terms(lowered))
    score = 100 * weight if query in lowered else 0
    return score + sum(10 * weight for term in _reference_terms(query) if term in value_terms)


def _reference_select(records: list[Rec], query: str | None) -> list[Rec]:
    eligible = [record for record in records if record.kind in ("fact", "preference", "decision")]
    normalised = (query or "").strip().lower() or None

    def order(record: Rec) -> tuple:
        return (
            {"session": 0, "persona": 1, "project": 2, "workspace": 3}.get(record.scope_kind, 4),
            -record.published_at_ms,
            record.learning_id,
        )

    if normalised is None:
        return sorted(eligible, key=order)
    has_terms = bool(_reference_terms(normalised))
    scored = [
        (record, _reference_field_score(record.content, normalised, 4) if has_terms else 0) for record in eligible
    ]
    if any(score > 0 for _, score in scored):
        scored = [(record, score) for record, score in scored if score > 0]
    elif not is_explicit_memory_request(normalised):
        return []
    return [record for record, _ in sorted(scored, key=lambda pair: (-pair[1], *order(pair[0])))]


def _random_text(rng, most: int) -> str:
    return " ".join(rng.choice(_VOCAB) for _ in range(rng.randint(1, most)))


def test_selection_equals_a_straightforward_reading_of_the_spec():
    import random

    rng = random.Random(7)
    for case in range(500):
        records = [
            Rec(
                f"learning-{rng.randint(1, 40)}",
                _random_text(rng, 6),
                rng.choice(["session", "project", "workspace"]),
                rng.randint(0, 5),
                rng.choice(["fact", "preference", "decision", "procedure"]),
            )
            for _ in range(rng.randint(0, 12))
        ]
        query = rng.choice([None, "", "  ", _random_text(rng, 4), _random_text(rng, 2) + " learned context"])
        assert ids(select_for_prompt(records, query)) == ids(_reference_select(records, query)), (case, query)
        for record in records:
            expected = (
                _reference_field_score(record.content, (query or "").strip().lower(), 4)
                if (query or "").strip() and _reference_terms(query.strip().lower())
                else 0
            )
            assert score_for_prompt(record.content, query) == expected


def test_search_ranking_equals_a_straightforward_reading_of_the_spec():
    import random

    rng = random.Random(11)
    labels = {
        "fact": "fact",
        "preference": "preference",
        "decision": "decision",
        "procedure": "procedure",
        "run_summary": "run summary",
    }
    for _ in range(500):
        content = _random_text(rng, 6)
        kind, scope = rng.choice(list(labels)), rng.choice(["session", "persona", "project", "workspace"])
        query = rng.choice([None, "the", _random_text(rng, 3), "run summary", "workspace fact"])
        normalised = (query or "").strip().lower()
        expected_score, expected_fields = 0, []
        if normalised and _reference_terms(normalised):
            for name, value, weight in (("content", content, 4), ("kind", labels[kind], 1), ("scope", scope, 1)):
                score = _reference_field_score(value, normalised, weight)
                if score:
                    expected_score, expected_fields = expected_score + score, [*expected_fields, name]
        assert rank_for_search(content, kind, scope, query) == (expected_score, expected_fields)
