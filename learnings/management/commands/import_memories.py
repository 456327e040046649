"""``manage.py import_memories FILE``: move memories from another system into Kheish as published learnings.

    manage.py import_memories memories.jsonl --format jsonl
    manage.py import_memories mem0_get_all.json --format mem0 --scope project:atlas
    manage.py import_memories store_items.jsonl --format langgraph --scope persona:helper --kind preference

Reads the file (``learnings.importers``), then publishes it in batches (``learnings.services.imports``), each
batch in its own transaction with every gate of the one-at-a-time path (the next batch is read and checked
while one is written); progress is printed per batch. Each
memory's external id is stored with its candidate (unique per scope), so an interrupted import is resumed by
running the same command again: what was imported is skipped, the rest is added.

``--vector-index`` (default ``auto``): a big import (at least 1000 memories and at least a third of what the
learnings table will hold, or ``rebuild``) loads with the learnings' HNSW index dropped and builds it again
at the end (concurrently: nothing is blocked), ten times cheaper than maintaining it row by row; searches stay
correct meanwhile, only slower over big scopes. The index is built again however the command ends (Ctrl-C, an
error); after a crash the next import or ``manage.py repair --apply`` builds it. ``keep`` never drops it."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from learnings import importers
from learnings.models import PublishTier
from learnings.services.imports import (
    INDEX_MODES,
    PREPARE_MODES,
    ImportItem,
    ImportOutcome,
    ensure_vector_index,
    import_batches,
    rebuilds_vector_index,
)


class Command(BaseCommand):
    help = "Import memories (Kheish JSONL, mem0 get_all output, LangGraph store items) as published learnings."

    def add_arguments(self, parser):
        parser.add_argument("file", help="the file to read")
        parser.add_argument("--format", choices=importers.FORMATS, default="jsonl", dest="fmt")
        parser.add_argument("--scope", default=None, help="scope of memories that name none, e.g. project:atlas")
        parser.add_argument("--kind", default="fact", help="kind of memories that name none (default fact)")
        parser.add_argument("--publish-tier", choices=PublishTier.values, default=PublishTier.ACTIVE)
        parser.add_argument("--batch", type=int, default=1000, help="memories per transaction (default 1000)")
        parser.add_argument("--actor", default="import", help="who the audit rows name (default import)")
        parser.add_argument(
            "--prepare-in",
            choices=PREPARE_MODES,
            default="auto",
            help="where the next batch is checked and embedded while one is written: auto, process, thread",
        )
        parser.add_argument(
            "--vector-index",
            choices=INDEX_MODES,
            default="auto",
            help="load with the HNSW index dropped and rebuild it at the end: auto (big imports), keep, rebuild",
        )

    def handle(
        self,
        *args,
        file: str,
        fmt: str,
        scope: str | None,
        kind: str,
        publish_tier: str,
        batch: int,
        actor: str,
        vector_index: str,
        prepare_in: str,
        **options,
    ):
        path = Path(file)
        if not path.is_file():
            raise CommandError(f"{file}: no such file")
        if not 1 <= batch <= 10_000:
            raise CommandError("--batch must be between 1 and 10000")
        try:
            default_scope = importers.parse_scope(scope) if scope else None
        except importers.ReadError as exc:
            raise CommandError(f"--scope: {exc}") from exc
        total = ImportOutcome()
        unreadable = 0
        started = time.perf_counter()
        expected = importers.count(path)
        rebuild = rebuilds_vector_index(expected, vector_index)
        if rebuild:
            self.stdout.write("  loading without the vector index: it is built again at the end")
        elif (state := ensure_vector_index()) in ("created", "rebuilt"):  # what an earlier crash left
            self.stdout.write(f"  vector index {state} (an earlier import did not finish)")
        # Each batch with its lines' numbers and the unreadable lines counted when it was cut: the next
        # batch is read (and prepared) while this one is written.
        cut: deque[tuple[list[ImportItem], list[int], int]] = deque()

        def batches() -> Iterator[list[ImportItem]]:
            nonlocal unreadable
            pending: list[ImportItem] = []
            lines: list[int] = []
            for read in importers.read(path, fmt=fmt, default_scope=default_scope, default_kind=kind):
                if read.item is None:
                    unreadable += 1
                    self.stderr.write(f"  line {read.line}: {read.error}")
                    continue
                pending.append(read.item)
                lines.append(read.line)
                if len(pending) >= batch:
                    cut.append((pending, lines, unreadable))
                    yield pending
                    pending, lines = [], []
            if pending:
                cut.append((pending, lines, unreadable))
                yield pending

        outcomes = import_batches(
            batches(),
            actor=f"operator:{actor}",
            publish_tier=publish_tier,
            expected=expected,
            vector_index="rebuild" if rebuild else "keep",
            prepare_in=prepare_in,
        )
        # closing: the index is built again when the loop ends, also when it is interrupted (Ctrl-C)
        with closing(outcomes):
            for outcome in outcomes:
                items, lines, unreadable_then = cut.popleft()
                for external_id, message in outcome.invalid:
                    line = next(
                        (n for n, item in zip(lines, items, strict=True) if item.external_id == external_id), "?"
                    )
                    self.stderr.write(f"  line {line}: {message}")
                total.add(outcome)
                done = total.published + total.reused + total.already_imported + total.held + len(total.invalid)
                rate = done / max(time.perf_counter() - started, 1e-9)
                self.stdout.write(
                    f"  {done + unreadable_then} read: {total.published} published, {total.reused} equivalent "
                    f"reused, {total.already_imported} already imported, {total.held} held for review, "
                    f"{len(total.invalid) + unreadable_then} refused ({rate:.0f}/s)"
                )
        elapsed = time.perf_counter() - started
        self.stdout.write(
            self.style.SUCCESS(
                f"imported {path.name} ({fmt}) in {elapsed:.1f}s: {total.published} published, {total.reused} reused, "
                f"{total.already_imported} already there, {total.held} held for review, "
                f"{len(total.invalid) + unreadable} refused"
            )
        )
