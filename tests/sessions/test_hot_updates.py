"""The executor's writes to a Session row during an operation are HOT updates.

A claim and the recording of the Actor change no indexed column, so PostgreSQL updates the row in
place on its page without touching the table's nine indexes. An index on one of those columns
would silently double the cost of every creation; this keeps that from coming back.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

import psycopg
from conftest import apply_agent
from lifecycle import AGENT

from sessionq.db.store import Store


async def hot_and_all_updates(conn: psycopg.AsyncConnection[Any]) -> tuple[int, int]:
    cur = await conn.execute(
        "SELECT pg_stat_get_xact_tuples_hot_updated('sessionq.sessions'::regclass),"
        " pg_stat_get_xact_tuples_updated('sessionq.sessions'::regclass)"
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


async def test_claim_and_record_actor_are_hot_updates(store: Store, sim: Any, database_url: str) -> None:
    await apply_agent(store, sim)
    adm = await store.admit_create("alice", "hot-1", "kagent", AGENT, "")
    executor = uuid4()
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        async with conn.transaction():
            await conn.execute(
                "SELECT * FROM sessionq.claim_operation(%s, %s, %s, 30)", (adm.session.id, adm.generation, executor)
            )
            assert await hot_and_all_updates(conn) == (1, 1)
            await conn.execute(
                "SELECT sessionq.record_actor(%s, %s, %s, 'uid-1')", (adm.session.id, adm.generation, executor)
            )
            assert await hot_and_all_updates(conn) == (2, 2)


async def test_no_session_index_names_a_progress_column(store: Store) -> None:
    progress = ("executor_id", "executor_expires_at", "actor_uid", "updated_at", "dispatch_id", "dispatch_expires_at")
    async with store.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT indexrelid::regclass::text AS name, pg_get_indexdef(indexrelid) AS def"
            " FROM pg_index WHERE indrelid = 'sessionq.sessions'::regclass"
        )
        indexes = await cur.fetchall()
    assert len(indexes) >= 5
    for index in indexes:
        words = set(index["def"].replace("(", " ").replace(")", " ").replace(",", " ").split())
        assert not words & set(progress), f"{index['name']} names {words & set(progress)}: {index['def']}"
