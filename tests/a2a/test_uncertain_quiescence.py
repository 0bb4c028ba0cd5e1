"""A turn sent while the Session's last suspend is uncertain: the user is told the truth (the suspend
is being confirmed, retry shortly), and once the runtime answers again the workers resolve the claim
by themselves and the same message is taken (Q-10)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from a2a.types import a2a_pb2
from a2a.utils.constants import TransportProtocol
from conftest import apply_agent
from harness import answer, as_user, env, settings_for_a2a, user_message  # noqa: F401 - fixtures

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def a2a_settings() -> Any:
    return settings_for_a2a(**{"sessions.quiescenceRetryMax": 1.0})


async def send(client: Any, text: str, context_id: str = "") -> a2a_pb2.Task:
    request = a2a_pb2.SendMessageRequest(message=user_message(text, context_id))
    last = None
    async for event in client.send_message(request, context=as_user()):
        last = event
    assert last is not None and last.HasField("task")
    return last.task


async def claim_of(store: Any) -> tuple[Any, Any]:
    async with store.pool.connection() as conn:
        cur = await conn.execute("SELECT idle_uncertain_at, idle_executor FROM sessionq.sessions")
        row = await cur.fetchone()
    assert row is not None
    return row["idle_uncertain_at"], row["idle_executor"]


async def wait_for(predicate: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.1)


@pytest.mark.clause("Q-10")
@pytest.mark.parametrize("transport", [TransportProtocol.GRPC.value, TransportProtocol.JSONRPC.value])
async def test_a_turn_during_an_uncertain_suspend_is_told_the_truth_and_taken_once_resolved(env, store, sim,
                                                                                           transport):
    await apply_agent(store, sim)
    await sim.inject("suspend_actor", "fail_before", times=None)  # every suspend's outcome is unknown
    async with env.client(transport, streaming=False) as client:
        first = await send(client, "What is 2+2?")
        assert "4" in answer(first)

        async def uncertain() -> bool:
            return (await claim_of(store))[0] is not None

        await wait_for(uncertain, timeout=30)
        with pytest.raises(Exception) as refused:
            await send(client, "What is 3+3?", first.context_id)
        text = str(refused.value)
        assert "confirming that its last suspend reached the runtime" in text and "retry in about" in text
        assert "already running" not in text

        await sim.clear_faults()  # the runtime answers again: the workers resolve the claim themselves

        async def resolved() -> bool:
            return (await claim_of(store))[1] is None

        await wait_for(resolved, timeout=30)
        second = await send(client, "What is 3+3?", first.context_id)
        assert "6" in answer(second)
