"""A Substrate that answers a shape the adapter cannot read: the operation's failure names it, the
worker keeps running, and the same request completes once the runtime answers properly (issue 17)."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from conftest import apply_agent, running_worker

from sessionq._pb.ateapi import ateapi_pb2 as pb
from sessionq._pb.ateapi import ateapi_pb2_grpc as pb_grpc
from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc
from sessionq.runtime.ateapi.client import SubstrateClient, SubstrateOptions
from sessionq.runtime.ateapi.server import ControlService
from sessionq.runtime.simulator import SimulatedSubstrate

AGENT = common_pb2.ResourceReference(namespace="kagent", name="my-first-agent")


class Odd(ControlService):
    """Actors without status while `odd` is set."""

    odd = True

    async def CreateActor(self, request: pb.CreateActorRequest, context: Any) -> pb.Actor:
        made = await super().CreateActor(request, context)
        if self.odd:
            made.ClearField("status")
        return made

    async def GetActor(self, request: pb.GetActorRequest, context: Any) -> pb.Actor:
        got = await super().GetActor(request, context)
        if self.odd:
            got.ClearField("status")
        return got


@pytest.mark.timeout(120)
async def test_an_unexpected_shape_is_the_operations_failure(settings: Any, store: Any, database_url: str) -> None:
    from sessionq.api.server import ApiServer

    async with SimulatedSubstrate(database_url, worker_pool_size=64) as real:
        servicer = Odd(real)
        server = grpc.aio.server()
        pb_grpc.add_ControlServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        client = SubstrateClient(SubstrateOptions(address=f"127.0.0.1:{port}", uid_preflight=False))
        await client.open()
        api = ApiServer(settings, store, address="127.0.0.1:0", runtime=client)
        await api.start()
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{api.port}")
        md = [("authorization", "Bearer alice-token")]
        try:
            await apply_agent(store, client)
            stub = sessions_pb2_grpc.SessionServiceStub(channel)
            request = sessions_pb2.CreateSessionRequest(request_id="odd-1", agent=AGENT)
            async with running_worker(settings, database_url, store, client):
                details = ""
                for _ in range(8):
                    with pytest.raises(grpc.aio.AioRpcError) as e:
                        await stub.CreateSession(request, metadata=md, timeout=4)
                    assert e.value.code() == grpc.StatusCode.UNAVAILABLE, e.value.details()
                    details = e.value.details() or ""
                    if "unexpected shape" in details:
                        break
                assert "the runtime answered an unexpected shape" in details and "without status" in details, details
                listed = await stub.ListSessions(sessions_pb2.ListSessionsRequest(), metadata=md, timeout=5)
                (session,) = listed.sessions
                assert "without status" in session.failure.message
                servicer.odd = False  # the runtime is fixed: the same request completes, one Actor
                done = None
                for _ in range(10):
                    try:
                        done = await stub.CreateSession(request, metadata=md, timeout=8)
                        break
                    except grpc.aio.AioRpcError as again:
                        assert again.code() == grpc.StatusCode.UNAVAILABLE, again.details()
                assert done is not None and done.session.id == session.id
                assert len((await real.list_actors(None, 10, "")).items) == 1
        finally:
            await channel.close()
            await api.stop(0)
            await client.close()
            await server.stop(0)
