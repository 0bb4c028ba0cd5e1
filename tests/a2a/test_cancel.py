"""CancelTask as a durable intent: many racers make one intent and one call to the Actor; a task
waiting for input is canceled at once; a canceled turn frees the Session for the next one."""

from __future__ import annotations

import asyncio

import pytest
from a2a.types import a2a_pb2
from a2a.utils.errors import TaskNotCancelableError
from conftest import apply_agent
from harness import a2a_settings, as_user, env, user_message  # noqa: F401 - fixtures

pytestmark = pytest.mark.timeout(180)


async def send(client, text, context_id="", task_id="", **config) -> a2a_pb2.Task:
    request = a2a_pb2.SendMessageRequest(message=user_message(text, context_id, task_id))
    for key, value in config.items():
        setattr(request.configuration, key, value)
    events = [e async for e in client.send_message(request, context=as_user())]
    return events[-1].task


async def test_concurrent_cancels_make_one_intent_and_one_actor_call(env, store, sim):
    await apply_agent(store, sim)
    async with env.client("GRPC", streaming=False) as grpc_client, env.client("JSONRPC", streaming=False) as rpc_client:
        running = await send(grpc_client, "[slow:30] What is 9*9?", return_immediately=True)
        racers = [c.cancel_task(a2a_pb2.CancelTaskRequest(id=running.id), context=as_user())
                  for c in (grpc_client, rpc_client) * 6]
        answers = await asyncio.gather(*racers)
        assert {a.status.state for a in answers} == {a2a_pb2.TASK_STATE_CANCELED}
        rows = await store._rows("SELECT outcome FROM sessionq.task_cancels WHERE task_id = %s", (running.id,))
        assert [r["outcome"] for r in rows] == ["canceled"]
        for _ in range(100):  # the job ends the task, then tells the Actor
            calls = [c for c in await sim.calls() if c["method"] == "cancel_turn"]
            if calls:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        assert len([c for c in await sim.calls() if c["method"] == "cancel_turn"]) == 1
        # the Actor stopped: no write of the canceled turn came after (the task stays CANCELED)
        await asyncio.sleep(0.5)
        got = await grpc_client.get_task(a2a_pb2.GetTaskRequest(id=running.id), context=as_user())
        assert got.status.state == a2a_pb2.TASK_STATE_CANCELED
        # the Session takes the next turn
        after = await send(grpc_client, "What is 1+2?", running.context_id)
        assert after.status.state == a2a_pb2.TASK_STATE_COMPLETED


async def test_cancel_of_a_task_waiting_for_input(env, store, sim):
    await apply_agent(store, sim)
    async with env.client("HTTP+JSON", streaming=False) as client:
        waiting = await send(client, "[input-required] Book a table")
        assert waiting.status.state == a2a_pb2.TASK_STATE_INPUT_REQUIRED
        canceled = await client.cancel_task(a2a_pb2.CancelTaskRequest(id=waiting.id), context=as_user())
        assert canceled.status.state == a2a_pb2.TASK_STATE_CANCELED
        assert not [c for c in await sim.calls() if c["method"] == "cancel_turn"]  # nothing ran
        # it cannot be continued any more, and a new turn of the Session works
        with pytest.raises(Exception):
            await send(client, "for two", waiting.context_id, waiting.id)
        again = await client.cancel_task(a2a_pb2.CancelTaskRequest(id=waiting.id), context=as_user())
        assert again.status.state == a2a_pb2.TASK_STATE_CANCELED  # idempotent
        done = await send(client, "What is 2+5?", waiting.context_id)
        assert done.status.state == a2a_pb2.TASK_STATE_COMPLETED
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(a2a_pb2.CancelTaskRequest(id=done.id), context=as_user())
