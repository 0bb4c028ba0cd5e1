"""The store's pool queues callers beyond its size on its own gate (issue 23): psycopg_pool's queue
(a Condition and an asyncio.wait_for per waiting caller) is never used, every caller is served,
a connection is returned after each, and a caller that cannot get a connection in time still gets
PoolTimeout. A real server, real connections."""

from __future__ import annotations

import asyncio

import pytest
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from sessionq.db.connection import conninfo, make_pool


async def _forty_calls(pool: AsyncConnectionPool) -> None:
    async def call(i: int) -> int:
        async with pool.connection() as conn:
            cur = await conn.execute("SELECT %s::int, pg_sleep(0.01)", (i,))
            row = await cur.fetchone()
            assert row is not None
            return int(row["int4"])

    assert sorted(await asyncio.gather(*(call(i) for i in range(40)))) == list(range(40))


async def test_more_callers_than_connections_queue_on_the_gate_not_in_the_pool(database_url: str) -> None:
    pool = make_pool(database_url, min_size=1, max_size=3)
    await pool.open(wait=True)
    try:
        # while the pool grows to its size its own queue is used (a connection takes longer to open
        # than a call, so a returned connection may serve several queued callers meanwhile)
        await _forty_calls(pool)
        grown = pool.get_stats()
        assert grown["pool_max"] == 3 and grown["pool_size"] == 3, grown
        # once it has its connections, every caller the gate lets through finds one ready
        await _forty_calls(pool)
        stats = pool.get_stats()
        assert stats["requests_num"] == grown["requests_num"] + 40, stats
        assert stats.get("requests_queued", 0) == grown.get("requests_queued", 0), (grown, stats)
        assert stats["pool_size"] <= 3, stats
        assert not pool._gate.locked()  # every permit is back
    finally:
        await pool.close()


async def test_without_the_gate_the_pools_own_queue_is_used(database_url: str) -> None:
    # the counterpart of the test above: the same calls on a plain psycopg_pool of the same size
    # queue in the pool even when it is full, so the check above can see a queue
    pool: AsyncConnectionPool = AsyncConnectionPool(
        conninfo(database_url), min_size=3, max_size=3, open=False, kwargs={"row_factory": dict_row}
    )
    await pool.open(wait=True)
    try:
        await _forty_calls(pool)
        assert pool.get_stats().get("requests_queued", 0) >= 30
    finally:
        await pool.close()


async def test_a_caller_waiting_on_the_gate_times_out_with_pool_timeout(database_url: str) -> None:
    pool = make_pool(database_url, min_size=1, max_size=2)
    await pool.open(wait=True)
    try:
        held = [await pool.getconn(), await pool.getconn()]
        with pytest.raises(PoolTimeout):
            await pool.getconn(timeout=0.2)
        for conn in held:
            await pool.putconn(conn)
        conn = await pool.getconn(timeout=5)  # the permits came back
        await pool.putconn(conn)
        assert not pool._gate.locked()
    finally:
        await pool.close()
