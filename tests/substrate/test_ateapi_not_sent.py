"""The adapter says when a call certainly never reached the runtime (SubstrateError.not_sent): no
connection could be made, or the UID preflight read that precedes a mutation failed. Any other
UNAVAILABLE - the runtime's own answer, a lost response - stays an unknown outcome (Q-10)."""

from __future__ import annotations

import socket
from typing import Any

import grpc
import pytest

from sessionq._pb.ateapi import ateapi_pb2 as pb
from sessionq._pb.ateapi import ateapi_pb2_grpc as pb_grpc
from sessionq.runtime.ateapi.client import SubstrateClient, SubstrateOptions
from sessionq.runtime.base import Code, SnapshotFidelity, SubstrateError


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends: nothing listens there


class Unavailable(pb_grpc.ControlServicer):
    """A runtime that answers every call UNAVAILABLE itself (it received the call)."""

    async def GetActor(self, request: pb.GetActorRequest, context: Any) -> pb.Actor:
        await context.abort(grpc.StatusCode.UNAVAILABLE, "busy")

    async def SuspendActor(self, request: pb.SuspendActorRequest, context: Any) -> pb.SuspendActorResponse:
        await context.abort(grpc.StatusCode.UNAVAILABLE, "busy")


@pytest.mark.clause("Q-10")
async def test_a_refused_connection_is_not_sent_and_the_runtimes_own_unavailable_is_unknown() -> None:
    refused = SubstrateClient(SubstrateOptions(address=f"127.0.0.1:{closed_port()}", call_timeout=5.0,
                                               uid_preflight=False))
    await refused.open()
    try:
        for _ in range(2):  # the first connection attempt, and a call while the channel backs off
            with pytest.raises(SubstrateError) as e:
                await refused.suspend_actor("default", "a", "uid-1", SnapshotFidelity.VOLUMES)
            assert e.value.code == Code.UNAVAILABLE and e.value.not_sent
    finally:
        await refused.close()

    server = grpc.aio.server()
    pb_grpc.add_ControlServicer_to_server(Unavailable(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        for preflight, not_sent in ((False, False), (True, True)):
            client = SubstrateClient(SubstrateOptions(address=f"127.0.0.1:{port}", call_timeout=5.0,
                                                      uid_preflight=preflight))
            await client.open()
            try:
                with pytest.raises(SubstrateError) as e:
                    await client.suspend_actor("default", "a", "uid-1", SnapshotFidelity.VOLUMES)
                # the SuspendActor the runtime answered UNAVAILABLE: unknown; with the preflight, the
                # GetActor before it failed and the suspend was never sent
                assert e.value.code == Code.UNAVAILABLE and e.value.not_sent is not_sent
            finally:
                await client.close()
    finally:
        await server.stop(0)
