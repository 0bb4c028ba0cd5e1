"""kagent.api.v1alpha1.AgentService: list, get, create, update and delete Agents, each carried as
one resource (sessionq.domain.agent_resource). The refs' rules (required, DNS names) are checked
before the servicer runs (api/validation.py); what the protos cannot express is checked here and in
the procedures: that the resource is an Agent that agrees with `ref`, that its spec is valid
(domain.agents), who may change it (its owner or an administrator) and whether it exists.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import json_format, struct_pb2

from sessionq import errors
from sessionq._pb.kagent.api.v1alpha1 import agents_pb2, agents_pb2_grpc, common_pb2
from sessionq.api.auth import Authenticator
from sessionq.api.rpc import rpc
from sessionq.db.store import Store
from sessionq.domain.agent_resource import API_VERSION, KIND, resource_of, spec_from_resource
from sessionq.domain.agents import apply_spec
from sessionq.models import Agent, ApplyMode

LIST_BATCH = 200  # agents read per query while listing a namespace


def agent_to_proto(agent: Agent, resource: dict[str, Any]) -> agents_pb2.Agent:
    value = struct_pb2.Struct()
    value.update(resource)
    return agents_pb2.Agent(
        ref=common_pb2.ResourceReference(namespace=agent.namespace, name=agent.name),
        resource=common_pb2.StructuredObject(api_version=API_VERSION, kind=KIND, value=value),
    )


def resource_value(resource: common_pb2.StructuredObject) -> dict[str, Any] | None:
    """The resource's object as plain data (None when unset)."""
    if not resource.HasField("value"):
        return None
    return json_format.MessageToDict(resource.value)


class AgentService(agents_pb2_grpc.AgentServiceServicer):
    def __init__(
        self, store: Store, auth: Authenticator, cluster_domain: str = "cluster.local", admins: list[str] | None = None
    ) -> None:
        self.store = store
        self.auth = auth
        self.cluster_domain = cluster_domain
        self.admins = set(admins or ())

    async def _agent(self, namespace: str, name: str) -> agents_pb2.Agent:
        agent = await self.store.get_agent(namespace, name)
        return agent_to_proto(agent, resource_of(agent, await self.store.agent_revisions(namespace, name)))

    async def _apply(
        self, request: agents_pb2.CreateAgentRequest | agents_pb2.UpdateAgentRequest, context: grpc.aio.ServicerContext,
        mode: ApplyMode,
    ) -> agents_pb2.Agent:
        who = self.auth.identify(context)
        ref, resource = request.ref, request.resource
        self.auth.check_namespace(who, ref.namespace)
        spec = spec_from_resource(ref.namespace, ref.name, resource.api_version, resource.kind, resource_value(resource))
        # existence (create: not yet; update: already) and ownership are the procedure's checks
        await apply_spec(self.store, spec, who.user, who.user in self.admins, self.cluster_domain, mode)
        return await self._agent(ref.namespace, ref.name)

    @rpc
    async def CreateAgent(
        self, request: agents_pb2.CreateAgentRequest, context: grpc.aio.ServicerContext
    ) -> agents_pb2.CreateAgentResponse:
        return agents_pb2.CreateAgentResponse(agent=await self._apply(request, context, ApplyMode.CREATE))

    @rpc
    async def UpdateAgent(
        self, request: agents_pb2.UpdateAgentRequest, context: grpc.aio.ServicerContext
    ) -> agents_pb2.UpdateAgentResponse:
        return agents_pb2.UpdateAgentResponse(agent=await self._apply(request, context, ApplyMode.UPDATE))

    @rpc
    async def GetAgent(
        self, request: agents_pb2.GetAgentRequest, context: grpc.aio.ServicerContext
    ) -> agents_pb2.GetAgentResponse:
        self.auth.identify(context)
        return agents_pb2.GetAgentResponse(agent=await self._agent(request.ref.namespace, request.ref.name))

    @rpc
    async def ListAgents(
        self, request: agents_pb2.ListAgentsRequest, context: grpc.aio.ServicerContext
    ) -> agents_pb2.ListAgentsResponse:
        self.auth.identify(context)
        agents: list[agents_pb2.Agent] = []
        after: tuple[str, str] | None = None
        while True:  # kagent's list has no pages: the whole namespace, read in batches
            rows = await self.store.list_agents(request.namespace, after, LIST_BATCH)
            for a in rows:
                agents.append(agent_to_proto(a, resource_of(a, await self.store.agent_revisions(a.namespace, a.name))))
            if len(rows) < LIST_BATCH:
                return agents_pb2.ListAgentsResponse(agents=agents)
            after = (rows[-1].namespace, rows[-1].name)

    @rpc
    async def DeleteAgent(
        self, request: agents_pb2.DeleteAgentRequest, context: grpc.aio.ServicerContext
    ) -> agents_pb2.DeleteAgentResponse:
        who = self.auth.identify(context)
        await self.store.delete_agent(request.ref.namespace, request.ref.name, who.user, who.user in self.admins)
        return agents_pb2.DeleteAgentResponse()


__all__ = ["AgentService", "agent_to_proto", "errors", "resource_value"]
