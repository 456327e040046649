"""/v1/learnings (spec §2.4): list filters, get, revoke, revoke-matching, supersede; the learned_context
section in runs, memory-context and memory-search; permissions and bad input."""

from __future__ import annotations

import pytest

from learnings.models import Learning
from memory import hooks
from memory.clock import now_ms
from memory.models import AuditEvent
from tests.conftest import assert_problem
from tests.support.learnings import learning, set_policy

pytestmark = pytest.mark.django_db

URL = "/v1/learnings"


def ids(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [item["learning_id"] for item in response.json()["results"]]


# ---- read -------------------------------------------------------------------------------------------------


def test_list_and_get(operator_client):
    atlas = learning("Project codename is Atlas.")
    helix = learning("Preferred editor is Helix.", kind="preference", scope=("project", "atlas"))
    listed = operator_client.get(URL).json()
    assert listed["count"] == 2 and [i["learning_id"] for i in listed["results"]] == [helix.public_id, atlas.public_id]
    view = operator_client.get(f"{URL}/{atlas.public_id}").json()
    assert view["learning_id"] == atlas.public_id and view["content"] == "Project codename is Atlas."
    assert set(view) == {
        "learning_id",
        "scope",
        "kind",
        "sensitivity",
        "content",
        "confidence",
        "source",
        "evidence_refs",
        "source_candidate_id",
        "created_at_ms",
        "published_at_ms",
        "expires_at_ms",
        "stated_at_ms",
        "status",
        "publish_tier",
        "policy_decision",
        "policy_actor",
        "verification_status",
        "supersedes",
        "superseded_by",
        "revoked_at_ms",
        "revoked_reason",
    }
    for bad in ("learning-999", "learning-candidate-1", "x"):
        problem = assert_problem(operator_client.get(f"{URL}/{bad}"), 404, "learnings/learning_not_found")
        assert problem["detail"] == f"unknown learning {bad}"


def test_list_filters(operator_client):
    set_policy(
        {
            "mode": "enabled",
            "publication": {"rules": [{"name": "Auto-Facts", "kind": "fact", "action": "publish_provisional"}]},
        }
    )
    from learnings.review import review_candidate
    from tests.support.learnings import candidate

    auto_candidate = candidate("Release train is weekly.")
    review_candidate(auto_candidate.pk)
    auto = Learning.objects.get(source_candidate=auto_candidate)
    manual = learning("Project codename is Atlas.", scope=("project", "atlas"))
    pref = learning("Preferred editor is Helix.", kind="preference")
    revoked = learning("Old decision is void.", kind="decision")
    operator_client.post(f"{URL}/{revoked.public_id}/revoke", {}, format="json")

    assert ids(operator_client.get(URL + "?policy_decision=automatic")) == [auto.public_id]
    assert ids(operator_client.get(URL + "?policy_actor=Daemon")) == [auto.public_id]
    assert ids(operator_client.get(URL + "?matched_rule_name=auto-facts")) == [auto.public_id]
    assert ids(operator_client.get(URL + "?status=revoked")) == [revoked.public_id]
    assert ids(operator_client.get(URL + "?status=provisional")) == [auto.public_id]
    assert ids(operator_client.get(URL + "?kind=preference")) == [pref.public_id]
    assert ids(operator_client.get(URL + "?scope_kind=project&scope_id=atlas")) == [manual.public_id]
    assert ids(operator_client.get(URL + "?query=codename")) == [manual.public_id]
    assert ids(operator_client.get(URL + "?query=workspace:default&kind=fact")) == [auto.public_id]
    assert ids(operator_client.get(URL + "?policy_decision=manual&status=active")) == [pref.public_id, manual.public_id]
    problem = assert_problem(operator_client.get(URL + "?scope_kind=session"), 400)
    assert problem["detail"] == "scope_id is required for the selected learning scope"
    problem = assert_problem(operator_client.get(URL + "?scope_id=atlas"), 400)
    assert problem["detail"] == "scope_kind is required when scope_id is provided"
    for bad in ("?status=zombie", "?policy_decision=maybe", "?kind=x"):
        assert operator_client.get(URL + bad).status_code == 400


def test_agents_read_only_within_their_sessions_scopes(
    api_client, other_client, operator_client, session_id, other_agent_key, grant
):
    operator_client.post("/v1/projects", {"project_id": "atlas", "name": "Atlas"}, format="json")
    grant(other_agent_key.api_key.user, projects=["atlas"])
    other_session = other_client.post("/v1/sessions", {"project_ids": ["atlas"]}, format="json").json()
    mine = learning("Session note is private.", scope=("session", session_id))
    theirs = learning("Their note is private.", scope=("session", other_session["session_id"]))
    project = learning("Project language is Rust.", scope=("project", "atlas"))
    workspace = learning("Workspace timezone is UTC.")
    assert set(ids(api_client.get(URL))) == {mine.public_id, workspace.public_id}
    assert set(ids(other_client.get(URL))) == {theirs.public_id, project.public_id, workspace.public_id}
    assert_problem(api_client.get(f"{URL}/{theirs.public_id}"), 404)
    assert_problem(api_client.get(f"{URL}/{project.public_id}"), 404)
    assert api_client.get(f"{URL}/{workspace.public_id}").status_code == 200
    assert ids(api_client.get(URL + f"?scope_kind=session&scope_id={other_session['session_id']}")) == []
    assert len(ids(operator_client.get(URL))) == 4


def test_agents_cannot_revoke_supersede_or_revoke_matching(api_client):
    target = learning()
    assert_problem(api_client.post(f"{URL}/{target.public_id}/revoke", {}, format="json"), 403)
    assert_problem(
        api_client.post(f"{URL}/{target.public_id}/supersede", {"content": "Project codename is B."}, format="json"),
        403,
    )
    assert_problem(api_client.post(f"{URL}/revoke-matching", {}, format="json"), 403)
    target.refresh_from_db()
    assert target.status == "active" and Learning.objects.count() == 1


# ---- revoke -----------------------------------------------------------------------------------------------


def test_revoke(operator_client):
    target = learning()
    view = operator_client.post(f"{URL}/{target.public_id}/revoke", {"reason": "outdated"}, format="json").json()
    assert view["status"] == "revoked" and view["revoked_reason"] == "outdated" and view["revoked_at_ms"]
    again = operator_client.post(f"{URL}/{target.public_id}/revoke", {}, format="json").json()
    assert again == view
    audit = AuditEvent.objects.get(subject_id=target.public_id, action="revoke")
    assert (audit.actor, audit.from_state, audit.to_state, audit.reason) == ("ops", "active", "revoked", "outdated")


@pytest.mark.parametrize(
    "body,status",
    [
        ({"reason": "the api key is sk-abcdefghijklmnopqrstuvwx"}, 400),
        ({"reason": 5}, 400),
        ({"reason": "x" * 2001}, 400),
        ({"why": "x"}, 400),
        ([], 400),
    ],
)
def test_revoke_bad_input(operator_client, body, status):
    target = learning()
    problem = assert_problem(operator_client.post(f"{URL}/{target.public_id}/revoke", body, format="json"), status)
    if "sk-" in str(body):
        assert problem["detail"] == "learning revocation reason contains secret-like material"
    target.refresh_from_db()
    assert target.status == "active"
    assert_problem(operator_client.post(f"{URL}/learning-999/revoke", {}, format="json"), 404)


def test_revoke_matching(operator_client):
    first = learning("Project codename is Atlas.")
    second = learning("Release train is weekly.", scope=("project", "atlas"))
    keep = learning("Preferred editor is Helix.", kind="preference")
    response = operator_client.post(f"{URL}/revoke-matching", {"kind": "fact", "reason": "cleanup"}, format="json")
    assert response.status_code == 200, response.content
    assert sorted(item["learning_id"] for item in response.json()) == sorted([first.public_id, second.public_id])
    assert all(item["status"] == "revoked" for item in response.json())
    keep.refresh_from_db()
    assert keep.status == "active"
    assert operator_client.post(f"{URL}/revoke-matching", {"kind": "decision"}, format="json").json() == []
    again = operator_client.post(f"{URL}/revoke-matching", {"status": "revoked", "reason": "again"}, format="json")
    assert sorted(item["learning_id"] for item in again.json()) == sorted([first.public_id, second.public_id])
    assert {item["revoked_reason"] for item in again.json()} == {"cleanup"}  # idempotent: the first reason stays
    assert AuditEvent.objects.filter(subject_id=first.public_id, action="revoke").count() == 1
    problem = assert_problem(
        operator_client.post(f"{URL}/revoke-matching", {"scope_kind": "project"}, format="json"), 400
    )
    assert problem["detail"] == "scope_id is required for the selected learning scope"
    problem = assert_problem(operator_client.post(f"{URL}/revoke-matching", {"scope_id": "x"}, format="json"), 400)
    assert problem["detail"] == "scope_kind is required when scope_id is provided"
    for body in ({"status": "zombie"}, {"kind": 5}, {"bogus": 1}, {"reason": "token=abcdefabcdefabcdef"}):
        assert_problem(operator_client.post(f"{URL}/revoke-matching", body, format="json"), 400)
    keep.refresh_from_db()
    assert keep.status == "active"


def test_revoke_matching_is_all_or_nothing(operator_client):
    first = learning("Project codename is Atlas.")
    second = learning("Release train is weekly.")

    def refuse(item, **kwargs):
        if item.pk == second.pk:
            raise RuntimeError("promoted skill could not be revoked")

    hooks.register(hooks.LEARNING_REVOKING, refuse)
    try:
        response = operator_client.post(f"{URL}/revoke-matching", {"reason": "cleanup", "all": True}, format="json")
    finally:
        hooks.unregister(hooks.LEARNING_REVOKING, refuse)
    problem = assert_problem(response, 409, "learnings/revoke_matching_failed")
    assert problem["detail"] == (
        "failed to revoke matching learnings after 1 successful updates: promoted skill could not be revoked"
    )
    assert set(Learning.objects.values_list("status", flat=True)) == {"active"}
    assert not AuditEvent.objects.filter(subject_id__in=[first.public_id, second.public_id], action="revoke").exists()


# ---- supersede --------------------------------------------------------------------------------------------


def test_supersede(operator_client):
    old = learning("Reports use gigabytes.", kind="preference")
    response = operator_client.post(
        f"{URL}/{old.public_id}/supersede", {"content": "Reports use gibibytes.", "confidence": 90}, format="json"
    )
    assert response.status_code == 200, response.content
    new = response.json()
    assert (new["status"], new["publish_tier"], new["supersedes"], new["confidence"]) == (
        "active",
        "active",
        old.public_id,
        90,
    )
    old_view = operator_client.get(f"{URL}/{old.public_id}").json()
    assert old_view["status"] == "superseded" and old_view["superseded_by"] == new["learning_id"]
    assert old_view["content"] == "Reports use gigabytes."
    again = operator_client.post(
        f"{URL}/{old.public_id}/supersede", {"content": "Reports use bytes."}, format="json"
    ).json()
    assert again["learning_id"] == new["learning_id"]


def test_supersede_expiry_override_or_current_value(operator_client):
    """``expires_at_ms?`` is an override: a value replaces the current expiry, null or absent keeps it."""
    future = now_ms() + 86_400_000
    cases = [
        ("audit", {}, future),
        ("backup", {"expires_at_ms": None}, future),
        ("cache", {"expires_at_ms": future + 5}, future + 5),
    ]
    for subject, body, expected in cases:
        old = learning(f"The {subject} retention is 30 days.", candidate_extra={"expires_at_ms": future})
        assert old.expires_at_ms == future
        response = operator_client.post(
            f"{URL}/{old.public_id}/supersede",
            {"content": f"The {subject} retention is 60 days.", **body},
            format="json",
        )
        assert response.status_code == 200, response.content
        assert response.json()["expires_at_ms"] == expected, body


@pytest.mark.parametrize(
    "body,message",
    [
        ({}, None),
        ({"content": ""}, "learning content is required"),
        ({"content": "x" * 1601}, "learning content exceeds the 1600 character limit"),
        ({"content": "client_secret=abcdef123456"}, "semantic learning content appears to contain secret material"),
        (
            {"content": "ok", "scope": {"kind": "project", "id": "p"}},
            "superseding learning scope must match the source learning scope",
        ),
        ({"content": "ok", "confidence": 101}, "learning confidence must be between 0 and 100"),
        ({"content": "ok", "kind": "gossip"}, None),
        ({"content": 7}, None),
        ({"content": "ok", "x": 1}, None),
    ],
)
def test_supersede_bad_input(operator_client, body, message):
    old = learning("Reports use gigabytes.", kind="preference")
    problem = assert_problem(operator_client.post(f"{URL}/{old.public_id}/supersede", body, format="json"), 400)
    if message:
        assert problem["detail"] == message
    assert Learning.objects.count() == 1
    old.refresh_from_db()
    assert old.status == "active"


# ---- learned_context through runs, memory-context, memory-search -------------------------------------------


@pytest.mark.usefixtures("spec_retrieval")  # the reference's ranking and budget
def test_learned_context_is_packed_first_within_one_budget(api_client, session_id, operator_client):
    """§4.17: learned_context is packed first, entry by entry while the rendered section fits; the first
    overflow stops it (truncated, with the omission note) and the omitted count feeds
    session_memory.metrics.prompt_limit_omitted_total; recovered_memory only gets what budget is left."""
    from learnings.sections import LEARNED_CONTEXT_TRUNCATED
    from memory.sections import estimate_tokens
    from tests.support.api import finish

    finish(api_client, session_id, "Which editor theme do we use?", output="The editor theme is dark.")
    made = [learning(f"Editor setting {index} is value {index}.", kind="preference") for index in range(40)]
    before = operator_client.get("/v1/status").json()["session_memory"]["metrics"]["prompt_limit_omitted_total"]
    response = api_client.post(
        f"/v1/sessions/{session_id}/runs",
        {
            "input": {"content": "Which editor setting values do we use?"},
            "model": {"context_window": 14_000, "max_output_tokens": 0},
        },
        format="json",
    )
    assert response.status_code == 202, response.content
    prompt = response.json()["prompt"]
    names = [section["name"] for section in prompt["sections"]]
    assert names[0] == "learned_context" and names in (["learned_context"], ["learned_context", "recovered_memory"])
    learned = prompt["sections"][0]
    kept = len(learned["entries"])
    assert 0 < kept < len(made) and learned["truncated"] is True
    assert set(learned["entries"]) <= {row.public_id for row in made}
    assert learned["content"].rstrip().endswith(LEARNED_CONTEXT_TRUNCATED)
    used = sum(estimate_tokens(section["content"]) for section in prompt["sections"])
    assert used <= prompt["budget_tokens"] < estimate_tokens(learned["content"]) * 2
    after = operator_client.get("/v1/status").json()["session_memory"]["metrics"]["prompt_limit_omitted_total"]
    assert after - before == len(made) - kept


def test_learned_context_reaches_runs_and_previews(api_client, session_id):
    helix = learning("Preferred editor is Helix.", kind="preference")
    learning("Secret project is Falcon.", sensitivity="sensitive")
    learning("Provisional note is here.", tier="provisional")
    run = api_client.post(
        f"/v1/sessions/{session_id}/runs", {"input": {"content": "Which editor is preferred?"}}, format="json"
    )
    assert run.status_code == 202, run.content
    sections = {s["name"]: s for s in run.json()["prompt"]["sections"]}
    learned = sections["learned_context"]
    assert learned["entries"] == [helix.public_id] and learned["truncated"] is False
    assert "# Learned Context" in learned["content"] and f"## {helix.public_id} (preference)" in learned["content"]
    assert "Preferred editor is Helix." in learned["content"]
    events = api_client.get(f"/v1/sessions/{session_id}/events").json()["results"]
    assert "learned_context" not in str(events[0]["event"])

    context = api_client.get(f"/v1/sessions/{session_id}/memory-context?query=editor").json()
    assert [e["learning_id"] for e in context["learned_context"]["entries"]] == [helix.public_id]
    weather = api_client.get(f"/v1/sessions/{session_id}/memory-context?query=weather").json()["learned_context"]
    assert [(e["learning_id"], e["standing"]) for e in weather["entries"]] == [(helix.public_id, True)]

    search = api_client.get(f"/v1/sessions/{session_id}/memory-search?query=project").json()
    hits = [r for r in search["results"] if r["kind"] == "learning"]
    assert hits == []  # the only 'project' learning is sensitive
    search = api_client.get(f"/v1/sessions/{session_id}/memory-search").json()
    by_id = {r["source_id"]: r for r in search["results"] if r["kind"] == "learning"}
    assert by_id[helix.public_id]["prompt_eligible"] is True
    assert [r["prompt_eligible"] for r in by_id.values() if r["source_id"] != helix.public_id] == [False]


def test_run_summary_and_procedure_never_reach_prompts(api_client, session_id):
    learning("Deploy procedure is make deploy.", kind="procedure")
    context = api_client.get(f"/v1/sessions/{session_id}/memory-context?query=use durable memory").json()
    assert context["learned_context"] is None
