"""Helpers shared by the lifecycle tests."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from conftest import apply_agent
from sessionq.models import Session
from sessionq.operations import OperationExecutor
from sessionq.store import Store

AGENT = "my-first-agent"


async def ready_session(store: Store, sim: Any, request_id: str = "req-1", user: str = "alice") -> Session:
    """An Agent (if missing) and a READY Session created through the executor."""
    try:
        await store.get_agent("kagent", AGENT)
    except Exception:
        await apply_agent(store, sim)
    adm = await store.admit_create(user, request_id, "kagent", AGENT, "")
    out = await OperationExecutor(store, sim, 120).run(adm.session.id)
    assert out.status == "completed", out
    assert out.session is not None
    return out.session


async def count(store: Store, sql: str, *params: Any) -> int:
    async with store.pool.connection() as conn:
        cur = await conn.execute(sql, params)
        row = await cur.fetchone()
        assert row is not None
        return int(next(iter(row.values())))


async def raw_session(store: Store, session_id: UUID) -> Session:
    s = await store.session_by_id(session_id)
    assert s is not None
    return s
