"""Keep warm (sessions.keepWarm, the Agent spec's keepWarm): an idle boundary becomes claimable only
after the window, so a turn inside it runs on the running Actor with no resume; after the window the
Actor is suspended (a timer, not polling) and the next turn resumes it. The boundary is durable: a
worker that goes away inside the window leaves it to the next one, and the Actor still ends suspended."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import psycopg
import pytest
from conftest import apply_agent, running_worker
from harness import settings_for_a2a
from test_busy_policy import message, send, until_final

from sessionq.api.server import ApiServer
from sessionq.domain.agents import compile_egress, parse_spec, prepare_revision
from sessionq.runtime.base import ActorState

pytestmark = pytest.mark.timeout(180)
WINDOW = 2.5


async def resumes(url: str) -> int:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        row = await (await conn.execute(
            "SELECT count(*) FROM substrate_sim.calls WHERE method = 'resume_actor'")).fetchone()
        assert row is not None
        return int(row[0])


async def turn(address: str, text: str, context_id: str = "") -> Any:
    request = message(text, context_id)
    request.configuration.return_immediately = False
    return await send(address, request)


async def actor_state(sim: Any, store: Any, sid: uuid.UUID) -> ActorState:
    session = await store.session_by_id(sid)
    return (await sim.get_actor(session.actor_atespace, session.actor_name)).state


async def until_suspended(sim: Any, store: Any, sid: uuid.UUID, timeout: float = 30.0) -> float:
    start = time.monotonic()
    while await actor_state(sim, store, sid) != ActorState.SUSPENDED:
        assert time.monotonic() - start < timeout
        await asyncio.sleep(0.05)
    return time.monotonic() - start


@pytest.mark.parametrize("where", ["config", "agent"])
async def test_a_turn_inside_the_window_needs_no_resume(where, database_url, store, sim):
    overrides = {"sessions.keepWarm": WINDOW} if where == "config" else {}
    settings = settings_for_a2a(**overrides)
    if where == "agent":
        spec = parse_spec({"name": "my-first-agent", "keepWarm": f"{WINDOW}s"})
        await store.apply_agent(spec.namespace, spec.name, spec.to_json(), spec.spec_hash(), spec.image,
                                compile_egress(spec), "alice")
        await prepare_revision(store, sim, (await store.get_agent(spec.namespace, spec.name)).desired_revision_id)
    else:
        await apply_agent(store, sim)
    api = ApiServer(settings, store, address="127.0.0.1:0", runtime=sim)
    await api.start()
    address = f"127.0.0.1:{api.port}"
    sim.taskstore_address = address
    try:
        async with running_worker(settings, database_url, store, sim):
            first = await turn(address, "What is 1+1?")
            sid = uuid.UUID(first.context_id)
            assert await resumes(database_url) == 1
            await asyncio.sleep(0.5)
            assert await actor_state(sim, store, sid) == ActorState.RUNNING  # kept warm
            second = await turn(address, "What is 2+2?", first.context_id)  # inside the window
            assert "4" in second.status.message.parts[0].text
            assert await resumes(database_url) == 1  # ran on the running Actor
            waited = await until_suspended(sim, store, sid)
            assert waited >= WINDOW - 0.5  # not before the window ended
        # a worker that goes away inside the window: the next one suspends the Actor after it
        async with running_worker(settings, database_url, store, sim):
            third = await turn(address, "What is 3+3?", first.context_id)  # after the window: a resume
            assert "6" in third.status.message.parts[0].text
            assert await resumes(database_url) == 2
        assert await actor_state(sim, store, sid) == ActorState.RUNNING
        async with running_worker(settings, database_url, store, sim, name="next-worker"):
            await until_suspended(sim, store, sid)
    finally:
        await api.stop(0)


async def test_without_a_window_the_actor_is_suspended_at_once(database_url, store, sim):
    settings = settings_for_a2a()
    await apply_agent(store, sim)
    api = ApiServer(settings, store, address="127.0.0.1:0", runtime=sim)
    await api.start()
    address = f"127.0.0.1:{api.port}"
    sim.taskstore_address = address
    try:
        async with running_worker(settings, database_url, store, sim):
            first = await turn(address, "What is 1+1?")
            assert await until_suspended(sim, store, uuid.UUID(first.context_id)) < WINDOW
            await turn(address, "What is 2+2?", first.context_id)
            assert await resumes(database_url) == 2
            await until_final(store, [first.id])
    finally:
        await api.stop(0)


def test_keep_warm_is_validated():
    assert parse_spec({"name": "a", "keepWarm": "30s"}).to_json()["keepWarm"] == "30s"
    assert parse_spec({"name": "a", "keepWarm": "0.5s"}).keep_warm == 0.5
    assert "keepWarm" not in parse_spec({"name": "a"}).to_json()
    for bad in ("-1s", "ten", 30, "", "86401s"):
        with pytest.raises(Exception) as err:
            parse_spec({"name": "a", "keepWarm": bad})
        assert 'keepWarm must be a duration from "0s" to "86400s"' in str(err.value)
