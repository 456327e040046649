"""The journal is append-only: a trigger rejects UPDATE and DELETE on journal events (PostgreSQL only)."""

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
DROP = """
DROP TRIGGER IF EXISTS memory_journal_append_only ON memory_journalevent;
DROP FUNCTION IF EXISTS memory_journal_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [("memory", "0001_initial")]
    operations = [migrations.RunSQL(CREATE, DROP)]
