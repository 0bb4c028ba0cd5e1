"""The agent card the SDK's clients use as it is: three interfaces, protocol version, skills,
capabilities, the bearer scheme; resolved over HTTP by the SDK's own resolver (A2A-4)."""

from __future__ import annotations

import pytest
from a2a.client import A2ACardResolver
from a2a.types import a2a_pb2
from conftest import apply_agent
from harness import TRANSPORTS, a2a_settings, as_user, env, user_message  # noqa: F401 - fixtures

from sessionq.domain.agents import parse_spec, prepare_revision

pytestmark = pytest.mark.timeout(120)


@pytest.mark.clause("A2A-4")
async def test_card_resolved_by_the_sdk_and_dialled_as_it_is(env, store, sim):
    spec = parse_spec({"name": "helper", "namespace": "kagent", "description": "Helps with sums.",
                       "skills": [{"id": "math", "name": "Arithmetic", "description": "adds numbers",
                                   "tags": ["math"], "examples": ["What is 2+2?"]}]})
    await store.apply_agent(spec.namespace, spec.name, spec.to_json(), spec.spec_hash(), spec.image, [], "alice")
    await prepare_revision(store, sim, (await store.get_agent("kagent", "helper")).desired_revision_id)
    await apply_agent(store, sim)  # my-first-agent: no skills in its spec

    resolver = A2ACardResolver(env.http, f"{env.base}/api/a2a/kagent/helper")
    card = await resolver.get_agent_card(http_kwargs={"headers": {"Authorization": "Bearer alice-token"}})
    assert card.name == "helper" and card.description == "Helps with sums."
    assert [(s.id, s.name, list(s.examples)) for s in card.skills] == [("math", "Arithmetic", ["What is 2+2?"])]
    assert card.capabilities.streaming and card.capabilities.push_notifications
    assert card.capabilities.extended_agent_card
    assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "Bearer"
    bindings = {i.protocol_binding: i for i in card.supported_interfaces}
    assert set(bindings) == {"GRPC", "JSONRPC", "HTTP+JSON"}
    assert all(i.protocol_version == "1.0" for i in card.supported_interfaces)
    assert bindings["GRPC"].url == env.grpc_address and bindings["GRPC"].tenant == "kagent/helper"
    assert bindings["JSONRPC"].url == f"{env.base}/api/a2a/kagent/helper/jsonrpc"
    default = await env.card()
    assert [s.id for s in default.skills] == ["chat"]

    # every interface of the card, dialled as it is by the SDK's factory
    import grpc
    from a2a.client import ClientConfig, ClientFactory

    for binding in TRANSPORTS:
        client = ClientFactory(ClientConfig(
            streaming=False, supported_protocol_bindings=[binding], httpx_client=env.http,
            grpc_channel_factory=lambda url: grpc.aio.insecure_channel(url),
        )).create(card)
        events = [e async for e in client.send_message(
            a2a_pb2.SendMessageRequest(message=user_message("What is 7+8?")), context=as_user())]
        assert "15" in events[-1].task.status.message.parts[0].text
        await client.close()


def test_spec_skills_are_checked():
    from sessionq.errors import SessionqError

    for bad in ({"skills": "x"}, {"skills": [{"name": "no id"}]}, {"skills": [{"id": "a", "other": 1}]},
                {"description": "bad\x00"}, {"skills": [{"id": "a", "tags": ["t"] * 40}]}):
        with pytest.raises(SessionqError):
            parse_spec({"name": "a", **bad})
    plain = parse_spec({"name": "a"})
    assert "skills" not in plain.to_json() and "description" not in plain.to_json()  # hashes unchanged
