"""Only staff reach the console. Anonymous visitors, logged-in users without staff status and agents holding an
API key (a Bearer credential, which the admin does not accept) get the login redirect for every page and every
action — never a page, never a change."""

from __future__ import annotations

import pytest
from django.urls import reverse

from learnings import services as learning_services
from learnings.models import Learning, LearningCandidate
from memory.models import AuditEvent, PolicyRevision
from skills import services as skill_services
from skills.models import LearningSkill
from tests.support.console_data import api_candidate, plain_user, procedure_learning, published, use_tmp_skill_dirs

pytestmark = pytest.mark.django_db


@pytest.fixture
def objects(settings, tmp_path):
    use_tmp_skill_dirs(settings, tmp_path)
    candidate = api_candidate("The staging cluster is called Borealis.")
    learning = published("Deploys happen on Tuesdays.", kind="decision")
    procedure = procedure_learning()
    skill = skill_services.skill_promote(
        learning=procedure,
        actor="tests",
        request=skill_services.PromotionRequest(skill_name="release:checklist", instructions=procedure.content),
    )
    learning_services.learning_revoke(learning=published("Revoked fact is here."), actor="tests")
    return {"candidate": candidate, "learning": learning, "procedure": procedure, "skill": skill}


def console_requests(o) -> list[tuple[str, str, dict]]:
    """Every console URL with the POST that would change something if it were accepted."""
    c, lrn, p, s = o["candidate"].pk, o["learning"].pk, o["procedure"].pk, o["skill"].pk
    yes = {"confirm": "yes"}
    return [
        ("get", reverse("console:dashboard"), {}),
        ("get", reverse("console:review"), {}),
        ("get", reverse("console:learnings"), {}),
        ("get", reverse("console:learning", args=[lrn]), {}),
        ("get", reverse("console:skills"), {}),
        ("get", reverse("console:search"), {}),
        ("post", reverse("console:candidate-publish", args=[c]), {"publish_tier": "active"}),
        ("post", reverse("console:candidate-reject", args=[c]), yes),
        ("post", reverse("console:learning-revoke", args=[lrn]), yes),
        ("post", reverse("console:learning-supersede", args=[lrn]), {"content": "Deploys happen on Mondays."}),
        ("post", reverse("console:learning-promote", args=[p]), {"skill_name": "other", "instructions": "x"}),
        (
            "post",
            reverse("console:skill-rollout", args=[s]),
            {"kind": "verification", "run_id": "run-1", "expected_output_contains": "x"},
        ),
        ("post", reverse("console:skill-status", args=[s]), {"status": "verified"}),
        ("post", reverse("console:skill-revoke", args=[s]), yes),
        ("post", reverse("console:skill-rollback", args=[s]), yes),
        ("post", reverse("console:learning-policy"), {"mode": "enabled", "action": "save"}),
        ("post", reverse("console:run-memory-policy"), {"enabled": "on", "action": "save"}),
    ]


def state() -> tuple:
    return (
        AuditEvent.objects.count(),
        PolicyRevision.objects.count(),
        tuple(LearningCandidate.objects.order_by("id").values_list("state", flat=True)),
        tuple(Learning.objects.order_by("id").values_list("status", flat=True)),
        tuple(LearningSkill.objects.order_by("id").values_list("status", flat=True)),
    )


def assert_refused(client, objects, **headers):
    before = state()
    for method, path, data in console_requests(objects):
        response = getattr(client, method)(path, data, **headers)
        assert response.status_code in (302, 403), (method, path, response.status_code)
        if response.status_code == 302:
            assert response["Location"].startswith(reverse("admin:login")), (path, response["Location"])
        # GETs of the action pages too
        if method == "post":
            assert client.get(path, **headers).status_code in (302, 403), path
    assert state() == before


def test_anonymous_visitors_are_sent_to_login(client, objects):
    assert_refused(client, objects)


def test_users_without_staff_status_are_refused(client, objects):
    client.force_login(plain_user())
    assert_refused(client, objects)


def test_agent_api_keys_get_no_console(client, objects, agent_key):
    assert_refused(client, objects, HTTP_AUTHORIZATION=f"Bearer {agent_key.plaintext}")


def test_operator_api_keys_do_not_open_the_console_either(client, objects, operator_key):
    """A key is an API credential: the console needs a logged-in staff session."""
    assert_refused(client, objects, HTTP_AUTHORIZATION=f"Bearer {operator_key.plaintext}")


def test_staff_reach_every_page(client, objects):
    from tests.support.console_data import staff_user

    client.force_login(staff_user())
    for _, path, _ in console_requests(objects):
        assert client.get(path).status_code == 200, path
