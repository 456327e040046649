"""/v1/agents/{agent_id}/grants: the personas and projects an agent may bind its sessions to (operator-only)."""

from __future__ import annotations

from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from kheish.api.fields import StrictCharField, StrictSerializer
from kheish.api.permissions import IsOperator
from memory import grants


class AgentGrantsSerializer(StrictSerializer):
    project_ids = serializers.ListField(child=StrictCharField(max_length=120), max_length=1000)
    persona_ids = serializers.ListField(child=StrictCharField(max_length=120), max_length=1000)


class AgentGrantsView(APIView):
    permission_classes = [IsOperator]

    @extend_schema(responses=AgentGrantsSerializer, operation_id="agents_grants_retrieve")
    def get(self, request, agent_id: str):
        return Response(grants.grants_for(grants.get_agent(agent_id)).as_dict())

    @extend_schema(request=AgentGrantsSerializer, responses=AgentGrantsSerializer,
                   operation_id="agents_grants_update")
    def put(self, request, agent_id: str):
        agent = grants.get_agent(agent_id)
        data = AgentGrantsSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        result = grants.grants_set(agent=agent, actor=request.user, **data.validated_data)
        return Response(result.as_dict())


urlpatterns = [path("agents/<str:agent_id>/grants", AgentGrantsView.as_view(), name="agent-grants")]
