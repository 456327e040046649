from django.db import migrations, models


class Migration(migrations.Migration):
    """The capture replay's claim (issue 14.12): a nullable column, so adding it rewrites nothing."""

    dependencies = [
        ("memory", "0006_runmemoryrecord_embedding"),
    ]

    operations = [
        migrations.AddField(
            model_name="runmemoryrecord",
            name="capture_queued_at_ms",
            field=models.BigIntegerField(
                blank=True,
                editable=False,
                help_text="When a capture task was last queued for this run (the replay's claim; it lapses after "
                "KHEISH_QUEUE_LEASE_S, and the task clears it when it ends).",
                null=True,
            ),
        ),
    ]
