"""Helpers shared by the lifecycle tests."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

from conftest import apply_agent

from sessionq.db.store import Store
from sessionq.domain.operations import OperationExecutor, OutcomeStatus
from sessionq.models import Session

AGENT = "my-first-agent"


async def ready_session(store: Store, sim: Any, request_id: str = "req-1", user: str = "alice") -> Session:
    """An Agent (if missing) and a READY Session created through the executor. When a worker runs
    beside the test (the `api` fixture's), the worker's job may take the creation first: the
    executor then finds it busy or done, and the Session is read back once it is READY."""
    try:
        await store.get_agent("kagent", AGENT)
    except Exception:
        await apply_agent(store, sim)
    adm = await store.admit_create(user, request_id, "kagent", AGENT, "")
    out = await OperationExecutor(store, sim, 120).run(adm.session.id)
    if out.status == OutcomeStatus.COMPLETED:
        assert out.session is not None
        return out.session
    assert out.status in (OutcomeStatus.BUSY, OutcomeStatus.DONE), out
    for _ in range(300):
        s = await store.session_by_id(adm.session.id)
        if s is not None and s.state == "READY" and s.operation == "NONE":
            return s
        await asyncio.sleep(0.1)
    raise AssertionError(f"session {adm.session.id} never became READY: {s}")


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


def task_json(task_id: str, session_id: Any, state: str, text: str = "hi") -> dict[str, Any]:
    return {
        "id": task_id,
        "contextId": str(session_id),
        "status": {"state": state, "message": {"messageId": f"m-{task_id}-{state}", "role": "ROLE_AGENT",
                                               "parts": [{"text": text}]}},
        "history": [{"messageId": f"u-{task_id}", "role": "ROLE_USER", "parts": [{"text": text}]}],
    }


async def turn_by_store(store: Store, sim: Any, session: Session, final: str = "TASK_STATE_COMPLETED",
                        task_id: str | None = None, settle: bool = True) -> str:
    """Play one turn as the frontend, the dispatcher and the Actor would, through the store."""
    import uuid

    msg = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "q"}]}
    admitted = await store.admit_turn(session.id, session.creator, None, msg, None, 600)
    actor = await sim.get_actor(session.actor_atespace, session.actor_name)
    if actor.state.value != "ACTOR_STATE_RUNNING":
        await sim.resume_actor(session.actor_atespace, session.actor_name, actor.uid)
    tid = task_id or str(uuid.uuid4())
    v = await store.task_create(session.id, tid, task_json(tid, session.id, "TASK_STATE_WORKING"), admitted.dispatch_id)
    v = await store.task_update(session.id, tid, task_json(tid, session.id, final, "done"), v, None, admitted.dispatch_id)
    if settle:
        await store.task_settle(session.id, tid, v)
    return tid


async def ready_checkpoint(store: Store, sim: Any, request_id: str = "source") -> Any:
    """A READY checkpoint of a fresh Session after one settled turn (quiesced first)."""
    from sessionq.domain.checkpoints import run_checkpoint
    from sessionq.domain.quiescence import QuiescencePool, claim_and_quiesce

    source = await ready_session(store, sim, request_id)
    head = await turn_by_store(store, sim, source)
    pool = QuiescencePool(store, sim, "", listen=False)
    while await claim_and_quiesce(pool):
        pass
    cp = await store.admit_checkpoint(source.id, source.creator, f"cp-{request_id}", head)
    assert (await run_checkpoint(store, sim, cp.id, 30)).status == "ready"
    return cp
