"""memory.embedding: the batch path (``embed_many``) computes what WordLlama's own ``embed`` computes, bit for
bit, with the faster tokeniser call (issue 23.3: the bulk import embeds every batch)."""

from __future__ import annotations

import numpy as np

from memory import embedding

TEXTS = [
    "",
    "a",
    "The deploy window is Tuesday at 10:00.",
    "Alice prefers typed Python over tabs because the team agreed on it after the incident review",
    "Ünïcødé, emoji 🚀 and CJK 記憶 in one fact; tabs\tand\nnew lines",
    "x " * 900,
    "   ",
    "token=abc123 https://example.com/a?b=c (note 7)",
] + [f"fact {i}: " + "word " * (i % 37) for i in range(150)]  # more than two chunks, of many lengths


def test_embed_many_is_the_model_s_own_embedding_bit_for_bit():
    model = embedding._load()
    texts = [text[: embedding.MAX_CHARS] for text in TEXTS]
    with np.errstate(invalid="ignore", divide="ignore"):
        expected = np.nan_to_num(np.asarray(model.embed(texts, norm=True), dtype=np.float32))
    got = embedding.embed_many(TEXTS)
    assert got.dtype == np.float32 and got.shape == (len(TEXTS), embedding.DIMENSIONS)
    assert np.array_equal(got, expected)
    assert not got[0].any() and got[2].any()  # the empty text gives zeros, a sentence a vector


def test_the_fast_path_is_taken_and_can_differ_from_a_wrong_model():
    """The comparison above can fail: a table with one row changed gives other vectors."""
    model = embedding._load()
    assert hasattr(model.tokenizer, "encode_batch_fast")
    ids = model.tokenizer.encode("deploy window", add_special_tokens=False).ids
    changed = model.embedding.copy()
    changed[ids[0]] += 1.0

    class Changed:
        tokenizer = model.tokenizer
        embedding = changed
        binary = False
        avg_pool = staticmethod(model.avg_pool)

    assert not np.array_equal(
        embedding._embed(Changed(), ["deploy window"]), embedding._embed(model, ["deploy window"])
    )


def test_one_text_is_rounded_as_a_bulk_import_rounds_it():
    """``embed`` (a learning published one at a time, a run-memory record) and the bulk import
    (``learnings.services.imports.prepare_batch``) store the very same values for the same text."""
    import numpy as np

    from memory.embedding import embed, embed_many

    texts = ["the deploy window is Tuesday", "Alice prefers tea over coffee", "x"]
    batch = np.round(embed_many(texts).astype(np.float64), 6)
    for text, row in zip(texts, batch, strict=True):
        vector = embed(text)
        assert vector == row.tolist()
        assert all(type(value) is float for value in vector)
        assert all(abs(value - round(value, 6)) < 1e-12 for value in vector)
