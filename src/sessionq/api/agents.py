"""AgentService: apply, get, list and delete Agents (sessionq's own service)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import grpc

from sessionq import errors
from sessionq._pb.kagent.api.v1alpha1 import agents_pb2, agents_pb2_grpc, common_pb2, sessions_pb2
from sessionq.api.common import Authenticator, decode_token, encode_token, page_limit, rpc, ts
from sessionq.db.store import Store
from sessionq.domain.agents import (
    AgentSpec,
    EgressDestination,
    apply_spec,
    check_name,
    check_namespace,
    parse_spec,
    redact_spec,
)
from sessionq.models import Agent, Revision


def spec_from_proto(msg: agents_pb2.AgentSpec) -> AgentSpec:
    data = {
        "name": msg.ref.name,
        "namespace": msg.ref.namespace or "kagent",
        "template": msg.template,
        "egress": [{"url": e.url, "credentialHeaders": dict(e.credential_headers)} for e in msg.egress],
    }
    return parse_spec(data)


def spec_to_proto(stored: dict[str, Any]) -> agents_pb2.AgentSpec:
    """A stored spec as clients see it: credential header values redacted (write-only)."""
    spec = redact_spec(stored)
    return agents_pb2.AgentSpec(
        ref=common_pb2.ResourceReference(namespace=spec.get("namespace", ""), name=spec.get("name", "")),
        template=spec.get("template", ""),
        egress=[
            agents_pb2.EgressDestination(url=e["url"], credential_headers=e.get("credentialHeaders") or {})
            for e in spec.get("egress") or []
        ],
    )


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def agent_to_proto(a: Agent, revisions: list[Revision]) -> agents_pb2.Agent:
    return agents_pb2.Agent(
        ref=common_pb2.ResourceReference(namespace=a.namespace, name=a.name),
        spec=spec_to_proto(a.spec),
        conditions=[
            agents_pb2.Condition(
                type=c["type"],
                status=c["status"],
                reason=c.get("reason", ""),
                message=c.get("message", ""),
                last_transition_time=ts(_time(c.get("lastTransitionTime"))),
            )
            for c in a.conditions
        ],
        desired_revision=str(a.desired_revision_id),
        latest_successful_revision=str(a.latest_successful_revision_id or ""),
        revisions=[
            agents_pb2.Revision(
                id=str(r.id),
                number=r.number,
                state=r.state,
                template_atespace=r.template_atespace,
                template_name=r.template_name,
                failure=sessions_pb2.Failure(reason="RevisionFailed", message=r.failure_message)
                if r.failure_message
                else None,
                created_at=ts(r.created_at),
                prepared_at=ts(r.prepared_at),
            )
            for r in revisions
        ],
        created_at=ts(a.created_at),
        updated_at=ts(a.updated_at),
    )


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
        return agent_to_proto(agent, await self.store.agent_revisions(namespace, name))

    @rpc
    async def ApplyAgent(
        self, request: agents_pb2.ApplyAgentRequest, context: grpc.aio.ServicerContext
    ) -> agents_pb2.ApplyAgentResponse:
        who = self.auth.identify(context)
        spec = spec_from_proto(request.spec)
        self.auth.check_namespace(who, spec.namespace)
        created = await apply_spec(self.store, spec, who.user, who.user in self.admins, self.cluster_domain)
        return agents_pb2.ApplyAgentResponse(
            agent=await self._agent(spec.namespace, spec.name), revision_created=created
        )

    @rpc
    async def GetAgent(
        self, request: agents_pb2.GetAgentRequest, context: grpc.aio.ServicerContext
    ) -> agents_pb2.GetAgentResponse:
        self.auth.identify(context)
        ns = check_namespace(request.agent.namespace or "kagent", "agent.namespace")
        name = check_name(request.agent.name, "agent.name")
        return agents_pb2.GetAgentResponse(agent=await self._agent(ns, name))

    @rpc
    async def ListAgents(
        self, request: agents_pb2.ListAgentsRequest, context: grpc.aio.ServicerContext
    ) -> agents_pb2.ListAgentsResponse:
        self.auth.identify(context)
        limit = page_limit(request.page.limit)
        ns = check_namespace(request.namespace, "namespace") if request.namespace else None
        after = None
        if request.page.page_token:
            a_ns, a_name = decode_token(request.page.page_token, 2)
            after = (a_ns, a_name)
        rows = await self.store.list_agents(ns, after, limit + 1)
        token = encode_token(rows[limit - 1].namespace, rows[limit - 1].name) if len(rows) > limit else ""
        agents = [agent_to_proto(a, await self.store.agent_revisions(a.namespace, a.name)) for a in rows[:limit]]
        return agents_pb2.ListAgentsResponse(agents=agents, page=common_pb2.PageResponse(next_page_token=token))

    @rpc
    async def DeleteAgent(
        self, request: agents_pb2.DeleteAgentRequest, context: grpc.aio.ServicerContext
    ) -> agents_pb2.DeleteAgentResponse:
        who = self.auth.identify(context)
        ns = check_namespace(request.agent.namespace or "kagent", "agent.namespace")
        name = check_name(request.agent.name, "agent.name")
        await self.store.delete_agent(ns, name, who.user, who.user in self.admins)
        return agents_pb2.DeleteAgentResponse()


__all__ = ["AgentService", "EgressDestination", "errors"]
