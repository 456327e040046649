from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("kheish", "0001_broker_message")]

    operations = [
        migrations.CreateModel(
            name="RateCounter",
            fields=[
                ("key", models.CharField(max_length=255, primary_key=True, serialize=False)),
                ("value", models.BigIntegerField()),
                ("expires", models.DateTimeField(db_index=True)),
            ],
            options={"db_table": "kheish_rate_counter"},
        ),
        # Counts are not worth a WAL record (no fsync on the request path); a crash empties the table, which
        # only forgives the current windows.
        migrations.RunSQL(
            "ALTER TABLE kheish_rate_counter SET UNLOGGED", reverse_sql="ALTER TABLE kheish_rate_counter SET LOGGED"
        ),
    ]
