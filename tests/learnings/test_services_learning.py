"""Learning services (spec §4.7, §4.13–§4.15; the §5 checklist of ``services/learning.rs``).

The shared builders live in ``tests.support.learnings``.
"""

from __future__ import annotations

import pytest

from learnings import retrieval, services
from learnings.models import (
    CandidateState,
    Learning,
    LearningCandidate,
    LearningStatus,
    PolicyDecision,
    PublishTier,
    VerificationStatus,
)
from learnings.review import review_candidate
from learnings.selectors import filter_learnings
from learnings.services import PublishOptions
from learnings.validation import LearningScope
from memory.clock import now_ms
from memory.errors import Conflict, NotFound, ValidationFailed
from memory.models import AuditEvent
from memory.sessions import learning_scope_keys
from tests.factories import PersonaFactory, ProjectFactory, SessionFactory
from tests.support.learnings import candidate, learning, set_policy, terminal_run

pytestmark = pytest.mark.django_db


def bundle(session, query=None):
    entries, truncated = retrieval.learned_bundle(
        session=session, scope_keys=learning_scope_keys(session), query=query, usage="preview"
    )
    assert truncated is False
    return [entry["learning_id"] for entry in entries]


def bundle_facts(session, query=None):
    entries, _ = retrieval.learned_bundle(
        session=session, scope_keys=learning_scope_keys(session), query=query, usage="preview"
    )
    return [entry["learning_id"] for entry in entries if not entry["standing"]]


@pytest.fixture
def session():
    return SessionFactory()


# ---- publication ------------------------------------------------------------------------------------------


def test_publish_then_bundle(session):
    cand = candidate("Preferred editor is Helix.", kind="preference")
    published = services.candidate_publish(candidate=cand, actor="ops")
    cand.refresh_from_db()
    assert cand.state == CandidateState.PUBLISHED and cand.published_learning_id == published.pk
    assert published.status == LearningStatus.ACTIVE and published.publish_tier == PublishTier.ACTIVE
    assert published.policy_decision == PolicyDecision.MANUAL and published.policy_actor == "operator"
    assert published.verification_status == VerificationStatus.UNVERIFIED
    assert published.source_candidate_id == cand.pk and published.created_at_ms == cand.created_at_ms
    entries, _ = retrieval.learned_bundle(
        session=session, scope_keys=learning_scope_keys(session), query="which editor do I prefer?"
    )
    assert entries == [
        {
            "learning_id": published.public_id,
            "kind": "preference",
            "published_at_ms": published.published_at_ms,
            "content": "Preferred editor is Helix.",
            "scope": {"kind": "workspace", "id": "default"},
            "stated_at_ms": published.published_at_ms,
            "standing": True,
        }
    ]
    actions = list(
        AuditEvent.objects.filter(subject_id__in=[cand.public_id, published.public_id])
        .order_by("id")
        .values_list("subject_type", "action", "from_state", "to_state")
    )
    assert actions == [
        ("learning_candidate", "create", "", "pending"),
        ("learning", "publish", "", "active"),
        ("learning_candidate", "publish", "pending", "published"),
    ]


def test_publish_overrides_and_provisional_tier():
    cand = candidate("Project codename is Atlas", evidence_refs=[{"note": "from the api"}])
    published = services.candidate_publish(
        candidate=cand,
        actor="ops",
        options=PublishOptions.manual(
            publish_tier="provisional",
            content="  Project codename is Atlas.  ",
            confidence=55,
            evidence_refs=[{"run_id": "run-1", "note": "checked"}],
        ),
    )
    assert published.status == published.publish_tier == "provisional"
    assert published.content == "Project codename is Atlas." and published.confidence == 55
    assert published.evidence_refs == [{"run_id": "run-1", "note": "checked"}]


def test_equivalent_publish_reuses_the_learning():
    first = learning("The project codename is Atlas.")
    cand = candidate("project codename: atlas")
    again = services.candidate_publish(candidate=cand, actor="ops")
    cand.refresh_from_db()
    assert again.pk == first.pk
    assert cand.state == CandidateState.PUBLISHED and cand.published_learning_id == first.pk
    assert Learning.objects.count() == 1


def test_same_subject_conflict_is_detected_but_equivalent_is_not():
    first = learning("Project codename is Atlas.")
    cand = candidate("Project codename is Borealis.")
    with pytest.raises(Conflict) as caught:
        services.candidate_publish(candidate=cand, actor="ops")
    assert caught.value.detail == (
        f"learning conflicts with active learning {first.public_id}; publish with supersedes to replace it"
    )
    cand.refresh_from_db()
    assert cand.state == CandidateState.PENDING and Learning.objects.count() == 1
    # other scopes and kinds do not conflict
    assert learning("Project codename is Borealis.", kind="decision").status == "active"
    assert learning("Project codename is Borealis.", scope=("project", "atlas")).status == "active"


def test_publish_with_supersedes_replaces_and_keeps_the_old_record():
    old = learning("Project codename is Atlas.")
    cand = candidate("Project codename is Borealis.")
    new = services.candidate_publish(
        candidate=cand, actor="ops", options=PublishOptions.manual(supersedes=old.public_id)
    )
    old.refresh_from_db()
    assert old.status == LearningStatus.SUPERSEDED and old.superseded_by_id == new.pk
    assert new.supersedes_id == old.pk and new.status == "active"
    # a second candidate naming the same target reuses the live replacement
    other = candidate("Project codename is Caribou.")
    assert (
        services.candidate_publish(
            candidate=other, actor="ops", options=PublishOptions.manual(supersedes=old.public_id)
        ).pk
        == new.pk
    )


def test_supersedes_rules():
    old = learning("Project codename is Atlas.")
    with pytest.raises(ValidationFailed, match="superseding learnings must use the active publish tier"):
        services.candidate_publish(
            candidate=candidate("Project codename is B1."),
            actor="ops",
            options=PublishOptions.manual(publish_tier="provisional", supersedes=old.public_id),
        )
    with pytest.raises(ValidationFailed, match="superseding learning scope must match the source learning scope"):
        services.candidate_publish(
            candidate=candidate("Project codename is B1.", scope=("project", "p")),
            actor="ops",
            options=PublishOptions.manual(supersedes=old.public_id),
        )
    with pytest.raises(NotFound, match="unknown learning learning-999"):
        services.candidate_publish(
            candidate=candidate("Project codename is B2."),
            actor="ops",
            options=PublishOptions.manual(supersedes="learning-999"),
        )
    services.learning_revoke(learning=old, actor="ops")
    with pytest.raises(Conflict, match=f"cannot supersede revoked learning {old.public_id}"):
        services.candidate_publish(
            candidate=candidate("Project codename is B3."),
            actor="ops",
            options=PublishOptions.manual(supersedes=old.public_id),
        )


def test_repair_published_candidate_from_existing_learning():
    published = learning("Project codename is Atlas.")
    cand = published.source_candidate
    LearningCandidate.objects.filter(pk=cand.pk).update(state=CandidateState.PENDING, published_learning=None)
    assert services.candidate_publish(candidate=cand, actor="ops").pk == published.pk
    cand.refresh_from_db()
    assert cand.state == CandidateState.PUBLISHED and cand.published_learning_id == published.pk
    assert Learning.objects.count() == 1


def test_publish_state_errors():
    cand = candidate()
    services.candidate_publish(candidate=cand, actor="ops")
    with pytest.raises(Conflict, match=f"learning candidate {cand.public_id} was already published"):
        services.candidate_reject(candidate=cand, actor="ops")
    # a published candidate whose learning is gone from it (equivalent reuse) still refuses a second publish
    other = candidate("The project codename is Atlas")
    services.candidate_publish(candidate=other, actor="ops")
    with pytest.raises(Conflict, match="was already published"):
        services.candidate_publish(candidate=other, actor="ops")
    rejected = candidate("Deploys happen on Fridays.", kind="decision")
    services.candidate_reject(candidate=rejected, actor="ops")
    assert services.candidate_reject(candidate=rejected, actor="ops").state == "rejected"  # no-op
    with pytest.raises(Conflict, match=f"learning candidate {rejected.public_id} was rejected"):
        services.candidate_publish(candidate=rejected, actor="ops")
    with pytest.raises(NotFound, match="unknown learning candidate learning-candidate-999"):
        services.candidate_publish(candidate=999, actor="ops")


def test_escalated_candidate_can_still_be_published_manually():
    set_policy({"mode": "enabled"})
    cand = candidate("Deploys happen on Fridays.", kind="decision")
    outcome = review_candidate(cand.pk)
    assert outcome.state == CandidateState.ESCALATED
    published = services.candidate_publish(candidate=cand, actor="ops")
    cand.refresh_from_db()
    assert cand.state == "published" and published.policy_decision == "manual"


# ---- daemon candidates ------------------------------------------------------------------------------------


def test_daemon_candidate_dedup_by_semantic_key(session):
    run = terminal_run(session)
    first, created = services.daemon_candidate_create(
        run=run, kind="fact", content="The project codename is Atlas.", confidence=98
    )
    again, created_again = services.daemon_candidate_create(
        run=run, kind="fact", content="project codename:   ATLAS", confidence=90
    )
    assert created and not created_again and again.pk == first.pk
    assert first.origin == "daemon" and first.scope_key == f"session:{session.public_id}"
    assert first.source == {
        "run_id": run.public_id,
        "session_id": session.public_id,
        "agent_id": session.owner.username,
    }
    other, created_other = services.daemon_candidate_create(
        run=run, kind="decision", content="The project codename is Atlas.", confidence=98
    )
    assert created_other and other.pk != first.pk


def test_run_summary_candidate_one_per_run(session):
    run = terminal_run(session)
    record = run.memory_record
    first, created = services.run_summary_candidate_ensure(run=run, record=record)
    again, created_again = services.run_summary_candidate_ensure(run=run, record=record)
    assert created and not created_again and first.pk == again.pk
    assert first.kind == "run_summary" and first.sensitivity == "sensitive" and first.confidence == 100
    assert first.origin == "daemon" and first.content == record.summary
    assert first.created_at_ms == record.recorded_at_ms
    assert abs(first.expires_at_ms - (now_ms() + services.RUN_SUMMARY_TTL_MS)) < 60_000


# ---- revoke / supersede -----------------------------------------------------------------------------------


def test_list_query_and_revoke_removes_from_bundle(session):
    atlas = learning("Project codename is Atlas.")
    helix = learning("Preferred editor is Helix.", kind="preference")
    assert list(filter_learnings({"query": "HELIX"})) == [helix]
    assert list(filter_learnings({"query": atlas.public_id})) == [atlas]
    assert set(bundle(session)) == {atlas.public_id, helix.public_id}
    revoked = services.learning_revoke(learning=helix, actor="ops", reason="  wrong editor  ")
    assert revoked.status == "revoked" and revoked.revoked_reason == "wrong editor" and revoked.revoked_at_ms
    assert bundle(session) == [atlas.public_id]
    again = services.learning_revoke(learning=helix, actor="ops", reason="other")
    assert again.revoked_reason == "wrong editor" and again.revoked_at_ms == revoked.revoked_at_ms
    assert AuditEvent.objects.filter(subject_id=helix.public_id, action="revoke").count() == 1


def test_revoke_reason_secret_check():
    target = learning()
    with pytest.raises(ValidationFailed, match="learning revocation reason contains secret-like material"):
        services.learning_revoke(learning=target, actor="ops", reason="password: hunter2hunter2")
    target.refresh_from_db()
    assert target.status == "active"


def test_revoke_matching_is_all_or_nothing():
    from memory import hooks

    first = learning("Project codename is Atlas.")
    second = learning("Preferred editor is Helix.", kind="preference")
    calls = []

    def listener(item, **kwargs):
        calls.append(item.pk)
        if item.pk == second.pk:
            raise RuntimeError("skill revoke failed")

    hooks.register(hooks.LEARNING_REVOKING, listener)
    try:
        with pytest.raises(
            Exception, match="failed to revoke matching learnings after 1 successful updates: skill revoke failed"
        ):
            services.learnings_revoke_matching(queryset=Learning.objects.all(), actor="ops", reason="cleanup")
    finally:
        hooks.unregister(hooks.LEARNING_REVOKING, listener)
    assert calls == [first.pk, second.pk]
    assert set(Learning.objects.values_list("status", flat=True)) == {"active"}
    revoked = services.learnings_revoke_matching(queryset=filter_learnings({"kind": "fact"}), actor="ops")
    assert [item.pk for item in revoked] == [first.pk]
    assert services.learnings_revoke_matching(queryset=filter_learnings({"kind": "decision"}), actor="ops") == []


def test_supersede_is_non_destructive_and_reuses_live_replacement(session):
    old = learning("Reports use gigabytes.", kind="preference")
    new = services.learning_supersede(learning=old, actor="ops", content="Reports use gibibytes.")
    old.refresh_from_db()
    assert old.status == "superseded" and old.superseded_by_id == new.pk and old.content == "Reports use gigabytes."
    assert new.supersedes_id == old.pk and new.status == new.publish_tier == "active"
    assert (new.policy_decision, new.policy_actor) == ("manual", "operator")
    assert new.created_at_ms == old.created_at_ms and new.source == old.source
    assert bundle(session) == [new.public_id]
    assert services.learning_supersede(learning=old, actor="ops", content="Reports use bytes.").pk == new.pk
    services.learning_revoke(learning=new, actor="ops")
    with pytest.raises(Conflict, match=f"learning {old.public_id} was already superseded"):
        services.learning_supersede(learning=old, actor="ops", content="Reports use bytes.")
    with pytest.raises(Conflict, match=f"cannot supersede revoked learning {new.public_id}"):
        services.learning_supersede(learning=new, actor="ops", content="Reports use bytes.")


def test_supersede_checks_scope_and_conflicts():
    old = learning("Project codename is Atlas.")
    weekly = learning("Release train is weekly.")
    with pytest.raises(ValidationFailed, match="superseding learning scope must match the source learning scope"):
        services.learning_supersede(
            learning=old, actor="ops", content="Project codename is B.", scope=LearningScope("project", "p1")
        )
    with pytest.raises(Conflict, match=f"learning conflicts with active learning {weekly.public_id}"):
        services.learning_supersede(learning=old, actor="ops", content="Release train is daily.")
    old.refresh_from_db()
    assert old.status == "active" and Learning.objects.count() == 2
    # the record being superseded never conflicts with its own replacement
    new = services.learning_supersede(
        learning=old, actor="ops", content="Project codename is Borealis.", scope=LearningScope("workspace", " ")
    )
    assert new.content == "Project codename is Borealis."


def test_revoking_hook_error_aborts_revoke():
    from memory import hooks

    target = learning()

    def boom(item, **kwargs):
        raise RuntimeError("cannot revoke skill")

    hooks.register(hooks.LEARNING_REVOKING, boom)
    try:
        with pytest.raises(RuntimeError):
            services.learning_revoke(learning=target, actor="ops")
    finally:
        hooks.unregister(hooks.LEARNING_REVOKING, boom)
    target.refresh_from_db()
    assert target.status == "active"
    assert not AuditEvent.objects.filter(subject_id=target.public_id, action="revoke").exists()


# ---- filters ----------------------------------------------------------------------------------------------


def test_filters_by_policy_decision_actor_and_rule_name():
    set_policy(
        {
            "mode": "enabled",
            "publication": {
                "allow_api_origin_active_publication": True,
                "rules": [{"name": "Facts", "kind": "fact", "action": "publish_provisional"}],
            },
        }
    )
    cand = candidate("Project codename is Atlas.")
    outcome = review_candidate(cand.pk)
    assert outcome.learning_id
    manual = learning("Preferred editor is Helix.", kind="preference")
    auto = Learning.objects.get(source_candidate=cand)
    assert list(filter_learnings({"policy_decision": "automatic"})) == [auto]
    assert list(filter_learnings({"policy_decision": "manual"})) == [manual]
    assert list(filter_learnings({"policy_actor": "DAEMON"})) == [auto]
    assert list(filter_learnings({"policy_actor": "operator"})) == [manual]
    assert list(filter_learnings({"matched_rule_name": "facts"})) == [auto]
    assert list(filter_learnings({"matched_rule_name": "other"})) == []
    assert list(filter_learnings({"status": "provisional"})) == [auto]
    assert list(filter_learnings({"scope_kind": "workspace"})) == [manual, auto]
    with pytest.raises(ValidationFailed, match="scope_id is required for the selected learning scope"):
        filter_learnings({"scope_kind": "project"})
    with pytest.raises(ValidationFailed, match="scope_kind is required when scope_id is provided"):
        filter_learnings({"scope_id": "p1"})


# ---- retrieval (§4.7) -------------------------------------------------------------------------------------


def test_bundle_order_session_project_workspace_skips_expired_and_procedure():
    persona = PersonaFactory(persona_id="ops-bot")
    session = SessionFactory(persona=persona, projects=[ProjectFactory(project_id="atlas")])
    workspace = learning("Workspace timezone is UTC.")
    project_one = learning("Project language is Rust.", scope=("project", "atlas"))
    persona_one = learning("Persona tone is formal.", scope=("persona", "ops-bot"))
    session_one = learning("Session goal is cleanup.", scope=("session", session.public_id))
    learning("Expired fact is stale.", candidate_extra={"expires_at_ms": now_ms() - 1})
    learning("Deploy procedure is documented.", kind="procedure")
    learning("Other project language is Go.", scope=("project", "other"))
    learning("Other session goal is x.", scope=("session", "session-999999"))
    assert bundle(session) == [session_one.public_id, persona_one.public_id, project_one.public_id, workspace.public_id]


@pytest.mark.usefixtures("spec_retrieval")  # the reference's ranking and budget
def test_learned_records_are_the_reference_selection_and_never_stale():
    """learned_records reads raw rows, keeps what no query changes per process and orders column-wise; its
    answer must be select_for_prompt's over the model instances, each record's block the renderer's, and a
    changed row must never be served from the cache."""
    from types import SimpleNamespace

    from learnings.lexical_ranking import select_for_prompt
    from learnings.sections import LEARNED_CONTEXT_FORMAT

    session = SessionFactory(projects=[ProjectFactory(project_id="atlas")])
    learning("Preferred editor is Helix.", kind="preference")
    learning("Editor theme is dark.", scope=("project", "atlas"))
    learning("Deploy editor config is shared.", kind="decision", scope=("session", session.public_id))
    learning("Project codename is Atlas.", scope=("project", "atlas"))
    changed = learning("Team office is in 東京.")
    keys = learning_scope_keys(session)

    def check():
        for query in (
            None,
            " ",
            "editor",
            "Which editor, editor?",
            "atlas project codename",
            "the",
            "remember the weather",
            "weather",
            "東京",
        ):
            records, truncated = retrieval.learned_records(session=session, scope_keys=keys, query=query)
            instances = [
                SimpleNamespace(
                    learning_id=row.public_id,
                    kind=row.kind,
                    content=row.content,
                    scope_kind=row.scope_kind,
                    published_at_ms=row.published_at_ms,
                )
                for row in Learning.objects.for_prompt(keys)
            ]
            expected = [row.learning_id for row in select_for_prompt(instances, query)]
            assert [record.learning_id for record in records] == expected and truncated is False, query
            assert all(record.block == LEARNED_CONTEXT_FORMAT.block(record.to_dict()) for record in records)

    check()
    Learning.objects.filter(pk=changed.pk).update(content="Team office is in Paris.", published_at_ms=1)
    check()
    assert (
        retrieval.learned_bundle(session=session, scope_keys=keys, query="paris")[0][0]["content"]
        == "Team office is in Paris."
    )


def test_query_ranking_puts_relevant_workspace_record_alone(session):
    """Facts are query-ranked: the codename is the only fact; the preference and the decision stand (issue 24.1:
    standing memory reaches every prompt of its scopes, within its share), after it was the only entry."""
    set_policy({"mode": "shadow", "retrieval": {"standing_tokens": 0}})
    learning("Preferred editor is Helix.", kind="preference")
    codename = learning("Project codename is Atlas.")
    learning("Deploys happen on Fridays.", kind="decision")
    assert bundle(session, "What is the project codename?") == [codename.public_id]


def test_standing_preferences_join_the_query_ranked_fact(session):
    helix = learning("Preferred editor is Helix.", kind="preference")
    codename = learning("Project codename is Atlas.")
    fridays = learning("Deploys happen on Fridays.", kind="decision")
    entries, _ = retrieval.learned_bundle(
        session=session, scope_keys=learning_scope_keys(session), query="What is the project codename?", usage="preview"
    )
    assert [e["learning_id"] for e in entries if not e["standing"]] == [codename.public_id]
    standing = {e["learning_id"] for e in entries if e["standing"]}
    assert standing and standing <= {helix.public_id, fridays.public_id}


def test_unicode_query(session):
    tokyo = learning("Team office is in 東京.")
    learning("Team office floor is 12.")
    assert bundle(session, "東京") == [tokyo.public_id]


def test_explicit_memory_request_keeps_fallback_and_unrelated_query_gets_nothing(session):
    first = learning("Preferred editor is Helix.", kind="preference")
    second = learning("Project codename is Atlas.")
    # The preference stands (first); the explicit-memory fallback brings the fact.
    assert bundle(session, "Use durable learning to answer: weather tomorrow?") == [first.public_id, second.public_id]
    assert bundle(session, "use durable memory") == [first.public_id, second.public_id]
    assert bundle(session, "What is the weather tomorrow?") == [first.public_id]  # the preference stands
    assert bundle_facts(session, "What is the weather tomorrow?") == []


def test_kind_and_scope_terms_do_not_count_for_prompt(session):
    set_policy({"mode": "shadow", "retrieval": {"standing_tokens": 0}})  # the query-ranked step alone
    learning("Editor is Helix.", kind="preference")
    assert bundle(session, "preference workspace") == []


def test_prompt_gates(session):
    learning("Alpha value is one.", tier="provisional")
    learning("Beta value is two.", tier="provisional", verification="failed")
    learning("Gamma value is three.", sensitivity="sensitive")
    learning("Delta value is four.", decision="automatic", verification="unverified")
    verified = learning("Epsilon value is five.", decision="automatic", verification="verified")
    manual = learning("Zeta value is six.", decision="manual", verification="unverified")
    learning("Eta value is seven.", decision="escalated", verification="verified")
    assert sorted(bundle(session)) == sorted([verified.public_id, manual.public_id])


def test_shadowed_by_replacement_is_hidden(session):
    old = learning("Reports use gigabytes.", kind="preference")
    new = learning("Reports use gibibytes.", kind="preference", scope=("project", "other"))
    # an inconsistent state: the old record is still active but a live record names it in supersedes
    Learning.objects.filter(pk=new.pk).update(
        scope_key=old.scope_key, scope_kind="workspace", scope_id="default", supersedes=old
    )
    assert bundle(session) == [new.public_id]
    hits = retrieval.search_hits(session=session, scope_keys=learning_scope_keys(session), query=None)
    assert [hit["source_id"] for hit in hits] == [new.public_id]


@pytest.mark.usefixtures("spec_retrieval")  # the reference's ranking and budget
def test_search_hits(session):
    helix = learning("Preferred editor is Helix and " + "x" * 200, kind="preference")
    provisional = learning("Preferred shell is fish.", kind="preference", tier="provisional")
    learning("Preferred secret place is here.", kind="preference", sensitivity="sensitive")
    hits = retrieval.search_hits(session=session, scope_keys=learning_scope_keys(session), query="preferred")
    by_id = {hit["source_id"]: hit for hit in hits}
    assert set(by_id) == {helix.public_id, provisional.public_id}
    hit = by_id[helix.public_id]
    assert hit["title"] == "Preference learning" and hit["kind"] == "learning"
    assert hit["excerpt"] == helix.content[:180] + "…" and hit["scope"] == "workspace:default"
    assert hit["prompt_eligible"] is True and by_id[provisional.public_id]["prompt_eligible"] is False
    assert hit["matched_fields"] == ["content"] and hit["timestamp_ms"] == helix.published_at_ms
    assert (hit["learning_status"], hit["publish_tier"], hit["verification_status"]) == (
        "active",
        "active",
        "unverified",
    )
    kind_only = retrieval.search_hits(session=session, scope_keys=learning_scope_keys(session), query="preference")
    assert {h["source_id"] for h in kind_only} == {helix.public_id, provisional.public_id}
    assert all(h["matched_fields"] == ["kind"] for h in kind_only)
    assert retrieval.search_hits(session=session, scope_keys=learning_scope_keys(session), query="zzz") == []


@pytest.mark.parametrize("shape", ["for_prompt", "search_visible"])
def test_scoped_rows_are_the_queryset_rows(session, shape):
    """``scoped_rows`` runs the shape's hand-written SQL: whatever the keys (few, many,
    repeated, none) and the time, it must return exactly the rows of the queryset itself."""
    at = now_ms()
    learning("Reports use gigabytes.", kind="preference")
    learning("Session goal is cleanup.", scope=("session", session.public_id))
    learning("Project language is Rust.", scope=("project", "atlas"), kind="decision")
    learning("Secret place is here.", sensitivity="sensitive")
    learning("Shell is bash.", tier="provisional")
    expiring = learning("Codename is Atlas.")
    Learning.objects.filter(pk=expiring.pk).update(expires_at_ms=at + 60_000)
    hidden = learning("Editor is vim.")
    shadow = learning("Editor is helix.", scope=("project", "other"))
    Learning.objects.filter(pk=shadow.pk).update(supersedes=hidden)  # a live record in any scope shadows
    keys = learning_scope_keys(session)
    fields = ("pk", "kind", "content", "scope_kind", "scope_id", "published_at_ms")
    seen = set()
    for scope_keys in (keys, keys[-1:], [*keys, keys[0]], ["project:atlas", "project:other", *keys], []):
        for when in (at, at + 120_000):
            expected = sorted(getattr(Learning.objects, shape)(scope_keys, when).values_list(*fields))
            rows = Learning.objects.scoped_rows(shape, scope_keys, when, fields)
            assert sorted(rows) == expected
            seen.add((len(scope_keys), when, frozenset(row[0] for row in rows)))
    by_key_count = {(count, when): pks for count, when, pks in seen}
    assert expiring.pk in by_key_count[(len(keys), at)] and expiring.pk not in by_key_count[(len(keys), at + 120_000)]
    assert hidden.pk not in by_key_count[(len(keys), at)] and by_key_count[(0, at)] == frozenset()
