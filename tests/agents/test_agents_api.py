"""kagent's AgentService over gRPC: create, get, update, list and delete an Agent carried whole as a
resource; a resource that disagrees with its ref, an unknown kind, another user's Agent (issue 20)."""

from __future__ import annotations

import grpc
import pytest
from agentapi import API_VERSION, ref, resource, spec_of, status_of, value_of
from google.protobuf import struct_pb2
from lifecycle import count

from sessionq._pb.kagent.api.v1alpha1 import agents_pb2, agents_pb2_grpc, common_pb2

pytestmark = pytest.mark.pooler  # also run through PgBouncer (make test-pooler)


@pytest.fixture
def stub(api):
    return agents_pb2_grpc.AgentServiceStub(api.channel)


async def refused(call, code=grpc.StatusCode.INVALID_ARGUMENT) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await call
    assert e.value.code() == code, e.value.details()
    return e.value.details() or ""


async def test_create_get_update_list_delete(api, stub, store):
    md = api.md("alice")
    spec = {"template": "example.com/agents/helper:1.0", "egress": [{"url": "https://api.example.com"}]}
    created = (await stub.CreateAgent(agents_pb2.CreateAgentRequest(ref=ref("crud"), resource=resource(spec, "crud")),
                                      metadata=md, timeout=10)).agent
    assert created.ref == ref("crud")
    assert (created.resource.api_version, created.resource.kind) == (API_VERSION, "Agent")
    value = value_of(created)
    assert (value["apiVersion"], value["kind"]) == (API_VERSION, "Agent")
    assert value["metadata"]["name"] == "crud" and value["metadata"]["namespace"] == "kagent"
    assert spec_of(created)["template"] == "example.com/agents/helper:1.0"
    status = status_of(created)
    assert [c["type"] for c in status["conditions"]] == ["Accepted", "ResolvedRefs", "Compatible", "Ready"]
    assert status["desiredRevision"] and [r["number"] for r in status["revisions"]] == [1]

    # creating it again: ALREADY_EXISTS, nothing written
    details = await refused(stub.CreateAgent(agents_pb2.CreateAgentRequest(ref=ref("crud"), resource=resource(spec)),
                                             metadata=md, timeout=10), grpc.StatusCode.ALREADY_EXISTS)
    assert "already exists" in details
    assert await count(store, "SELECT count(*) FROM sessionq.revisions") == 1

    got = (await stub.GetAgent(agents_pb2.GetAgentRequest(ref=ref("crud")), metadata=api.md("bob"), timeout=10)).agent
    assert spec_of(got) == spec_of(created) and status_of(got)["desiredRevision"] == status["desiredRevision"]

    updated = (await stub.UpdateAgent(agents_pb2.UpdateAgentRequest(
        ref=ref("crud"), resource=resource({**spec, "template": "example.com/agents/helper:2.0"})),
        metadata=md, timeout=10)).agent
    assert spec_of(updated)["template"] == "example.com/agents/helper:2.0"
    assert status_of(updated)["desiredRevision"] != status["desiredRevision"]
    assert value_of(updated)["metadata"]["generation"] == 2

    # an update of an Agent that does not exist: NOT_FOUND, nothing created
    await refused(stub.UpdateAgent(agents_pb2.UpdateAgentRequest(ref=ref("ghost"), resource=resource({})),
                                   metadata=md, timeout=10), grpc.StatusCode.NOT_FOUND)

    await stub.CreateAgent(agents_pb2.CreateAgentRequest(ref=ref("other", "team-a"), resource=resource({})),
                           metadata=md, timeout=10)
    listed = await stub.ListAgents(agents_pb2.ListAgentsRequest(namespace="kagent"), metadata=md, timeout=10)
    assert [a.ref.name for a in listed.agents] == ["crud"]
    listed = await stub.ListAgents(agents_pb2.ListAgentsRequest(namespace="team-a"), metadata=md, timeout=10)
    assert [a.ref.name for a in listed.agents] == ["other"]

    assert await stub.DeleteAgent(agents_pb2.DeleteAgentRequest(ref=ref("crud")), metadata=md, timeout=10) == (
        agents_pb2.DeleteAgentResponse())
    await refused(stub.GetAgent(agents_pb2.GetAgentRequest(ref=ref("crud")), metadata=md, timeout=10),
                  grpc.StatusCode.NOT_FOUND)
    await refused(stub.DeleteAgent(agents_pb2.DeleteAgentRequest(ref=ref("crud")), metadata=md, timeout=10),
                  grpc.StatusCode.NOT_FOUND)


def raw(api_version: str, kind: str, value: dict | None) -> common_pb2.StructuredObject:
    obj = common_pb2.StructuredObject(api_version=api_version, kind=kind)
    if value is not None:
        s = struct_pb2.Struct()
        s.update(value)
        obj.value.CopyFrom(s)
    return obj


@pytest.mark.parametrize(("bad", "says"), [
    (resource({}, "someone-else"), "metadata.name 'someone-else' does not match ref.name 'a1'"),
    (resource({}, "a1", "team-b"), "metadata.namespace 'team-b' does not match ref.namespace 'kagent'"),
    (raw(API_VERSION, "Harness", {"spec": {}}), "resource.kind must be Agent (got 'Harness')"),
    (raw("kagent.dev/v1alpha2", "Agent", {"spec": {}}), "resource.api_version must be api.kagent.dev/v1alpha3"),
    (raw(API_VERSION, "Agent", None), "resource.value is required"),
    (raw(API_VERSION, "Agent", {"kind": "Sandbox", "spec": {}}), "resource.value.kind 'Sandbox' does not agree"),
    (raw(API_VERSION, "Agent", {"spec": {"image": "x"}}), "the Agent spec has unknown keys: image"),
    (raw(API_VERSION, "Agent", {"spec": {"name": "x"}}), "the Agent spec has unknown keys: name"),
    (raw(API_VERSION, "Agent", {"spek": {}}), "the Agent resource has unknown keys: spek"),
    (raw(API_VERSION, "Agent", {"spec": {"template": "Not An Image"}}), "template must be an image reference"),
    (raw(API_VERSION, "Agent", {"spec": []}), "resource spec must be a mapping"),
])
async def test_a_resource_that_disagrees_is_refused(api, stub, store, bad, says):
    for call in (stub.CreateAgent(agents_pb2.CreateAgentRequest(ref=ref("a1"), resource=bad),
                                  metadata=api.md(), timeout=10),):
        assert says in await refused(call)
    assert await count(store, "SELECT count(*) FROM sessionq.agents") == 0
    await stub.CreateAgent(agents_pb2.CreateAgentRequest(ref=ref("a1"), resource=resource({})), metadata=api.md(),
                           timeout=10)
    assert says in await refused(stub.UpdateAgent(agents_pb2.UpdateAgentRequest(ref=ref("a1"), resource=bad),
                                                  metadata=api.md(), timeout=10))
    assert await count(store, "SELECT count(*) FROM sessionq.revisions") == 1


async def test_the_status_given_is_ignored(api, stub):
    sent = resource({}, "st", status={"conditions": [{"type": "Ready", "status": "False"}], "desiredRevision": "x"})
    agent = (await stub.CreateAgent(agents_pb2.CreateAgentRequest(ref=ref("st"), resource=sent), metadata=api.md(),
                                    timeout=10)).agent
    assert status_of(agent)["desiredRevision"] != "x"


async def test_another_users_agent(api, stub, store):
    await stub.CreateAgent(agents_pb2.CreateAgentRequest(ref=ref("alices"), resource=resource({})),
                           metadata=api.md("alice"), timeout=10)
    bob = api.md("bob")
    # others see it (Agents are shared: anyone may run Sessions of it) but may not change or delete it
    got = await stub.GetAgent(agents_pb2.GetAgentRequest(ref=ref("alices")), metadata=bob, timeout=10)
    assert value_of(got.agent)["metadata"]["annotations"] == {"sessionq.dev/created-by": "alice"}
    details = await refused(stub.UpdateAgent(agents_pb2.UpdateAgentRequest(
        ref=ref("alices"), resource=resource({"template": "example.com/x:1"})), metadata=bob, timeout=10),
        grpc.StatusCode.PERMISSION_DENIED)
    assert "belongs to alice" in details
    await refused(stub.DeleteAgent(agents_pb2.DeleteAgentRequest(ref=ref("alices")), metadata=bob, timeout=10),
                  grpc.StatusCode.PERMISSION_DENIED)
    await refused(stub.CreateAgent(agents_pb2.CreateAgentRequest(ref=ref("alices"), resource=resource({})),
                                   metadata=bob, timeout=10), grpc.StatusCode.ALREADY_EXISTS)
    assert await count(store, "SELECT count(*) FROM sessionq.revisions") == 1
    # an administrator may
    await stub.UpdateAgent(agents_pb2.UpdateAgentRequest(ref=ref("alices"), resource=resource({"template": "e.com/x:1"})),
                           metadata=api.md("admin"), timeout=10)
    assert await count(store, "SELECT count(*) FROM sessionq.revisions") == 2
