"""Recall indexes for learnings (issue 12).

* ``embedding``: the content's sentence embedding (double precision[256], filled on save; ``backfill_embeddings``
  fills older rows).
* ``search_tsv``: a stored generated full-text vector of the content (English Snowball stemming) with a GIN
  index over live rows: the lexical candidates of a query come from the index, never from a scan.
* ``embedding_vec``: where the server has pgvector, a stored generated ``vector(256)`` cast from
  ``embedding`` with an HNSW index (cosine): the semantic candidates come from the index. On a server without
  the extension the column is absent and ``learnings.recall_sql`` ranks the lexical and recent candidates by
  the stored embeddings instead.

The two generated columns are not model fields (Django never writes them); ``learnings.recall_sql`` reads them.
"""

import django.contrib.postgres.fields
from django.db import migrations, models

LIVE = "status IN ('active', 'provisional')"


def add_vector_column(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
        if cursor.fetchone() is None:
            return
        cursor.execute("CREATE EXTENSION IF NOT EXISTS vector")
        cursor.execute(
            "ALTER TABLE learnings_learning ADD COLUMN IF NOT EXISTS embedding_vec vector(256) "
            "GENERATED ALWAYS AS (embedding::vector(256)) STORED"
        )
        cursor.execute(
            "CREATE INDEX IF NOT EXISTS learning_embedding_hnsw_idx ON learnings_learning "
            f"USING hnsw (embedding_vec vector_cosine_ops) WHERE {LIVE}"
        )


def drop_vector_column(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("DROP INDEX IF EXISTS learning_embedding_hnsw_idx")
        cursor.execute("ALTER TABLE learnings_learning DROP COLUMN IF EXISTS embedding_vec")


class Migration(migrations.Migration):
    dependencies = [("learnings", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="learning",
            name="embedding",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.FloatField(), blank=True, editable=False, null=True, size=256
            ),
        ),
        migrations.RunSQL(
            sql=[
                "ALTER TABLE learnings_learning ADD COLUMN search_tsv tsvector "
                "GENERATED ALWAYS AS (to_tsvector('english'::regconfig, content)) STORED",
                f"CREATE INDEX learning_search_tsv_idx ON learnings_learning USING gin (search_tsv) WHERE {LIVE}",
            ],
            reverse_sql=[
                "DROP INDEX IF EXISTS learning_search_tsv_idx",
                "ALTER TABLE learnings_learning DROP COLUMN IF EXISTS search_tsv",
            ],
        ),
        migrations.RunPython(add_vector_column, drop_vector_column),
    ]
