"""memory.sql: hand-written single-row writes behave like the ORM calls they replace."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from memory import sql
from memory.models import ApiKey, AuditEvent, Counter, Run, RunStatus
from tests.factories import SessionFactory, UserFactory

pytestmark = pytest.mark.django_db


def test_create_fills_defaults_and_round_trips_json():
    event = sql.create(AuditEvent, subject_type="run", subject_id="run-1", action="open", actor="daemon",
                       data={"nested": [1, "two", {"three": None}]})
    stored = AuditEvent.objects.get(pk=event.pk)
    assert stored.data == {"nested": [1, "two", {"three": None}]} and stored.reason == "" and stored.from_state == ""
    assert stored.at_ms == event.at_ms > 0  # the field default, computed once and returned on the instance
    assert not event._state.adding


def test_create_runs_pre_save_auto_now_add():
    key = sql.create(ApiKey, user=UserFactory(), name="k", role="agent", prefix="khm_abc", key_hash="0" * 64)
    assert key.created_at is not None and ApiKey.objects.get(pk=key.pk).created_at == key.created_at


def test_create_respects_constraints():
    sql.create(Counter, name="x.total", value=1)
    with pytest.raises(IntegrityError), transaction.atomic():
        sql.create(Counter, name="x.total", value=2)
    assert Counter.objects.get(name="x.total").value == 1


def test_update_is_a_compare_and_swap():
    run = Run.objects.create(session=SessionFactory(), status=RunStatus.RUNNING, outputs=[])
    assert sql.update(Run, run.pk, where={"status": RunStatus.QUEUED}, status=RunStatus.COMPLETED) == 0
    assert Run.objects.get(pk=run.pk).status == RunStatus.RUNNING
    assert sql.update(Run, run.pk, where={"status": RunStatus.RUNNING}, status=RunStatus.COMPLETED,
                      outputs=[{"content": "done"}], finished_at_ms=5) == 1
    stored = Run.objects.get(pk=run.pk)
    assert (stored.status, stored.outputs, stored.finished_at_ms) == (RunStatus.COMPLETED, [{"content": "done"}], 5)


def test_select_reads_columns_through_the_orm_converters():
    session = SessionFactory()
    run = Run.objects.create(session=session, status=RunStatus.COMPLETED, outputs=[{"text": "é", "n": [1, None]}])
    other = Run.objects.create(session=session, status=RunStatus.RUNNING, outputs=[])
    rows = sql.select(Run, 'WHERE "session_id" = %s ORDER BY "id" DESC', [session.pk],
                      fields=("id", "status", "outputs", "session"))
    assert rows == [(other.pk, "running", [], session.pk),
                    (run.pk, "completed", [{"text": "é", "n": [1, None]}], session.pk)]
    assert sql.select(Run, 'WHERE "id" = %s', [-1], fields=("id",)) == []


def test_select_instances_are_the_orm_instances():
    session = SessionFactory()
    run = Run.objects.create(session=session, status=RunStatus.RUNNING, outputs=[{"a": 1}])
    [found] = sql.select_instances(Run, 'WHERE "id" = %s', [run.pk])
    expected = Run.objects.get(pk=run.pk)
    assert isinstance(found, Run) and not found._state.adding and found._state.db == "default"
    assert {f.attname: getattr(found, f.attname) for f in Run._meta.concrete_fields} == \
        {f.attname: getattr(expected, f.attname) for f in Run._meta.concrete_fields}
