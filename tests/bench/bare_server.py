"""Child process of the `read` scenario: a bare grpcio aio SessionService that answers
GetSession with one constant Session and ListSessions with a constant page of 50 - no
authentication, no validation, no database. The baseline of what gRPC itself costs per call.

    python -m tests.bench.bare_server PORT [--event-loop uvloop|asyncio] [--suspend] [--read URL --user USER]

With `--suspend`, GetSession waits once for the event loop before it answers the constant (a
future resolved by the loop's next turn), as every handler that awaits I/O does: what one
suspension of a handler costs in grpcio aio (the `read` scenario's "suspend" row).

With `--read`, GetSession reads its Session the way sessionq's does (Store.get_session_view: the
coalesced statement of sessionq.get_session_views, as USER) and answers what it read, still with
no authentication, validation or metrics: the floor of a handler that reads its answer from
PostgreSQL (the `read` scenario's "floor" row).

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
from sessionq.api.grpcweb import GrpcWeb
from sessionq.api.handlers import HandlerTable
from sessionq.oneport import OnePort, PrivateSocket
from sessionq.webserve import Limits


def constant_session(i: int = 0) -> sessions_pb2.Session:
    # a fixed time: the answer's length must not depend on when it was made (a timestamp's nanos
    # take 4 or 5 bytes), since a benchmark checks h2load's bytes against one answer's length
    now = Timestamp(seconds=1_764_547_200, nanos=123_456_789)
    sid = str(uuid.UUID(int=i + 1))
    return sessions_pb2.Session(
        id=sid, creator="bench", prepared_revision=str(uuid.UUID(int=7)), a2a_authority="kagent/bench-agent",
        state=runtime_pb2.RUNTIME_STATE_READY, operation=runtime_pb2.RUNTIME_OPERATION_NONE, created_at=now,
        updated_at=now, name="", context_id=sid, agent=common_pb2.ResourceReference(namespace="kagent", name="bench-agent"),
    )


class Bare(sessions_pb2_grpc.SessionServiceServicer):
    def __init__(self, suspend: bool = False) -> None:
        self.suspend = suspend
        self.get = sessions_pb2.GetSessionResponse(session=constant_session())
        self.page = sessions_pb2.ListSessionsResponse(
            sessions=[constant_session(i) for i in range(50)],
            page=common_pb2.PageResponse(next_page_token="djEfMDAwMDAwMDAtMDAwMC0wMDAwLTAwMDAtMDAwMDAwMDAwMDMy"))

    async def GetSession(self, request, context):  # type: ignore[no-untyped-def]
        if self.suspend:  # wait once for the event loop, as a handler that awaits any I/O does
            loop = asyncio.get_running_loop()
            fut = loop.create_future()
            loop.call_soon(fut.set_result, None)
            await fut
        return self.get

    async def ListSessions(self, request, context):  # type: ignore[no-untyped-def]
        return self.page


class Floor(Bare):
    def __init__(self, store: object, user: str) -> None:
        super().__init__()
        self.store, self.user = store, user

    async def GetSession(self, request, context):  # type: ignore[no-untyped-def]
        from sessionq.api.sessions import session_to_proto

        view = await self.store.get_session_view(uuid.UUID(request.session_id), self.user)  # type: ignore[attr-defined]
        response = sessions_pb2.GetSessionResponse()
        session_to_proto(view, response.session)
        return response


async def main(port: int, read_url: str = "", user: str = "", suspend: bool = False, oneport: bool = False) -> None:
    server = grpc.aio.server()
    store = None
    servicer: Bare = Bare(suspend)
    if read_url:
        from sessionq.db.store import Store

        store = await Store.open(read_url, pool_size=10, listen=False)
        servicer = Floor(store, user)
    table = HandlerTable(lambda method, handler: handler)
    sessions_pb2_grpc.add_SessionServiceServicer_to_server(servicer, table)
    server.add_generic_rpc_handlers((table,))
    front: OnePort | None = None
    private: PrivateSocket | None = None
    if oneport:
        private = PrivateSocket()
        server.add_insecure_port(private.grpc_address)
        # the HTTP side: gRPC-Web served by the same handlers in process (api/grpcweb.py), for the gRPC-Web row
        web = GrpcWeb(table, 1 << 20, [])
        front = OnePort(web, Limits("bench", 10_000, 15.0), private.path)
    else:
        server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    if front is not None:
        await front.start(f"127.0.0.1:{port}")
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
    if front is not None:
        await front.stop()
    await server.stop(1)
    if private is not None:
        private.close()
    if store is not None:
        await store.close()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("port", type=int)
    p.add_argument("--event-loop", default="uvloop", choices=("uvloop", "asyncio"))
    p.add_argument("--suspend", action="store_true", help="GetSession waits once for the event loop")
    p.add_argument("--read", default="", help="a database URL: GetSession reads its Session there")
    p.add_argument("--user", default="", help="with --read: whose reads they are")
    p.add_argument("--oneport", action="store_true", help="grpcio behind the one-port front (sessionq.oneport)")
    a = p.parse_args()
    if a.event_loop == "uvloop":
        import uvloop

        uvloop.run(main(a.port, a.read, a.user, a.suspend, a.oneport))
    else:
        asyncio.run(main(a.port, a.read, a.user, a.suspend, a.oneport))
