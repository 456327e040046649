"""/v1/learning-candidates (spec §2.3): create, list, get, publish, reject; agents vs operators; bad input."""

from __future__ import annotations

import pytest

from learnings.models import Learning, LearningCandidate
from memory.models import AuditEvent
from tests.conftest import assert_problem
from tests.support.learnings import learning

pytestmark = pytest.mark.django_db

URL = "/v1/learning-candidates"
WORKSPACE = {"kind": "workspace"}


def create(client, content="The project codename is Atlas.", *, kind="fact", scope=None, **extra):
    body = {"scope": scope or WORKSPACE, "kind": kind, "content": content, **extra}
    return client.post(URL, body, format="json")


def created(client, *args, **kwargs) -> dict:
    response = create(client, *args, **kwargs)
    assert response.status_code == 200, response.content
    return response.json()


def nothing_written():
    assert not LearningCandidate.objects.exists()
    assert not AuditEvent.objects.filter(subject_type="learning_candidate").exists()


# ---- create -----------------------------------------------------------------------------------------------


def test_create_candidate_defaults_and_forced_fields(api_client, session_id):
    from tests.support.api import finish

    run_id = finish(api_client, session_id, "the run this candidate cites")  # an agent may cite only its own
    view = created(
        api_client,
        scope={"kind": "session", "id": f"  {session_id} "},
        source={"run_id": run_id, "session_id": session_id},
        evidence_refs=[{"run_id": run_id, "artifact_id": "a-1", "note": "trust me"}],
    )
    assert view["candidate_id"].startswith("learning-candidate-")
    assert view["origin"] == "api" and view["state"] == "pending"
    assert view["scope"] == {"kind": "session", "id": session_id}
    assert (view["sensitivity"], view["confidence"]) == ("scoped", 80)
    assert view["source"] == {"run_id": run_id, "session_id": session_id}
    assert view["evidence_refs"] == [{"run_id": run_id, "artifact_id": "a-1", "note": "trust me"}]
    assert view["automation_review"] is None and view["published_learning_id"] is None
    assert view["expires_at_ms"] is None and view["created_at_ms"] > 0
    stored = LearningCandidate.objects.get(origin="api")
    assert stored.source_run_id is None  # API-supplied provenance is never linked as daemon evidence
    audit = AuditEvent.objects.get(subject_type="learning_candidate", subject_id=view["candidate_id"])
    assert (audit.action, audit.actor, audit.to_state) == ("create", "agent-one", "pending")


def test_workspace_scope_id_defaults(api_client):
    assert created(api_client, scope={"kind": "workspace", "id": ""})["scope"] == {"kind": "workspace", "id": "default"}


def test_api_caller_cannot_forge_daemon_origin(api_client):
    assert_problem(create(api_client, origin="daemon"), 400, field="origin")
    assert_problem(create(api_client, state="published"), 400, field="state")
    nothing_written()


@pytest.mark.parametrize(
    "body_extra,status,message,field",
    [
        ({"kind": "run_summary"}, 400, "run_summary candidates are captured by the service only", "kind"),
        (
            {"content": "api_key=sk-abcdefghijklmnopqrstuvwx"},
            400,
            "semantic learning content appears to contain secret material",
            "content",
        ),
        ({"content": "x" * 1601}, 400, "learning content exceeds the 1600 character limit", "content"),
        ({"content": "   "}, 400, "learning content is required", "content"),
        ({"confidence": 101}, 400, "learning confidence must be between 0 and 100", "confidence"),
        ({"confidence": -1}, 400, "learning confidence must be between 0 and 100", "confidence"),
        (
            {"scope": {"kind": "workspace", "id": "other"}},
            400,
            "workspace learning scope id must be `default`",
            "scope.id",
        ),
        ({"scope": {"kind": "project", "id": " "}}, 400, "learning scope id is required", "scope.id"),
        ({"scope": {"kind": "project"}}, 400, "learning scope id is required", "scope.id"),
    ],
)
def test_create_validation_messages(api_client, body_extra, status, message, field):
    body = {"scope": WORKSPACE, "kind": "fact", "content": "Project codename is Atlas.", **body_extra}
    problem = assert_problem(api_client.post(URL, body, format="json"), status, field=field)
    assert problem["detail"] == message
    nothing_written()


def test_secret_guard_spares_benign_text(api_client):
    for text in (
        "Token budget is 1000.",
        "The client secretariat prefers written updates.",
        "Pat prefers concise reports.",
    ):
        assert created(api_client, text)["content"] == text


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"kind": "fact", "content": "x"},
        {"scope": WORKSPACE, "content": "x"},
        {"scope": WORKSPACE, "kind": "fact"},
        {"scope": WORKSPACE, "kind": "opinion", "content": "x"},
        {"scope": {"kind": "galaxy", "id": "x"}, "kind": "fact", "content": "x"},
        {"scope": "workspace", "kind": "fact", "content": "x"},
        {"scope": WORKSPACE, "kind": "fact", "content": 12},
        {"scope": WORKSPACE, "kind": "fact", "content": "x", "confidence": "high"},
        {"scope": WORKSPACE, "kind": "fact", "content": "x", "confidence": 5.5},
        {"scope": WORKSPACE, "kind": "fact", "content": "x", "sensitivity": "secret"},
        {"scope": WORKSPACE, "kind": "fact", "content": "x", "source": "run-1"},
        {"scope": WORKSPACE, "kind": "fact", "content": "x", "source": {"run": "run-1"}},
        {"scope": WORKSPACE, "kind": "fact", "content": "x", "source": {"input_event_offset": -1}},
        {"scope": WORKSPACE, "kind": "fact", "content": "x", "evidence_refs": {"run_id": "run-1"}},
        {"scope": WORKSPACE, "kind": "fact", "content": "x", "evidence_refs": [{"run_id": 5}]},
        {"scope": WORKSPACE, "kind": "fact", "content": "x", "evidence_refs": [{"x": 1}] * 2},
        {"scope": WORKSPACE, "kind": "fact", "content": "x", "evidence_refs": [{}] * 33},
        {"scope": WORKSPACE, "kind": "fact", "content": "x", "expires_at_ms": "soon"},
        {"scope": WORKSPACE, "kind": "fact", "content": "x", "expires_at_ms": -5},
        [1, 2],
    ],
)
def test_create_bad_input_is_400_and_writes_nothing(api_client, body):
    assert_problem(api_client.post(URL, body, format="json"), 400)
    nothing_written()


def test_malformed_json_is_400(api_client):
    response = api_client.post(URL, data="{not json", content_type="application/json")
    assert_problem(response, 400, "api/malformed_json")
    nothing_written()


def test_agent_may_only_create_in_its_own_scopes(api_client, other_client, session_id, operator_client, agent, grant):
    operator_client.post("/v1/projects", {"project_id": "atlas", "name": "Atlas"}, format="json")
    operator_client.post("/v1/personas", {"persona_id": "ops-bot", "display_name": "Ops"}, format="json")
    grant(agent, projects=["atlas"], personas=["ops-bot"])
    mine = api_client.post("/v1/sessions", {"project_ids": ["atlas"], "persona_id": "ops-bot"}, format="json").json()
    for scope in (
        {"kind": "session", "id": mine["session_id"]},
        {"kind": "project", "id": "atlas"},
        {"kind": "persona", "id": "ops-bot"},
        WORKSPACE,
    ):
        assert create(api_client, scope=scope).status_code == 200
    for scope in (
        {"kind": "session", "id": session_id},
        {"kind": "project", "id": "atlas"},
        {"kind": "persona", "id": "ops-bot"},
        {"kind": "session", "id": "session-999"},
        {"kind": "session", "id": "not-a-session"},
    ):
        problem = assert_problem(create(other_client, scope=scope), 403, "learnings/scope_forbidden")
        assert problem["field"] == "scope"
    assert LearningCandidate.objects.count() == 4
    # operators may use any scope
    assert create(operator_client, scope={"kind": "project", "id": "anything"}).status_code == 200


# ---- read -------------------------------------------------------------------------------------------------


def test_get_and_list_are_scoped_to_the_caller(api_client, other_client, operator_client, session_id):
    mine = created(api_client, scope={"kind": "session", "id": session_id})
    shared = created(api_client, "Release train is weekly.")
    assert api_client.get(f"{URL}/{mine['candidate_id']}").json() == mine
    assert_problem(other_client.get(f"{URL}/{mine['candidate_id']}"), 404, "learnings/learning_candidate_not_found")
    # a pending workspace candidate is the proposer's alone (issue 19.4), not every agent's
    listed = other_client.get(URL).json()
    assert listed["count"] == 0 and listed["results"] == []
    assert_problem(other_client.get(f"{URL}/{shared['candidate_id']}"), 404, "learnings/learning_candidate_not_found")
    assert set(listed) == {"count", "next", "previous", "results"}
    assert operator_client.get(URL).json()["count"] == 2
    assert api_client.get(URL).json()["count"] == 2


def test_unknown_candidate_is_404(api_client):
    for bad in ("learning-candidate-999", "learning-999", "candidate", "learning-candidate-1x"):
        problem = assert_problem(api_client.get(f"{URL}/{bad}"), 404, "learnings/learning_candidate_not_found")
        assert problem["detail"] == f"unknown learning candidate {bad}"


def test_list_filters(operator_client, session_id):
    created(operator_client, "Project codename is Atlas.")
    created(operator_client, "Preferred editor is Helix.", kind="preference", scope={"kind": "project", "id": "atlas"})
    rejected = created(
        operator_client, "Deploys happen on Fridays.", kind="decision", scope={"kind": "session", "id": session_id}
    )
    operator_client.post(f"{URL}/{rejected['candidate_id']}/reject", {}, format="json")

    def ids(query):
        return [c["content"] for c in operator_client.get(URL + query).json()["results"]]

    assert ids("?kind=preference") == ["Preferred editor is Helix."]
    assert ids("?state=rejected") == ["Deploys happen on Fridays."]
    assert ids("?query=HELIX") == ["Preferred editor is Helix."]
    assert ids("?query=project:atlas") == ["Preferred editor is Helix."]
    assert ids("?scope_kind=workspace") == ["Project codename is Atlas."]
    assert ids("?scope_kind=project&scope_id=%20atlas%20") == ["Preferred editor is Helix."]
    assert ids(f"?scope_kind=session&scope_id={session_id}") == ["Deploys happen on Fridays."]
    assert ids("?origin=api&limit=1") == ["Deploys happen on Fridays."]
    problem = assert_problem(operator_client.get(URL + "?scope_kind=project"), 400)
    assert problem["detail"] == "scope_id is required for the selected learning scope"
    problem = assert_problem(operator_client.get(URL + "?scope_id=atlas"), 400)
    assert problem["detail"] == "scope_kind is required when scope_id is provided"
    problem = assert_problem(operator_client.get(URL + "?scope_kind=workspace&scope_id=x"), 400)
    assert problem["detail"] == "workspace learning scope id must be `default`"
    assert_problem(operator_client.get(URL + "?state=lost"), 400)
    assert_problem(operator_client.get(URL + "?kind=opinion"), 400)
    assert_problem(operator_client.get(URL + "?scope_kind=galaxy&scope_id=x"), 400)


# ---- publish / reject -------------------------------------------------------------------------------------


def test_operator_publishes_with_tier_and_overrides(operator_client):
    cand = created(operator_client, "Project codename is Atlas.", expires_at_ms=4_000_000_000_000)
    response = operator_client.post(
        f"{URL}/{cand['candidate_id']}/publish",
        {"publish_tier": "provisional", "confidence": 60, "scope": {"kind": "project", "id": "atlas"}},
        format="json",
    )
    assert response.status_code == 200, response.content
    view = response.json()
    assert view["learning_id"].startswith("learning-") and view["source_candidate_id"] == cand["candidate_id"]
    assert (view["status"], view["publish_tier"], view["confidence"]) == ("provisional", "provisional", 60)
    assert view["scope"] == {"kind": "project", "id": "atlas"} and view["expires_at_ms"] == 4_000_000_000_000
    assert (view["policy_decision"], view["policy_actor"], view["verification_status"]) == (
        "manual",
        "operator",
        "unverified",
    )
    assert view["created_at_ms"] == cand["created_at_ms"] and view["supersedes"] is None
    after = operator_client.get(f"{URL}/{cand['candidate_id']}").json()
    assert after["state"] == "published" and after["published_learning_id"] == view["learning_id"]


def test_publish_conflict_and_supersedes(operator_client):
    first = created(operator_client, "Project codename is Atlas.")
    old = operator_client.post(f"{URL}/{first['candidate_id']}/publish", {}, format="json").json()
    second = created(operator_client, "Project codename is Borealis.")
    problem = assert_problem(
        operator_client.post(f"{URL}/{second['candidate_id']}/publish", {}, format="json"),
        409,
        "learnings/learning_conflict",
    )
    assert problem["detail"] == (
        f"learning conflicts with active learning {old['learning_id']}; publish with supersedes to replace it"
    )
    problem = assert_problem(
        operator_client.post(
            f"{URL}/{second['candidate_id']}/publish",
            {"supersedes": old["learning_id"], "publish_tier": "provisional"},
            format="json",
        ),
        400,
    )
    assert problem["detail"] == "superseding learnings must use the active publish tier"
    new = operator_client.post(
        f"{URL}/{second['candidate_id']}/publish", {"supersedes": old["learning_id"]}, format="json"
    ).json()
    assert new["supersedes"] == old["learning_id"]
    old_view = operator_client.get(f"/v1/learnings/{old['learning_id']}").json()
    assert old_view["status"] == "superseded" and old_view["superseded_by"] == new["learning_id"]


def test_reject_and_state_errors(operator_client):
    cand = created(operator_client)
    view = operator_client.post(f"{URL}/{cand['candidate_id']}/reject").json()
    assert view["state"] == "rejected"
    assert operator_client.post(f"{URL}/{cand['candidate_id']}/reject").json()["state"] == "rejected"
    problem = assert_problem(operator_client.post(f"{URL}/{cand['candidate_id']}/publish", {}, format="json"), 409)
    assert problem["detail"] == f"learning candidate {cand['candidate_id']} was rejected"
    other = created(operator_client, "Release train is weekly.")
    operator_client.post(f"{URL}/{other['candidate_id']}/publish", {}, format="json")
    problem = assert_problem(operator_client.post(f"{URL}/{other['candidate_id']}/reject"), 409)
    assert problem["detail"] == f"learning candidate {other['candidate_id']} was already published"
    # publishing again returns the learning it built (the repair path of §4.14), nothing new is written
    again = operator_client.post(f"{URL}/{other['candidate_id']}/publish", {}, format="json")
    assert again.status_code == 200 and Learning.objects.count() == 1
    assert_problem(operator_client.post(f"{URL}/learning-candidate-999/publish", {}, format="json"), 404)
    assert_problem(operator_client.post(f"{URL}/{other['candidate_id']}/reject", {"why": "x"}, format="json"), 400)


@pytest.mark.parametrize(
    "body,status,field",
    [
        ({"publish_tier": "gold"}, 400, "publish_tier"),
        ({"confidence": 500}, 400, "confidence"),
        ({"content": "x" * 1601}, 400, "content"),
        ({"content": "  "}, 400, "content"),
        ({"scope": {"kind": "workspace", "id": "x"}}, 400, "scope.id"),
        ({"kind": "rumour"}, 400, "kind"),
        ({"supersedes": 5}, 400, "supersedes"),
        ({"supersedes": "learning-999"}, 404, None),
        ({"evidence_refs": "none"}, 400, "evidence_refs"),
        ({"bogus": True}, 400, "bogus"),
        ({"content": "password: hunter2hunter2"}, 400, "content"),
    ],
)
def test_publish_bad_input_writes_nothing(operator_client, body, status, field):
    cand = created(operator_client)
    response = operator_client.post(f"{URL}/{cand['candidate_id']}/publish", body, format="json")
    body = assert_problem(response, status, field=field)  # each bad input has its own expected answer
    if status == 404:
        assert body["code"] == "learning_not_found" and "learning-999" in body["detail"], body
    assert not Learning.objects.exists()
    assert LearningCandidate.objects.get().state == "pending"


def test_agents_cannot_publish_or_reject(api_client, operator_client):
    cand = created(api_client)
    for action in ("publish", "reject"):
        assert_problem(
            api_client.post(f"{URL}/{cand['candidate_id']}/{action}", {}, format="json"), 403, "auth/forbidden"
        )
        assert_problem(api_client.post(f"{URL}/learning-candidate-999/{action}", {}, format="json"), 403)
    assert LearningCandidate.objects.get().state == "pending" and not Learning.objects.exists()


def test_anonymous_is_401(anon_client):
    assert_problem(anon_client.get(URL), 401)
    assert_problem(anon_client.post(URL, {}, format="json"), 401)
    assert_problem(anon_client.get("/v1/learnings"), 401)


def test_existing_learning_lets_published_candidate_point_at_it(operator_client):
    existing = learning("Project codename is Atlas.")
    cand = created(operator_client, "project codename: ATLAS")
    view = operator_client.post(f"{URL}/{cand['candidate_id']}/publish", {}, format="json").json()
    assert view["learning_id"] == existing.public_id


def test_creation_queues_the_automation_review(api_client, django_capture_on_commit_callbacks):
    from tests.support.learnings import set_policy

    set_policy(
        {
            "mode": "enabled",
            "publication": {
                "rules": [
                    {"name": "trusted-facts", "kind": "fact", "require_evidence": True, "action": "publish_active"},
                    {"name": "other-facts", "kind": "fact", "action": "publish_active"},
                ]
            },
        }
    )
    from tests.support.api import finish

    sid = api_client.post("/v1/sessions", {}, format="json").json()["session_id"]
    rid = finish(api_client, sid, "the agent's own run")  # foreign ids are refused outright (issue 14.2)
    with django_capture_on_commit_callbacks(execute=True):
        view = created(
            api_client, evidence_refs=[{"run_id": rid, "note": "claimed"}], source={"run_id": rid, "session_id": sid}
        )
    after = api_client.get(f"{URL}/{view['candidate_id']}").json()
    # API-supplied evidence does not satisfy the trusted-input rule, and API-origin active is downgraded
    assert after["state"] == "published" and after["automation_review"]["matched_rule_name"] == "other-facts"
    published = Learning.objects.get(source_candidate__pk=int(view["candidate_id"].rsplit("-", 1)[1]))
    assert (published.status, published.policy_decision, published.verification_status) == (
        "provisional",
        "automatic",
        "unverified",
    )
