"""The A2A test harness: the API on one port (api/public.py: native gRPC, the cards, JSON-RPC and
HTTP+JSON on one A2AHandler), a worker and the simulator; clients are the a2a-sdk's own, one per
transport, each resolving the card from that port."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc
import httpx
import pytest
from a2a.client import ClientCallContext, ClientConfig, ClientFactory
from a2a.types import a2a_pb2
from a2a.utils.constants import TransportProtocol
from conftest import make_settings, running_worker

from sessionq.api.agentcard import AgentCardServer
from sessionq.api.public import PublicPort
from sessionq.api.server import ApiServer

TENANT = "kagent/my-first-agent"
TRANSPORTS = [TransportProtocol.GRPC.value, TransportProtocol.JSONRPC.value, TransportProtocol.HTTP_JSON.value]


def as_user(user: str = "alice", timeout: float = 30.0) -> ClientCallContext:
    return ClientCallContext(service_parameters={"authorization": f"Bearer {user}-token"}, timeout=timeout)


@dataclass
class A2AEnv:
    api: ApiServer
    cards: AgentCardServer
    grpc_address: str
    http: httpx.AsyncClient

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.cards.port}"

    async def card(self, namespace: str = "kagent", name: str = "my-first-agent") -> a2a_pb2.AgentCard:
        return await self.cards.extended_card(namespace, name, False)

    @contextlib.asynccontextmanager
    async def client(self, transport: str, *, streaming: bool = True, polling: bool = False) -> AsyncIterator[Any]:
        config = ClientConfig(
            streaming=streaming,
            polling=polling,
            supported_protocol_bindings=[transport],
            httpx_client=self.http,
            grpc_channel_factory=lambda url: grpc.aio.insecure_channel(url),
        )
        client = ClientFactory(config).create(await self.card())
        try:
            yield client
        finally:
            with contextlib.suppress(Exception):
                await client.close()


def settings_for_a2a(**overrides: Any) -> Any:
    base = {"a2a.push.allowPrivateTargets": True}  # the tests' receivers listen on loopback
    base.update(overrides)
    return make_settings(**base)


@contextlib.asynccontextmanager
async def a2a_env(settings: Any, database_url: str, store: Any, sim: Any) -> AsyncIterator[A2AEnv]:
    async with running_worker(settings, database_url, store, sim):
        public = PublicPort(settings, store, address="127.0.0.1:0", runtime=sim)
        await public.start()
        address = f"127.0.0.1:{public.port}"
        sim.taskstore_address = address
        http = httpx.AsyncClient(timeout=60)
        try:
            yield A2AEnv(public.api, public.cards, address, http)
        finally:
            await http.aclose()
            await public.stop(0)


@pytest.fixture
def a2a_settings() -> Any:
    return settings_for_a2a()


@pytest.fixture
async def env(a2a_settings: Any, database_url: str, store: Any, sim: Any) -> AsyncIterator[A2AEnv]:
    async with a2a_env(a2a_settings, database_url, store, sim) as e:
        yield e


def user_message(text: str, context_id: str = "", task_id: str = "", message_id: str = "") -> a2a_pb2.Message:
    import uuid

    return a2a_pb2.Message(
        message_id=message_id or str(uuid.uuid4()), role=a2a_pb2.ROLE_USER, context_id=context_id, task_id=task_id,
        parts=[a2a_pb2.Part(text=text)],
    )


def answer(task: a2a_pb2.Task) -> str:
    return " ".join(p.text for p in task.status.message.parts)
