"""Issue 14.2, 14.4, 14.6, 14.7, 14.9, 14.10: provenance, revoke-matching with no filter, bad JSON values,
deep nesting, numeric policy bounds, the run.outputs cap."""

from __future__ import annotations

import json

import pytest

from memory.models import JournalEvent, Run, Session
from tests.conftest import assert_problem
from tests.support.api import finish

pytestmark = pytest.mark.django_db

WORKSPACE = {"kind": "workspace"}


def raw_post(client, url, text: str):
    return client.post(url, data=text.encode("utf-8", "surrogatepass"), content_type="application/json")


# ---- 14.2 provenance --------------------------------------------------------------------------------------


def test_candidate_source_must_be_the_callers_own(api_client, other_client, session_id, agent):
    theirs = other_client.post("/v1/sessions", {}, format="json").json()["session_id"]
    their_run = finish(other_client, theirs, "their work", output="done")
    my_run = finish(api_client, session_id, "my work", output="done")

    def create(source=None, evidence=None):
        body = {"scope": WORKSPACE, "kind": "fact", "content": "The build uses make."}
        if source is not None:
            body["source"] = source
        if evidence is not None:
            body["evidence_refs"] = evidence
        return api_client.post("/v1/learning-candidates", body, format="json")

    for source, field in (
        ({"run_id": their_run}, "source.run_id"),
        ({"session_id": theirs}, "source.session_id"),
        ({"agent_id": "agent-two"}, "source.agent_id"),
        ({"run_id": "run-999999"}, "source.run_id"),
        ({"run_id": my_run, "session_id": theirs}, "source.session_id"),
    ):
        assert_problem(create(source), 403, "learnings/provenance_forbidden", field=field)
    assert_problem(create(evidence=[{"run_id": their_run}]), 403, field="evidence_refs[0].run_id")
    ok = create(
        {"run_id": my_run, "session_id": session_id, "agent_id": agent.username}, [{"run_id": my_run, "note": "mine"}]
    )
    assert ok.status_code == 200, ok.content


# ---- 14.4 revoke-matching ---------------------------------------------------------------------------------


def test_revoke_matching_with_no_filter_is_refused(operator_client):
    from tests.support.learnings import learning

    kept = learning("Workspace timezone is UTC.")
    for body in ({}, {"reason": "cleanup"}, {"query": "", "kind": None}, {"query": "   "}):
        assert_problem(
            operator_client.post("/v1/learnings/revoke-matching", body, format="json"),
            400,
            "learnings/filter_required",
            field="all",
        )
    kept.refresh_from_db()
    assert kept.status == "active"
    response = operator_client.post("/v1/learnings/revoke-matching", {"all": True, "reason": "reset"}, format="json")
    assert response.status_code == 200 and [v["learning_id"] for v in response.json()] == [kept.public_id]


def test_console_bulk_revoke_across_an_unfiltered_list_is_refused(client, operator):
    from django.contrib.auth import get_user_model

    from learnings.models import Learning
    from tests.support.learnings import learning

    target = learning("Workspace timezone is UTC.")
    admin = get_user_model().objects.create_superuser("root", "r@example.com", "pw")
    client.force_login(admin)
    url = "/admin/learnings/learning/"
    response = client.post(
        url,
        {
            "action": "revoke_selected",
            "select_across": "1",
            "index": "0",
            "_selected_action": [target.pk],
            "post": "yes",
            "confirm": "yes",
            "reason": "all",
        },
        follow=True,
    )
    assert "needs a filter" in response.content.decode()
    assert Learning.objects.get(pk=target.pk).status == "active"


# ---- 14.6 / 14.7 bad JSON values --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,field",
    [
        ('{"metadata": {"a": "x\\u0000y"}}', "metadata.a"),
        ('{"metadata": {"list": [1, "\\ud800"]}}', "metadata.list[1]"),
        ('{"metadata": {"n": Infinity}}', "body"),
        ('{"metadata": {"n": NaN}}', "body"),
        ('{"metadata": {"n": 1e400}}', "body"),
        ('{"metadata": {"k\\u0000": 1}}', "metadata.k\\x00"),
    ],
)
def test_bad_json_values_in_session_metadata_are_400(api_client, text, field):
    before = Session.objects.count()
    body = assert_problem(raw_post(api_client, "/v1/sessions", text), 400)
    if field != "metadata.k\\x00":
        assert body["field"] == field, body
    assert Session.objects.count() == before


def test_bad_values_in_run_and_candidate_json_fields(api_client, session_id):
    url = f"/v1/sessions/{session_id}/runs"
    assert_problem(
        raw_post(api_client, url, '{"input": {"content": "x", "attachments": [{"a": "\\u0000"}]}}'),
        400,
        field="input.attachments[0].a",
    )
    run_id = api_client.post(url, {"input": {"content": "go"}}, format="json").json()["run_id"]
    api_client.post(f"/v1/runs/{run_id}/start", {}, format="json")
    for action, text in (
        ("tool-call-started", '{"call_id": "c", "name": "t", "input": {"q": "\\udfff"}}'),
        ("tool-call-finished", '{"call_id": "c", "output": [-Infinity]}'),
        ("output", '{"content": "ok", "artifacts": ["\\u0000"]}'),
    ):
        assert_problem(raw_post(api_client, f"/v1/runs/{run_id}/{action}", text), 400)
    assert_problem(
        raw_post(
            api_client,
            "/v1/learning-candidates",
            '{"scope": {"kind": "workspace"}, "kind": "fact", "content": "c", "source": {"note": "\\u0000"}}',
        ),
        400,
    )


def test_lone_surrogate_in_an_unknown_field_name_is_a_json_400(api_client):
    response = raw_post(api_client, "/v1/sessions", '{"\\ud800bogus": 1}')
    body = assert_problem(response, 400)
    assert "surrogate" in body["detail"]


def test_nul_in_path_and_query(api_client):
    assert api_client.get("/v1/personas/%00").status_code in (400, 404)
    assert_problem(api_client.get("/v1/personas/%00"), 400, field="path")
    assert_problem(api_client.get("/v1/learnings?query=a%00b"), 400, field="query")


@pytest.mark.parametrize("depth", [65, 1000, 100_000])
def test_deep_nesting_is_400(api_client, depth):
    text = '{"metadata": {"a": ' + "[" * depth + "]" * depth + "}}"
    body = assert_problem(raw_post(api_client, "/v1/sessions", text), 400)
    assert "64" in body["detail"]


def test_nesting_up_to_the_limit_is_fine(api_client):
    nested = {"a": [[[[1]]]]}
    response = api_client.post("/v1/sessions", {"metadata": nested}, format="json")
    assert response.status_code == 201 and response.json()["metadata"] == nested


# ---- 14.9 policy bounds -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "policy,field",
    [
        ({"judge": {"enabled": False, "model": None, "timeout_ms": 2**70}}, "judge.timeout_ms"),
        (
            {
                "capture": {
                    "run_summary_candidates": True,
                    "semantic_candidates": {
                        "enabled": False,
                        "model": None,
                        "timeout_ms": 10**12,
                        "max_candidates_per_run": 2,
                    },
                }
            },
            "capture.semantic_candidates.timeout_ms",
        ),
        (
            {
                "publication": {
                    "default_action": "manual_review",
                    "allow_api_origin_active_publication": False,
                    "quarantined_rule_names": [],
                    "rules": [{"action": "publish_active", "expires_after_ms": 2**70}],
                }
            },
            "publication.rules[0].expires_after_ms",
        ),
    ],
)
def test_learning_policy_numbers_are_bounded(operator_client, policy, field):
    response = operator_client.post("/v1/runtime/learning-policy", {"policy": policy}, format="json")
    body = assert_problem(response, 400)
    assert body["field"] == f"policy.{field}", body


@pytest.mark.parametrize(
    "field,value", [("retention_ms", 2**62), ("max_tracked_per_session", 10**9), ("max_prompt_entries", 10**6)]
)
def test_run_memory_policy_numbers_are_bounded(operator_client, field, value):
    policy = {"max_tracked_per_session": 10_000, "max_prompt_entries": 3, field: value}
    response = operator_client.post("/v1/runtime/run-memory-policy", {"policy": policy}, format="json")
    assert_problem(response, 400, field=f"policy.{field}")


# ---- 14.10 outputs cap ------------------------------------------------------------------------------------


def test_run_outputs_are_capped_inline_and_paged(api_client, session_id):
    from kheish.api.runs import OUTPUTS_IN_VIEW, OUTPUTS_VIEW_CHARS
    from memory.runs import MAX_INLINE_OUTPUTS

    run_id = api_client.post(f"/v1/sessions/{session_id}/runs", {"input": {"content": "go"}}, format="json").json()[
        "run_id"
    ]
    api_client.post(f"/v1/runs/{run_id}/start", {}, format="json")
    chunk = "x" * 100_000
    for n in range(40):
        response = api_client.post(f"/v1/runs/{run_id}/output", {"content": f"{n}:{chunk}"}, format="json")
        assert response.status_code == 200
        assert len(response.content) < OUTPUTS_VIEW_CHARS + 20_000, (n, len(response.content))
    view = response.json()
    assert view["outputs_truncated"] is True
    assert len(view["outputs"]) <= OUTPUTS_IN_VIEW and view["outputs"][-1]["content"].startswith("39:")
    assert len(Run.objects.get(pk=int(run_id[4:])).outputs) == MAX_INLINE_OUTPUTS
    done = api_client.post(f"/v1/runs/{run_id}/complete", {"output": {"content": "final"}}, format="json")
    assert len(done.content) < OUTPUTS_VIEW_CHARS + 20_000
    assert done.json()["outputs"][-1]["content"] == "final"
    seen, cursor = [], None
    while True:
        page = api_client.get(f"/v1/runs/{run_id}/outputs" + (f"?cursor={cursor}" if cursor else "")).json()
        seen += [o["content"] for o in page["results"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == 41 and seen[0] == f"0:{chunk}" and seen[-1] == "final"
    assert JournalEvent.objects.filter(run_id=int(run_id[4:]), type="message_appended").count() == 41


def test_small_runs_keep_every_output_in_the_view(api_client, session_id):
    run_id = finish(api_client, session_id, "go", output="one")
    view = api_client.get(f"/v1/runs/{run_id}").json()
    assert [o["content"] for o in view["outputs"]] == ["one"] and view["outputs_truncated"] is False
    assert json.loads(api_client.get(f"/v1/runs/{run_id}/outputs?limit=1").content)["results"][0]["content"] == "one"


# ---- 14.5 agents see what they need -----------------------------------------------------------------------


def test_agents_get_no_global_counters_or_policies_from_status(api_client, operator_client):
    agent_view = api_client.get("/v1/status").json()
    assert agent_view == {
        "health": {"ok": agent_view["health"]["ok"], "warnings": []},
        "run_memory": {"enabled": True},
        "session_memory": {},
    }
    full = operator_client.get("/v1/status").json()
    assert "metrics" in full["run_memory"] and "policy" in full["run_memory"]


def test_agents_see_skill_paths_relative_to_the_skills_directory(api_client, operator_client, settings, tmp_path):
    skill = tmp_path / "catalog" / "code-review"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: code-review\ndescription: Review code.\n---\nRead the diff.\n")
    settings.KHEISH_CATALOG_DIR = tmp_path / "catalog"
    agent_items = api_client.get("/v1/skills").json()["results"]
    assert [(i["skill_root"], i["skill_path"]) for i in agent_items] == [("code-review", "code-review/SKILL.md")]
    assert str(tmp_path) not in api_client.get("/v1/skills/code-review").content.decode()
    operator_items = operator_client.get("/v1/skills").json()["results"]
    assert operator_items[0]["skill_path"] == str(skill / "SKILL.md")
