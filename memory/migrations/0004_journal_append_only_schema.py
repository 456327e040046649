"""The journal's append-only trigger is part of the schema, unconditionally (PostgreSQL is the only engine).

0002 created it from Python only on PostgreSQL; this states it as plain SQL, so every database migrated to here
has it whatever ran before (``CREATE OR REPLACE`` / ``DROP TRIGGER IF EXISTS``: re-running it is harmless)."""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION memory_journal_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'memory_journalevent is append-only: % is not allowed', TG_OP
        USING ERRCODE = 'restrict_violation';
END;
$$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS memory_journal_append_only ON memory_journalevent;
CREATE TRIGGER memory_journal_append_only BEFORE UPDATE OR DELETE ON memory_journalevent
    FOR EACH ROW EXECUTE FUNCTION memory_journal_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [("memory", "0003_run_memory_capture_attempts")]
    # Backwards leaves the trigger to 0002's reverse (which drops it): the schema before 0004 had it too.
    operations = [migrations.RunSQL(CREATE, reverse_sql=migrations.RunSQL.noop)]
