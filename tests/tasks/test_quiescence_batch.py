"""Batched quiescence: one statement claims several idle boundaries and says what remains
(sessionq.claim_idle_work); outcomes are recorded several at once (sessionq.finish_idle_many)."""

import asyncio
import contextlib
import json
import time
import uuid

import psycopg
import pytest
from lifecycle import raw_session, ready_session, turn_by_store

from sessionq.domain import quiescence, turn_snapshots
from sessionq.domain.quiescence import QuiescencePool
from sessionq.errors import SessionqError
from sessionq.runtime.base import Code, SubstrateError


async def settled_sessions(store, sim, prefix: str, n: int):
    sessions = [await ready_session(store, sim, f"{prefix}{i}") for i in range(n)]
    for s in sessions:
        await turn_by_store(store, sim, s)  # no worker runs: each leaves an unclaimed idle boundary
    return sessions


async def claim_work(conn, executor, limit):
    cur = await conn.execute("SELECT sessionq.claim_idle_work(%s, 0, %s)", (executor, limit))
    row = await cur.fetchone()
    value = row[0]
    return value if isinstance(value, dict) else json.loads(value)


@pytest.mark.clause("Q-7")
@pytest.mark.clause("Q-6")
async def test_racing_batch_claims_take_each_boundary_once(store, sim, database_url):
    sessions = await settled_sessions(store, sim, "race", 12)
    conns = [await psycopg.AsyncConnection.connect(database_url, autocommit=True) for _ in range(6)]
    claimed: dict[str, list[str]] = {}
    start = asyncio.Event()

    async def racer(conn):
        executor = uuid.uuid4()
        await start.wait()
        got: list[str] = []
        for _ in range(20):  # bounded: 12 boundaries, at least one per look while any is left
            work = await claim_work(conn, executor, 3)
            assert len(work["claimed"]) <= 3
            for row in work["claimed"]:
                assert row["idle_executor"] == str(executor)
                got.append(row["id"])
            if not work["claimed"] and not work["more"]:
                break
        claimed[str(executor)] = got

    try:
        tasks = [asyncio.create_task(racer(c)) for c in conns]
        await asyncio.sleep(0.05)
        start.set()
        await asyncio.gather(*tasks)
    finally:
        for c in conns:
            await c.close()
    every = [sid for got in claimed.values() for sid in got]
    assert sorted(every) == sorted(str(s.id) for s in sessions)  # each exactly once
    for s in sessions:
        row = await raw_session(store, s.id)
        assert str(row.idle_executor) in claimed and str(s.id) in claimed[str(row.idle_executor)]


@pytest.mark.clause("Q-6")
@pytest.mark.clause("Q-8")
async def test_a_claim_says_whether_more_is_due(store, sim, database_url):
    await settled_sessions(store, sim, "more", 5)
    seen = []
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        for _ in range(4):
            work = await claim_work(conn, uuid.uuid4(), 2)
            seen.append((len(work["claimed"]), work["more"], work["blocked"]))
    # the last boundary's claim reports nothing more; the empty look after it nothing blocked either
    assert seen == [(2, True, False), (2, True, False), (1, False, False), (0, False, False)]


@pytest.mark.clause("Q-6")
async def test_a_lone_settlement_costs_one_look_and_wakes_no_sibling(store, sim, database_url):
    s = await ready_session(store, sim)
    pool = QuiescencePool(store, sim, database_url, workers=4, recovery_interval=60.0)
    stop = asyncio.Event()
    task = asyncio.create_task(pool.run(stop))
    try:
        deadline = time.monotonic() + 5
        while pool.queries < 5 and time.monotonic() < deadline:  # the start-up scans: 4 looks + the lapse scan
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)
        before = pool.queries
        await turn_by_store(store, sim, s)
        deadline = time.monotonic() + 5
        while (await raw_session(store, s.id)).idle_boundary_id is not None:
            assert time.monotonic() < deadline, "not quiesced"
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)
        # one claim statement: it took the boundary and said nothing more was due, so no sibling
        # was woken and the worker did not look again
        assert pool.queries - before == 1
        assert pool.claims == 1
    finally:
        stop.set()
        await task


@pytest.mark.clause("Q-10")
@pytest.mark.clause("Q-5")
async def test_batched_outcomes_are_recorded_by_holders_only(store, sim, database_url):
    sessions = await settled_sessions(store, sim, "rec", 3)
    executor = uuid.uuid4()
    work = await store.claim_idle_work(executor, 0.0, 3)
    assert sorted(x.id for x in work.claimed) == sorted(s.id for s in sessions)
    lost = work.claimed[1]
    # the operator's retry takes one claim over: its old holder can no longer record it
    taken = await store.take_over_idle_claim(lost.id, uuid.uuid4(), 60.0)
    assert taken is not None
    pool = QuiescencePool(store, sim, database_url, listen=False)
    results = await asyncio.gather(
        *(pool.outcomes.finish(c.id, c.idle_boundary_id, c.idle_executor, None) for c in work.claimed),
        return_exceptions=True,
    )
    assert pool.outcomes.statements == 1  # the three in one statement
    for c, r in zip(work.claimed, results, strict=True):
        row = await raw_session(store, c.id)
        if c.id == lost.id:
            assert isinstance(r, SessionqError) and r.sqlstate == "SQ409"
            assert row.idle_executor == taken.idle_executor and row.idle_boundary_id == c.idle_boundary_id
        else:
            assert not isinstance(r, BaseException) and r.idle_boundary_id is None
            assert row.idle_boundary_id is None and row.idle_executor is None


@pytest.mark.clause("Q-5")
async def test_a_failed_batch_is_recorded_one_by_one(store, sim, database_url):
    sessions = await settled_sessions(store, sim, "one", 2)
    work = await store.claim_idle_work(uuid.uuid4(), 0.0, 2)
    assert len(work.claimed) == 2
    pool = QuiescencePool(store, sim, database_url, listen=False)
    # the batch statement fails (not a connection failure): each outcome is then recorded on its own
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
        await admin.execute("ALTER FUNCTION sessionq.finish_idle_many(jsonb) RENAME TO finish_idle_many_away")
        try:
            results = await asyncio.gather(
                *(pool.outcomes.finish(c.id, c.idle_boundary_id, c.idle_executor, None) for c in work.claimed))
        finally:
            with contextlib.suppress(psycopg.Error):
                await admin.execute("ALTER FUNCTION sessionq.finish_idle_many_away(jsonb) RENAME TO finish_idle_many")
    assert pool.outcomes.statements == 3  # the failed batch, then one each
    assert all(r.idle_boundary_id is None for r in results)
    for s in sessions:
        assert (await raw_session(store, s.id)).idle_executor is None


async def pins_of(database_url, session_id):
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        cur = await conn.execute("SELECT state, tag_name FROM sessionq.turn_snapshots WHERE session_id = %s",
                                 (session_id,))
        return await cur.fetchall()


@pytest.mark.clause("TT-2")
@pytest.mark.clause("TT-6")
async def test_turn_pins_are_finished_with_the_batched_outcomes(store, sim, database_url):
    sessions = await settled_sessions(store, sim, "pin", 3)
    work = await store.claim_idle_work(uuid.uuid4(), 0.0, 3)
    assert len(work.claimed) == 3
    pool = QuiescencePool(store, sim, database_url, listen=False, turn_snapshots=4)
    await asyncio.gather(*(pool.quiesce(c) for c in work.claimed))
    assert pool.outcomes.statements <= 3  # each outcome and its pin in one statement (or several in one)
    for s in sessions:
        row = await raw_session(store, s.id)
        assert row.idle_boundary_id is None and row.snapshot_status == "COMPLETED"
        pins = await pins_of(database_url, s.id)
        assert [p[0] for p in pins] == ["PINNED"]
        assert (await sim.get_tag(s.actor_atespace, pins[0][1])).snapshot_generation == row.snapshot_generation


@pytest.mark.clause("TT-6")
async def test_a_pin_taken_over_is_not_recorded_and_its_tag_goes(store, sim, database_url):
    sessions = await settled_sessions(store, sim, "lost", 2)
    work = await store.claim_idle_work(uuid.uuid4(), 0.0, 2)
    pool = QuiescencePool(store, sim, database_url, listen=False, turn_snapshots=4)
    victim = work.claimed[0]
    real_tag_turn = turn_snapshots.tag_turn

    async def tag_then_lose(st, rt, session, snapshot, keep, **kw):
        made = await real_tag_turn(st, rt, session, snapshot, keep, **kw)
        if session.id == victim.id and made is not None:  # another attempt took this pin over meanwhile
            async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
                await conn.execute("UPDATE sessionq.turn_snapshots SET executor_id = %s WHERE id = %s",
                                   (uuid.uuid4(), made.pin.id))
        return made

    quiescence.tag_turn = tag_then_lose
    try:
        await asyncio.gather(*(pool.quiesce(c) for c in work.claimed))
    finally:
        quiescence.tag_turn = real_tag_turn
    for s in sessions:
        row = await raw_session(store, s.id)
        assert row.idle_boundary_id is None  # the idle outcome is recorded either way
        (state, tag), = await pins_of(database_url, s.id)
        if s.id == victim.id:
            assert state == "PINNING"  # left to the attempt that holds it
            with pytest.raises(SubstrateError) as e:
                await sim.get_tag(s.actor_atespace, tag)
            assert e.value.code == Code.NOT_FOUND  # this attempt's tag was removed
        else:
            assert state == "PINNED"
