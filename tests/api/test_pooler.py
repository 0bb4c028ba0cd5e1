"""sessionq behind a real PgBouncer in transaction mode (tests/pgbouncer.py) with ONE server connection
per database, so that whatever a client leaves on a server connection (a prepared statement, a
LISTEN, a setting, a session advisory lock) is seen by the next client: database.url goes through
the pooler, database.directUrl does not (HA-1), and nothing session-level is left behind (HA-2).

The whole API suite also runs through a pooler with SESSIONQ_TEST_POOLER=pgbouncer (`make
test-pooler`); these tests run in the default suite whenever pgbouncer is installed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pgbouncer
import psycopg
import pytest
from conftest import Api, apply_agent, running_worker

from sessionq._pb.kagent.api.v1alpha1 import common_pb2, runtime_pb2, sessions_pb2, sessions_pb2_grpc
from sessionq.db.connection import Listener, make_pool
from sessionq.db.leader import leadership
from sessionq.db.store import Store

pytestmark = [pytest.mark.pooler, pytest.mark.skipif(pgbouncer.available() is not None, reason=str(pgbouncer.available()))]


@pytest.fixture
def bouncer(pg_admin_url: str) -> Iterator[pgbouncer.PgBouncer]:
    b = pgbouncer.PgBouncer(pg_admin_url, pool_size=1).start()
    yield b
    b.stop()


@pytest.fixture
def via(bouncer: pgbouncer.PgBouncer, database_url: str) -> str:
    """The test database through the one-server-connection pooler."""
    return bouncer.url(database_url)


async def _through(url: str, sql: str) -> list[Any]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, prepare_threshold=None) as conn:
        cur = await conn.execute(sql)
        return [r[0] for r in await cur.fetchall()]


async def _hammer(pool: Any, rounds: int = 8) -> None:
    """Two pooled connections at once, each running the same query more often than psycopg's
    prepare threshold (5)."""
    async with pool.connection() as a, pool.connection() as b:
        for i in range(rounds):
            for conn in (a, b):
                await conn.execute("SELECT count(*) FROM sessionq.sessions WHERE state = %s", (f"S{i % 1}",))


@pytest.mark.clause("HA-2")
async def test_no_prepared_statements_behind_the_pooler(via: str, database_url: str) -> None:
    pool = make_pool(via, min_size=2, max_size=2, direct_url=database_url)
    await pool.open(wait=True)
    try:
        await _hammer(pool)
    finally:
        await pool.close()
    assert await _through(via, "SELECT name FROM pg_prepared_statements") == []
    # the same pool without a direct URL (database.url taken as a direct connection) prepares, and
    # its two clients collide on the one server connection: what HA-2 prevents
    pool = make_pool(via, min_size=2, max_size=2)
    await pool.open(wait=True)
    try:
        with pytest.raises(psycopg.errors.DuplicatePreparedStatement):
            await _hammer(pool)
    finally:
        await pool.close()


@pytest.mark.clause("HA-1")
async def test_a_listen_through_the_pooler_would_stick_to_a_server_connection(via: str) -> None:
    """The hazard the direct URL avoids: LISTEN through a transaction pooler stays on whichever server
    connection ran it (and is lost to the client that asked)."""
    listener = Listener(via, ["sessionq_session"])
    await listener.start()
    try:
        assert await _through(via, "SELECT pg_listening_channels()") == ["sessionq_session"]
    finally:
        await listener.stop()


@pytest.mark.clause("HA-1")
async def test_leadership_takes_the_direct_url(via: str, database_url: str) -> None:
    """A session advisory lock through the pooler stays on the shared server connection, so a second
    holder 'gets' it too; on the direct URL there is one leader. (Whether the pooled lock outlives
    its holders depends on the server connection each holder's unlock is given: not asserted.)"""
    async with leadership(database_url, "expiry", "a") as first, leadership(database_url, "expiry", "b") as second:
        assert first and not second
    async with leadership(via, "expiry", "a") as first, leadership(via, "expiry", "b") as second:
        assert first and second  # two leaders: why leadership never goes through the pooler


@pytest.fixture
async def pooled_api(settings: Any, database_url: str, via: str, sim: Any) -> AsyncIterator[tuple[Api, Store]]:
    """The API and a worker as `sessionq serve`/`worker` run them with database.url = the pooler and
    database.directUrl = the server."""
    from sessionq.api.server import ApiServer

    store = await Store.open(via, pool_size=6, direct_url=database_url)
    try:
        async with running_worker(settings, via, store, sim, direct_url=database_url):
            server = ApiServer(settings, store, address="127.0.0.1:0", runtime=sim)
            await server.start()
            address = f"127.0.0.1:{server.port}"
            sim.taskstore_address = address
            channel = grpc.aio.insecure_channel(address)
            try:
                yield Api(channel, address), store
            finally:
                await channel.close()
                await server.stop(0)
    finally:
        await store.close()


@pytest.mark.clause("HA-1")
@pytest.mark.clause("HA-2")
async def test_the_api_and_workers_through_one_pooled_server_connection(pooled_api: tuple[Api, Store],
                                                                        sim: Any, via: str) -> None:
    api, store = pooled_api
    await apply_agent(store, sim)
    stub = sessions_pb2_grpc.SessionServiceStub(api.channel)
    agent = common_pb2.ResourceReference(namespace="kagent", name="my-first-agent")

    async def lifecycle(i: int) -> None:
        r = await stub.CreateSession(sessions_pb2.CreateSessionRequest(request_id=f"r{i}", agent=agent),
                                     metadata=api.md(), timeout=20)
        assert r.session.state == runtime_pb2.RUNTIME_STATE_READY
        sid = r.session.id
        for call, request, state in (
            (stub.SuspendSession, sessions_pb2.SuspendSessionRequest, runtime_pb2.RUNTIME_STATE_SUSPENDED),
            (stub.ResumeSession, sessions_pb2.ResumeSessionRequest, runtime_pb2.RUNTIME_STATE_READY),
            (stub.DeleteSession, sessions_pb2.DeleteSessionRequest, runtime_pb2.RUNTIME_STATE_DELETED),
        ):
            r = await call(request(session_id=sid), metadata=api.md(), timeout=20)
            assert r.session.state == state

    started = asyncio.get_running_loop().time()
    await asyncio.gather(*(lifecycle(i) for i in range(8)))
    elapsed = asyncio.get_running_loop().time() - started
    # every waiter was woken by a NOTIFY on the direct LISTEN connection, not by its fallback poll
    assert elapsed < 15, elapsed
    # the one server connection behind the pooler: no LISTEN, no prepared statement, no setting left
    assert await _through(via, "SELECT pg_listening_channels()") == []
    assert await _through(via, "SELECT name FROM pg_prepared_statements") == []
    assert await _through(via, "SHOW synchronous_commit") == ["on"]
    assert await _through(via, "SELECT coalesce(current_setting('sessionq.actor', true), '')") == [""]
    assert await _through(via, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                               " AND pid = pg_backend_pid()") == [0]


@pytest.mark.clause("HA-2")
def test_which_url_counts_as_a_pooler() -> None:
    """Only a direct URL that differs from database.url makes it a pooler (no prepared statements);
    no direct URL, or the same one in either spelling, keeps psycopg's default."""
    from sessionq.db.connection import pooled, pooler_kwargs

    direct = "postgresql://sq@db-rw:5432/sessionq"
    assert pooled("postgresql://sq@db-pooler-rw:5432/sessionq", direct)
    assert pooler_kwargs("postgresql://sq@db-pooler-rw:5432/sessionq", direct) == {"prepare_threshold": None}
    assert not pooled(direct, None) and not pooled(direct, "") and not pooled(direct, direct)
    assert not pooled("postgresql+psycopg://sq@db-rw:5432/sessionq", direct)
    assert pooler_kwargs(direct, direct) == {}


@pytest.mark.clause("HA-2")
async def test_operator_commands_poll_through_the_pooler(via: str) -> None:
    """`sessionq workers`-style polling: two operator connections through the one server connection,
    each running the same query more often than psycopg's prepare threshold."""
    from sessionq.db.operator_store import OperatorStore

    async with OperatorStore.connect(via) as first, OperatorStore.connect(via) as second:
        for _ in range(8):
            assert await first.workers() == []
            assert await second.workers() == []
    assert await _through(via, "SELECT name FROM pg_prepared_statements") == []
