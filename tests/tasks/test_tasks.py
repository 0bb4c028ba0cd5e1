"""Turns and the task store rules (TASK-*)."""

import asyncio
import uuid

import pytest
from lifecycle import count, raw_session, ready_session, task_json, turn_by_store

from sessionq.domain.operations import OperationExecutor
from sessionq.errors import SessionqError

MSG = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "What is 2+2?"}]}


async def expect(call, sqlstate):
    with pytest.raises(SessionqError) as e:
        await call
    assert e.value.sqlstate == sqlstate, e.value
    return e.value


@pytest.mark.clause("TASK-1")
async def test_deleting_or_deleted_session_admits_no_turn(store, sim):
    s = await ready_session(store, sim)
    await store.admit_operation(s.id, "alice", None, "DELETE")
    err = await expect(store.admit_turn(s.id, "alice", None, MSG, None, 600), "SQ412")
    assert "being deleted" in err.message
    await OperationExecutor(store, sim, 30).run(s.id)
    await expect(store.admit_turn(s.id, "alice", None, MSG, None, 600), "SQ404")
    await expect(store.task_create(s.id, "t1", task_json("t1", s.id, "TASK_STATE_WORKING"), uuid.uuid4()), "SQ404")


@pytest.mark.clause("TASK-1")
async def test_turn_admission_and_lifecycle_admission_share_the_row_lock(store, sim, database_url):
    """A turn and a delete racing for one Session: exactly one order wins, never both half-way."""
    import psycopg

    s = await ready_session(store, sim)
    async with await psycopg.AsyncConnection.connect(database_url) as holder:
        await holder.execute("SELECT 1 FROM sessionq.sessions WHERE id = %s FOR UPDATE", (s.id,))
        turn = asyncio.create_task(store.admit_turn(s.id, "alice", None, MSG, None, 600))
        await asyncio.sleep(0.2)
        assert not turn.done()  # admission waits for the same row lock
        await holder.execute(
            "UPDATE sessionq.sessions SET state = 'DELETING', operation = 'DELETE', operation_id = sessionq.uuid_v7() WHERE id = %s",
            (s.id,))
        await holder.commit()
    with pytest.raises(SessionqError) as e:
        await turn
    assert e.value.sqlstate == "SQ412"


@pytest.mark.clause("TASK-2")
async def test_versioned_updates_stale_is_aborted_and_retry_is_idempotent(store, sim):
    s = await ready_session(store, sim)
    adm = await store.admit_turn(s.id, "alice", None, MSG, None, 600)
    working = task_json("t1", s.id, "TASK_STATE_WORKING")
    assert await store.task_create(s.id, "t1", working, adm.dispatch_id) == 1
    assert await store.task_create(s.id, "t1", working, adm.dispatch_id) == 1  # retried creation
    await expect(store.task_create(s.id, "t1", task_json("t1", s.id, "TASK_STATE_SUBMITTED"), adm.dispatch_id), "SQ409")
    step = task_json("t1", s.id, "TASK_STATE_WORKING", "step 2")
    v2 = await store.task_update(s.id, "t1", step, 1, {"statusUpdate": {"taskId": "t1"}}, adm.dispatch_id)
    assert v2 == 2
    events_before = await count(store, "SELECT count(*) FROM sessionq.events WHERE session_id = %s", s.id)
    clock_before = (await raw_session(store, s.id)).last_event_at
    assert await store.task_update(s.id, "t1", step, 1, {"statusUpdate": {"taskId": "t1"}}, adm.dispatch_id) == 2
    assert await count(store, "SELECT count(*) FROM sessionq.events WHERE session_id = %s", s.id) == events_before
    assert (await raw_session(store, s.id)).last_event_at == clock_before  # a retry does not extend the idle clock
    await expect(store.task_update(s.id, "t1", task_json("t1", s.id, "TASK_STATE_WORKING", "other"), 1, None,
                                   adm.dispatch_id), "SQ409")
    await expect(store.task_update(s.id, "t1", step, 7, None, adm.dispatch_id), "SQ409")
    await expect(store.task_update(s.id, "t1", step, 0, None, adm.dispatch_id), "SQ400")


@pytest.mark.clause("TASK-3")
async def test_final_update_is_staged_and_settlement_publishes_atomically(store, sim):
    s = await ready_session(store, sim)
    adm = await store.admit_turn(s.id, "alice", None, MSG, None, 600)
    await store.task_create(s.id, "t1", task_json("t1", s.id, "TASK_STATE_WORKING"), adm.dispatch_id)
    v = await store.task_update(s.id, "t1", task_json("t1", s.id, "TASK_STATE_COMPLETED", "4"), 1,
                                {"statusUpdate": {"taskId": "t1", "status": {"state": "TASK_STATE_COMPLETED"}}},
                                adm.dispatch_id)
    staged = await store.get_task("t1")
    assert staged.state == "TASK_STATE_WORKING" and staged.phase == "active"  # not published yet
    assert staged.staged_task["status"]["state"] == "TASK_STATE_COMPLETED"
    events = await count(store, "SELECT count(*) FROM sessionq.events WHERE session_id = %s", s.id)
    row = await raw_session(store, s.id)
    assert row.idle_boundary_id is None and row.unsettled_task_id == "t1"
    await store.task_settle(s.id, "t1", v)
    done = await store.get_task("t1")
    assert done.state == "TASK_STATE_COMPLETED" and done.phase == "settled" and done.published_version == v
    assert await count(store, "SELECT count(*) FROM sessionq.events WHERE session_id = %s", s.id) == events + 1
    row = await raw_session(store, s.id)
    # settlement ends the turn and marks the idle boundary; it does not wait for any suspension
    assert row.idle_boundary_id is not None and row.unsettled_task_id is None and row.dispatch_id is None
    assert row.state == "READY"
    await store.task_settle(s.id, "t1", v)  # a retried settlement is a no-op
    assert await count(store, "SELECT count(*) FROM sessionq.events WHERE session_id = %s", s.id) == events + 1


@pytest.mark.clause("TASK-3")
async def test_a_final_update_that_settles_publishes_and_ends_the_turn_in_one_write(store, sim):
    """task_finish (UpdateTask with the settle header): what task_update then task_settle do, in one
    transaction; a state that does not end a turn is refused with nothing written; a retry is a no-op."""
    s = await ready_session(store, sim)
    adm = await store.admit_turn(s.id, "alice", None, MSG, None, 600)
    await store.task_create(s.id, "t1", task_json("t1", s.id, "TASK_STATE_WORKING"), adm.dispatch_id)
    events = await count(store, "SELECT count(*) FROM sessionq.events WHERE session_id = %s", s.id)
    working = task_json("t1", s.id, "TASK_STATE_WORKING", "still going")
    err = await expect(store.task_finish(s.id, "t1", working, 1, None, adm.dispatch_id), "SQ400")
    assert "final or waiting state" in err.message
    assert (await store.get_task("t1")).version == 1  # nothing written
    final = task_json("t1", s.id, "TASK_STATE_COMPLETED", "4")
    event = {"statusUpdate": {"taskId": "t1", "status": {"state": "TASK_STATE_COMPLETED"}}}
    await expect(store.task_finish(s.id, "t1", final, 7, event, adm.dispatch_id), "SQ409")  # stale, as task_update
    v = await store.task_finish(s.id, "t1", final, 1, event, adm.dispatch_id)
    assert v == 2
    done = await store.get_task("t1")
    assert done.state == "TASK_STATE_COMPLETED" and done.phase == "settled" and done.published_version == v
    assert done.staged_task is None
    assert await count(store, "SELECT count(*) FROM sessionq.events WHERE session_id = %s", s.id) == events + 1
    row = await raw_session(store, s.id)
    assert row.idle_boundary_id is not None and row.unsettled_task_id is None and row.dispatch_id is None
    assert row.active_task_id is None
    # an identical retry (its answer lost) returns the committed version and settles nothing twice
    boundary = row.idle_boundary_id
    assert await store.task_finish(s.id, "t1", final, 1, event, adm.dispatch_id) == v
    assert await count(store, "SELECT count(*) FROM sessionq.events WHERE session_id = %s", s.id) == events + 1
    assert (await raw_session(store, s.id)).idle_boundary_id == boundary
    # the Session takes its next turn at once
    nxt = await store.admit_turn(s.id, "alice", None, MSG, None, 600)
    assert nxt.dispatch_id is not None and nxt.dispatch_id != adm.dispatch_id


@pytest.mark.clause("TASK-4")
async def test_events_have_database_timestamps_and_per_session_sequence(store, sim):
    a = await ready_session(store, sim, "a")
    b = await ready_session(store, sim, "b")
    for s in (a, b, a):
        await turn_by_store(store, sim, s)
        claimed = await store.claim_idle(uuid.uuid4())
        await store.finish_idle(claimed.id, claimed.idle_boundary_id, claimed.idle_executor, None)
    async with store.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT seq, created_at, created_at <= now() + interval '1 second' AS db_time FROM sessionq.events"
            " WHERE session_id = %s ORDER BY seq", (a.id,))
        rows = await cur.fetchall()
    assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1))
    assert all(r["db_time"] for r in rows)
    assert [r["created_at"] for r in rows] == sorted(r["created_at"] for r in rows)
    assert (await raw_session(store, a.id)).last_event_at == rows[-1]["created_at"]
    assert await count(store, "SELECT max(seq) FROM sessionq.events WHERE session_id = %s", b.id) == 2


@pytest.mark.clause("TASK-5")
async def test_unsettled_cleanup_blocks_task_writes_and_lifecycle(store, sim):
    s = await ready_session(store, sim)
    tid = await turn_by_store(store, sim, s, settle=False)
    await expect(store.task_update(s.id, tid, task_json(tid, s.id, "TASK_STATE_WORKING", "more"), 2, None, None), "SQ409")
    await expect(store.admit_turn(s.id, "alice", None, MSG, None, 600), "SQ409")
    for kind in ("SUSPEND", "DELETE"):
        err = await expect(store.admit_operation(s.id, "alice", None, kind), "SQ409")
        assert "not settled" in err.message
    await store.task_settle(s.id, tid, 2)
    await store.admit_operation(s.id, "alice", None, "SUSPEND")


@pytest.mark.clause("TASK-6")
async def test_abandoned_phase_cannot_be_continued(store, sim):
    s = await ready_session(store, sim)
    adm = await store.admit_turn(s.id, "alice", None, MSG, None, 600)
    await store.task_create(s.id, "t1", task_json("t1", s.id, "TASK_STATE_WORKING"), adm.dispatch_id)
    await store.task_update(s.id, "t1", task_json("t1", s.id, "TASK_STATE_INPUT_REQUIRED", "which?"), 1, None, adm.dispatch_id)
    # the Actor died during native cleanup: the dispatcher ends the turn as abandoned
    await store.fail_dispatch(s.id, adm.dispatch_id, "actor crashed", True)
    t = await store.get_task("t1")
    assert t.phase == "abandoned" and t.state == "TASK_STATE_FAILED"
    err = await expect(store.admit_turn(s.id, "alice", None, MSG, "t1", 600), "SQ412")
    assert "start a new session" in err.message
    # a fresh turn in the same Session is still possible
    again = await store.admit_turn(s.id, "alice", None, MSG, None, 600)
    assert again.dispatch_id is not None


@pytest.mark.clause("TASK-6")
async def test_waiting_task_can_be_continued_once(store, sim):
    s = await ready_session(store, sim)
    tid = await turn_by_store(store, sim, s, final="TASK_STATE_INPUT_REQUIRED")
    row = await raw_session(store, s.id)
    if row.idle_boundary_id:  # nobody quiesces here; drop the boundary through a claim
        claimed = await store.claim_idle(uuid.uuid4())
        await store.finish_idle(s.id, claimed.idle_boundary_id, claimed.idle_executor, None)
    cont = await store.admit_turn(s.id, "alice", None, MSG, tid, 600)
    t = await store.get_task(tid)
    v = await store.task_update(s.id, tid, task_json(tid, s.id, "TASK_STATE_WORKING", "answer"), t.version, None, cont.dispatch_id)
    v = await store.task_update(s.id, tid, task_json(tid, s.id, "TASK_STATE_COMPLETED", "thanks"), v, None, cont.dispatch_id)
    await store.task_settle(s.id, tid, v)
    assert (await store.get_task(tid)).state == "TASK_STATE_COMPLETED"
    err = await expect(store.admit_turn(s.id, "alice", None, MSG, tid, 600), "SQ412")
    assert "not waiting for input" in err.message
    await expect(store.admit_turn(s.id, "alice", None, MSG, "no-such-task", 600), "SQ404")


async def test_a_turn_failure_shows_on_the_session_only_for_its_dispatch_and_until_cleared(store, sim):
    """record_turn_failure records why the current dispatch's turn could not start (clipped), never
    for a stale dispatch; it stays after the dispatch ends, until clear_turn_failure or an admission."""
    from sessionq.models import TurnFailure

    s = await ready_session(store, sim)
    adm = await store.admit_turn(s.id, "alice", None, MSG, None, 600)
    await store.record_turn_failure(s.id, uuid.uuid4(), TurnFailure.RESTORE_FAILED, "stale dispatch")
    assert (await raw_session(store, s.id)).failure_reason is None
    await store.record_turn_failure(s.id, adm.dispatch_id, TurnFailure.RESTORE_FAILED, "why " + "x" * 5000)
    row = await raw_session(store, s.id)
    assert row.failure_reason == "RestoreFailed" and row.failure_message.startswith("why x") \
        and len(row.failure_message) <= 1001
    await store.fail_dispatch(s.id, adm.dispatch_id, "the snapshot could not be restored: why", True)
    assert (await raw_session(store, s.id)).failure_reason == "RestoreFailed", "the Session still shows it"
    await store.clear_turn_failure(s.id, TurnFailure.RESTORE_FAILED)
    assert (await raw_session(store, s.id)).failure_reason is None
    # the next failed turn shows again; an admitted operation clears it (its own failure takes the columns)
    adm = await store.admit_turn(s.id, "alice", None, MSG, None, 600)
    await store.record_turn_failure(s.id, adm.dispatch_id, TurnFailure.RESTORE_FAILED, "again")
    await store.fail_dispatch(s.id, adm.dispatch_id, "the snapshot could not be restored: again", True)
    assert (await raw_session(store, s.id)).failure_message == "again"
    await store.admit_operation(s.id, "alice", None, "SUSPEND")
    assert (await raw_session(store, s.id)).failure_reason is None, "an admission clears it"
