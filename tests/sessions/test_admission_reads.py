"""Admitting a new creation or fork reads none of the caller's other Sessions.

A lookup by (creator, request kind, request id) ahead of the insert was planned, while the
sessions table was still small, as a scan of `sessions_creator_idx` on the creator alone; the
plan stayed cached in every long-lived connection, and each creation then read every Session its
caller already had (2.7 million index tuples for 2,325 creations in the benchmark). Admission now
inserts first, with the unique constraint as the arbiter, and looks a request up only when the
insert conflicts (a retry); the creator index is partial (live Sessions only), so that lookup can
use nothing but the unique constraint. These tests force PostgreSQL's generic plans, the ones a
pooled connection ends up with, and count the index tuples each admission reads in its
transaction.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import psycopg
from conftest import apply_agent
from lifecycle import AGENT, ready_checkpoint

from sessionq.db.store import Store

EARLIER_SESSIONS = 300


async def index_tuples_read(conn: psycopg.AsyncConnection[Any]) -> int:
    """Index tuples this transaction has read from the indexes of sessionq.sessions so far."""
    cur = await conn.execute(
        "SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(indexrelid)), 0)"
        " FROM pg_index WHERE indrelid = 'sessionq.sessions'::regclass"
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def fork_reads(conn: psycopg.AsyncConnection[Any]) -> tuple[int, int]:
    """(index tuples read from the indexes of sessionq.sessions other than its primary key, lookups
    by primary key) in this transaction so far. A lookup by primary key is counted, not its tuples:
    it returns one entry per row version not yet pruned (the source Session of a fork has been
    updated by its turns and suspensions, and pruning waits while another backend of the server,
    such as the suite's next CREATE DATABASE, holds the horizon back), yet it reads one Session."""
    cur = await conn.execute(
        "SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(indexrelid))"
        "         FILTER (WHERE NOT indisprimary), 0),"
        " coalesce(sum(pg_stat_get_xact_numscans(indexrelid)) FILTER (WHERE indisprimary), 0)"
        " FROM pg_index WHERE indrelid = 'sessionq.sessions'::regclass"
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


async def generic_plans(database_url: str) -> psycopg.AsyncConnection[Any]:
    conn = await psycopg.AsyncConnection.connect(database_url)
    await conn.execute("SET plan_cache_mode = force_generic_plan")
    await conn.commit()
    return conn


async def earlier_sessions(conn: psycopg.AsyncConnection[Any]) -> None:
    await conn.execute(
        "SELECT sessionq.admit_create('alice', 'earlier-' || g, 'kagent', %s, '') FROM generate_series(1, %s) g",
        (AGENT, EARLIER_SESSIONS))
    await conn.commit()


async def test_new_creation_reads_no_other_session(store: Store, sim: Any, database_url: str) -> None:
    await apply_agent(store, sim)
    conn = await generic_plans(database_url)
    async with conn:
        await earlier_sessions(conn)
        cur = await conn.execute("SELECT outcome FROM sessionq.admit_create('alice', 'new', 'kagent', %s, '')",
                                 (AGENT,))
        assert (await cur.fetchone()) == ("admitted",)
        assert await index_tuples_read(conn) <= 2  # the Agent's revision aside, nothing scanned
        await conn.commit()
        # a retry finds its Session through the unique constraint alone and answers from it
        cur = await conn.execute("SELECT outcome FROM sessionq.admit_create('alice', 'new', 'kagent', %s, '')",
                                 (AGENT,))
        assert (await cur.fetchone()) == ("joined",)
        assert await index_tuples_read(conn) <= 2  # the insert's conflict check and the lookup
        await conn.commit()


async def test_new_fork_reads_no_other_session(store: Store, sim: Any, database_url: str) -> None:
    await apply_agent(store, sim)
    cp = await ready_checkpoint(store, sim)
    conn = await generic_plans(database_url)
    async with conn:
        await earlier_sessions(conn)
        before_other, before_lookups = await fork_reads(conn)
        cur = await conn.execute("SELECT outcome, session FROM sessionq.admit_fork(%s, 'alice', 'fork-1')", (cp.id,))
        row = await cur.fetchone()
        assert row is not None and row[0] == "admitted"
        # the copied history is read through the tasks and events tables, not sessions; the source
        # Session is read by primary key (the checkpoint's, its labels: FLEET-1, its forked event)
        other, lookups = await fork_reads(conn)
        assert other - before_other == 0 and lookups - before_lookups <= 3
        await conn.commit()
        cur = await conn.execute("SELECT outcome, session FROM sessionq.admit_fork(%s, 'alice', 'fork-1')", (cp.id,))
        again = await cur.fetchone()
        assert again is not None and again[0] == "joined" and UUID(again[1]["id"]) == UUID(row[1]["id"])
        # conflict check, lookup, one read by primary key; the counts, pending until the backend
        # reports them, may still hold the admission's reads of the source Session by primary key
        # (its forked event, schema/45_events.sql; its labels, which a fork copies: FLEET-1)
        other, lookups = await fork_reads(conn)
        assert other <= 2 and lookups <= 5
        await conn.commit()
