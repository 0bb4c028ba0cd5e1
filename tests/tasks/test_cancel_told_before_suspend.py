"""A cancelled turn's Actor is suspended only after the cancel_task job told it of the cancel.

finish_cancel ends the turn (and marks the idle boundary) before the job tells the Actor; if the
quiescence workers could claim that boundary at once, they could stop the Actor's process before
the A2A CancelTask reached it (the runtime then has no RUNNING Actor to tell), and the executor's
cancel would never run (tests/process/test_first_agent.py, the mid-turn cancel, under load)."""

import asyncio
import uuid

from lifecycle import ready_session, task_json

from sessionq.db.connection import Listener
from sessionq.db.notify import Channel
from sessionq.models import CancelAdmission, CancelOutcome

MSG = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "work"}]}


async def cancelled_turn(store, sim, request_id: str = "req-1"):
    """A Session whose running turn was cancelled and ended (finish_cancel), its Actor not told yet."""
    s = await ready_session(store, sim, request_id)
    admitted = await store.admit_turn(s.id, "alice", None, MSG, None, 600)
    tid = str(uuid.uuid4())
    await store.task_create(s.id, tid, task_json(tid, s.id, "TASK_STATE_WORKING"), admitted.dispatch_id)
    assert await store.admit_cancel(tid, "alice", None) == CancelAdmission.PENDING
    assert await store.finish_cancel(tid) == CancelOutcome.CANCELED  # the turn ended: an idle boundary
    return s, tid


async def test_the_idle_boundary_of_a_cancelled_turn_waits_until_the_actor_was_told(store, sim, database_url):
    s, tid = await cancelled_turn(store, sim)
    row = await store._value("SELECT to_jsonb(s) FROM sessionq.sessions s WHERE id = %s", (s.id,))
    assert row["idle_boundary_id"] is not None and row["dispatch_id"] is None
    assert await store.claim_idle(uuid.uuid4()) is None  # not before the Actor was told
    assert await store.idle_work_blocked()  # the workers look again shortly
    listener = Listener(database_url, [Channel.IDLE], keyed=(Channel.IDLE,))
    await listener.start()
    try:
        await store.cancel_told(tid)
        for _ in range(500):  # and are woken when it was
            if listener.recent(Channel.IDLE, str(s.id)) is not None:
                break
            await asyncio.sleep(0.01)
        assert listener.recent(Channel.IDLE, str(s.id)) is not None, "cancel_told woke no quiescence worker"
    finally:
        await listener.stop()
    claimed = await store.claim_idle(uuid.uuid4())
    assert claimed is not None and claimed.id == s.id


async def test_a_cancel_job_that_gave_up_holds_the_suspend_back_ten_minutes_at_most(store, sim):
    s, tid = await cancelled_turn(store, sim)
    assert await store.claim_idle(uuid.uuid4()) is None
    await store._rows("UPDATE sessionq.task_cancels SET finished_at = finished_at - interval '11 minutes'"
                      " WHERE task_id = %s RETURNING task_id", (tid,))  # its job never told the Actor (retries exhausted)
    claimed = await store.claim_idle(uuid.uuid4())
    assert claimed is not None and claimed.id == s.id
