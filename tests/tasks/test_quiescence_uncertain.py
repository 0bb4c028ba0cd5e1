"""Uncertain quiescence claims: they block new work (Q-10), the user is told the truth meanwhile,
and the quiescence workers resolve them by themselves - reading the Actor back under the recorded
UID (Q-11) and suspending it only if the read-back shows the suspend did not happen."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from lifecycle import raw_session, ready_session, turn_by_store

from sessionq.db.store import Store
from sessionq.domain.quiescence import QuiescencePool, claim_and_quiesce
from sessionq.errors import SessionqError
from sessionq.runtime.ateapi.client import SubstrateClient, SubstrateOptions
from sessionq.runtime.ateapi.server import start_server
from sessionq.runtime.simulator import SimulatedSubstrate


@contextlib.asynccontextmanager
async def running_pool(store: Store, runtime: Any, url: str, **kw: Any) -> AsyncIterator[QuiescencePool]:
    pool = QuiescencePool(store, runtime, url, **{"workers": 4, "recovery_interval": 60.0, "retry_first": 0.2,
                                                  "retry_max": 1.0, **kw})
    stop = asyncio.Event()
    task = asyncio.create_task(pool.run(stop))
    try:
        yield pool
    finally:
        stop.set()
        await task


async def wait_until(predicate: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"condition not reached within {timeout}s")


async def recorded(store: Store, s: Any) -> bool:
    row = await raw_session(store, s.id)
    return row.idle_executor is None and row.idle_boundary_id is None


async def actor_state(sim: Any, s: Any) -> str:
    return (await sim.get_actor(s.actor_atespace, s.actor_name)).state.value


def message() -> dict[str, Any]:
    return {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "again"}]}


async def refused_truthfully(store: Store, s: Any) -> str:
    """A new turn is refused while the claim is uncertain, saying what is happening and when to retry."""
    with pytest.raises(SessionqError) as e:
        await store.admit_turn(s.id, s.creator, None, message(), None, 600)
    assert e.value.code == grpc.StatusCode.ABORTED and e.value.reason == "KAGENT_SESSION_BUSY"
    assert "confirming that its last suspend reached the runtime" in e.value.message
    assert "retry in about" in e.value.message and "already running" not in e.value.message
    return e.value.message


async def uncertain_after_unknown_outcome(store: Store, sim: Any, database_url: str) -> Any:
    """A settled turn whose quiescence attempt failed with an unknown outcome every time: the claim
    stays, uncertain, and nothing was suspended."""
    s = await ready_session(store, sim)
    await turn_by_store(store, sim, s)
    await sim.inject("suspend_actor", "fail_before", times=None)
    pool = QuiescencePool(store, sim, database_url, listen=False, retry_first=0.2, retry_max=1.0)
    assert await claim_and_quiesce(pool) == s.id
    await sim.clear_faults()
    row = await raw_session(store, s.id)
    assert row.idle_executor is not None and row.idle_uncertain_at is not None  # it stays
    assert row.idle_attempts == 1 and row.idle_unsent is False and row.idle_retry_at is not None
    assert row.quiescence_failure is not None and row.quiescence_failure["reason"] == "SuspendFailed"
    assert await actor_state(sim, s) == "ACTOR_STATE_RUNNING"
    return s


@pytest.mark.clause("Q-10")
@pytest.mark.clause("Q-11")
async def test_unknown_outcome_with_the_actor_read_back_running_is_suspended_again(store, sim, database_url):
    s = await uncertain_after_unknown_outcome(store, sim, database_url)
    await refused_truthfully(store, s)
    calls = await sim.inject("suspend_actor", "delay", delay=0.0, times=None)  # counts SuspendActor calls
    async with running_pool(store, sim, database_url) as pool:
        await wait_until(lambda: recorded(store, s), timeout=15)
    assert pool.resolutions == 1
    row = await raw_session(store, s.id)
    assert row.snapshot_status == "COMPLETED" and row.snapshot_generation is not None
    assert row.quiescence_failure is None and row.idle_uncertain_at is None and row.idle_attempts == 0
    assert await actor_state(sim, s) == "ACTOR_STATE_SUSPENDED"
    assert await sim.fault_hits(calls) == 1  # the read-back showed RUNNING: one suspend
    assert await sim.mutation_count(actor=s.actor_name, method="suspend_actor") == 1
    await turn_by_store(store, sim, s)  # the Session takes a new turn


@pytest.mark.clause("Q-10")
@pytest.mark.clause("Q-11")
async def test_unknown_outcome_with_the_actor_read_back_suspended_is_recorded_without_a_second_suspend(
    store, sim, database_url
):
    s = await ready_session(store, sim)
    await turn_by_store(store, sim, s)
    # the suspend takes effect but its answer is lost, and every read-back fails: the outcome is unknown
    await sim.inject("suspend_actor", "lose_after", times=1)
    await sim.inject("get_actor", "fail_before", times=None)
    pool = QuiescencePool(store, sim, database_url, listen=False, retry_first=0.2, retry_max=1.0)
    assert await claim_and_quiesce(pool) == s.id
    await sim.clear_faults()
    row = await raw_session(store, s.id)
    assert row.idle_uncertain_at is not None and row.idle_unsent is False and row.snapshot_generation is None
    assert await sim.mutation_count(actor=s.actor_name, method="suspend_actor") == 1
    await refused_truthfully(store, s)
    calls = await sim.inject("suspend_actor", "delay", delay=0.0, times=None)
    async with running_pool(store, sim, database_url) as pool:
        await wait_until(lambda: recorded(store, s), timeout=15)
    assert await sim.fault_hits(calls) == 0  # the read-back showed SUSPENDED: no second suspend
    assert await sim.mutation_count(actor=s.actor_name, method="suspend_actor") == 1
    row = await raw_session(store, s.id)
    assert row.snapshot_status == "COMPLETED" and row.snapshot_generation is not None
    await turn_by_store(store, sim, s)


@pytest.mark.clause("Q-10")
async def test_many_workers_racing_for_one_uncertain_claim_suspend_once(store, sim, database_url):
    s = await uncertain_after_unknown_outcome(store, sim, database_url)
    await asyncio.sleep(0.3)  # the claim falls due
    calls = await sim.inject("suspend_actor", "delay", delay=0.3, times=None)  # a slow suspend: a wide window
    stores = [store] + [await Store.open(database_url, pool_size=4, listen=False) for _ in range(3)]
    try:
        racers = [QuiescencePool(st, sim, database_url, listen=False) for st in stores for _ in range(4)]

        async def race(p: QuiescencePool) -> bool:
            taken = await p.store.take_over_uncertain_idle(uuid.uuid4(), p.lease)
            if taken is None:
                return False
            assert await p.resolve(taken) is not None
            return True

        won = await asyncio.gather(*(race(p) for p in racers))
        assert sum(won) == 1
        # and whole pools racing afterwards find nothing left to do
        async with running_pool(stores[1], sim, database_url) as a, running_pool(stores[2], sim, database_url) as b:
            await asyncio.sleep(1.0)
        assert a.resolutions + b.resolutions == 0
    finally:
        for st in stores[1:]:
            await st.close()
    assert await sim.fault_hits(calls) == 1
    assert await sim.mutation_count(actor=s.actor_name, method="suspend_actor") == 1
    assert await recorded(store, s)


@pytest.mark.clause("Q-10")
async def test_a_claim_whose_worker_died_is_read_back_after_its_lease(store, sim, database_url):
    s = await ready_session(store, sim)
    await turn_by_store(store, sim, s)
    dead = await store.claim_idle(uuid.uuid4())  # a worker that claimed and died: it records nothing
    assert dead is not None and dead.id == s.id
    async with running_pool(store, sim, database_url, attempt_timeout=0.5, lease_margin=0.5,
                            recovery_interval=0.5):
        await asyncio.sleep(0.3)
        assert (await raw_session(store, s.id)).idle_executor == dead.idle_executor  # within its lease: kept
        await wait_until(lambda: recorded(store, s), timeout=15)
    assert await sim.mutation_count(actor=s.actor_name, method="suspend_actor") == 1
    assert await actor_state(sim, s) == "ACTOR_STATE_SUSPENDED"


@pytest.mark.clause("Q-10")
async def test_a_pending_turn_behind_an_uncertain_claim_is_told_the_truth(store, sim, database_url):
    s = await ready_session(store, sim)
    await turn_by_store(store, sim, s)
    claimed = await store.claim_idle(uuid.uuid4())
    assert claimed is not None
    await store.admit_turn(s.id, s.creator, None, message(), None, 600)  # admitted: waits for the claim
    with pytest.raises(SessionqError, match="waiting for its last suspend to be recorded; retry shortly"):
        await store.admit_turn(s.id, s.creator, None, message(), None, 600)  # an ordinary claim: said as it is
    assert claimed.idle_boundary_id is not None and claimed.idle_executor is not None
    await store.idle_attempt_failed(s.id, claimed.idle_boundary_id, claimed.idle_executor, "SuspendFailed",
                                    "the runtime answered UNAVAILABLE", not_sent=True, retry_after=5.0)
    text = await refused_truthfully(store, s)
    assert "retry in about 7 s" in text or "retry in about 6 s" in text  # the next attempt in 5 s, and 2 more


@pytest.mark.clause("Q-10")
@pytest.mark.timeout(120)
async def test_a_suspend_refused_by_a_restarting_runtime_is_resolved_once_it_is_back(store, sim, database_url):
    """A real ateapi server stopped (connection refused) while the Session quiesces and started again
    on the same port: the claim is resolved without an operator, and the Session takes a new turn."""
    s = await ready_session(store, sim)
    async with SimulatedSubstrate(database_url, worker_pool_size=64) as served:
        server, port, _ = await start_server(served, "127.0.0.1:0")
        client = SubstrateClient(SubstrateOptions(address=f"127.0.0.1:{port}", call_timeout=5.0, uid_preflight=False))
        await client.open()
        try:
            await server.stop(0)  # the runtime restarts: nothing listens on its port
            async with running_pool(store, client, database_url, retry_max=2.0) as pool:
                await turn_by_store(store, sim, s)  # the settlement wakes the workers
                await wait_until(lambda: _uncertain(store, s), timeout=30)
                row = await raw_session(store, s.id)
                assert row.idle_unsent is True  # connection refused: certainly never reached the runtime
                assert row.quiescence_failure is not None
                assert "could not be reached" in row.quiescence_failure["message"]
                await refused_truthfully(store, s)
                assert await actor_state(sim, s) == "ACTOR_STATE_RUNNING"
                server, _, _ = await start_server(served, f"127.0.0.1:{port}")  # back on the same port
                back = time.monotonic()
                await wait_until(lambda: recorded(store, s), timeout=45)
                resolved_in = time.monotonic() - back
            assert pool.resolutions >= 1
            assert resolved_in < 40  # bounded: the claim's backoff (at most 2 s here) and the channel's reconnect
            assert await actor_state(sim, s) == "ACTOR_STATE_SUSPENDED"
            assert await sim.mutation_count(actor=s.actor_name, method="suspend_actor") == 1
            await turn_by_store(store, sim, s)  # a new turn is admitted and runs
        finally:
            await client.close()
            await server.stop(0)


async def _uncertain(store: Store, s: Any) -> bool:
    return (await raw_session(store, s.id)).idle_uncertain_at is not None
