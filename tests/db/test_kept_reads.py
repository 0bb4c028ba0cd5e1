"""db/kept_reads.py: coalesced point reads on one kept connection, driven by the event loop.

A real server and real connections, with a statement pair of the same shape as GetSession's (ord
first): each read is (a, b, sleep) and its row is a / b, the backend's pid and a pg_sleep that
holds the statement in flight. What GetSession relies on: every read gets its own row, one
statement at a time, one connection kept between statements and given back when idle, an error
reaching the reads of its batch only, a broken connection failing what was in flight and the next
read going on a new one, a lost prepared statement prepared again, no prepared statement through a
pooler, cancelled reads dropping out (a statement all of whose reads gave up cancelled on the
server), reads of several kinds on one connection, rows read by column name, and a closing store
failing what is left."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from sessionq.db.kept_reads import KeptReads, PointRead
from sessionq.db.raw import Columns, GetValue, RawStatement, Row, record_reader, text_array

Key = tuple[int, int, float]

SINGLE = RawStatement(
    "sessionq_test_kept_one",
    "SELECT 1 AS ord, ($1::int / $2::int)::text, pg_backend_pid(), pg_sleep($3::float8)::text",
)
BATCH = RawStatement(
    "sessionq_test_kept_many",
    "SELECT o AS ord, (a / b)::text, pg_backend_pid(), (SELECT pg_sleep(max(s)) FROM unnest($3::float8[]) s)::text"
    " FROM unnest($1::int[], $2::int[]) WITH ORDINALITY AS t(a, b, o)",
)


def _one(key: Key) -> list[bytes | None]:
    return [str(key[0]).encode(), str(key[1]).encode(), str(key[2]).encode()]


def _many(keys: list[Key]) -> list[bytes | None]:
    return [text_array([str(k[i]) for k in keys]) for i in range(3)]


def _rows(columns: Columns) -> Callable[[GetValue, int], Row]:
    """Each read's answer: its row's values in the statement's order (text, as they came)."""
    width = range(len(columns))
    return lambda get, r: tuple(get(r, c) for c in width)


DIVIDE = PointRead(SINGLE, BATCH, _one, _many, _rows)


class Division(NamedTuple):
    quotient: int
    remainder: int | None


# a second kind of read on the same keys: its statements name their columns, each in another order
DIVMOD = PointRead(
    RawStatement(
        "sessionq_test_kept_divmod_one",
        "SELECT ($1::int % $2::int) AS remainder, 1 AS ord, pg_sleep($3::float8)::text AS slept,"
        " ($1::int / $2::int) AS quotient",
    ),
    RawStatement(
        "sessionq_test_kept_divmod_many",
        "SELECT a / b AS quotient, o AS ord, a % b AS remainder,"
        " (SELECT pg_sleep(max(s)) FROM unnest($3::float8[]) s)::text AS slept"
        " FROM unnest($1::int[], $2::int[]) WITH ORDINALITY AS t(a, b, o)",
    ),
    _one, _many, record_reader(Division),
)


def _reads(pool: AsyncConnectionPool, **kw: Any) -> KeptReads:
    return KeptReads(pool, **kw)


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[AsyncConnectionPool]:
    p = AsyncConnectionPool(database_url, min_size=1, max_size=3, open=False, kwargs={"autocommit": True})
    await p.open(wait=True)
    yield p
    await p.close()


async def _sent(reads: KeptReads, n: int = 1) -> None:
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
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND state = 'active'"
                " AND query LIKE %s AND pid <> pg_backend_pid()",
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
        return _quotient(await reads.read(DIVIDE, key))

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
        row = await reads.read(DIVIDE, (i, 1, 0.0))
        assert row is not None
        pids.add(row[2])
    assert len(pids) == 1 and reads.conn is not None
    assert pool.get_stats().get("requests_num", 0) - requests == 1  # taken from the pool once
    await asyncio.sleep(0.7)
    assert reads.conn is None  # given back after `keep` without a statement
    assert _quotient(await reads.read(DIVIDE, (8, 2, 0.0))) == 4 and reads.conn is not None  # and taken again
    await reads.close()
    assert reads.conn is None
    await asyncio.sleep(0.05)
    stats = pool.get_stats()
    assert stats.get("pool_available", 0) == stats.get("pool_size", 0)


async def test_an_error_reaches_the_reads_of_its_batch_only(pool: AsyncConnectionPool, database_url: str) -> None:
    reads = _reads(pool, max_batch=4)
    leader = reads.read(DIVIDE, (1, 1, 0.3))  # holds the connection while the batches queue
    await _sent(reads)
    good1 = [reads.read(DIVIDE, (i, 1, 0.0)) for i in range(4)]
    bad = [reads.read(DIVIDE, (i, 0 if i == 2 else 1, 0.0)) for i in range(4)]
    good2 = [reads.read(DIVIDE, (i * 10, 5, 0.0)) for i in range(4)]
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
    first = await reads.read(DIVIDE, (1, 1, 0.0))
    assert first is not None
    in_flight = [reads.read(DIVIDE, (1, 1, 30.0))]
    await _sent(reads)
    in_flight += [reads.read(DIVIDE, (i, 1, 30.0)) for i in range(3)]  # queued: a batch, after the first
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
    row = await reads.read(DIVIDE, (9, 3, 0.0))
    assert _quotient(row) == 3 and row is not None and row[2] not in (first[2], str(pid).encode())
    await reads.close()


async def test_a_statement_the_server_lost_is_prepared_again(pool: AsyncConnectionPool) -> None:
    reads = _reads(pool)
    # both statements prepared: one read alone, then two queued behind it (a batch)
    got = await asyncio.gather(reads.read(DIVIDE, (6, 3, 0.05)), reads.read(DIVIDE, (9, 3, 0.0)), reads.read(DIVIDE, (3, 3, 0.0)))
    assert [_quotient(r) for r in got] == [2, 3, 1] and reads.batches == 1
    conn = reads.conn
    assert conn is not None
    conn.pgconn.exec_(b"DEALLOCATE ALL")  # as a server restart behind a pooler's address would
    assert _quotient(await reads.read(DIVIDE, (10, 5, 0.0))) == 2
    got = await asyncio.gather(reads.read(DIVIDE, (1, 1, 0.1)), *(reads.read(DIVIDE, (i, 1, 0.0)) for i in range(5)))
    assert [_quotient(r) for r in got] == [1, 0, 1, 2, 3, 4]
    res = conn.pgconn.exec_(b"SELECT name FROM pg_prepared_statements ORDER BY name")
    assert [res.get_value(r, 0) for r in range(res.ntuples)] == [b"sessionq_test_kept_many", b"sessionq_test_kept_one"]
    await reads.close()


async def test_through_a_pooler_the_statements_are_sent_unnamed(database_url: str) -> None:
    """A connection to a transaction pooler has prepare_threshold None (db/connection.py)."""
    kwargs = {"autocommit": True, "prepare_threshold": None}
    async with AsyncConnectionPool(database_url, min_size=1, max_size=2, open=False, kwargs=kwargs) as pool:
        reads = _reads(pool)
        got = await asyncio.gather(*(reads.read(DIVIDE, (i, 1, 0.01 if i == 0 else 0.0)) for i in range(10)))
        assert [_quotient(r) for r in got] == list(range(10))
        conn = reads.conn
        assert conn is not None
        res = conn.pgconn.exec_(b"SELECT count(*) FROM pg_prepared_statements")
        assert res.get_value(0, 0) == b"0"
        await reads.close()


async def test_cancelled_reads_drop_out_and_the_others_are_answered(pool: AsyncConnectionPool) -> None:
    reads = _reads(pool)

    async def read(key: Key) -> int:
        return _quotient(await reads.read(DIVIDE, key))

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
    in_flight = reads.read(DIVIDE, (1, 1, 5.0))
    await _sent(reads)
    queued = [reads.read(DIVIDE, (i, 1, 0.0)) for i in range(3)]
    await reads.close()
    for f in [in_flight, *queued, reads.read(DIVIDE, (1, 1, 0.0))]:
        with pytest.raises(psycopg.OperationalError, match="closing"):
            await f
    assert reads.conn is None


async def test_when_the_pool_has_no_connection_every_queued_read_gets_its_error(database_url: str) -> None:
    async with AsyncConnectionPool(
        database_url, min_size=1, max_size=1, timeout=0.3, open=False, kwargs={"autocommit": True}
    ) as pool:
        taken = await pool.getconn()
        reads = _reads(pool)
        waiting = [reads.read(DIVIDE, (i, 1, 0.0)) for i in range(5)]
        for f in waiting:
            with pytest.raises(PoolTimeout):
                await f
        assert not reads.busy and not reads.queue
        await pool.putconn(taken)
        assert _quotient(await reads.read(DIVIDE, (4, 2, 0.0))) == 2
        await reads.close()


async def test_two_kinds_share_one_coalescer_and_connection_each_read_by_column_name(pool: AsyncConnectionPool) -> None:
    """Reads of two kinds race on one KeptReads: each is answered by its own kind's statements
    (a batch holds one kind), DIVMOD's rows read by column name whatever the column order."""
    reads = _reads(pool)
    requests = pool.get_stats().get("requests_num", 0)
    keys = [(random.randint(-10_000, 10_000), random.choice([1, 2, 3, 7, -5]), 0.0) for _ in range(400)]
    kinds = [random.choice([DIVIDE, DIVMOD]) for _ in keys]

    async def racer(kind: PointRead[Key, Any], key: Key) -> Any:
        await asyncio.sleep(random.random() * 0.05)
        return await reads.get(kind, key)

    got = await asyncio.gather(*(racer(kind, key) for kind, key in zip(kinds, keys, strict=True)))
    for kind, (a, b, _), answer in zip(kinds, keys, got, strict=True):
        q = int(a / b)  # PostgreSQL's integer division truncates toward zero, its % takes the dividend's sign
        if kind is DIVMOD:
            assert answer == Division(q, a - b * q)
        else:
            assert _quotient(answer) == q
    assert reads.batches > 0 and reads.largest > 1
    assert pool.get_stats().get("requests_num", 0) - requests == 1  # one connection for both kinds
    assert not reads.busy and not reads.queue
    await reads.close()


async def test_a_statement_without_a_column_of_the_record_fails_its_reads_only(pool: AsyncConnectionPool) -> None:
    lacking = PointRead(
        RawStatement("sessionq_test_kept_lacking", "SELECT 1 AS ord, $1::int / $2::int AS quotient, $3::float8 AS s"),
        BATCH, _one, _many, record_reader(Division),
    )
    reads = _reads(pool)
    with pytest.raises(psycopg.InterfaceError, match="remainder"):
        await reads.get(lacking, (1, 1, 0.0))
    assert await reads.get(DIVMOD, (7, 2, 0.0)) == Division(3, 1)
    await reads.close()


async def test_a_statement_every_read_of_which_gave_up_is_cancelled_on_the_server(
    pool: AsyncConnectionPool, database_url: str
) -> None:
    """A caller cancelled while its read runs alone cancels the statement (a cancel request), so
    the reads queued behind it go at once, on the same kept connection; a batch one of whose
    callers gave up runs on for the others."""
    reads = _reads(pool)
    first = await reads.read(DIVIDE, (1, 1, 0.0))
    assert first is not None
    leader = asyncio.create_task(reads.get(DIVIDE, (1, 1, 0.3)))
    await _sent(reads)
    pair = [asyncio.create_task(reads.get(DIVIDE, (i, 1, 0.5))) for i in (2, 3)]
    await _sent(reads, 2)
    pair[0].cancel()
    assert _quotient(await pair[1]) == 3 and await leader is not None
    assert reads.cancels == 0
    lone = asyncio.create_task(reads.get(DIVIDE, (4, 1, 60.0)))
    await _sent(reads)
    await _in_flight(database_url, "pg_sleep")
    queued = reads.read(DIVIDE, (8, 2, 0.0))
    lone.cancel()
    row = await asyncio.wait_for(queued, 20)  # not the 60 s of the statement given up
    assert _quotient(row) == 4 and row is not None and row[2] == first[2]  # on the same connection
    assert lone.cancelled() and reads.cancels == 1
    # the cancel request reached only the statement it was meant for: the next one, held in flight
    # a while, is answered
    assert _quotient(await reads.read(DIVIDE, (9, 3, 0.3))) == 3
    await reads.close()


async def test_a_reader_the_event_loop_lost_is_armed_again(pool: AsyncConnectionPool) -> None:
    """A statement in flight whose reader the event loop no longer watches (what uvloop does now and
    then when a descriptor number comes back: the next test) is read at the next tick but one, not
    never."""
    reads = _reads(pool, keep=0.2)
    assert _quotient(await reads.read(DIVIDE, (1, 1, 0.0))) == 1
    slow = reads.read(DIVIDE, (6, 3, 0.3))
    await _sent(reads)
    asyncio.get_running_loop().remove_reader(reads._fd)  # lost, behind the store's back
    row = await asyncio.wait_for(slow, 5)  # without the tick: never
    assert _quotient(row) == 2 and reads.rearmed >= 1
    assert _quotient(await reads.read(DIVIDE, (9, 3, 0.0))) == 3  # and the reader stays armed
    await reads.close()


def test_reads_under_uvloop_outlive_their_connections_being_ended(database_url: str) -> None:
    """The failover harness's stall (an API replica whose GetSessions never answered after the first
    failover) in a few seconds: uvloop, 16 readers, other pool users and sockets opened and closed
    on the loop, and every backend of the pool ended again and again. Before the tick re-armed a
    statement's reader, the reads stopped for good within some 30 ends on this machine (uvloop had
    dropped the kept connection's descriptor from epoll); now each end costs at most a tick."""
    uvloop = pytest.importorskip("uvloop")

    async def scenario() -> tuple[float, int, int]:
        name = "sessionq-test-kept-ends"
        pool = AsyncConnectionPool(database_url, min_size=2, max_size=6, open=False,
                                   kwargs={"autocommit": True, "application_name": name})
        await pool.open(wait=True)
        reads = KeptReads(pool, keep=0.2)
        stop = asyncio.Event()
        last_ok = [asyncio.get_running_loop().time()]
        longest = [0.0]

        async def reader(i: int) -> None:
            while not stop.is_set():
                try:
                    row = await asyncio.wait_for(reads.get(DIVIDE, (i, 1, 0.0)), 2.0)
                    assert _quotient(row) == i
                    now = asyncio.get_running_loop().time()
                    longest[0] = max(longest[0], now - last_ok[0])
                    last_ok[0] = now
                except (psycopg.Error, PoolTimeout, TimeoutError):
                    await asyncio.sleep(0.01)

        async def other() -> None:
            while not stop.is_set():
                try:
                    async with pool.connection() as conn:
                        await conn.execute("SELECT 1")
                except (psycopg.Error, PoolTimeout):
                    await asyncio.sleep(0.01)

        async def churn() -> None:  # descriptor numbers taken and given back, as a server's connections do
            server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            while not stop.is_set():
                with contextlib.suppress(OSError):
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                    writer.close()
                await asyncio.sleep(0.001)
            server.close()

        tasks = [asyncio.create_task(reader(i)) for i in range(16)]
        tasks += [asyncio.create_task(other()) for _ in range(4)] + [asyncio.create_task(churn())]
        ends = 0
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
            until = asyncio.get_running_loop().time() + 8.0
            while asyncio.get_running_loop().time() < until:
                await asyncio.sleep(random.uniform(0.03, 0.12))
                await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                                    " WHERE application_name = %s", (name,))
                ends += 1
            await asyncio.sleep(1.5)  # the reads go on after the last end
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        answered = await asyncio.wait_for(reads.get(DIVIDE, (12, 4, 0.0)), 5)
        await reads.close()
        await pool.close()
        return longest[0], ends, _quotient(answered)

    longest, ends, last = uvloop.run(scenario())
    assert ends > 40 and last == 3
    assert longest < 3.0, f"the reads stopped for {longest:.1f} s"
