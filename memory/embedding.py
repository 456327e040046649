"""Sentence embeddings for recall: a small static embedding model that ships inside its PyPI wheel.

The model is WordLlama's ``l2_supercat`` 256-dimension model (``wordllama`` wheel, MIT licence, 16 MB of
weights under ``wordllama/weights/``). It is loaded from the installed package with downloads disabled: the
machines this service runs on have no internet, and a memory service must never fetch weights at run time.
A static model is a token-embedding table plus a pooling step: embedding one sentence costs tens of
microseconds on one core, so learnings are embedded when they are published and queries when a run opens.

Vectors are L2-normalised, so cosine similarity is a dot product (and pgvector's ``<=>`` distance is
``1 - cosine``)."""

from __future__ import annotations

import threading
import time
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

MODEL_NAME = "wordllama/l2_supercat"
DIMENSIONS = 256
MAX_CHARS = 4000
"""Text beyond this is not embedded (a learning is at most a few paragraphs; a static model averages tokens,
so the first few thousand characters carry the meaning)."""

_lock = threading.Lock()
_model = None
load_seconds: float | None = None


def _load():
    global _model, load_seconds
    with _lock:
        if _model is None:
            started = time.perf_counter()
            import wordllama
            from wordllama import WordLlama

            package_dir = Path(wordllama.__file__).resolve().parent
            _model = WordLlama.load(cache_dir=package_dir, disable_download=True, dim=DIMENSIONS)
            load_seconds = time.perf_counter() - started
    return _model


def embed_many(texts: list[str]) -> np.ndarray:
    """One L2-normalised float32 row of ``DIMENSIONS`` per text (an empty text gives a zero row)."""
    import numpy as np

    if not texts:
        return np.zeros((0, DIMENSIONS), dtype=np.float32)
    model = _model or _load()
    with np.errstate(invalid="ignore", divide="ignore"):  # an empty text has no norm: its row becomes zeros
        vectors = np.asarray(_embed(model, [text[:MAX_CHARS] for text in texts]), dtype=np.float32)
    return np.nan_to_num(vectors, copy=False)


BATCH = 64  # texts a chunk, as WordLlama's ``embed`` (its default ``batch_size``)


def _embed(model, texts: list[str]) -> np.ndarray:
    """``model.embed(texts, norm=True)``, the same arithmetic step for step (chunks of ``BATCH`` padded to their
    longest text, the ids clamped to the table, the model's own masked average, the L2 norm), with the texts
    tokenised by ``encode_batch_fast``: the same ids and masks without the character offsets ``encode_batch``
    also computes and nothing here reads (~30% of the tokeniser's time). Falls back to ``model.embed`` for a
    binary model or a tokeniser without it. ``tests/memory/test_embedding.py`` holds the two equal, bit for bit."""
    import numpy as np

    encode = getattr(model.tokenizer, "encode_batch_fast", None)
    if encode is None or getattr(model, "binary", False):
        return model.embed(texts, norm=True)
    table = model.embedding
    last = table.shape[0] - 1
    pooled = np.empty((len(texts), table.shape[1]), dtype=np.float32)
    for start in range(0, len(texts), BATCH):
        encoded = encode(texts[start : start + BATCH], is_pretokenized=False, add_special_tokens=False)
        ids = np.array([enc.ids for enc in encoded], dtype=np.int32)
        mask = np.array([enc.attention_mask for enc in encoded], dtype=np.float32)
        np.clip(ids, 0, last, out=ids)
        chunk = model.avg_pool(table[ids], mask)
        chunk /= np.linalg.norm(chunk, axis=1, keepdims=True)
        pooled[start : start + chunk.shape[0]] = chunk
    return pooled


def embed(text: str) -> list[float]:
    """One text's embedding as a list of floats (what the database column stores), rounded to 6 decimals as
    the bulk import rounds a batch (``np.round``, in one pass: ~15x cheaper than ``round`` per value)."""
    import numpy as np

    return np.round(embed_many([text])[0].astype(np.float64), 6).tolist()


@lru_cache(maxsize=1024)
def _query_vector(text: str) -> np.ndarray:
    vector = embed_many([text])[0].astype("float64")
    vector.setflags(write=False)  # shared by every caller: read-only
    return vector


def embed_query(text: str) -> np.ndarray:
    """One text's embedding as float64, read-only, cached by text (bounded): a run's input is ranked against
    learnings, standing preferences and recovered runs, and agents ask the same questions again."""
    return _query_vector(text)
