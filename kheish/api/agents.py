"""/v1/agents/{agent_id}/grants: the personas and projects an agent may bind its sessions to (operator-only)."""

from __future__ import annotations

from rest_framework import serializers, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from kheish.api.fields import StrictCharField, StrictSerializer
from kheish.api.permissions import IsOperator
from kheish.api.schema import OPERATOR, described
from memory import grants


class AgentGrantsSerializer(StrictSerializer):
    field_help = {
        "project_ids": "every project the agent's sessions may bind to (replaces the list; each must exist)",
        "persona_ids": "every persona the agent's sessions may bind to (replaces the list; each must exist)",
    }

    project_ids = serializers.ListField(child=StrictCharField(max_length=120), max_length=1000)
    persona_ids = serializers.ListField(child=StrictCharField(max_length=120), max_length=1000)


class AgentGrantsViewSet(viewsets.ViewSet):
    """A singleton under an agent: ``agents/{agent_id}/grants``."""

    permission_classes = [IsOperator]

    @described(
        "An agent's grants",
        "The personas and projects the agent (its username, the agent_id of its runs) may bind its sessions "
        "to. 404 when no such agent exists.",
        caller=OPERATOR,
        responses=AgentGrantsSerializer,
        operation_id="agents_grants_retrieve",
    )
    def read(self, request: Request, agent_id: str) -> Response:
        return Response(grants.grants_for(grants.get_agent(agent_id)).as_dict())

    @described(
        "Replace an agent's grants",
        "Replaces the agent's persona and project grants whole (an empty list revokes all of that kind); "
        "sessions opened afterwards may bind only granted ids. 400 for an unknown persona or project id, "
        "404 when no such agent exists.",
        caller=OPERATOR,
        request=AgentGrantsSerializer,
        responses=AgentGrantsSerializer,
        operation_id="agents_grants_update",
    )
    def replace(self, request: Request, agent_id: str) -> Response:
        agent = grants.get_agent(agent_id)
        data = AgentGrantsSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        result = grants.grants_set(agent=agent, actor=request.user, **data.validated_data)
        return Response(result.as_dict())
