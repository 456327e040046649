"""``manage.py backfill_embeddings``: embed the learnings that have no embedding yet
(see learnings.embedding_backfill)."""

from django.core.management.base import BaseCommand

from learnings import embedding_backfill


class Command(BaseCommand):
    help = "Compute the sentence embedding of every learning that has none (progress printed; safe to rerun)."

    def add_arguments(self, parser):
        parser.add_argument("--batch", type=int, default=embedding_backfill.BATCH, help="rows per batch (default 500)")

    def handle(self, *args, batch: int, **options):
        total = embedding_backfill.missing_count()
        if total == 0:
            self.stdout.write("every learning has an embedding: nothing to do")
            return
        self.stdout.write(f"embedding {total} learning(s) in batches of {batch}")

        def progress(done: int, expected: int) -> None:
            self.stdout.write(f"  {done}/{expected}")

        filled = embedding_backfill.backfill(batch=batch, progress=progress)
        self.stdout.write(self.style.SUCCESS(f"filled {filled} embedding(s)"))
