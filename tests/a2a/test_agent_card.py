"""A2A agent-card discovery over HTTP and namespace authorization (A2A-4, A2A-2)."""

import asyncio
import json

import grpc
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from conftest import apply_agent, make_settings

from sessionq.api.agentcard import AgentCardServer
from sessionq.api.auth import Authenticator

pytestmark = pytest.mark.pooler  # also run through PgBouncer (make test-pooler)


async def get(port: int, path: str, token: str | None = None) -> tuple[int, dict]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n{auth}\r\n".encode())
    await writer.drain()
    raw = await reader.read()
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


@pytest.mark.clause("A2A-4")
async def test_agent_card_discovery_status_codes(store, sim):
    await apply_agent(store, sim)
    settings = make_settings(**{"auth.namespaces": {"bob": ["team-b"]}})
    auth = Authenticator(settings["auth.tokens"], "", settings["auth.namespaces"])
    cards = AgentCardServer(store, auth, "grpc://127.0.0.1:8083")
    await cards.start("127.0.0.1:0")
    try:
        path = "/api/a2a/kagent/my-first-agent/.well-known/agent-card.json"
        status, card = await get(cards.port, path, "alice-token")
        assert status == 200 and card["name"] == "my-first-agent"
        assert card["supportedInterfaces"][0]["tenant"] == "kagent/my-first-agent"
        assert (await get(cards.port, "/api/a2a/kagent/nobody/.well-known/agent-card.json", "alice-token"))[0] == 404
        assert (await get(cards.port, path, "bob-token"))[0] == 403  # bob may use team-b only
        assert (await get(cards.port, path))[0] == 401
        assert (await get(cards.port, "/elsewhere", "alice-token"))[0] == 404
    finally:
        await cards.stop()


@pytest.mark.clause("A2A-2")
async def test_authorization_failure_is_permission_denied(store, sim):
    from sessionq.api.server import ApiServer

    await apply_agent(store, sim)
    server = ApiServer(make_settings(**{"auth.namespaces": {"bob": ["team-b"]}}), store, address="127.0.0.1:0", runtime=sim)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            req = a2a_pb2.SendMessageRequest(tenant="kagent/my-first-agent",
                                             message=a2a_pb2.Message(message_id="m", parts=[a2a_pb2.Part(text="hi")]))
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await stub.SendMessage(req, metadata=[("authorization", "Bearer bob-token")], timeout=5)
            assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
            with pytest.raises(grpc.aio.AioRpcError) as e:  # a missing Agent is still not found
                await stub.SendMessage(a2a_pb2.SendMessageRequest(tenant="team-b/none", message=req.message),
                                       metadata=[("authorization", "Bearer bob-token")], timeout=5)
            assert e.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        await server.stop(0)
