"""Child process of the `read` scenario: a bare grpcio aio SessionService that answers
GetSession with one constant Session and ListSessions with a constant page of 50 - no
authentication, no validation, no database. The baseline of what gRPC itself costs per call.

    python -m tests.bench.bare_server PORT [--event-loop uvloop|asyncio]

Stops on SIGTERM, or by itself when its parent disappears.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import uuid

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from sessionq._pb.kagent.api.v1alpha1 import common_pb2, runtime_pb2, sessions_pb2, sessions_pb2_grpc


def constant_session(i: int = 0) -> sessions_pb2.Session:
    now = Timestamp()
    now.GetCurrentTime()
    sid = str(uuid.UUID(int=i + 1))
    return sessions_pb2.Session(
        id=sid, creator="bench", prepared_revision=str(uuid.UUID(int=7)), a2a_authority="kagent/bench-agent",
        state=runtime_pb2.RUNTIME_STATE_READY, operation=runtime_pb2.RUNTIME_OPERATION_NONE, created_at=now,
        updated_at=now, name="", context_id=sid, agent=common_pb2.ResourceReference(namespace="kagent", name="bench-agent"),
    )


class Bare(sessions_pb2_grpc.SessionServiceServicer):
    def __init__(self) -> None:
        self.get = sessions_pb2.GetSessionResponse(session=constant_session())
        self.page = sessions_pb2.ListSessionsResponse(
            sessions=[constant_session(i) for i in range(50)],
            page=common_pb2.PageResponse(next_page_token="djEfMDAwMDAwMDAtMDAwMC0wMDAwLTAwMDAtMDAwMDAwMDAwMDMy"))

    async def GetSession(self, request, context):  # type: ignore[no-untyped-def]
        return self.get

    async def ListSessions(self, request, context):  # type: ignore[no-untyped-def]
        return self.page


async def main(port: int) -> None:
    server = grpc.aio.server()
    sessions_pb2_grpc.add_SessionServiceServicer_to_server(Bare(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    parent = os.getppid()
    while not stop.is_set():
        if os.getppid() != parent:
            break
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
        except TimeoutError:
            pass
    await server.stop(1)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("port", type=int)
    p.add_argument("--event-loop", default="uvloop", choices=("uvloop", "asyncio"))
    a = p.parse_args()
    if a.event_loop == "uvloop":
        import uvloop

        uvloop.run(main(a.port))
    else:
        asyncio.run(main(a.port))
