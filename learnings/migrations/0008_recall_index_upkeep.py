"""Upkeep of the recall indexes (issue 23.2: the first query after a write as fast as any other).

* ``learning_search_tsv_idx`` keeps at most 256 kB of new entries in its pending list (PostgreSQL's default
  is 4 MB): every full-text lookup scans the whole pending list, so after a few thousand writes a lookup read
  hundreds of pages; now at most 32, and the list is merged into the index in small batches.
* ``learnings_learning`` is vacuumed by autovacuum after 2% of its rows were inserted (500 at least; the
  default waits for 20%): a vacuum sets the pages' visibility and hint bits (which the index scans otherwise
  work out again, row by row, on every read of freshly written rows) and merges the pending list. Analysed
  after 2% changed as well, so the planner's statistics follow a growing table.
"""

from django.db import migrations

TABLE_OPTIONS = (
    "autovacuum_vacuum_insert_scale_factor = 0.02, autovacuum_vacuum_insert_threshold = 500, "
    "autovacuum_analyze_scale_factor = 0.02"
)


class Migration(migrations.Migration):
    dependencies = [("learnings", "0007_candidate_screening")]

    operations = [
        migrations.RunSQL(
            sql=[
                "ALTER INDEX IF EXISTS learning_search_tsv_idx SET (gin_pending_list_limit = 256)",
                f"ALTER TABLE learnings_learning SET ({TABLE_OPTIONS})",
            ],
            reverse_sql=[
                "ALTER INDEX IF EXISTS learning_search_tsv_idx RESET (gin_pending_list_limit)",
                "ALTER TABLE learnings_learning RESET (autovacuum_vacuum_insert_scale_factor, "
                "autovacuum_vacuum_insert_threshold, autovacuum_analyze_scale_factor)",
            ],
        ),
    ]
