"""The prompt-visible set of a session's scopes, fingerprinted by row versions and prepared once
per process: the fingerprint computed in SQL is the one computed from the rows, an unchanged set is served
without reading its rows, and any write - even a second one inside the same transaction - is seen."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from learnings import retrieval
from learnings.models import Learning
from learnings.querysets import versions_digest
from memory.clock import now_ms
from memory.sessions import learning_scope_keys
from tests.factories import ProjectFactory, SessionFactory
from tests.support.learnings import learning

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("spec_retrieval")]  # the lexical path's cache


@pytest.fixture
def scoped():
    session = SessionFactory(projects=[ProjectFactory(project_id="atlas")])
    learning("Preferred editor is Helix.", kind="preference")
    learning("Project codename is Atlas.", scope=("project", "atlas"))
    learning("Session goal is cleanup.", kind="decision", scope=("session", session.public_id))
    learning("Other project language is Go.", scope=("project", "other"))
    retrieval._VISIBLE_SETS.clear()
    return session, learning_scope_keys(session)


def ids(session, keys, query=None):
    records, _ = retrieval.learned_records(session=session, scope_keys=keys, query=query)
    return [record.learning_id for record in records]


def test_sql_fingerprint_is_the_digest_of_the_rows(scoped):
    _, keys = scoped
    at = now_ms()
    fingerprint = Learning.objects.scoped_fingerprint("for_prompt", keys, at)
    rows = Learning.objects.scoped_rows("for_prompt", keys, at, ("pk", "content"), versioned=True)
    assert fingerprint.count == len(rows) == Learning.objects.for_prompt(keys, at).count() == 3
    assert fingerprint.digest == versions_digest(rows) and len(fingerprint.digest) == 32
    assert Learning.objects.scoped_fingerprint("for_prompt", ["project:nothing-here"], at).count == 0
    assert Learning.objects.scoped_fingerprint("for_prompt", [], at).count == 0


def test_an_unchanged_set_is_scored_without_reading_its_rows(scoped):
    session, keys = scoped
    first = ids(session, keys, "editor")
    with CaptureQueriesContext(connection) as queries:
        again = ids(session, keys, "editor")
    assert again == first and len(queries) == 1 and "sha256" in queries[0]["sql"]


def test_every_write_changes_the_fingerprint_even_inside_one_transaction(scoped):
    """pytest-django runs this test in one transaction: xmin stays the same across these writes, the
    tuple's place (ctid) does not."""
    session, keys = scoped
    target = Learning.objects.get(content="Project codename is Atlas.")
    seen = {Learning.objects.scoped_fingerprint("for_prompt", keys, now_ms()).digest}
    assert ids(session, keys, "codename") == [target.public_id]
    for content in ("Project codename is Borealis.", "Project codename is Cygnus."):
        Learning.objects.filter(pk=target.pk).update(content=content)
        seen.add(Learning.objects.scoped_fingerprint("for_prompt", keys, now_ms()).digest)
        records, _ = retrieval.learned_records(session=session, scope_keys=keys, query="codename")
        assert [record.content for record in records] == [content]
    Learning.objects.filter(pk=target.pk).update(updated_at_ms=1)  # same content, a new version: a new key
    seen.add(Learning.objects.scoped_fingerprint("for_prompt", keys, now_ms()).digest)
    assert len(seen) == 4


def test_hidden_added_and_expired_rows_are_seen(scoped):
    session, keys = scoped
    before = ids(session, keys)
    added = learning("Release train is weekly.", scope=("project", "atlas"))
    assert set(ids(session, keys)) == {*before, added.public_id}
    Learning.objects.filter(pk=added.pk).update(expires_at_ms=now_ms() - 1)
    assert ids(session, keys) == before
    Learning.objects.filter(content="Preferred editor is Helix.").update(status="revoked", revoked_at_ms=now_ms())
    assert len(ids(session, keys)) == len(before) - 1
