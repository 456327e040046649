"""The shared hybrid ranker (memory.ranking) and the embedding model (memory.embedding), without a database."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memory import embedding, ranking


def test_the_model_ships_in_its_wheel_and_loads_offline():
    import wordllama

    weights = Path(wordllama.__file__).resolve().parent / "weights" / "l2_supercat_256.safetensors"
    assert weights.is_file()  # loaded from the installed package: nothing is downloaded
    vectors = embedding.embed_many(["I keep my old sneakers under my bed.", ""])
    assert vectors.shape == (2, embedding.DIMENSIONS) and vectors.dtype == np.float32
    assert np.linalg.norm(vectors[0]) == pytest.approx(1.0, abs=1e-4)
    assert not vectors[1].any()  # an empty text has no direction


def test_embeddings_put_related_sentences_closer():
    query, related, unrelated = embedding.embed_many(
        ["Where do I keep my old shoes?", "My old sneakers are stored under the bed.", "The invoice is due Friday."]
    )
    assert float(query @ related) > float(query @ unrelated) + 0.2


def test_terms_are_stemmed_without_stop_words():
    assert ranking.terms("The sneakers were running under my beds") == ["sneaker", "run", "bed"]
    assert ranking.query_terms("running runs run") == ("run",)


def test_bm25_prefers_the_rare_term():
    profiles = [
        ranking.profile(text)
        for text in ("I went to the shop today", "I went to the shop with Coldplay", "the shop was closed", "the shop")
    ]
    scores = ranking.bm25(ranking.query_terms("shop coldplay"), profiles)
    assert int(np.argmax(scores)) == 1
    assert scores[3] > 0 and scores[0] < scores[1]  # "shop" is everywhere: worth little


def test_rank_fuses_and_drops_irrelevant_candidates():
    texts = [
        "My old sneakers are under the bed.",
        "Quarterly invoices go to accounting.",
        "I bought new running shoes last week.",
    ]
    ranked = ranking.rank_texts("where are my sneakers?", texts)
    assert ranked.order[0] == 0
    assert 1 not in ranked.order  # no shared term, low similarity: not relevant


def test_priors_break_near_ties_only():
    texts = ["deploy window is tuesday", "deploy window is tuesday"]
    vectors = embedding.embed_many(texts).astype(np.float64)
    query = embedding.embed_many(["deploy window"])[0].astype(np.float64)
    assert ranking.rank("deploy window", texts, vectors, query, priors=[0.0, 0.01]).order == [1, 0]
    assert ranking.rank("deploy window", texts, vectors, query).order == [0, 1]  # stable without priors


def test_no_query_and_no_candidates():
    assert ranking.rank("anything", [], None, None).order == []
    assert ranking.bm25((), [ranking.profile("text")]).tolist() == [0.0]


def test_feedback_reorders_towards_what_the_best_matches_talk_about():
    texts = [
        "I moved my running sneakers to the garage shelf.",
        "Sneakers: the garage shelf, next to the bikes.",
        "The garage shelf also holds the bike pump.",
        "Invoices are due on Friday.",
    ]
    vectors = embedding.embed_many(texts).astype(np.float64)
    query = embedding.embed_many(["where are my sneakers"])[0].astype(np.float64)
    calls = []

    def spy(top):
        calls.append(list(top))
        return vectors @ query

    ranking.rank("where are my sneakers", texts, None, None, cosines=vectors @ query, feedback=spy)
    assert calls and 1 <= len(calls[0]) <= ranking.FEEDBACK_DOCS and 3 not in calls[0]  # the best relevant ones


def test_a_query_is_embedded_once_and_shared_read_only():
    text = "where did I leave the blue umbrella"
    first = embedding.embed_query(text)
    assert first.dtype == np.float64 and first.shape == (embedding.DIMENSIONS,)
    assert np.array_equal(first, embedding.embed_many([text])[0].astype(np.float64))
    assert embedding.embed_query(text) is first  # cached by text
    with pytest.raises(ValueError):
        first[0] = 1.0  # shared by every caller: nobody can change it
    assert not np.array_equal(embedding.embed_query("an invoice for the rocket"), first)
