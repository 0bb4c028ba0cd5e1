"""db/kept_reads.py: coalesced point reads on one kept connection, driven by the event loop (issue 23).

A real server and real connections, with a statement pair of the same shape as GetSession's (ord
first): each read is (a, b, sleep) and its row is a / b, the backend's pid and a pg_sleep that
holds the statement in flight. What GetSession relies on: every read gets its own row, one
statement at a time, one connection kept between statements and given back when idle, an error
reaching the reads of its batch only, a broken connection failing what was in flight and the next
read going on a new one, a lost prepared statement prepared again, no prepared statement through a
pooler, cancelled reads dropping out, and a closing store failing what is left."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from sessionq.db.kept_reads import KeptReads
from sessionq.db.raw import RawStatement, text_array

Key = tuple[int, int, float]

SINGLE = RawStatement(
    "sessionq_test_kept_one",
    "SELECT 1, ($1::int / $2::int)::text, pg_backend_pid(), pg_sleep($3::float8)::text",
)
BATCH = RawStatement(
    "sessionq_test_kept_many",
    "SELECT o, (a / b)::text, pg_backend_pid(), (SELECT pg_sleep(max(s)) FROM unnest($3::float8[]) s)::text"
    " FROM unnest($1::int[], $2::int[]) WITH ORDINALITY AS t(a, b, o)",
)


def _one(key: Key) -> list[bytes | None]:
    return [str(key[0]).encode(), str(key[1]).encode(), str(key[2]).encode()]


def _many(keys: list[Key]) -> list[bytes | None]:
    return [text_array([str(k[i]) for k in keys]) for i in range(3)]


def _reads(pool: AsyncConnectionPool, **kw: Any) -> KeptReads[Key]:
    return KeptReads(pool, SINGLE, BATCH, _one, _many, **kw)


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[AsyncConnectionPool]:
    p = AsyncConnectionPool(database_url, min_size=1, max_size=3, open=False, kwargs={"autocommit": True})
    await p.open(wait=True)
    yield p
    await p.close()


async def _sent(reads: KeptReads[Key], n: int = 1) -> None:
    """Until a statement of `n` reads is in flight (the connection taken, nothing queued)."""
    for _ in range(500):
        if reads.inflight is not None and len(reads.inflight) == n and not reads.queue:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no statement went")


def _quotient(row: Any) -> int:
    assert row is not None
    return int(row[1])


async def _in_flight(database_url: str, pattern: str) -> list[int]:
    """The pids of backends running a statement that contains `pattern` (waits until there is one)."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        for _ in range(200):
            cur = await conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE state = 'active' AND query LIKE %s AND pid <> pg_backend_pid()",
                (f"%{pattern}%",),
            )
            pids = [r[0] for r in await cur.fetchall()]
            if pids:
                return pids
            await asyncio.sleep(0.02)
    raise AssertionError(f"no statement with {pattern!r} in flight")


async def test_many_racers_each_get_their_own_row_one_statement_at_a_time(pool: AsyncConnectionPool) -> None:
    reads = _reads(pool)
    keys = [(random.randint(-10_000, 10_000), random.choice([1, 2, 3, 7, -5]), 0.0) for _ in range(400)]

    async def racer(key: Key) -> int:
        await asyncio.sleep(random.random() * 0.05)
        return _quotient(await reads.read(key))

    got = await asyncio.gather(*(racer(k) for k in keys))
    # PostgreSQL's integer division truncates toward zero
    assert got == [int(a / b) for a, b, _ in keys]
    assert reads.batches > 0 and reads.largest > 1  # some reads shared a statement
    assert not reads.busy and not reads.queue
    await reads.close()


async def test_one_connection_is_kept_between_statements_and_given_back_when_idle(pool: AsyncConnectionPool) -> None:
    reads = _reads(pool, keep=0.3)
    requests = pool.get_stats().get("requests_num", 0)
    pids = set()
    for i in range(20):
        row = await reads.read((i, 1, 0.0))
        assert row is not None
        pids.add(row[2])
    assert len(pids) == 1 and reads.conn is not None
    assert pool.get_stats().get("requests_num", 0) - requests == 1  # taken from the pool once
    await asyncio.sleep(0.7)
    assert reads.conn is None  # given back after `keep` without a statement
    assert _quotient(await reads.read((8, 2, 0.0))) == 4 and reads.conn is not None  # and taken again
    await reads.close()
    assert reads.conn is None
    await asyncio.sleep(0.05)
    stats = pool.get_stats()
    assert stats.get("pool_available", 0) == stats.get("pool_size", 0)


async def test_an_error_reaches_the_reads_of_its_batch_only(pool: AsyncConnectionPool, database_url: str) -> None:
    reads = _reads(pool, max_batch=4)
    leader = reads.read((1, 1, 0.3))  # holds the connection while the batches queue
    await _sent(reads)
    good1 = [reads.read((i, 1, 0.0)) for i in range(4)]
    bad = [reads.read((i, 0 if i == 2 else 1, 0.0)) for i in range(4)]
    good2 = [reads.read((i * 10, 5, 0.0)) for i in range(4)]
    assert _quotient(await leader) == 1
    assert [_quotient(await f) for f in good1] == [0, 1, 2, 3]
    for f in bad:
        with pytest.raises(psycopg.errors.DivisionByZero):
            await f
    assert [_quotient(await f) for f in good2] == [0, 2, 4, 6]
    assert reads.conn is not None and reads.conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
    await reads.close()


async def test_a_broken_connection_fails_what_was_in_flight_and_the_next_read_reconnects(
    pool: AsyncConnectionPool, database_url: str
) -> None:
    reads = _reads(pool)
    first = await reads.read((1, 1, 0.0))
    assert first is not None
    in_flight = [reads.read((1, 1, 30.0))]
    await _sent(reads)
    in_flight += [reads.read((i, 1, 30.0)) for i in range(3)]  # queued: a batch, after the first
    [pid] = await _in_flight(database_url, "pg_sleep")
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(psycopg.OperationalError):
            await in_flight[0]
        # the queued batch went on a new connection: end it the same way
        [pid2] = await _in_flight(database_url, "pg_sleep")
        assert pid2 != pid
        await admin.execute("SELECT pg_terminate_backend(%s)", (pid2,))
    for f in in_flight[1:]:
        with pytest.raises(psycopg.OperationalError):
            await f
    row = await reads.read((9, 3, 0.0))
    assert _quotient(row) == 3 and row is not None and row[2] not in (first[2], str(pid).encode())
    await reads.close()


async def test_a_statement_the_server_lost_is_prepared_again(pool: AsyncConnectionPool) -> None:
    reads = _reads(pool)
    # both statements prepared: one read alone, then two queued behind it (a batch)
    got = await asyncio.gather(reads.read((6, 3, 0.05)), reads.read((9, 3, 0.0)), reads.read((3, 3, 0.0)))
    assert [_quotient(r) for r in got] == [2, 3, 1] and reads.batches == 1
    conn = reads.conn
    assert conn is not None
    conn.pgconn.exec_(b"DEALLOCATE ALL")  # as a server restart behind a pooler's address would
    assert _quotient(await reads.read((10, 5, 0.0))) == 2
    got = await asyncio.gather(reads.read((1, 1, 0.1)), *(reads.read((i, 1, 0.0)) for i in range(5)))
    assert [_quotient(r) for r in got] == [1, 0, 1, 2, 3, 4]
    res = conn.pgconn.exec_(b"SELECT name FROM pg_prepared_statements ORDER BY name")
    assert [res.get_value(r, 0) for r in range(res.ntuples)] == [b"sessionq_test_kept_many", b"sessionq_test_kept_one"]
    await reads.close()


async def test_through_a_pooler_the_statements_are_sent_unnamed(database_url: str) -> None:
    """A connection to a transaction pooler has prepare_threshold None (db/connection.py)."""
    kwargs = {"autocommit": True, "prepare_threshold": None}
    async with AsyncConnectionPool(database_url, min_size=1, max_size=2, open=False, kwargs=kwargs) as pool:
        reads = _reads(pool)
        got = await asyncio.gather(*(reads.read((i, 1, 0.01 if i == 0 else 0.0)) for i in range(10)))
        assert [_quotient(r) for r in got] == list(range(10))
        conn = reads.conn
        assert conn is not None
        res = conn.pgconn.exec_(b"SELECT count(*) FROM pg_prepared_statements")
        assert res.get_value(0, 0) == b"0"
        await reads.close()


async def test_cancelled_reads_drop_out_and_the_others_are_answered(pool: AsyncConnectionPool) -> None:
    reads = _reads(pool)

    async def read(key: Key) -> int:
        return _quotient(await reads.read(key))

    leader = asyncio.create_task(read((1, 1, 0.3)))
    await _sent(reads)
    batch = [asyncio.create_task(read((i, 1, 0.2))) for i in range(6)]
    queued = [asyncio.create_task(read((i, 1, 0.0))) for i in range(6)]
    await asyncio.sleep(0.05)
    leader.cancel()  # in flight
    queued[0].cancel()  # still queued
    await asyncio.sleep(0.4)
    batch[3].cancel()  # in flight, in a batch
    assert [await t for i, t in enumerate(batch) if i != 3] == [0, 1, 2, 4, 5]
    assert [await t for t in queued[1:]] == [1, 2, 3, 4, 5]
    for t in (leader, queued[0], batch[3]):
        assert t.cancelled()
    assert not reads.busy and not reads.queue
    await reads.close()


async def test_closing_fails_what_is_queued_or_in_flight(pool: AsyncConnectionPool) -> None:
    reads = _reads(pool)
    in_flight = reads.read((1, 1, 5.0))
    await _sent(reads)
    queued = [reads.read((i, 1, 0.0)) for i in range(3)]
    await reads.close()
    for f in [in_flight, *queued, reads.read((1, 1, 0.0))]:
        with pytest.raises(psycopg.OperationalError, match="closing"):
            await f
    assert reads.conn is None


async def test_when_the_pool_has_no_connection_every_queued_read_gets_its_error(database_url: str) -> None:
    async with AsyncConnectionPool(
        database_url, min_size=1, max_size=1, timeout=0.3, open=False, kwargs={"autocommit": True}
    ) as pool:
        taken = await pool.getconn()
        reads = _reads(pool)
        waiting = [reads.read((i, 1, 0.0)) for i in range(5)]
        for f in waiting:
            with pytest.raises(PoolTimeout):
                await f
        assert not reads.busy and not reads.queue
        await pool.putconn(taken)
        assert _quotient(await reads.read((4, 2, 0.0))) == 2
        await reads.close()
