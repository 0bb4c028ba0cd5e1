"""Bulk actions: one ordinary operation per matching Session through its own admission, racing with
turns and explicit lifecycle calls; every Session ends deleted or reported, none half-done."""

from __future__ import annotations

import asyncio
import random
import time

import pytest
from conftest import apply_agent
from fleet_agent import prepared_agent
from lifecycle import count, turn_by_store

from sessionq.domain.operations import OperationExecutor, OutcomeStatus
from sessionq.errors import SessionqError
from sessionq.models import BulkActionKind, BulkActionState, OperationKind, SessionState
from sessionq.runtime.simulator import install_schema


async def fleet_of(store, sim, n: int, labels: dict[str, str], worker_runs: bool = False) -> list:
    await (prepared_agent(store) if worker_runs else apply_agent(store, sim))
    ex = OperationExecutor(store, sim, 120)
    gate = asyncio.Semaphore(16)

    async def one(i: int):
        async with gate:
            adm = await store.admit_create_labeled("alice", f"r{i}", "kagent", "my-first-agent", "", labels, None)
            out = await ex.run(adm.session.id)
            if worker_runs and out.status in (OutcomeStatus.BUSY, OutcomeStatus.DONE):
                # a running worker's execute_operation job began the creation when it fetched the
                # job (sessionq.fetch_job_begun): it completes it, this executor does not
                return await ready_by_worker(store, adm.session.id)
            assert out.status == "completed", out
            return out.session

    return list(await asyncio.gather(*(one(i) for i in range(n))))


async def ready_by_worker(store, session_id, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while (session := await store.session_by_id(session_id)).state != SessionState.READY:
        assert time.monotonic() < deadline, session
        await asyncio.sleep(0.05)
    return session


async def settle_all(store, sim, timeout: float = 300.0) -> None:
    """Execute every admitted operation, as their execute_operation jobs would."""
    ex = OperationExecutor(store, sim, 120)
    gate = asyncio.Semaphore(16)
    deadline = time.monotonic() + timeout

    async def one(sid):
        async with gate:
            await ex.run(sid)

    while True:
        async with store.pool.connection() as conn:
            cur = await conn.execute("SELECT id FROM sessionq.sessions WHERE operation <> 'NONE'")
            pending = [r["id"] if isinstance(r, dict) else r[0] for r in await cur.fetchall()]
        if not pending:
            return
        assert time.monotonic() < deadline, "operations still pending"
        await asyncio.gather(*(one(sid) for sid in pending))


async def run_bulk(store, bulk_id) -> object:
    while True:
        action = await store.bulk_step(bulk_id, 50)
        if action.state == BulkActionState.DONE:
            return action


@pytest.mark.clause("FLEET-4")
async def test_bulk_suspend_by_selector_reports_busy_sessions(store, sim):
    billing = await fleet_of(store, sim, 12, {"team": "billing"})
    other = await store.admit_create_labeled("alice", "other", "kagent", "my-first-agent", "", {"team": "x"}, None)
    await OperationExecutor(store, sim, 120).run(other.session.id)
    await turn_by_store(store, sim, billing[0], settle=False)  # a running turn: busy, reported, not forced
    flt = {"selector": [{"key": "team", "op": "in", "values": ["billing"]}]}
    assert await store.count_sessions("alice", None, False, flt) == 12
    action = await store.start_bulk_action("alice", "bulk-1", False, BulkActionKind.SUSPEND, flt, None)
    assert action.matched == 12 and action.state == BulkActionState.RUNNING
    again = await store.start_bulk_action("alice", "bulk-1", False, BulkActionKind.SUSPEND, flt, None)
    assert again.id == action.id
    with pytest.raises(SessionqError) as e:
        await store.start_bulk_action("alice", "bulk-1", False, BulkActionKind.DELETE, flt, None)
    assert e.value.sqlstate == "SQ422"
    await run_bulk(store, action.id)
    done = await store.get_bulk_action(action.id, "alice")
    assert (done.processed, done.admitted, done.refused) == (12, 11, 1)
    items = await store.list_bulk_action_items(action.id, "alice", None, 10)
    assert [i.session_id for i in items] == [billing[0].id] and items[0].code == "SQ409"
    await settle_all(store, sim)
    states = {s.id: (await store.session_by_id(s.id)).state for s in billing}
    assert states[billing[0].id] == SessionState.READY
    assert sum(st == SessionState.SUSPENDED for st in states.values()) == 11
    assert (await store.session_by_id(other.session.id)).state == SessionState.READY  # not matched
    with pytest.raises(SessionqError):  # another caller's action answers as missing
        await store.get_bulk_action(action.id, "bob")


async def race_bulk_delete(store, sim, database_url: str, n: int) -> None:
    # the race is about deletion, not the runtime's capacity: a simulated worker for every Session
    # (the racers' turns leave Actors running, and the slower the machine the more turns they play
    # before the action ends: past the fixture's 64 workers, a resume is RESOURCE_EXHAUSTED)
    sim.worker_pool_size = n + 64
    await install_schema(database_url, worker_pool_size=sim.worker_pool_size)
    sessions = await fleet_of(store, sim, n, {"fleet": "doomed"})
    ex = OperationExecutor(store, sim, 120)
    rnd = random.Random(5)
    stop = asyncio.Event()
    explicit: dict = {}

    async def turns():
        while not stop.is_set():
            s = rnd.choice(sessions)
            try:
                await turn_by_store(store, sim, s, settle=rnd.random() < 0.5)
            except Exception:  # the Session is busy, being deleted or gone: the race's point
                pass
            await asyncio.sleep(0)

    async def calls():
        while not stop.is_set():
            s = rnd.choice(sessions)
            kind = rnd.choice([OperationKind.SUSPEND, OperationKind.RESUME, OperationKind.DELETE])
            try:
                await store.admit_operation(s.id, "alice", None, kind)
                explicit[s.id] = kind
                await ex.run(s.id)
            except Exception:
                pass
            await asyncio.sleep(0)

    racers = [asyncio.create_task(turns()) for _ in range(3)] + [asyncio.create_task(calls()) for _ in range(3)]
    flt = {"selector": [{"key": "fleet", "op": "in", "values": ["doomed"]}]}
    action = await store.start_bulk_action("alice", "doom", False, BulkActionKind.DELETE, flt, None)
    done = await run_bulk(store, action.id)
    stop.set()
    await asyncio.gather(*racers)
    await settle_all(store, sim)
    print("bulk delete:", done.processed, done.admitted, done.unchanged, done.refused)
    assert done.processed == done.admitted + done.unchanged + done.refused
    assert done.processed <= n
    reported = set()
    after = None
    while page := await store.list_bulk_action_items(action.id, "alice", after, 100):
        reported |= {i.session_id for i in page}
        after = page[-1].session_id
    assert len(reported) == done.refused
    for s in sessions:
        row = await store.session_by_id(s.id)
        assert row is not None and row.operation == OperationKind.NONE, row  # nothing half-done
        assert row.state in (SessionState.DELETED, SessionState.READY, SessionState.SUSPENDED)
        if row.state != SessionState.DELETED:
            assert s.id in reported, row  # not deleted: reported, never silently skipped
            actor = await sim.get_actor(row.actor_atespace, row.actor_name)
            assert actor.uid == row.actor_uid  # its Actor intact
        else:
            assert row.revision_id is None and row.actor_uid is None
    assert await count(store, "SELECT count(*) FROM sessionq.sessions WHERE state = 'DELETING'") == 0


@pytest.mark.clause("FLEET-4")
async def test_bulk_delete_racing_turns_and_explicit_calls(store, sim, database_url):
    await race_bulk_delete(store, sim, database_url, 200)


@pytest.mark.slow
@pytest.mark.clause("FLEET-4")
async def test_bulk_delete_of_2000_racing_turns_and_explicit_calls(store, sim, database_url):
    await race_bulk_delete(store, sim, database_url, 2000)


@pytest.mark.clause("FLEET-4")
async def test_the_worker_runs_a_bulk_action_and_its_operations(store, sim, worker):
    """The run_bulk_action job pages through the action; the admitted operations run as their own
    execute_operation jobs."""
    sessions = await fleet_of(store, sim, 60, {"tier": "a"}, worker_runs=True)
    flt = {"selector": [{"key": "tier", "op": "in", "values": ["a"]}]}
    action = await store.start_bulk_action("alice", "suspend-all", False, BulkActionKind.SUSPEND, flt, None)
    deadline = time.monotonic() + 60
    while (done := await store.get_bulk_action(action.id, "alice")).state != BulkActionState.DONE:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    assert (done.processed, done.admitted, done.refused) == (60, 60, 0)
    while await count(store, "SELECT count(*) FROM sessionq.sessions WHERE state <> 'SUSPENDED'"):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    assert {(await store.session_by_id(s.id)).state for s in sessions} == {SessionState.SUSPENDED}
