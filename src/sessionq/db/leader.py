"""Leader election for leader-only work (idle expiry, revision GC): a session-level PostgreSQL
advisory lock held on a dedicated connection. The leader is whoever holds it; if its process or
connection dies, PostgreSQL releases the lock and the next attempt elsewhere takes over."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

import psycopg

from sessionq.db.connection import conninfo

log = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def leadership(url: str, role: str, holder: str) -> AsyncIterator[bool]:
    """Yield True while this process holds the leadership of `role` (for the block's duration),
    False when another holder has it. The lock lives on its own connection."""
    conn = await psycopg.AsyncConnection.connect(
        conninfo(url), autocommit=True, application_name=f"sessionq-leader-{role}"
    )
    try:
        cur = await conn.execute("SELECT pg_try_advisory_lock(sessionq.leader_lock_key(%s))", (role,))
        row = await cur.fetchone()
        leader = bool(row and row[0])
        if leader:
            await conn.execute("SELECT sessionq.note_leader(%s, %s)", (role, holder))
        yield leader
        if leader:
            # released now: a closed connection's backend lets its locks go only when it has exited,
            # a moment after the close, and the next holder would find the lock still taken
            with contextlib.suppress(psycopg.Error):
                await conn.execute("SELECT pg_advisory_unlock(sessionq.leader_lock_key(%s))", (role,))
    finally:
        with contextlib.suppress(Exception):
            await conn.close()  # (and closing it releases the lock in any case)
