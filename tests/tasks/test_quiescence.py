"""Automatic quiescence and snapshots (Q-*, SNAP-*)."""

import asyncio
import contextlib
import time
import uuid

import psycopg
import pytest
from lifecycle import raw_session, ready_session, turn_by_store

from sessionq.db.store import Store
from sessionq.domain.operations import OperationExecutor
from sessionq.domain.quiescence import QuiescencePool, claim_and_quiesce, pick_snapshot
from sessionq.errors import SessionqError
from sessionq.runtime.base import SnapshotFidelity


@contextlib.asynccontextmanager
async def running_pool(store, sim, url, **kw):
    pool = QuiescencePool(store, sim, url, **{"workers": 4, "recovery_interval": 60.0, **kw})
    stop = asyncio.Event()
    task = asyncio.create_task(pool.run(stop))
    await asyncio.sleep(0.1)
    try:
        yield pool
    finally:
        stop.set()
        await task


async def wait_until(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():
            return time.monotonic()
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached in time")


async def actor_state(sim, s):
    return (await sim.get_actor(s.actor_atespace, s.actor_name)).state.value


async def suspended(sim, s):
    return await actor_state(sim, s) == "ACTOR_STATE_SUSPENDED"


@pytest.mark.clause("Q-1")
@pytest.mark.clause("Q-3")
@pytest.mark.clause("Q-6")
async def test_settlement_wakes_a_worker_that_suspends_and_session_stays_ready(store, sim, database_url):
    s = await ready_session(store, sim)
    async with running_pool(store, sim, database_url):
        t0 = time.monotonic()
        await turn_by_store(store, sim, s)
        done = await wait_until(lambda: suspended(sim, s))
        assert done - t0 < 2.0  # woken by NOTIFY, not by the 60 s recovery interval
        await wait_until(lambda: _boundary_cleared(store, s))
    row = await raw_session(store, s.id)
    assert row.state == "READY" and row.operation == "NONE"
    actor = await sim.get_actor(s.actor_atespace, s.actor_name)
    assert actor.worker is None
    assert row.snapshot_generation == max(x.generation for x in actor.snapshots)
    # the next turn is admitted as usual
    assert (await store.admit_turn(s.id, "alice", None, {"parts": [{"text": "x"}]}, None, 600)).dispatch_id


async def _boundary_cleared(store, s):
    return (await raw_session(store, s.id)).idle_boundary_id is None


@pytest.mark.clause("Q-2")
@pytest.mark.clause("SNAP-1")
@pytest.mark.parametrize("final", ["TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED", "TASK_STATE_FAILED",
                                   "TASK_STATE_COMPLETED"])
async def test_waiting_and_terminal_turns_suspend_with_exact_volumes_snapshot(store, sim, database_url, final):
    s = await ready_session(store, sim)
    pool = QuiescencePool(store, sim, database_url, listen=False)
    for _ in range(2):
        await turn_by_store(store, sim, s, final=final)
        assert await claim_and_quiesce(pool) == s.id
    actor = await sim.get_actor(s.actor_atespace, s.actor_name)
    top = max(actor.snapshots, key=lambda x: x.generation)
    assert top.fidelity == SnapshotFidelity.VOLUMES and top.generation >= 2
    row = await raw_session(store, s.id)
    assert (row.snapshot_generation, row.snapshot_uri, row.snapshot_status) == (top.generation, top.uri, "COMPLETED")


@pytest.mark.clause("SNAP-1")
async def test_pending_snapshot_never_falls_back_to_an_older_one(store, sim, database_url):
    s = await ready_session(store, sim)
    pool = QuiescencePool(store, sim, database_url, listen=False, snapshot_wait=0.2)
    await turn_by_store(store, sim, s)
    await claim_and_quiesce(pool)
    first = await raw_session(store, s.id)
    await sim.set_option("snapshot_pending", True)
    await turn_by_store(store, sim, s)
    await claim_and_quiesce(pool)
    row = await raw_session(store, s.id)
    assert row.snapshot_generation == first.snapshot_generation + 1
    assert row.snapshot_status == "IN_PROGRESS" and row.snapshot_uri is None  # not the older generation's uri


@pytest.mark.clause("SNAP-2")
async def test_only_volumes_snapshots_are_accepted(store, sim, database_url):
    s = await ready_session(store, sim)
    await turn_by_store(store, sim, s)
    actor = await sim.get_actor(s.actor_atespace, s.actor_name)
    await sim.suspend_actor(s.actor_atespace, s.actor_name, actor.uid, SnapshotFidelity.MEMORY)
    with pytest.raises(Exception, match="not VOLUMES"):
        pick_snapshot((await sim.get_actor(s.actor_atespace, s.actor_name)).snapshots)
    pool = QuiescencePool(store, sim, database_url, listen=False)
    assert await claim_and_quiesce(pool) == s.id
    row = await raw_session(store, s.id)
    assert row.idle_executor is not None  # refused: nothing recorded, the claim stays
    assert row.snapshot_generation is None


@pytest.mark.clause("Q-4")
async def test_new_turn_supersedes_unclaimed_idle_work_but_claimed_work_blocks(store, sim, database_url):
    s = await ready_session(store, sim)
    await turn_by_store(store, sim, s)
    assert (await raw_session(store, s.id)).idle_boundary_id is not None
    msg = {"parts": [{"text": "next"}]}
    adm = await store.admit_turn(s.id, "alice", None, msg, None, 600)  # supersedes the unclaimed boundary
    assert (await raw_session(store, s.id)).idle_boundary_id is None
    assert await store.claim_idle(uuid.uuid4()) is None
    await store.fail_dispatch(s.id, adm.dispatch_id, "test ends the turn", False)
    # now a claimed boundary: it blocks new execution and explicit lifecycle changes until recorded
    await turn_by_store(store, sim, s)
    claimed = await store.claim_idle(uuid.uuid4())
    assert claimed.id == s.id
    adm = await store.admit_turn(s.id, "alice", None, msg, None, 600)
    with pytest.raises(SessionqError) as e:
        await store.task_create(s.id, "t-blocked", {"id": "t-blocked", "status": {"state": "TASK_STATE_WORKING"}}, adm.dispatch_id)
    assert e.value.sqlstate == "SQ409"
    await store.fail_dispatch(s.id, adm.dispatch_id, "test ends the turn", False)
    for kind in ("SUSPEND", "DELETE"):
        with pytest.raises(SessionqError) as e:
            await store.admit_operation(s.id, "alice", None, kind)
        assert e.value.sqlstate == "SQ409" and "quiesced" in e.value.message
    await store.finish_idle(s.id, claimed.idle_boundary_id, claimed.idle_executor, None)
    await store.admit_operation(s.id, "alice", None, "SUSPEND")


@pytest.mark.clause("Q-5")
async def test_database_failure_after_suspend_records_without_second_runtime_call(store, sim, database_url):
    s = await ready_session(store, sim)
    await turn_by_store(store, sim, s)
    block = await sim.inject("suspend_actor", "block")
    pool = QuiescencePool(store, sim, database_url, listen=False)
    run = asyncio.create_task(claim_and_quiesce(pool))
    await sim.wait_blocked(block)
    # the runtime call holds no transaction: kill every connection of the control plane's pool now
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                            " WHERE application_name = 'sessionq' AND datname = current_database()")
    await sim.release(block)
    assert await run == s.id
    row = await raw_session(store, s.id)
    assert row.idle_boundary_id is None and row.snapshot_status == "COMPLETED"
    assert await sim.mutation_count(actor=s.actor_name, method="suspend_actor") == 1


@pytest.mark.clause("Q-6")
async def test_burst_uses_all_four_workers(store, sim, database_url):
    sessions = [await ready_session(store, sim, f"b{i}") for i in range(8)]
    await sim.inject("suspend_actor", "delay", delay=0.3, times=None)
    for s in sessions:
        await turn_by_store(store, sim, s)
    t0 = time.monotonic()
    async with running_pool(store, sim, database_url) as pool:
        for s in sessions:
            await wait_until(lambda s=s: _boundary_cleared(store, s), timeout=10)
        elapsed = time.monotonic() - t0
    assert pool.claims == 8
    assert elapsed < 8 * 0.3 * 0.6  # serial would take 2.4 s; four workers about 0.6 s


@pytest.mark.clause("Q-7")
@pytest.mark.clause("Q-10")
async def test_replicas_claim_each_boundary_once_and_scan_at_start(store, sim, database_url):
    sessions = [await ready_session(store, sim, f"r{i}") for i in range(12)]
    for s in sessions:
        await turn_by_store(store, sim, s)  # settled while no worker runs: no notification reaches anyone
    other = await Store.open(database_url, pool_size=4, listen=False)
    try:
        async with running_pool(store, sim, database_url) as a, running_pool(other, sim, database_url) as b:
            for s in sessions:
                await wait_until(lambda s=s: _boundary_cleared(store, s), timeout=10)
    finally:
        await other.close()
    assert a.claims + b.claims == 12
    for s in sessions:
        assert await sim.mutation_count(actor=s.actor_name, method="suspend_actor") == 1


@pytest.mark.clause("Q-7")
async def test_missed_notification_recovered_by_interval_scan(store, sim, database_url):
    s = await ready_session(store, sim)
    async with running_pool(store, sim, database_url, listen=False, recovery_interval=0.5):
        await turn_by_store(store, sim, s)  # no LISTEN: only the recovery scan can find it
        await wait_until(lambda: _boundary_cleared(store, s), timeout=3)


@pytest.mark.clause("Q-8")
async def test_blocked_work_retried_within_a_second_and_idle_workers_stay_quiet(store, sim, database_url):
    s = await ready_session(store, sim)
    await turn_by_store(store, sim, s)
    async with await psycopg.AsyncConnection.connect(database_url) as holder:
        await holder.execute("SELECT 1 FROM sessionq.sessions WHERE id = %s FOR UPDATE", (s.id,))
        async with running_pool(store, sim, database_url, listen=False) as pool:
            await asyncio.sleep(1.5)
            assert await actor_state(sim, s) == "ACTOR_STATE_RUNNING"
            busy_queries = pool.queries
            assert busy_queries >= 4 * 2  # short retries while blocked
            await holder.rollback()  # the lock goes: the short retry picks it up within a second
            t = time.monotonic()
            await wait_until(lambda: _boundary_cleared(store, s), timeout=3)
            assert time.monotonic() - t < 1.6
            quiet_from = pool.queries
            await asyncio.sleep(1.5)
            # nothing to do: no short retry keeps going (one claim + one check per worker per interval)
            assert pool.queries - quiet_from <= 4 * 2


@pytest.mark.clause("Q-9")
async def test_explicit_resume_completion_wakes_workers(store, sim, database_url):
    s = await ready_session(store, sim)
    await store.admit_operation(s.id, "alice", None, "SUSPEND")
    await OperationExecutor(store, sim, 30).run(s.id)
    before = await sim.get_actor(s.actor_atespace, s.actor_name)
    async with running_pool(store, sim, database_url):
        await store.admit_operation(s.id, "alice", None, "RESUME")
        await OperationExecutor(store, sim, 30).run(s.id)
        # the resume ran (the woken pool may already have suspended the Actor again)
        assert (await sim.get_actor(s.actor_atespace, s.actor_name)).version > before.version
        await wait_until(lambda: suspended(sim, s), timeout=2)
    assert (await raw_session(store, s.id)).state == "READY"


@pytest.mark.clause("Q-10")
async def test_failed_claim_is_kept_and_blocks_new_work(store, sim, database_url):
    s = await ready_session(store, sim)
    await turn_by_store(store, sim, s)
    # every suspend attempt times out from the worker's point of view: it may have been issued
    await sim.inject("suspend_actor", "fail_before", times=None)
    pool = QuiescencePool(store, sim, database_url, listen=False)
    assert await claim_and_quiesce(pool) == s.id
    row = await raw_session(store, s.id)
    assert row.idle_executor is not None  # possibly issued: never expires, never taken over
    other = QuiescencePool(store, sim, database_url, listen=False)
    assert await claim_and_quiesce(other) is None
    with pytest.raises(SessionqError):
        await store.admit_operation(s.id, "alice", None, "DELETE")
    assert (await store.get_session(s.id, "alice")).state == "READY"  # completed results stay readable


@pytest.mark.clause("Q-11")
async def test_actor_uid_checked_before_runtime_calls(store, sim, database_url):
    s = await ready_session(store, sim)
    await turn_by_store(store, sim, s)
    actor = await sim.get_actor(s.actor_atespace, s.actor_name)
    await sim.delete_actor(s.actor_atespace, s.actor_name, actor.uid, any_state=True)
    await sim.create_actor(s.actor_atespace, s.actor_name, s.actor_template)
    replaced = await sim.get_actor(s.actor_atespace, s.actor_name)
    await sim.resume_actor(s.actor_atespace, s.actor_name, replaced.uid)
    before = await sim.mutation_count(actor=s.actor_name, method="suspend_actor")
    pool = QuiescencePool(store, sim, database_url, listen=False)
    await claim_and_quiesce(pool)
    assert await sim.mutation_count(actor=s.actor_name, method="suspend_actor") == before
    assert await actor_state(sim, s) == "ACTOR_STATE_RUNNING"  # the replacement was never touched
    assert (await raw_session(store, s.id)).idle_executor is not None


@pytest.mark.clause("Q-4")
async def test_turn_admitted_while_a_worker_looks_wins(store, sim, database_url):
    """A turn whose admission holds the row lock when a worker tries to claim: the worker skips
    the locked row, and after the commit the boundary is superseded - the turn wins."""
    s = await ready_session(store, sim)
    await turn_by_store(store, sim, s)
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        await conn.execute("SELECT sessionq.admit_turn(%s, 'alice', NULL, '{\"parts\": []}'::jsonb, NULL, 600)", (s.id,))
        assert await store.claim_idle(uuid.uuid4()) is None  # SKIP LOCKED: the admission holds the row
        assert await store.idle_work_blocked()  # ... and the short retry keeps looking
        await conn.commit()
    assert await store.claim_idle(uuid.uuid4()) is None
    row = await raw_session(store, s.id)
    assert row.idle_boundary_id is None and row.dispatch_id is not None
