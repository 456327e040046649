"""``SessionSerializer`` renders a session directly (no field copies per response); what it renders is what
DRF's generic path over the declared fields renders, for every shape of session, alone and in a list page."""

from __future__ import annotations

import pytest
from rest_framework import serializers

from kheish.api.sessions import SessionSerializer
from memory.grants import grants_set
from memory.models import Persona, Project, Run, RunStatus, Session
from memory.sessions import session_create, with_read_annotations

pytestmark = pytest.mark.django_db


def generic(session: Session, context: dict | None = None) -> dict:
    return dict(serializers.Serializer.to_representation(SessionSerializer(session, context=context or {}), session))


@pytest.fixture
def sessions_of_every_shape(agent):
    Project.objects.create(project_id="alpha", name="Alpha")
    Project.objects.create(project_id="beta", name="Beta")
    Persona.objects.create(persona_id="writer", display_name="Writer", capability_scope=["read", "write"])
    grants_set(agent=agent, project_ids=["alpha", "beta"], persona_ids=["writer"], actor="tests")
    bare = session_create(owner=agent)
    bound = session_create(
        owner=agent,
        persona_id="writer",
        project_ids=["beta", "alpha"],
        capability_scope=["read"],
        metadata={"team": "blue", "n": [1, 2]},
    )
    Run.objects.create(session=bound, status=RunStatus.RUNNING)
    return [bare, bound]


def test_one_session_renders_as_the_declared_fields_do(sessions_of_every_shape):
    for session in sessions_of_every_shape:
        read = with_read_annotations(Session.objects.all()).get(pk=session.pk)  # as a request reads it
        assert SessionSerializer(read).data == generic(read)
        plain = Session.objects.get(pk=session.pk)  # and without the read's annotations
        assert SessionSerializer(plain).data == generic(plain)


def test_a_list_page_renders_as_the_declared_fields_do(sessions_of_every_shape, agent):
    from memory.sessions import learning_scope_keys_many

    page = list(Session.objects.filter(owner=agent).order_by("pk"))
    context = {"learning_scopes": learning_scope_keys_many(page)}
    assert SessionSerializer(page, many=True, context=context).data == [generic(s, context) for s in page]
    assert {row["active_run_id"] is None for row in SessionSerializer(page, many=True, context=context).data} == {
        True,
        False,
    }
