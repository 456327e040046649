"""Candidates record who proposed them (issue 19.4: an agent sees only its own pending proposals).

Existing rows are filled in: a candidate captured from a run belongs to the owner of that run's session; one
made through the API to the user its ``create`` audit row names as the actor. A candidate neither can place
stays without a proposer (operators still see it; no agent does)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models



def backfill(apps, schema_editor):
    Candidate = apps.get_model("learnings", "LearningCandidate")
    Run = apps.get_model("memory", "Run")
    Session = apps.get_model("memory", "Session")
    AuditEvent = apps.get_model("memory", "AuditEvent")
    User = apps.get_model(*settings.AUTH_USER_MODEL.split("."))
    candidates = Candidate._meta.db_table
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            f'UPDATE "{candidates}" c SET proposed_by_id = s.owner_id '  # noqa: S608 - model table names
            f'FROM "{Run._meta.db_table}" r JOIN "{Session._meta.db_table}" s ON s.id = r.session_id '
            "WHERE c.source_run_id = r.id AND c.proposed_by_id IS NULL"
        )
        cursor.execute(
            f'UPDATE "{candidates}" c SET proposed_by_id = u.id '  # noqa: S608
            f'FROM "{AuditEvent._meta.db_table}" a JOIN "{User._meta.db_table}" u ON u.username = a.actor '
            "WHERE a.subject_type = 'learning_candidate' AND a.action = 'create' "
            "AND a.subject_id = 'learning-candidate-' || c.id::text AND c.proposed_by_id IS NULL"
        )


class Migration(migrations.Migration):

    dependencies = [
        ('learnings', '0003_stated_at'),
        ('memory', '0007_runmemoryrecord_capture_queued_at_ms'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='learningcandidate',
            name='proposed_by',
            field=models.ForeignKey(blank=True, editable=False, help_text='Who proposed it: the API caller, or the owner of the session whose run it was captured from. Agents see only their own candidates.', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
