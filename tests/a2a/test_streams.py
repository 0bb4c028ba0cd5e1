"""Streams from PostgreSQL: SendStreamingMessage and SubscribeToTask with the a2a-sdk's clients on all
three transports - a slow turn's events in order, a subscriber that attaches mid-turn, one that
reconnects, one on another user's task, and a disconnect that stops nothing."""

from __future__ import annotations

import asyncio

import pytest
from a2a.types import a2a_pb2
from a2a.utils.errors import TaskNotFoundError, UnsupportedOperationError
from conftest import apply_agent
from harness import TRANSPORTS, a2a_settings, as_user, env, user_message  # noqa: F401 - fixtures

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
