"""The store's pool queues callers beyond its size on its own gate (issue 23): psycopg_pool's queue
(a Condition and an asyncio.wait_for per waiting caller) is never used, every caller is served,
a connection is returned after each, and a caller that cannot get a connection in time still gets
PoolTimeout. A real server, real connections."""

from __future__ import annotations

import asyncio

import pytest
from psycopg_pool import PoolTimeout

from sessionq.db.connection import make_pool


async def test_more_callers_than_connections_queue_on_the_gate_not_in_the_pool(database_url: str) -> None:
    pool = make_pool(database_url, min_size=1, max_size=3)
    await pool.open(wait=True)
    try:
        async def call(i: int) -> int:
            async with pool.connection() as conn:
                cur = await conn.execute("SELECT %s::int, pg_sleep(0.01)", (i,))
                row = await cur.fetchone()
                assert row is not None
                return int(row["int4"])

        assert sorted(await asyncio.gather(*(call(i) for i in range(40)))) == list(range(40))
        stats = pool.get_stats()
        # psycopg_pool's own queue is used only while the pool grows to its size (at most once per
        # connection it opens); without the gate most of the 40 callers wait there
        assert stats.get("requests_queued", 0) <= 3, stats
        assert stats["pool_max"] == 3 and stats["pool_size"] <= 3, stats
        assert not pool._gate.locked()  # every permit is back
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
