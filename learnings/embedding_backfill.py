"""Backfill of learning embeddings (``Learning.embedding``, derived from the content on save).

Rows written before the recall indexes existed, or in bulk without ``save()``, have no embedding; the hybrid
ranker then sees them through the full-text index only. ``backfill`` fills them in batches, newest first, and
reports progress; ``manage.py backfill_embeddings`` runs it."""

from __future__ import annotations

from collections.abc import Callable

from django.db import connection, transaction

from learnings.models import Learning
from memory.embedding import embed_many

BATCH = 500


def missing_count() -> int:
    return Learning.objects.filter(embedding__isnull=True).count()


def backfill(*, batch: int = BATCH, progress: Callable[[int, int], None] | None = None) -> int:
    """Embed every learning that has no embedding; returns how many were filled. Each batch commits on its
    own, so an interrupted backfill keeps what it did and a rerun continues."""
    total = missing_count()
    done = 0
    while True:
        missing = Learning.objects.filter(embedding__isnull=True).order_by("-id")
        rows = list(missing.values_list("id", "content")[:batch])
        if not rows:
            return done
        vectors = embed_many([content for _, content in rows])
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.executemany(
                "UPDATE learnings_learning SET embedding = %s WHERE id = %s AND embedding IS NULL",
                [([round(float(x), 6) for x in vector], pk) for (pk, _), vector in zip(rows, vectors, strict=True)],
            )
        done += len(rows)
        if progress is not None:
            progress(done, total)
