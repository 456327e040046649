"""Plane 2 ranking, the pure part: the §4.5 lexical score and order of run-memory entries (no database)."""

from __future__ import annotations

import random
import unicodedata

import pytest

from memory import recall
from memory.recall import normalise_text, query_terms, rank_entries, score_entry
from memory.run_records import RecoveredEntry
from tests.support.sections import entry

# ------------------------------------------------------------------------------------------------ ranking


def test_normalise_text_is_unicode_aware():
    assert normalise_text("  Hello, WORLD!! -- déjà_vu  ") == "hello world déjà vu"
    assert normalise_text("東京の天気 — 2024年") == "東京の天気 2024年"
    assert normalise_text("नमस्ते, दुनिया") == "नमस्ते दुनिया"  # vowel signs stay inside their word
    assert normalise_text("Straße") == "strasse"
    assert normalise_text("a\x00b\tc\u3000d。e") == "a b c d e"
    assert normalise_text("!!! ...") == ""
    assert query_terms("Fix the CI, ok? 東京 fix") == {"fix", "the"}


def test_ranker_prefers_relevant_over_newer_irrelevant():
    relevant = entry("run-1", 1_000, "Request: rotate the staging database credentials", request_preview="rotate db")
    newer = entry("run-2", 2_000, "Request: write the weekly newsletter")
    ranked = rank_entries([newer, relevant], "please rotate the staging database credentials again")
    assert [e.run_id for _, e in ranked] == ["run-1", "run-2"]
    assert ranked[0][0] > ranked[1][0] == 15 * 4  # the newer record only shares the word "the"


def test_unicode_exact_match_ranks():
    tokyo = entry("run-1", 1_000, "Request: 東京の天気を調べて\nResult: 晴れ", request_preview="東京の天気を調べて")
    newer = entry("run-2", 2_000, "Request: ロンドンの天気")
    assert query_terms("東京") == frozenset()
    assert score_entry(tokyo, "東京") == 100 * 4 + 100 * 3
    assert score_entry(newer, "東京") == 0
    assert [e.run_id for _, e in rank_entries([newer, tokyo], "東京")] == ["run-1", "run-2"]


def test_score_weights_exactly():
    e = entry(
        "run-1",
        1,
        "Request: Deploy staging now",
        request_preview="deploy STAGING",
        outcome_preview="staging is up",
        failure_markers=["failed", "error: deploy staging timed out"],
    )
    # summary: whole query + 2 terms + all terms; request: same; outcome: 1 term; markers: whole + 2 + all.
    expected = (100 + 30 + 40) * 4 + (100 + 30 + 40) * 3 + 15 * 3 + (100 + 30 + 40) * 1
    assert score_entry(e, "deploy, staging!") == expected


def test_short_words_are_not_terms_but_count_in_the_whole_query():
    e = entry("run-1", 1, "go to db")
    assert score_entry(e, "to db") == 400
    assert score_entry(e, "db go") == 0


@pytest.mark.parametrize("query", [None, "", "   ", "!!!", "—"])
def test_blank_query_scores_zero_and_ranks_by_recency(query):
    entries = [entry("run-9", 5, "a"), entry("run-10", 5, "b"), entry("run-3", 7, "c")]
    ranked = rank_entries(entries, query)
    assert [(s, e.run_id) for s, e in ranked] == [(0, "run-3"), (0, "run-10"), (0, "run-9")]


def test_ties_break_by_recency_then_run_id():
    entries = [
        entry("run-9", 5, "deploy the app"),
        entry("run-10", 5, "deploy the app"),
        entry("run-11", 4, "deploy the app"),
        entry("run-12", 6, "unrelated"),
    ]
    ranked = rank_entries(entries, "deploy")
    assert [e.run_id for _, e in ranked] == ["run-10", "run-9", "run-11", "run-12"]


def _naive_normalise(text: str) -> str:
    out, space = [], True
    for char in text.casefold():
        if char.isalnum() or unicodedata.category(char)[0] == "M":
            out.append(char)
            space = False
        elif not space:
            out.append(" ")
            space = True
    return "".join(out).strip()


def _naive_score(e: RecoveredEntry, query: str) -> int:
    """Spec §4.5, written out literally."""
    q = _naive_normalise(query)
    terms = {t for t in q.split() if len(t) >= 3}
    if not query.strip() or (not q and not terms):
        return 0
    fields = [(e.summary, 4), (e.request_preview, 3), (e.outcome_preview, 3)]
    if e.failure_markers:
        fields.append((" ".join(e.failure_markers), 1))
    score = 0
    for value, weight in fields:
        v = _naive_normalise(value or "")
        if not v:
            continue
        if q and q in v:
            score += 100 * weight
        matched = len(terms & {t for t in v.split() if len(t) >= 3})
        if matched:
            score += 15 * weight * matched + (40 * weight if matched == len(terms) else 0)
    return score


def test_fast_scorer_matches_the_literal_spec():
    rng = random.Random(11)
    vocab = ["deploy", "staging", "DB", "fix", "the", "tests", "東京", "天気", "नमस्ते", "déjà", "vu", "ok"]
    vocab += ["straße", "STRASSE", "a\x00b", "x_y", "run-10", "”quoted”", "—", "...", "\u200b", "ǅ"]

    def text(n: int) -> str:
        return "".join(rng.choice(vocab) + rng.choice([" ", ", ", "\n", "", "!", "  "]) for _ in range(n))

    entries = [
        entry(
            f"run-{i}",
            i,
            text(rng.randint(0, 30)),
            request_preview=rng.choice([None, text(5)]),
            outcome_preview=rng.choice([None, "", text(8)]),
            failure_markers=rng.choice([[], ["failed"], ["failed", "error: " + text(3)]]),
        )
        for i in range(60)
    ]
    queries = [text(rng.randint(1, 4)) for _ in range(80)] + [text(20), text(40), "deploy staging", "東京"]
    for query in queries:
        ranked = rank_entries(entries, query)
        assert {e.run_id: s for s, e in ranked} == {e.run_id: _naive_score(e, query) for e in entries}, query
        for e in entries[:5]:
            assert score_entry(e, query) == _naive_score(e, query)


@pytest.mark.parametrize("count", [32, 128])
def test_ranking_normalises_once_per_batch_and_scores_only_entries_sharing_a_term(monkeypatch, count):
    """What kept ranking 32 records under a millisecond, counted instead of timed (a wall-clock bound is
    noise under ``-n 2``): the query and all the entries' fields are normalised in two calls whatever the
    number of entries, and only an entry that shares a query word is scored field by field."""
    rng = random.Random(5)

    def vocab(letters: str) -> list[str]:
        return ["".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(500)]

    other, asked = vocab("abcdefghijklm"), vocab("nopqrstuvwxyz")  # no word of one is inside a word of the other

    def words(source: list[str], n: int) -> str:
        return " ".join(rng.choice(source) for _ in range(n))

    query_words = [rng.choice(asked) for _ in range(3)]
    entries, sharing = [], set()
    for i in range(count):
        request, outcome = words(other, 30)[:160], words(other, 30)[:160]
        if i % 5 == 0:
            outcome = f"{rng.choice(query_words)} {outcome}"
            sharing.add(f"run-{i}")
        summary = f"Request: {request}\nResult: {outcome}\nError: {words(other, 30)}"[:480]
        entries.append(entry(f"run-{i}", i, summary, request_preview=request, outcome_preview=outcome))

    calls = {"_spaced_pieces": 0, "_score_pieces": 0}
    for name in calls:
        real = getattr(recall, name)

        def counted(*args, _real=real, _name=name):
            calls[_name] += 1
            return _real(*args)

        monkeypatch.setattr(recall, name, counted)
    ranked = rank_entries(entries, ", please: ".join(query_words))
    assert calls == {"_spaced_pieces": 2, "_score_pieces": len(sharing)}
    assert {e.run_id for score, e in ranked if score > 0} == sharing
