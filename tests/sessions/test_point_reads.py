"""Coalesced Session reads (Store.get_session and get_session_view, one db/kept_reads.py coalescer):
reads that arrive while another is in flight are answered by one `sessionq.get_sessions` (or
`get_session_views`) statement, each caller getting exactly what its own `get_session` would give
(its row, or NOT_FOUND). A real server, real connections; the
table is locked from another connection to hold a read or a batch in flight."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from conftest import apply_agent

from sessionq.db.store import Store
from sessionq.errors import SessionqError
from sessionq.models import RowKind, SharePermission

Read = tuple[UUID, str, "str | None", RowKind]
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


async def _outcome(store: Store, read: Read) -> Any:
    try:
        return ("ok", await store.get_session(*read))
    except SessionqError as e:
        return ("error", e.sqlstate, e.message)


async def _world(store: Store, sim: Any) -> list[Read]:
    """Sessions of alice and bob, a Sandbox of alice, a share of one of bob's Sessions, and the
    reads that cover every visibility rule: own, another user's, shared, missing, the other kind."""
    await apply_agent(store, sim)
    alice = [(await store.admit_create("alice", f"a{i}", "kagent", "my-first-agent", f"a{i}")).session.id
             for i in range(3)]
    bob = [(await store.admit_create("bob", f"b{i}", "kagent", "my-first-agent", f"b{i}")).session.id
           for i in range(2)]
    sandbox = (await store.admit_sandbox("alice", "sb", "kagent", "my-first-agent", "scratch", 3600.0)).session.id
    await store.create_share(bob[0], "bob", SharePermission.READ_ONLY, None, "share-hash-1")
    reads: list[Read] = []
    for sid in alice:
        reads += [(sid, "alice", None, RowKind.SESSION), (sid, "bob", None, RowKind.SESSION),
                  (sid, "bob", "share-hash-1", RowKind.SESSION), (sid, "alice", None, RowKind.SANDBOX)]
    for sid in bob:
        reads += [(sid, "bob", None, RowKind.SESSION), (sid, "alice", None, RowKind.SESSION),
                  (sid, "alice", "share-hash-1", RowKind.SESSION), (sid, "alice", "other-hash", RowKind.SESSION)]
    reads += [(sandbox, "alice", None, RowKind.SANDBOX), (sandbox, "alice", None, RowKind.SESSION),
              (sandbox, "bob", None, RowKind.SANDBOX), (uuid4(), "alice", None, RowKind.SESSION)]
    return reads


async def _lock_sessions(database_url: str) -> psycopg.AsyncConnection:
    """A connection holding an ACCESS EXCLUSIVE lock on sessionq.sessions (reads wait for it)."""
    conn = await psycopg.AsyncConnection.connect(database_url)
    await conn.execute("LOCK TABLE sessionq.sessions IN ACCESS EXCLUSIVE MODE")
    return conn


async def _blocked(database_url: str, function: str, n: int = 1) -> list[int]:
    """Wait until n statements calling `function` wait on a lock; their backend pids."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        for _ in range(500):
            cur = await conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND query LIKE %s",
                (f"%sessionq.{function}(%",))
            pids = [r[0] for r in await cur.fetchall()]
            if len(pids) >= n:
                return pids
            await asyncio.sleep(0.01)
    raise AssertionError(f"no {function} call waited on the lock")


async def _race(coalescer: Any, outcome: Any, store: Store, reads: list[Read], expected: dict[Read, Any]) -> None:
    """200 concurrent reads drawn from `reads`: each gets its `expected` outcome, and they were
    coalesced (far fewer statements than calls)."""
    racers = [random.choice(reads) for _ in range(200)]
    before = coalescer.batches
    got = await asyncio.gather(*(outcome(store, r) for r in racers))
    for read, result in zip(racers, got, strict=True):
        assert result == expected[read], read
    batches = coalescer.batches - before
    assert 1 <= batches <= 20, batches


async def test_200_concurrent_mixed_reads_each_get_what_a_single_read_gives(store: Store, sim: Any) -> None:
    reads = await _world(store, sim)
    alone = Store(store.pool, coalesce_reads=False)
    expected = {r: await _outcome(alone, r) for r in reads}
    assert {o[0] for o in expected.values()} == {"ok", "error"}  # both outcomes are covered
    assert store.reads is not None
    await _race(store.reads, _outcome, store, reads, expected)
    assert store.reads.largest <= store.reads.max_batch
    # a batch never exceeds the maximum: 200 racers queued behind one read become full batches
    store.reads.max_batch = 16
    store.reads.largest = 0
    before = store.reads.batches
    plain = [r for r in reads if r[2] is None]  # a batch whose share hashes are all NULL
    racers = [random.choice(plain) for _ in range(200)]
    got = await asyncio.gather(*(_outcome(store, r) for r in racers))
    assert all(outcome == expected[read] for read, outcome in zip(racers, got, strict=True))
    assert store.reads.largest == 16 and store.reads.batches - before >= 199 // 16
    store.reads.max_batch = 64
    before = store.reads.batches
    # a lone read still takes the single path, and answers the same
    assert not store.reads.busy
    assert await _outcome(store, reads[0]) == expected[reads[0]]
    assert store.reads.batches == before


async def test_a_cancelled_caller_fails_no_one_else(store: Store, sim: Any, database_url: str) -> None:
    reads = await _world(store, sim)
    alone = Store(store.pool, coalesce_reads=False)
    expected = {r: await _outcome(alone, r) for r in reads}
    lock = await _lock_sessions(database_url)
    try:
        leader = asyncio.create_task(_outcome(store, reads[0]))
        await _blocked(database_url, "get_session")
        queued = [asyncio.create_task(_outcome(store, r)) for r in reads]
        await asyncio.sleep(0.05)
        assert store.reads is not None and len(store.reads.queue) == len(reads)
        # one caller is cancelled while queued, the leader while its statement runs
        queued[1].cancel()
        leader.cancel()
        await _blocked(database_url, "get_sessions")  # the queue's batch now waits on the lock
        queued[2].cancel()  # a caller cancelled while its batch is in flight
    finally:
        await lock.rollback()
        await lock.close()
    got = await asyncio.gather(leader, *queued, return_exceptions=True)
    assert isinstance(got[0], asyncio.CancelledError)
    assert isinstance(got[2], asyncio.CancelledError) and isinstance(got[3], asyncio.CancelledError)
    for i, read in enumerate(reads):
        if i not in (1, 2):
            assert got[i + 1] == expected[read], read
    assert not store.reads.busy and not store.reads.queue
    assert await _outcome(store, reads[0]) == expected[reads[0]]


async def test_the_database_dropping_mid_batch_fails_every_waiter_as_a_single_read_fails(
    store: Store, sim: Any, database_url: str
) -> None:
    reads = await _world(store, sim)
    alone = Store(store.pool, coalesce_reads=False)
    lock = await _lock_sessions(database_url)
    try:
        # a single read whose connection drops: OperationalError (the API answers UNAVAILABLE);
        # the coalescing store's lone read (the leader) the same
        single = asyncio.create_task(alone.get_session(*reads[0]))
        leader = asyncio.create_task(store.get_session(*reads[0]))
        pids = await _blocked(database_url, "get_session", 2)
        queued = [asyncio.create_task(store.get_session(*r)) for r in reads]
        await asyncio.sleep(0.05)
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
            await admin.execute("SELECT pg_terminate_backend(p) FROM unnest(%s::int[]) p", (pids,))
            with pytest.raises(psycopg.OperationalError):
                await single
            # then the batch the queue became, while it runs
            [batch_pid] = await _blocked(database_url, "get_sessions")
            await admin.execute("SELECT pg_terminate_backend(%s)", (batch_pid,))
    finally:
        await lock.rollback()
        await lock.close()
    got = await asyncio.gather(*queued, return_exceptions=True)
    assert all(isinstance(g, psycopg.OperationalError) for g in got), got
    with pytest.raises(psycopg.OperationalError):
        await leader
    assert store.reads is not None and not store.reads.busy and not store.reads.queue
    # the store reads again once the database is back
    session = await store.get_session(*reads[0])
    assert session.id == reads[0][0]


async def _view_outcome(store: Store, read: Read) -> Any:
    try:
        return ("ok", await store.get_session_view(*read))
    except SessionqError as e:
        return ("error", e.sqlstate, e.message)


async def test_concurrent_view_reads_each_get_what_a_whole_read_gives(store: Store, sim: Any) -> None:
    """GetSession's reads (get_session_view, sessionq.get_session_views): coalesced the same way,
    each caller seeing exactly what get_session gives it: the same fields of its row, or the same
    NOT_FOUND."""
    reads = await _world(store, sim)
    alone = Store(store.pool, coalesce_reads=False)
    whole = {r: await _outcome(alone, r) for r in reads}
    expected = {r: await _view_outcome(alone, r) for r in reads}
    for read, outcome in expected.items():
        if outcome[0] == "error":
            assert outcome == whole[read], read
            continue
        view, session = outcome[1], whole[read][1]
        assert (view.id, view.creator, view.state, view.operation, view.name) == (
            str(session.id), session.creator, session.state, session.operation, session.name)
        assert view.created_us == (session.created_at - EPOCH) // timedelta(microseconds=1)
    assert store.reads is not None
    await _race(store.reads, _view_outcome, store, reads, expected)
    assert not store.reads.busy and not store.reads.queue


async def test_the_database_dropping_mid_view_batch_fails_every_waiter(
    store: Store, sim: Any, database_url: str
) -> None:
    reads = await _world(store, sim)
    lock = await _lock_sessions(database_url)
    try:
        leader = asyncio.create_task(store.get_session_view(*reads[0]))
        [leader_pid] = await _blocked(database_url, "get_session_views")
        queued = [asyncio.create_task(store.get_session_view(*r)) for r in reads]
        await asyncio.sleep(0.05)
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s)", (leader_pid,))
            with pytest.raises(psycopg.OperationalError):
                await leader
            pids = await _blocked(database_url, "get_session_views")
            await admin.execute("SELECT pg_terminate_backend(p) FROM unnest(%s::int[]) p", (pids,))
    finally:
        await lock.rollback()
        await lock.close()
    got = await asyncio.gather(*queued, return_exceptions=True)
    assert all(isinstance(g, psycopg.OperationalError) for g in got), got
    assert store.reads is not None and not store.reads.busy and not store.reads.queue
    view = await store.get_session_view(*reads[0])
    assert view.id == str(reads[0][0])
