"""Streams from PostgreSQL: SendStreamingMessage and SubscribeToTask with the a2a-sdk's clients on all
three transports - a slow turn's events in order, a subscriber that attaches mid-turn, one that
reconnects, one on another user's task, and a disconnect that stops nothing; what hundreds of idle
streams cost PostgreSQL (nothing), a LISTEN reconnect, and the streams one user may hold open."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import grpc
import psycopg
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from a2a.utils.errors import TaskNotFoundError, UnsupportedOperationError
from conftest import apply_agent
from google.protobuf import json_format
from harness import (  # noqa: F401 - fixtures
    TENANT,
    TRANSPORTS,
    a2a_env,
    a2a_settings,
    as_user,
    env,
    settings_for_a2a,
    user_message,
)

pytestmark = pytest.mark.timeout(180)


def state_of(event: a2a_pb2.StreamResponse) -> int:
    which = event.WhichOneof("payload")
    if which == "task":
        return event.task.status.state
    if which == "status_update":
        return event.status_update.status.state
    return -1


@pytest.mark.clause("A2A-1")
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_streaming_a_slow_turn_and_subscribers(env, store, sim, transport):
    await apply_agent(store, sim)
    async with env.client(transport, streaming=True) as client:
        request = a2a_pb2.SendMessageRequest(message=user_message("[slow:1.5] What is 6*7?"))
        events: list[a2a_pb2.StreamResponse] = []
        first_seen = asyncio.Event()

        async def stream() -> None:
            async for event in client.send_message(request, context=as_user()):
                events.append(event)
                first_seen.set()

        streamer = asyncio.create_task(stream())
        await asyncio.wait_for(first_seen.wait(), 20)
        first = events[0]
        assert first.HasField("task") and first.task.status.state == a2a_pb2.TASK_STATE_WORKING
        task_id = first.task.id

        # a subscriber that attaches mid-turn: the task as it stands, then what follows, to the end
        mid = [e async for e in client.subscribe(a2a_pb2.SubscribeToTaskRequest(id=task_id), context=as_user())]
        await asyncio.wait_for(streamer, 30)

        # the sender saw the turn in order: created WORKING ... COMPLETED with the answer
        states = [state_of(e) for e in events]
        assert states[0] == a2a_pb2.TASK_STATE_WORKING and states[-1] == a2a_pb2.TASK_STATE_COMPLETED
        assert all(s in (a2a_pb2.TASK_STATE_WORKING, a2a_pb2.TASK_STATE_COMPLETED) for s in states)
        assert "42" in " ".join(p.text for p in events[-1].status_update.status.message.parts)
        assert mid[0].HasField("task") and mid[0].task.id == task_id
        assert state_of(mid[-1]) == a2a_pb2.TASK_STATE_COMPLETED

        # a subscriber to a finished task: nothing to follow (GetTask reads it)
        with pytest.raises(UnsupportedOperationError):
            async for _ in client.subscribe(a2a_pb2.SubscribeToTaskRequest(id=task_id), context=as_user()):
                pass
        # another user's task: TaskNotFound, exactly as a missing one
        for tid in (task_id, "no-such-task"):
            with pytest.raises(TaskNotFoundError):
                async for _ in client.subscribe(a2a_pb2.SubscribeToTaskRequest(id=tid), context=as_user("bob")):
                    pass


@pytest.mark.parametrize("transport", ["GRPC", "JSONRPC"])
async def test_disconnect_costs_nothing_and_a_reconnecting_subscriber_misses_nothing(env, store, sim, transport):
    await apply_agent(store, sim)
    async with env.client(transport, streaming=True) as client:
        request = a2a_pb2.SendMessageRequest(message=user_message("[slow:1.5] What is 2+3?"))
        stream = client.send_message(request, context=as_user())
        first = await anext(stream)
        task_id = first.task.id
        await stream.aclose()  # the client goes away mid-turn: the turn goes on
        # it reconnects: the task as it stands, then the rest of the turn
        events = [e async for e in client.subscribe(a2a_pb2.SubscribeToTaskRequest(id=task_id), context=as_user())]
        assert events[0].HasField("task") and state_of(events[-1]) == a2a_pb2.TASK_STATE_COMPLETED
        got = await client.get_task(a2a_pb2.GetTaskRequest(id=task_id), context=as_user())
        assert got.status.state == a2a_pb2.TASK_STATE_COMPLETED and "5" in got.status.message.parts[0].text


async def test_a_stream_ends_canceled_when_the_task_is_canceled(env, store, sim):
    await apply_agent(store, sim)
    async with env.client("GRPC", streaming=True) as client:
        request = a2a_pb2.SendMessageRequest(message=user_message("[slow:20] What is 1+2?"))
        stream = client.send_message(request, context=as_user())
        first = await anext(stream)
        canceled = await client.cancel_task(a2a_pb2.CancelTaskRequest(id=first.task.id), context=as_user())
        assert canceled.status.state == a2a_pb2.TASK_STATE_CANCELED
        rest = [e async for e in stream]
        assert state_of(rest[-1]) == a2a_pb2.TASK_STATE_CANCELED


async def test_any_replica_serves_the_stream(env, store, sim, database_url, a2a_settings):
    """A second API replica (its own pool and LISTEN connection) follows a turn sent through the first."""
    import grpc

    from sessionq.api.server import ApiServer
    from sessionq.db.store import Store

    await apply_agent(store, sim)
    other_store = await Store.open(database_url, pool_size=4)
    replica = ApiServer(a2a_settings, other_store, address="127.0.0.1:0", runtime=sim)
    await replica.start()
    try:
        async with env.client("GRPC", streaming=True) as client:
            stream = client.send_message(
                a2a_pb2.SendMessageRequest(message=user_message("[slow:1.5] What is 8+8?")), context=as_user())
            first = await anext(stream)
            async with grpc.aio.insecure_channel(f"127.0.0.1:{replica.port}") as channel:
                from a2a.types import a2a_pb2_grpc

                call = a2a_pb2_grpc.A2AServiceStub(channel).SubscribeToTask(
                    a2a_pb2.SubscribeToTaskRequest(tenant="kagent/my-first-agent", id=first.task.id),
                    metadata=[("authorization", "Bearer alice-token")], timeout=30)
                on_replica = [e async for e in call]
            rest = [e async for e in stream]
        assert on_replica[0].task.id == first.task.id
        assert state_of(on_replica[-1]) == state_of(rest[-1]) == a2a_pb2.TASK_STATE_COMPLETED
    finally:
        await replica.stop(0)
        await other_store.close()


@pytest.mark.parametrize("transport", ["GRPC", "HTTP+JSON"])
async def test_streaming_a_continuation(env, store, sim, transport):
    await apply_agent(store, sim)
    async with env.client(transport, streaming=True) as client:
        first_turn = [e async for e in client.send_message(
            a2a_pb2.SendMessageRequest(message=user_message("[input-required] Book a table")), context=as_user())]
        waiting = first_turn[0].task
        assert state_of(first_turn[-1]) == a2a_pb2.TASK_STATE_INPUT_REQUIRED
        reply = user_message("[slow:0.5] for two", waiting.context_id, waiting.id)
        events = [e async for e in client.send_message(a2a_pb2.SendMessageRequest(message=reply), context=as_user())]
        assert events[0].HasField("task") and events[0].task.id == waiting.id
        assert events[0].task.status.state == a2a_pb2.TASK_STATE_WORKING
        assert state_of(events[-1]) == a2a_pb2.TASK_STATE_COMPLETED
        assert [state_of(e) for e in events].count(a2a_pb2.TASK_STATE_COMPLETED) == 1


# -- what open streams cost, and how many one user may hold -------------------------------------------

AGENT_PATH = "/api/a2a/kagent/my-first-agent"
ALICE = [("authorization", "Bearer alice-token")]


async def working_task(stub: Any) -> a2a_pb2.Task:
    """A new conversation whose turn stays WORKING for minutes (the Actor sleeps): an idle task."""
    reply = await stub.SendMessage(a2a_pb2.SendMessageRequest(
        tenant=TENANT, message=user_message("[slow:300] What is 1+1?"),
        configuration=a2a_pb2.SendMessageConfiguration(return_immediately=True)), metadata=ALICE, timeout=60)
    assert reply.task.status.state == a2a_pb2.TASK_STATE_WORKING
    return reply.task


async def progress(store: Any, task: a2a_pb2.Task, text: str) -> None:
    """Store a WORKING status update of the task, as its Actor would (one event and its NOTIFY)."""
    row = await store.get_task(task.id)
    update = a2a_pb2.TaskStatusUpdateEvent(
        task_id=task.id, context_id=task.context_id,
        status=a2a_pb2.TaskStatus(state=a2a_pb2.TASK_STATE_WORKING, message=a2a_pb2.Message(
            message_id=str(uuid.uuid4()), role=a2a_pb2.ROLE_AGENT, parts=[a2a_pb2.Part(text=text)])))
    event = json_format.MessageToDict(a2a_pb2.StreamResponse(status_update=update))
    await store.task_update(row.session_id, task.id, row.task, row.version, event, row.dispatch_id)


def says(event: a2a_pb2.StreamResponse, text: str) -> bool:
    return event.HasField("status_update") and any(p.text == text for p in event.status_update.status.message.parts)


class Follower:
    """One gRPC SubscribeToTask stream, read in the background."""

    def __init__(self, stub: Any, task_id: str) -> None:
        self.call = stub.SubscribeToTask(a2a_pb2.SubscribeToTaskRequest(tenant=TENANT, id=task_id),
                                         metadata=ALICE, timeout=300)
        self.events: list[a2a_pb2.StreamResponse] = []
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for event in self.call:
            self.events.append(event)

    def saw(self, text: str) -> bool:
        return any(says(e, text) for e in self.events)


async def until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        await asyncio.sleep(0.05)


async def transactions(admin: Any) -> int:
    """Transactions committed or rolled back in the test database so far (its statistics, current)."""
    await admin.execute("SELECT pg_stat_clear_snapshot()")
    cur = await admin.execute("SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()")
    row = await cur.fetchone()
    return int(row[0])


@pytest.mark.slow
async def test_idle_streams_cost_no_queries_and_events_reach_every_one(database_url, store, sim):
    """300 streams on idle tasks add (almost) no transactions to what PostgreSQL sees without them -
    the old once-a-second poll added ~300/s - and a stored event still reaches every stream at once."""
    n, tasks = 300, 2
    settings = settings_for_a2a(**{"a2a.stream.maxPerUser": 1000})
    await apply_agent(store, sim)
    async with a2a_env(settings, database_url, store, sim) as env, \
            await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:

        async def rate(seconds: float = 6.0) -> float:
            start, before = time.monotonic(), await transactions(admin)
            await asyncio.sleep(seconds)
            return (await transactions(admin) - before) / (time.monotonic() - start)

        channels = [grpc.aio.insecure_channel(env.grpc_address) for _ in range(6)]
        try:
            stubs = [a2a_pb2_grpc.A2AServiceStub(c) for c in channels]
            idle = [await working_task(stubs[0]) for _ in range(tasks)]
            # without streams: the worker's periodic work and the simulated Actors' own polling
            await asyncio.sleep(1.0)
            baseline = await rate()
            followers = [Follower(stubs[i % len(stubs)], idle[i % tasks].id) for i in range(n)]
            await until(lambda: all(f.events for f in followers), 60, "every stream got its task")
            assert env.api.a2a.streams.open == {"alice": n}
            # an idle backend reports its statistics within 10 s (PGSTAT_IDLE_INTERVAL): wait until the
            # streams' first reads are counted
            await asyncio.sleep(11.0)
            with_streams = await rate()
            assert with_streams - baseline < n / 10, (
                f"{with_streams:.0f} transactions/s with {n} idle streams open, {baseline:.0f}/s without")

            for task in idle:
                await progress(store, task, "half way")
            await until(lambda: all(f.saw("half way") for f in followers), 15, "every stream got the event")
        finally:
            for channel in channels:
                await channel.close(None)
        await until(lambda: not env.api.a2a.streams.open, 20, "closed streams free their places")


async def test_a_stream_survives_a_listen_reconnect_without_missing_an_event(database_url, store, sim):
    """The LISTEN connection is terminated and an event is stored while it is down: the streams re-read
    when it is back (and poll each second while it is down; the fallback poll is an hour, so no
    other read delivers it) and keep following on the new connection."""
    settings = settings_for_a2a(**{"a2a.stream.fallbackPoll": 3600.0})
    await apply_agent(store, sim)
    async with a2a_env(settings, database_url, store, sim) as env, \
            await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin, \
            grpc.aio.insecure_channel(env.grpc_address) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        task = await working_task(stub)
        followers = [Follower(stub, task.id) for _ in range(40)]
        await until(lambda: all(f.events for f in followers), 30, "every stream got its task")
        listener = store.listener
        for attempt in range(5):  # until the event is stored while this process's LISTEN is down
            epoch = listener.epoch
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name = %s", (listener.application_name,))
            await until(lambda: not listener.connected, 10, "the LISTEN connection is lost")
            text = f"during the gap {attempt}"
            await progress(store, task, text)
            in_gap = not listener.connected and listener.epoch == epoch
            await until(lambda e=epoch: listener.connected and listener.epoch > e, 20, "LISTEN is re-established")
            await until(lambda t=text: all(f.saw(t) for f in followers), 15,
                        "every stream got the event stored while LISTEN was down")
            if in_gap:
                break
        else:
            pytest.fail("the event was never stored while the LISTEN connection was down")
        # the streams still follow NOTIFY on the new connection
        await progress(store, task, "after the reconnect")
        await until(lambda: all(f.saw("after the reconnect") for f in followers), 15, "every stream follows on")
        assert all(not f.reader.done() for f in followers)
        for f in followers:
            f.call.cancel()
        await until(lambda: not env.api.a2a.streams.open, 20, "canceled streams free their places")


VANISHING_CLIENT = """
import asyncio, sys
import grpc
from a2a.types import a2a_pb2, a2a_pb2_grpc

async def main():
    address, tenant, task_id, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    channel = grpc.aio.insecure_channel(address)
    stub = a2a_pb2_grpc.A2AServiceStub(channel)
    calls = [stub.SubscribeToTask(a2a_pb2.SubscribeToTaskRequest(tenant=tenant, id=task_id),
                                  metadata=[("authorization", "Bearer alice-token")]) for _ in range(n)]
    for call in calls:
        await call.read()  # the task as it stands: the stream is open
    print("open", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def sse_request(host: str, port: int, path: str, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer alice-token\r\n"
            f"A2A-Version: 1.0\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


async def test_a_user_holds_at_most_max_per_user_streams(database_url, store, sim):
    """a2a.stream.maxPerUser on every binding: the next stream is refused (RESOURCE_EXHAUSTED, HTTP 429,
    JSON-RPC -32029) and admits nothing; a closed stream, a killed client and a reset SSE connection
    each free their place."""
    cap = 3
    settings = settings_for_a2a(**{"a2a.stream.maxPerUser": cap})
    await apply_agent(store, sim)
    async with a2a_env(settings, database_url, store, sim) as env, \
            grpc.aio.insecure_channel(env.grpc_address) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        slots = env.api.a2a.streams
        task = await working_task(stub)
        followers = [Follower(stub, task.id) for _ in range(cap)]
        await until(lambda: all(f.events for f in followers), 30, "the streams are open")
        assert slots.open == {"alice": cap}

        # the next one, on each binding
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await Follower(stub, task.id).reader
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert f"at most {cap} per user" in (refused.value.details() or "")
        before = await store._rows("SELECT (SELECT count(*) FROM sessionq.sessions) AS s, (SELECT count(*) FROM sessionq.tasks) AS t")
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            async for _ in stub.SendStreamingMessage(a2a_pb2.SendMessageRequest(
                    tenant=TENANT, message=user_message("What is 2+2?")), metadata=ALICE, timeout=30):
                pass
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert await store._rows("SELECT (SELECT count(*) FROM sessionq.sessions) AS s, (SELECT count(*) FROM sessionq.tasks) AS t") == before
        auth = {"Authorization": "Bearer alice-token", "A2A-Version": "1.0"}
        r = await env.http.post(f"{env.base}{AGENT_PATH}/rest/tasks/{task.id}:subscribe", headers=auth)
        assert r.status_code == 429 and "too many open streams" in r.json()["error"]["message"]
        r = await env.http.post(f"{env.base}{AGENT_PATH}/jsonrpc", headers=auth, json={
            "jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task.id}})
        assert r.status_code == 200 and r.json()["error"]["code"] == -32029
        assert len(r.json()["error"]["message"]) < 200
        # the cap is per user: bob is not refused for alice's streams (he just cannot see her task)
        with pytest.raises(grpc.aio.AioRpcError) as other:
            async for _ in stub.SubscribeToTask(a2a_pb2.SubscribeToTaskRequest(tenant=TENANT, id=task.id),
                                                metadata=[("authorization", "Bearer bob-token")], timeout=30):
                pass
        assert other.value.code() == grpc.StatusCode.NOT_FOUND
        assert slots.open == {"alice": cap}

        # a stream the client closes frees its place
        followers.pop().call.cancel()
        await until(lambda: slots.open.get("alice") == cap - 1, 20, "a canceled stream frees its place")

        # a client killed with its stream open frees its place
        client = await asyncio.create_subprocess_exec(
            sys.executable, "-c", VANISHING_CLIENT, env.grpc_address, TENANT, task.id, "1", stdout=subprocess.PIPE)
        try:
            assert client.stdout is not None
            line = await asyncio.wait_for(client.stdout.readline(), 60)
            assert line.strip() == b"open" and slots.open.get("alice") == cap
        finally:
            client.kill()  # SIGKILL: the client vanishes without closing anything
            await asyncio.wait_for(client.wait(), 10)
        await until(lambda: slots.open.get("alice") == cap - 1, 20, "a killed client's stream frees its place")

        # an SSE stream whose connection is reset frees its place
        body = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "SubscribeToTask", "params": {"id": task.id}}).encode()
        reader, writer = await asyncio.open_connection("127.0.0.1", env.cards.port)
        writer.write(sse_request("127.0.0.1", env.cards.port, f"{AGENT_PATH}/jsonrpc", body))
        head = await asyncio.wait_for(reader.readuntil(b"data:"), 30)
        assert head.startswith(b"HTTP/1.1 200") and slots.open.get("alice") == cap
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
        writer.transport.abort()
        await until(lambda: slots.open.get("alice") == cap - 1, 20, "a reset SSE connection frees its place")

        # the freed place takes a new stream
        followers.append(Follower(stub, task.id))
        await until(lambda: bool(followers[-1].events), 30, "a new stream is admitted")
        assert slots.open == {"alice": cap}
        for f in followers:
            f.call.cancel()
        await until(lambda: not slots.open, 20, "every place is free")
