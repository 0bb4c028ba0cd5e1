"""Pause for input (sessions.pausedRuntimeTtl): a turn that ends INPUT_REQUIRED pauses its Actor
(PauseActor) rather than suspending it; an answer within the TTL resumes the paused Actor; with no
answer the Actor is suspended once, with its snapshot, when the TTL passes. While paused, explicit
lifecycle changes wait as for claimed idle work. 0s (the default): suspended at once."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest
from a2a.types import a2a_pb2
from conftest import apply_agent, running_worker
from harness import a2a_settings, env, settings_for_a2a  # noqa: F401 - fixtures
from test_busy_policy import message, send

from sessionq.api.server import ApiServer
from sessionq.models import OperationKind
from sessionq.runtime.base import ActorState

pytestmark = pytest.mark.timeout(180)
TTL = 2.0


async def calls(url: str, method: str) -> int:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        row = await (await conn.execute("SELECT count(*) FROM substrate_sim.calls WHERE method = %s", (method,))
                     ).fetchone()
        assert row is not None
        return int(row[0])


async def turn(address: str, text: str, context_id: str = "", task_id: str = "") -> a2a_pb2.Task:
    request = message(text, context_id)
    request.message.task_id = task_id
    request.configuration.return_immediately = False
    return await send(address, request)


async def until_state(sim: Any, store: Any, sid: uuid.UUID, state: ActorState, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    session = await store.session_by_id(sid)
    while (await sim.get_actor(session.actor_atespace, session.actor_name)).state != state:
        assert asyncio.get_running_loop().time() < deadline, state
        await asyncio.sleep(0.05)


async def recorded(store: Any, sid: uuid.UUID, timeout: float = 30.0) -> Any:
    """The Session once its quiescence is recorded (the runtime's state changes first: the worker then
    pins the turn and records the snapshot)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while (session := await store.session_by_id(sid)).idle_executor is not None or session.idle_boundary_id is not None:
        assert asyncio.get_running_loop().time() < deadline, "quiescence never recorded"
        await asyncio.sleep(0.05)
    return session


@pytest.fixture
async def served(database_url, store, sim):
    settings = settings_for_a2a(**{"sessions.pausedRuntimeTtl": TTL})
    await apply_agent(store, sim)
    api = ApiServer(settings, store, address="127.0.0.1:0", runtime=sim)
    await api.start()
    address = f"127.0.0.1:{api.port}"
    sim.taskstore_address = address
    try:
        async with running_worker(settings, database_url, store, sim):
            yield address
    finally:
        await api.stop(0)


async def test_an_answer_within_the_ttl_resumes_the_paused_actor(served, database_url, store, sim):
    asked = await turn(served, "[input-required] Book a flight")
    assert asked.status.state == a2a_pb2.TASK_STATE_INPUT_REQUIRED
    sid = uuid.UUID(asked.context_id)
    await until_state(sim, store, sid, ActorState.PAUSED)
    assert await calls(database_url, "pause_actor") == 1
    assert await calls(database_url, "suspend_actor") == 0
    session = await store.session_by_id(sid)
    assert session is not None and session.actor_paused_at is not None
    # paused: explicit lifecycle changes wait, as for claimed idle work
    with pytest.raises(Exception) as err:
        await store.admit_operation(sid, "alice", None, OperationKind.SUSPEND)
    assert "paused waiting for input" in str(err.value)
    resumes = await calls(database_url, "resume_actor")
    answered = await turn(served, "to Paris", asked.context_id, asked.id)
    assert answered.status.state == a2a_pb2.TASK_STATE_COMPLETED
    assert await calls(database_url, "resume_actor") == resumes + 1  # the paused Actor, resumed
    await until_state(sim, store, sid, ActorState.SUSPENDED)  # a completed turn: suspended at once
    assert await calls(database_url, "suspend_actor") == 1
    session = await recorded(store, sid)
    assert session.actor_paused_at is None and session.snapshot_uri


async def test_unanswered_it_is_suspended_once_with_its_snapshot(served, database_url, store, sim):
    asked = await turn(served, "[auth-required] Read my mail")
    assert asked.status.state == a2a_pb2.TASK_STATE_AUTH_REQUIRED
    sid = uuid.UUID(asked.context_id)
    await until_state(sim, store, sid, ActorState.PAUSED)
    before = await store.session_by_id(sid)
    assert before is not None
    await until_state(sim, store, sid, ActorState.SUSPENDED, timeout=TTL + 20)
    assert await calls(database_url, "suspend_actor") == 1
    after = await recorded(store, sid)
    assert after.actor_paused_at is None
    assert after.snapshot_uri and after.snapshot_generation != before.snapshot_generation
    assert after.idle_boundary_id is None
    # the answer now resumes the suspended Actor from its snapshot
    answered = await turn(served, "here is the token", asked.context_id, asked.id)
    assert answered.status.state == a2a_pb2.TASK_STATE_COMPLETED


async def test_without_a_ttl_an_actor_waiting_for_input_is_suspended_at_once(env, database_url, store, sim):
    await apply_agent(store, sim)
    asked = await send(env.grpc_address, message("[input-required] Book a flight"))
    sid = uuid.UUID(asked.context_id)
    await until_state(sim, store, sid, ActorState.SUSPENDED)
    assert await calls(database_url, "pause_actor") == 0
