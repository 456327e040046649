"""Issue 13.2: keys made in the admin follow the command line's rules (``identity.api_key_create``): an agent key
belongs to an agent principal (created from the key's name, or picked), never the operator's identity; an operator
key belongs to a staff user. Every test posts the real admin add form."""

from __future__ import annotations

import pytest

from memory.identity import authenticate_key
from memory.models import ApiKey
from tests.conftest import client_for

pytestmark = pytest.mark.django_db

ADD = "/admin/memory/apikey/add/"


@pytest.fixture
def operator_user(django_user_model):
    return django_user_model.objects.create_superuser("operator", "", "pw-123456789")


@pytest.fixture
def admin_browser(client, operator_user):
    client.force_login(operator_user)
    return client


def issued_key(response) -> str:
    html = response.content.decode()
    marker = "id='new-api-key'>"
    assert marker in html, html[:3000]
    start = html.index(marker) + len(marker)
    return html[start : html.index("</code>", start)]


def test_the_add_form_explains_principal_and_role(admin_browser):
    page = admin_browser.get(ADD).content.decode()
    assert "Leave empty to create a principal named after the key" in page
    assert "Agent keys need a non-staff principal" in page and "operator: everything" in page
    assert "operator (staff)" in page  # the staff user is marked as such in the picker


def test_an_agent_key_with_no_principal_creates_an_agent(admin_browser, operator_user):
    response = admin_browser.post(ADD, {"name": "my-agent", "role": "agent", "user": ""}, follow=True)
    key = issued_key(response)
    api_key = authenticate_key(key)
    assert api_key.user.username == "my-agent" and not api_key.user.is_staff
    assert api_key.user != operator_user and api_key.role == "agent"
    # over HTTP it acts as the agent, not the operator
    session = client_for(key).post("/v1/sessions", {}, format="json")
    assert session.status_code == 201, session.content
    run = client_for(key).post(
        f"/v1/sessions/{session.json()['session_id']}/runs", {"input": {"content": "hi"}}, format="json"
    )
    assert run.json()["agent_id"] == "my-agent"
    assert client_for(key).put("/v1/runtime/learning-policy", {}, format="json").status_code == 403


def test_an_agent_key_for_a_picked_agent_principal(admin_browser, django_user_model):
    bot = django_user_model.objects.create_user("bot")
    response = admin_browser.post(ADD, {"name": "bot-key-2", "role": "agent", "user": bot.pk}, follow=True)
    assert authenticate_key(issued_key(response)).user == bot


def test_an_agent_key_is_never_given_to_a_staff_user(admin_browser, operator_user):
    response = admin_browser.post(ADD, {"name": "sneaky", "role": "agent", "user": operator_user.pk})
    assert response.status_code == 200  # the form again, with the error
    assert "is a staff user: agent keys belong to agent principals" in response.content.decode()
    response = admin_browser.post(ADD, {"name": "operator", "role": "agent", "user": ""})
    assert "&#x27;operator&#x27; is a staff user" in response.content.decode()
    assert not ApiKey.objects.exists()


def test_operator_keys_belong_to_staff_users(admin_browser, operator_user, django_user_model):
    bot = django_user_model.objects.create_user("bot")
    refused = admin_browser.post(ADD, {"name": "ops-key", "role": "operator", "user": bot.pk})
    assert "is not a staff user: operator keys belong to staff users" in refused.content.decode()
    assert not ApiKey.objects.exists()

    picked = authenticate_key(
        issued_key(
            admin_browser.post(ADD, {"name": "ops-key", "role": "operator", "user": operator_user.pk}, follow=True)
        )
    )
    assert picked.user == operator_user and picked.role == "operator"

    created = authenticate_key(
        issued_key(admin_browser.post(ADD, {"name": "scraper", "role": "operator", "user": ""}, follow=True))
    )
    assert created.user.username == "scraper" and created.user.is_staff  # as create_api_key --role operator
