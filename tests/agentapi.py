"""Test helpers for kagent's AgentService: an Agent resource from a spec, reading one back, and
create-or-update (what `sessionq agent apply` does)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import json_format, struct_pb2

from sessionq._pb.kagent.api.v1alpha1 import agents_pb2, common_pb2

API_VERSION = "api.kagent.dev/v1alpha3"


def ref(name: str, namespace: str = "kagent") -> common_pb2.ResourceReference:
    return common_pb2.ResourceReference(namespace=namespace, name=name)


def resource(spec: dict[str, Any], name: str | None = None, namespace: str = "kagent", **extra: Any
             ) -> common_pb2.StructuredObject:
    """An Agent resource holding `spec` (template, egress); metadata from name/namespace."""
    value: dict[str, Any] = {"apiVersion": API_VERSION, "kind": "Agent", "spec": copy.deepcopy(spec)}
    if name is not None:
        value["metadata"] = {"name": name, "namespace": namespace}
    value.update(extra)
    struct = struct_pb2.Struct()
    struct.update(value)
    return common_pb2.StructuredObject(api_version=API_VERSION, kind="Agent", value=struct)


def value_of(agent: agents_pb2.Agent) -> dict[str, Any]:
    return json_format.MessageToDict(agent.resource.value)


def spec_of(agent: agents_pb2.Agent) -> dict[str, Any]:
    return value_of(agent)["spec"]


def status_of(agent: agents_pb2.Agent) -> dict[str, Any]:
    return value_of(agent)["status"]


@dataclass
class Applied:
    agent: agents_pb2.Agent
    revision_created: bool


async def apply(stub: Any, spec: dict[str, Any], *, name: str, namespace: str = "kagent",
                metadata: Any = None, timeout: float = 10) -> Applied:
    """Create the Agent, or update it when it exists; whether its desired revision changed."""
    r = ref(name, namespace)
    try:
        before = (await stub.GetAgent(agents_pb2.GetAgentRequest(ref=r), metadata=metadata, timeout=timeout)).agent
    except grpc.aio.AioRpcError as e:
        if e.code() != grpc.StatusCode.NOT_FOUND:
            raise
        created = await stub.CreateAgent(
            agents_pb2.CreateAgentRequest(ref=r, resource=resource(spec, name, namespace)),
            metadata=metadata, timeout=timeout)
        return Applied(created.agent, True)
    updated = await stub.UpdateAgent(
        agents_pb2.UpdateAgentRequest(ref=r, resource=resource(spec, name, namespace)), metadata=metadata,
        timeout=timeout)
    return Applied(updated.agent,
                   status_of(updated.agent)["desiredRevision"] != status_of(before)["desiredRevision"])
