"""memory.sql: hand-written single-row writes behave like the ORM calls they replace."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from memory import sql
from memory.models import ApiKey, AuditEvent, Counter, Run, RunStatus
from tests.factories import SessionFactory, UserFactory

pytestmark = pytest.mark.django_db


def test_create_fills_defaults_and_round_trips_json():
    event = sql.create(
        AuditEvent,
        subject_type="run",
        subject_id="run-1",
        action="open",
        actor="daemon",
        data={"nested": [1, "two", {"three": None}]},
    )
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


def test_copy_instances_stores_what_bulk_create_stores():
    from learnings.models import Learning
    from tests.support.learnings import learning

    made = [
        AuditEvent(
            subject_type="run",
            subject_id=f"run-{i}",
            action="open",
            actor="daemon",
            data={"i": i, "text": "tab\there, newline\nthere, back\\slash", "none": None},
        )
        for i in range(3)
    ]
    copied = sql.copy_instances(AuditEvent, made)
    assert [event.pk for event in copied] == sorted(event.pk for event in copied) and not copied[0]._state.adding
    for event in copied:
        stored = AuditEvent.objects.get(pk=event.pk)
        assert (stored.subject_id, stored.data, stored.at_ms) == (event.subject_id, event.data, event.at_ms)
    original = learning("The office is in Lyon.")  # an array of floats (the embedding) and JSON fields
    twin = Learning.objects.get(pk=original.pk)
    twin.pk, twin.content = None, "The office is in Lyon, by the river."
    twin.source_candidate_id = None
    (copy,) = sql.copy_instances(Learning, [twin])
    stored = Learning.objects.get(pk=copy.pk)
    assert stored.embedding == original.embedding and stored.source == original.source
    assert stored.evidence_refs == original.evidence_refs and stored.content == twin.content
    other = Learning.objects.get(pk=original.pk)  # an array with values that are not floats: prepared
    other.pk, other.content, other.source_candidate_id = None, "The office is in Paris.", None
    other.embedding = [1, 0.5, *([0] * 254)]
    (copy,) = sql.copy_instances(Learning, [other])
    assert Learning.objects.get(pk=copy.pk).embedding == [1.0, 0.5, *([0.0] * 254)]
    with pytest.raises(IntegrityError), transaction.atomic():  # constraints hold as for an INSERT
        sql.copy_instances(Counter, [Counter(name="y.total", value=1), Counter(name="y.total", value=2)])


def test_insert_many_is_one_statement_and_keeps_the_order(django_assert_num_queries):
    made = [AuditEvent(subject_type="run", subject_id=f"run-{i}", action="open", actor="daemon") for i in range(3)]
    with django_assert_num_queries(1):
        sql.insert_many(made)
    assert [event.pk for event in made] == sorted(event.pk for event in made) and not made[0]._state.adding
    assert [AuditEvent.objects.get(pk=event.pk).subject_id for event in made] == ["run-0", "run-1", "run-2"]
    assert sql.insert_many([]) == []


def test_update_is_a_compare_and_swap():
    run = Run.objects.create(session=SessionFactory(), status=RunStatus.RUNNING, outputs=[])
    assert sql.update(Run, run.pk, where={"status": RunStatus.QUEUED}, status=RunStatus.COMPLETED) == 0
    assert Run.objects.get(pk=run.pk).status == RunStatus.RUNNING
    assert (
        sql.update(
            Run,
            run.pk,
            where={"status": RunStatus.RUNNING},
            status=RunStatus.COMPLETED,
            outputs=[{"content": "done"}],
            finished_at_ms=5,
        )
        == 1
    )
    stored = Run.objects.get(pk=run.pk)
    assert (stored.status, stored.outputs, stored.finished_at_ms) == (RunStatus.COMPLETED, [{"content": "done"}], 5)


def test_select_reads_columns_through_the_orm_converters():
    session = SessionFactory()
    run = Run.objects.create(session=session, status=RunStatus.COMPLETED, outputs=[{"text": "é", "n": [1, None]}])
    other = Run.objects.create(session=session, status=RunStatus.RUNNING, outputs=[])
    rows = sql.select(
        Run, 'WHERE "session_id" = %s ORDER BY "id" DESC', [session.pk], fields=("id", "status", "outputs", "session")
    )
    assert rows == [
        (other.pk, "running", [], session.pk),
        (run.pk, "completed", [{"text": "é", "n": [1, None]}], session.pk),
    ]
    assert sql.select(Run, 'WHERE "id" = %s', [-1], fields=("id",)) == []


def test_select_instances_are_the_orm_instances():
    session = SessionFactory()
    run = Run.objects.create(session=session, status=RunStatus.RUNNING, outputs=[{"a": 1}])
    [found] = sql.select_instances(Run, 'WHERE "id" = %s', [run.pk])
    expected = Run.objects.get(pk=run.pk)
    assert isinstance(found, Run) and not found._state.adding and found._state.db == "default"
    assert {f.attname: getattr(found, f.attname) for f in Run._meta.concrete_fields} == {
        f.attname: getattr(expected, f.attname) for f in Run._meta.concrete_fields
    }


# --------------------------------------------------------------------------------------------------------
# The named reads answer what the ORM queries they replace answer.


def _values(instance) -> dict:
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


def test_active_key_with_user_is_the_orm_join():
    from datetime import timedelta

    from django.utils import timezone

    user = UserFactory(is_staff=True)
    key = ApiKey.objects.create(user=user, name="k", role="operator", prefix="khm_0123456789ab", key_hash="f" * 64)
    ApiKey.objects.create(
        user=user, name="gone", role="agent", prefix="khm_revoked00000", key_hash="e" * 64, revoked_at=timezone.now()
    )
    expected = ApiKey.objects.select_related("user").get(prefix=key.prefix, revoked_at__isnull=True)
    found, touch_due = sql.active_key_with_user(key.prefix, stale_before=timezone.now())
    assert isinstance(found, ApiKey) and not found._state.adding
    assert _values(found) == _values(expected) and found.created_at is not None
    assert _values(found.user) == _values(expected.user)
    assert touch_due  # never used
    ApiKey.objects.filter(pk=key.pk).update(last_used_at=timezone.now())
    assert sql.active_key_with_user(key.prefix, stale_before=timezone.now() - timedelta(minutes=1))[1] is False
    assert sql.active_key_with_user("khm_revoked00000", stale_before=timezone.now()) is None
    assert sql.active_key_with_user("khm_nosuchkey000", stale_before=timezone.now()) is None


def test_locked_run_is_the_orm_select_related_and_locks_the_row():
    session = SessionFactory(metadata={"a": [1, "é"]}, capability_scope=["read"])
    run = Run.objects.create(session=session, status=RunStatus.RUNNING, outputs=[{"content": "x"}])
    with transaction.atomic():
        found = sql.locked_run(run.pk)
        expected = Run.objects.select_related("session__owner").get(pk=run.pk)
        assert _values(found) == _values(expected)
        assert _values(found.session) == _values(expected.session)
        assert _values(found.session.owner) == _values(expected.session.owner)
        assert sql.locked_run(run.pk, owner_pk=session.owner_id).pk == run.pk
        assert sql.locked_run(run.pk, owner_pk=UserFactory().pk) is None
        assert sql.locked_run(-1) is None
        from django.db import connection

        with connection.cursor() as cursor:  # FOR UPDATE OF r: this transaction holds the run's row lock
            cursor.execute(
                "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                "WHERE c.relname = %s AND l.mode = 'RowShareLock' AND l.pid = pg_backend_pid()",
                [Run._meta.db_table],
            )
            assert cursor.fetchone()[0] >= 1


def test_current_policy_is_the_newest_revision():
    from memory.models import PolicyRevision

    assert sql.current_policy("run_memory") is None
    for revision in (1, 2, 3):
        PolicyRevision.objects.create(
            kind="run_memory", revision=revision, policy={"r": revision, "x": [None]}, actor="t"
        )
    PolicyRevision.objects.create(kind="learning", revision=9, policy={"other": True}, actor="t")
    expected = (
        PolicyRevision.objects.filter(kind="run_memory").order_by("-revision").values_list("revision", "policy").first()
    )
    assert sql.current_policy("run_memory") == expected == (3, {"r": 3, "x": [None]})


def test_one_policy_read_reads_every_kind_once(django_assert_num_queries):
    from memory.models import PolicyRevision

    for revision in (1, 2):
        PolicyRevision.objects.create(kind="run_memory", revision=revision, policy={"r": revision}, actor="t")
    PolicyRevision.objects.create(kind="learning", revision=4, policy={"l": [1]}, actor="t")
    plain = {kind: sql.current_policy(kind) for kind in ("run_memory", "learning")}
    with django_assert_num_queries(1), sql.one_policy_read():
        assert {kind: sql.current_policy(kind) for kind in ("learning", "run_memory")} == plain
        sql.current_policy("learning")[1]["l"].append(2)  # a caller's change stays its own
        assert sql.current_policy("learning") == (4, {"l": [1]})
    PolicyRevision.objects.create(kind="learning", revision=5, policy={"l": [5]}, actor="t")
    assert sql.current_policy("learning") == (5, {"l": [5]})  # outside the block: fresh again
    PolicyRevision.objects.filter(kind="run_memory").delete()
    with sql.one_policy_read():
        assert sql.current_policy("run_memory") is None


def test_session_scope_parts_are_the_persona_and_projects():
    from tests.factories import PersonaFactory, ProjectFactory

    projects = [ProjectFactory(), ProjectFactory()]
    session = SessionFactory(persona=PersonaFactory(), projects=projects)
    SessionFactory(persona=PersonaFactory(), projects=[ProjectFactory()])  # another session's parts stay out
    expected = {("persona", session.persona.persona_id)} | {
        ("project", pid) for pid in session.projects.values_list("project_id", flat=True)
    }
    assert set(sql.session_scope_parts(session.pk)) == expected and len(expected) == 3
    assert sql.session_scope_parts(SessionFactory().pk) == []


def test_counters_add_statement_is_the_orm_update():
    from django.db.models import Case, F, When

    for name, value in (("a.total", 1), ("b.total", 10), ("c.total", 100)):
        Counter.objects.create(name=name, value=value)
    amounts = {"a.total": 2, "b.total": 5, "missing.total": 7}
    with transaction.get_connection().cursor() as cursor:
        cursor.execute(*sql.counters_add_statement(amounts))
        changed = cursor.rowcount
    by_sql = dict(Counter.objects.values_list("name", "value"))
    Counter.objects.filter(name__in=amounts).update(  # the ORM statement, applied once more
        value=F("value") + Case(*[When(name=n, then=a) for n, a in amounts.items()], default=0)
    )
    by_orm = dict(Counter.objects.values_list("name", "value"))
    assert changed == 2 and by_sql == {"a.total": 3, "b.total": 15, "c.total": 100}
    assert by_orm == {"a.total": 5, "b.total": 20, "c.total": 100}  # the same increments again


def test_visible_session_is_the_annotated_orm_read():
    from memory.models import Persona, Project, Session
    from memory.sessions import sessions_visible_to, with_read_annotations

    owner, other = UserFactory(), UserFactory()
    persona = Persona.objects.create(persona_id="helper", display_name="Helper", capability_scope=["a"])
    projects = [Project.objects.create(project_id=pid, name=pid) for pid in ("zeta", "alpha")]
    bound = Session.objects.create(owner=owner, persona=persona, capability_scope=["a", "b"], metadata={"k": [1]})
    bound.projects.set(projects)
    bare = Session.objects.create(owner=owner)
    Run.objects.create(session=bound, status=RunStatus.COMPLETED)
    newest = Run.objects.create(session=bound, status=RunStatus.RUNNING)  # one in flight per session
    Run.objects.create(session=bound, status=RunStatus.FAILED)
    for session in (bound, bare):
        expected = with_read_annotations(sessions_visible_to(owner, operator=False)).get(pk=session.pk)
        found = sql.visible_session(session.pk, owner_pk=owner.pk)
        assert _values(found) == _values(expected) and _values(found.owner) == _values(expected.owner)
        assert (found.persona is None) == (expected.persona is None)
        if found.persona is not None:
            assert _values(found.persona) == _values(expected.persona)
        assert found.project_id_list == list(expected.project_id_list)
        assert found.active_run_pk == expected.active_run_pk
    assert sql.visible_session(bound.pk).project_id_list == ["alpha", "zeta"]
    assert sql.visible_session(bound.pk).active_run_pk == newest.pk
    assert sql.visible_session(bound.pk, owner_pk=other.pk) is None  # an agent sees only its own
    assert sql.visible_session(bound.pk + 10_000) is None


@pytest.mark.parametrize("persona_granted", [True, False])
@pytest.mark.parametrize("granted_projects", [(), ("alpha",), ("alpha", "zeta"), ("zeta", "other")])
def test_the_session_read_carries_the_effective_scopes_of_the_orm_rule(persona_granted, granted_projects):
    """visible_session reads the owner's current grants of the session's bindings in the same statement, and
    learning_scope_keys of that instance equals the rule computed by its own query (bindings ∩ grants)."""
    from memory.models import AgentGrant, Persona, Project, Session
    from memory.sessions import learning_scope_keys

    owner = UserFactory()
    persona = Persona.objects.create(persona_id="helper", display_name="Helper")
    projects = {pid: Project.objects.create(project_id=pid, name=pid) for pid in ("zeta", "alpha", "other")}
    session = Session.objects.create(owner=owner, persona=persona)
    session.projects.set([projects["zeta"], projects["alpha"]])
    unbound = Session.objects.create(owner=owner)  # no persona, no projects: nothing to narrow
    grant = AgentGrant.objects.create(user=owner)
    grant.personas.set([persona] if persona_granted else [])
    grant.projects.set([projects[pid] for pid in granted_projects])

    for pk in (session.pk, unbound.pk):
        read = sql.visible_session(pk)
        assert read is not None and read.granted_scope_keys is not None
        by_query = learning_scope_keys(Session.objects.select_related("owner", "persona").get(pk=pk))
        assert learning_scope_keys(read) == by_query
    expected = [f"session:{session.public_id}"]
    expected += ["persona:helper"] if persona_granted else []
    expected += [f"project:{pid}" for pid in ("alpha", "zeta") if pid in granted_projects]
    assert learning_scope_keys(sql.visible_session(session.pk)) == [*expected, "workspace:default"]


def test_the_effective_scopes_of_a_read_session_cost_no_further_statement(django_assert_num_queries):
    from memory.models import AgentGrant, Project, Session
    from memory.sessions import learning_scope_keys

    owner = UserFactory()
    project = Project.objects.create(project_id="alpha", name="alpha")
    session = Session.objects.create(owner=owner)
    session.projects.set([project])
    AgentGrant.objects.create(user=owner).projects.set([project])
    with django_assert_num_queries(1):
        keys = learning_scope_keys(sql.visible_session(session.pk))
    assert keys == [f"session:{session.public_id}", "project:alpha", "workspace:default"]


@pytest.mark.parametrize("visibility", ["session_only", "workspace"])
def test_search_records_read_the_orm_rows_without_the_compiler(visibility):
    """memory.run_memory.search_records' hand-written read of a session's own records (or of every record) is
    the ORM query it replaced, in its order, with every field as the ORM converts it."""
    from memory.models import RunMemoryRecord
    from memory.run_memory import search_records
    from memory.run_memory_policy import RunMemoryPolicy
    from tests.factories import RunMemoryRecordFactory

    mine = SessionFactory()
    other = SessionFactory()
    for at, session in ((3_000, mine), (1_000, mine), (2_000, other), (4_000, mine)):
        RunMemoryRecordFactory(run__session=session, recorded_at_ms=at, failure_markers=["timeout"])
    policy = RunMemoryPolicy(search_visibility=visibility, retention_ms=10**15)
    found = search_records(mine, [], policy=policy)
    qs = RunMemoryRecord.objects.all() if visibility == "workspace" else RunMemoryRecord.objects.filter(session=mine)
    expected = list(qs.order_by("-recorded_at_ms")[:500])
    assert [r.pk for r in found] == [r.pk for r in expected]
    assert [_values(r) for r in found] == [_values(r) for r in expected]
    assert len(found) == (4 if visibility == "workspace" else 3)


def test_a_session_read_brings_the_policies_in_force_and_a_change_is_seen_by_the_next_read():
    from memory.models import PolicyRevision

    session = SessionFactory()
    assert sql.visible_session(session.pk).policies_read == {}
    PolicyRevision.objects.create(kind="run_memory", revision=1, policy={"r": 1}, actor="t")
    PolicyRevision.objects.create(kind="run_memory", revision=2, policy={"r": [2, None]}, actor="t")
    PolicyRevision.objects.create(kind="learning", revision=7, policy={"l": {"x": 1.5}}, actor="t")
    read = sql.visible_session(session.pk).policies_read
    assert read == {kind: sql.current_policy(kind) for kind in ("run_memory", "learning")}
    assert read == {"run_memory": (2, {"r": [2, None]}), "learning": (7, {"l": {"x": 1.5}})}
    with CaptureQueriesContext(connection) as queries, sql.one_policy_read(read):
        assert sql.current_policy("learning") == (7, {"l": {"x": 1.5}})
        assert sql.current_policy("run_memory") == (2, {"r": [2, None]})
    assert not queries.captured_queries  # the block used what the session read brought
    PolicyRevision.objects.create(kind="learning", revision=8, policy={"l": 8}, actor="t")
    assert sql.visible_session(session.pk).policies_read["learning"] == (8, {"l": 8})
