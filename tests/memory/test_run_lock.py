"""A run action trusts the row lock only on the instance ``lock_run`` returned (inside a transaction); another
instance of the same row - equal under the model's ``==`` - is locked again."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from memory import runs
from memory.models import Run
from tests.factories import RunFactory

pytestmark = pytest.mark.django_db


def test_only_the_instance_lock_run_returned_is_trusted():
    run = RunFactory()
    with transaction.atomic():
        locked = runs.lock_run(run.pk)
        with CaptureQueriesContext(connection) as queries:
            assert runs._locked(locked) is locked
        assert len(queries) == 0
        other = Run.objects.get(pk=run.pk)
        assert other == locked  # same row, another instance
        with CaptureQueriesContext(connection) as queries:
            relocked = runs._locked(other)
        assert relocked is not other and relocked.pk == run.pk
        assert len(queries) == 1 and "FOR UPDATE" in queries[0]["sql"]
