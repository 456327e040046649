"""Issue 14.13: ``repair --apply`` converges. Runs whose records the overflow bound pruned are not "missing";
a second repair after ``--apply`` finds nothing to fix and the run-memory counters do not move."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from kheish import maintenance
from memory import metrics
from memory.models import RunMemoryRecord
from tests.support.api import finish

pytestmark = pytest.mark.django_db

COUNTERS = (
    "run_memory.stored_total",
    "run_memory.pruned_overflow_total",
    "run_memory.pruned_ttl_total",
    "run_memory.pruned_orphan_total",
)


def _nothing_to_fix(summary: dict) -> bool:
    run_memory = summary["run_memory"]
    return all(value == 0 for value in run_memory.values())


def _set_policy(operator_client, **changes) -> None:
    policy = operator_client.get("/v1/runtime/run-memory-policy").json()
    policy.update(changes)
    response = operator_client.post("/v1/runtime/run-memory-policy", {"policy": policy}, format="json")
    assert response.status_code == 200, response.content


def test_overflow_pruned_runs_are_not_missing_and_repair_converges(api_client, session_id, operator_client):
    _set_policy(operator_client, max_tracked_per_session=3, max_prompt_entries=3)
    run_ids = [finish(api_client, session_id, f"task {i}", output=f"done {i}") for i in range(6)]
    kept = sorted(RunMemoryRecord.objects.values_list("run_id", flat=True))
    assert kept == [int(r.split("-")[1]) for r in run_ids[-3:]]
    before = metrics.read(COUNTERS)

    dry = maintenance.repair_all(apply=False, source="test")
    assert _nothing_to_fix(dry), dry
    for _ in range(2):
        call_command("repair", "--apply", stdout=io.StringIO())
    assert sorted(RunMemoryRecord.objects.values_list("run_id", flat=True)) == kept
    assert metrics.read(COUNTERS) == before
    assert _nothing_to_fix(maintenance.repair_all(apply=False, source="test"))


def test_a_missing_record_is_rebuilt_once_then_nothing_more(api_client, session_id, operator_client):
    _set_policy(operator_client, max_tracked_per_session=3, max_prompt_entries=3)
    run_ids = [finish(api_client, session_id, f"task {i}", output=f"done {i}") for i in range(5)]
    newest = int(run_ids[-1].split("-")[1])
    RunMemoryRecord.objects.filter(run_id=newest).delete()  # lost: the newest run must get its record back

    first = maintenance.repair_all(apply=False, source="test")
    assert first["run_memory"]["missing_records_rebuilt"] == 1, first
    call_command("repair", "--apply", stdout=io.StringIO())
    assert RunMemoryRecord.objects.filter(run_id=newest).exists()
    assert RunMemoryRecord.objects.count() == 3
    after_apply = metrics.read(COUNTERS)

    second = maintenance.repair_all(apply=False, source="test")
    assert _nothing_to_fix(second), second
    call_command("repair", "--apply", stdout=io.StringIO())
    assert metrics.read(COUNTERS) == after_apply
    assert RunMemoryRecord.objects.count() == 3


def test_lowering_the_bound_prunes_once_then_converges(api_client, session_id, operator_client):
    run_ids = [finish(api_client, session_id, f"task {i}", output=f"done {i}") for i in range(5)]
    # The policy change enforces itself; repair afterwards must not resurrect the pruned runs.
    _set_policy(operator_client, max_tracked_per_session=2, max_prompt_entries=2)
    assert sorted(RunMemoryRecord.objects.values_list("run_id", flat=True)) == [
        int(r.split("-")[1]) for r in run_ids[-2:]
    ]
    before = metrics.read(COUNTERS)
    assert _nothing_to_fix(maintenance.repair_all(apply=False, source="test"))
    call_command("repair", "--apply", stdout=io.StringIO())
    assert metrics.read(COUNTERS) == before
    assert RunMemoryRecord.objects.count() == 2


def _records() -> set[int]:
    return set(RunMemoryRecord.objects.values_list("run_id", flat=True))


def test_the_report_reconciles_with_what_the_repair_did(api_client, session_id, operator_client):
    """Issue 22.7: rebuilding the newer runs' lost records pushes the older records out (the overflow bound);
    the report said "rebuilt N, overflow 0" while fewer records existed than it implied. Now records before +
    rebuilt - (overflow + expired + orphans) = records after, and the dry run predicts the same report."""
    _set_policy(operator_client, max_tracked_per_session=8, max_prompt_entries=8)
    pks = [int(finish(api_client, session_id, f"task {i}", output=f"done {i}").split("-")[1]) for i in range(8)]
    RunMemoryRecord.objects.filter(run_id__in=pks[3:]).delete()  # the five newest records lost
    _set_policy(operator_client, max_tracked_per_session=3, max_prompt_entries=3)
    before = _records()
    assert before == set(pks[:3])

    dry = maintenance.repair_all(apply=False, source="test")["run_memory"]
    assert _records() == before
    summary = maintenance.repair_all(apply=True, source="test")["run_memory"]
    after = _records()
    assert after == set(pks[-3:])  # the newest three, as the bound says
    removed = summary["overflow"] + summary["expired"] + summary["orphans"]
    assert summary["missing_records_rebuilt"] == len(after - before) == 3
    assert removed == len(before - after) == 3 and summary["overflow"] == 3
    assert len(before) + summary["missing_records_rebuilt"] - removed == len(after)
    assert dry == summary
    assert _nothing_to_fix(maintenance.repair_all(apply=False, source="test"))


def test_the_beat_repair_runs_under_its_name_and_under_its_name_before_the_move(monkeypatch, settings):
    """The hourly repair is ``kheish.tasks.repair_all_planes``; a message queued under its old name
    (``memory.tasks.repair_run_memory``) before an upgrade still runs the same repair."""
    from kheish import tasks
    from kheish.celery import app

    app.loader.import_default_modules()  # the apps' tasks modules, as a worker imports them
    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert tasks.REPAIR_TASK in scheduled and tasks.LEGACY_REPAIR_TASK not in scheduled
    assert scheduled <= set(app.tasks)  # every beat entry names a registered task
    calls = []
    monkeypatch.setattr(maintenance, "repair_all", lambda **kwargs: calls.append(kwargs) or {"ok": True})
    for name in (tasks.REPAIR_TASK, tasks.LEGACY_REPAIR_TASK):
        assert app.tasks[name].apply().get() == {"ok": True}
    assert calls == [{"apply": True, "source": "beat_repair"}] * 2
