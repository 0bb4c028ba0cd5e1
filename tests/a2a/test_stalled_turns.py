"""Stalled turns (sessions.stalledTurnTimeout): a turn whose task had no update for that long is
failed by the periodic check with the reason stated, its Actor suspended, the next queued turn
started; the waiting client sees FAILED, never a hang. A worker killed while turns are queued loses
none of them: the turn it was running is failed as stalled, the rest run in order elsewhere."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

import grpc
import pytest
from a2a.types import a2a_pb2
from conftest import apply_agent, running_worker
from harness import a2a_env, settings_for_a2a
from test_busy_policy import message, questions, send, start_slow_turn, until_final

from sessionq.api.server import ApiServer
from sessionq.app.worker import run_worker
from sessionq.domain.expiry import fail_stalled_turns
from sessionq.runtime.base import ActorState

pytestmark = pytest.mark.timeout(240)


async def until(predicate: Any, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.1)


async def test_a_silent_turn_is_failed_at_the_timeout_and_its_actor_suspended(database_url, store, sim):
    await apply_agent(store, sim)
    async with a2a_env(settings_for_a2a(), database_url, store, sim) as env:
        hung = await start_slow_turn(env.grpc_address, 120)  # the agent says nothing for two minutes
        sid = uuid.UUID(hung.context_id)
        queued = await send(env.grpc_address, message("What is 2+3?", hung.context_id, "enqueue"))
        blocking = message("What is 1+1?", hung.context_id, "enqueue")
        blocking.configuration.return_immediately = False
        waiter = asyncio.create_task(send(env.grpc_address, blocking))
        await asyncio.sleep(1.2)
        assert await fail_stalled_turns(store, 0) == 0  # 0s disables the check
        assert await fail_stalled_turns(store, 30) == 0  # not silent that long yet
        assert await fail_stalled_turns(store, 1.0) == 1
        task = await store.get_task(hung.id)
        assert task is not None and task.state == "TASK_STATE_FAILED" and task.phase == "abandoned"
        assert "the turn stalled: no task update for 1.0 s (sessions.stalledTurnTimeout)" in str(task.task)
        # the queue moves on, and the blocking client gets its answer, not a hang
        answered = await asyncio.wait_for(waiter, 60)
        assert answered.status.state == a2a_pb2.TASK_STATE_COMPLETED
        assert (await until_final(store, [queued.id]))[queued.id] == "TASK_STATE_COMPLETED"
        session = await store.session_by_id(sid)
        assert session is not None

        async def suspended() -> bool:
            actor = await sim.get_actor(session.actor_atespace, session.actor_name)
            return actor.state == ActorState.SUSPENDED

        await until(suspended)
        assert await questions(sim, session) == ["What is 2+3?", "What is 1+1?"]


async def test_a_client_waiting_on_a_stalled_turn_sees_failed(database_url, store, sim):
    await apply_agent(store, sim)
    async with a2a_env(settings_for_a2a(), database_url, store, sim) as env:
        first = await start_slow_turn(env.grpc_address, 1)
        await until_final(store, [first.id])
        request = message("[slow:120] What is 3+3?", first.context_id)
        request.configuration.return_immediately = False
        waiter = asyncio.create_task(send(env.grpc_address, request))
        await asyncio.sleep(1.5)
        assert await fail_stalled_turns(store, 1.0) == 1
        answered = await asyncio.wait_for(waiter, 30)
        assert answered.status.state == a2a_pb2.TASK_STATE_FAILED
        assert "stalled" in answered.status.message.parts[0].text


async def test_a_worker_killed_while_turns_are_queued_loses_none(database_url, store, sim):
    settings = settings_for_a2a()
    await apply_agent(store, sim)
    stop = asyncio.Event()
    # a worker that gives its running jobs no time when stopped: its turn dies with it
    abrupt = settings_for_a2a(**{"workers.shutdownTimeout": 0.1})
    doomed = asyncio.create_task(run_worker(abrupt, database_url, store, sim, stop=stop, name="doomed-worker"))
    api = ApiServer(settings, store, address="127.0.0.1:0", runtime=sim)
    await api.start()
    address = f"127.0.0.1:{api.port}"
    sim.taskstore_address = address
    try:
        first = await start_slow_turn(address, 60)
        answers = [await send(address, message(f"Remember the number {i}.", first.context_id, "enqueue"))
                   for i in range(6)]
        order = await store.queued_turns(uuid.UUID(first.context_id))
        assert order == [t.id for t in answers]
        await asyncio.sleep(1.0)
        stop.set()  # the worker goes away mid-turn: the turn it ran in this process dies with it
        await asyncio.wait_for(doomed, 30)
        async with running_worker(settings, database_url, store, sim, name="second-worker"):
            await asyncio.sleep(1.5)
            # the periodic check (shortened here) fails the dead turn; the queue moves to the live worker
            assert await fail_stalled_turns(store, 1.0) == 1
            states = await until_final(store, [first.id, *order], timeout=120)
        assert states[first.id] == "TASK_STATE_FAILED"
        assert all(states[t] == "TASK_STATE_COMPLETED" for t in order)
        session = await store.session_by_id(uuid.UUID(first.context_id))
        assert session is not None
        assert await questions(sim, session) == [f"Remember the number {i}." for i in range(6)]
    finally:
        with contextlib.suppress(grpc.RpcError, Exception):
            await api.stop(0)
