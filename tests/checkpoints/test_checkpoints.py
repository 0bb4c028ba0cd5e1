"""CheckpointService: checkpoints and forks over gRPC (CKPT-*, FORK-*, Q-12, DEL-6)."""

import asyncio
import time
from uuid import UUID

import grpc
import pytest
from a2a.types import a2a_pb2
from conftest import apply_agent
from conversation import answer, new_session, send
from google.rpc import error_details_pb2, status_pb2
from lifecycle import count

from sessionq._pb.kagent.api.v1alpha1 import (
    checkpoints_pb2,
    checkpoints_pb2_grpc,
    common_pb2,
    runtime_pb2,
    sessions_pb2,
    sessions_pb2_grpc,
)

pytestmark = pytest.mark.pooler  # also run through PgBouncer (make test-pooler)


def cps(api):
    return checkpoints_pb2_grpc.CheckpointServiceStub(api.channel)


def reason_of(err: grpc.aio.AioRpcError) -> str | None:
    for key, value in err.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            st = status_pb2.Status.FromString(value)
            for d in st.details:
                info = error_details_pb2.ErrorInfo()
                if d.Unpack(info):
                    return info.reason
    return None


async def create_cp(api, sid, head, rid, user="alice", wait=10.0):
    """CreateCheckpoint, retrying the same request while the snapshot is pending (as documented)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            r = await cps(api).CreateCheckpoint(
                checkpoints_pb2.CreateCheckpointRequest(session_id=sid, expected_head_task_id=head, request_id=rid),
                metadata=api.md(user), timeout=10)
            return r.checkpoint
        except grpc.aio.AioRpcError as e:
            if reason_of(e) != "KAGENT_CHECKPOINT_SNAPSHOT_PENDING" or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def fork(api, cp_id, rid, user="alice"):
    r = await cps(api).ForkSession(checkpoints_pb2.ForkSessionRequest(checkpoint_id=cp_id, request_id=rid),
                                   metadata=api.md(user), timeout=15)
    return r.session


async def turn_pinned(store, sid, task_id, timeout=10.0):
    """Wait until the quiescence after turn task_id has pinned its snapshot (sessions.turnSnapshots)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        async with store.pool.connection() as conn:
            row = await (await conn.execute(
                "SELECT count(*) AS n FROM sessionq.turn_snapshots WHERE session_id = %s AND task_id = %s AND state = 'PINNED'",
                (sid, task_id))).fetchone()
        if row["n"]:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"turn {task_id} was not pinned")


async def failure(call):
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await call
    return e.value.code(), e.value.details(), reason_of(e.value)


@pytest.fixture
async def conversation(api, store, sim):
    await apply_agent(store, sim)
    sid = await new_session(api)
    t1 = await send(api, "What is 2+2?", sid)
    t2 = await send(api, "Summarize this conversation so far.", sid)
    return sid, t1, t2


@pytest.mark.clause("CKPT-1")
@pytest.mark.clause("CKPT-3")
@pytest.mark.clause("CKPT-5")
async def test_checkpoint_pins_snapshot_with_a_tag_idempotently(api, store, sim, conversation):
    sid, _t1, t2 = conversation
    cp = await create_cp(api, sid, t2.id, "rid-1")
    assert cp.state == checkpoints_pb2.CHECKPOINT_STATE_READY and cp.session_id == sid and cp.head_task_id == t2.id
    assert cp.history_sequence == 4 and cp.name == "my-first-agent turn 4" and cp.created_at.seconds > 0
    again = await create_cp(api, sid, t2.id, "rid-1")
    assert again.id == cp.id
    assert await count(store, "SELECT count(*) FROM sessionq.checkpoints") == 1
    tag = await sim.get_tag("kagent", f"checkpoint-{cp.id}")
    row = await store.session_by_id(UUID(sid))
    assert (tag.snapshot_generation, tag.snapshot_uri) == (row.snapshot_generation, row.snapshot_uri)
    code, _, _ = await failure(create_cp(api, sid, "other-task", "rid-1"))
    assert code == grpc.StatusCode.ALREADY_EXISTS
    for rid in ("", "x" * 129):
        code, _, _ = await failure(create_cp(api, sid, t2.id, rid))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
    # DeleteCheckpoint removes the tag and releases the pin
    await cps(api).DeleteCheckpoint(checkpoints_pb2.DeleteCheckpointRequest(checkpoint_id=cp.id), metadata=api.md(), timeout=10)
    with pytest.raises(Exception):
        await sim.get_tag("kagent", f"checkpoint-{cp.id}")
    code, _, _ = await failure(cps(api).GetCheckpoint(checkpoints_pb2.GetCheckpointRequest(checkpoint_id=cp.id),
                                                      metadata=api.md(), timeout=5))
    assert code == grpc.StatusCode.NOT_FOUND


@pytest.mark.clause("CKPT-2")
@pytest.mark.clause("Q-12")
async def test_checkpoint_preconditions(api, store, sim, conversation):
    sid, t1, t2 = conversation
    code, details, reason = await failure(create_cp(api, sid, t1.id, "old-head", wait=0))
    assert (code, details, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "conversation advanced beyond the expected task",
                                       "KAGENT_CHECKPOINT_CONVERSATION_ADVANCED")
    slow = asyncio.create_task(send(api, "What is 5+5? [slow:1.0]", sid))
    await asyncio.sleep(0.3)
    code, details, _ = await failure(create_cp(api, sid, t2.id, "running", wait=0))
    assert (code, details) == (grpc.StatusCode.FAILED_PRECONDITION, "checkpoint requires all tasks to be terminal")
    t3 = await slow
    # a waiting turn is not checkpointable (nor forkable)
    waiting = await send(api, "Book a table [input-required]", sid)
    assert waiting.status.state == a2a_pb2.TASK_STATE_INPUT_REQUIRED
    code, details, _ = await failure(create_cp(api, sid, waiting.id, "waiting", wait=0))
    assert details == "checkpoint requires all tasks to be terminal"
    done = await send(api, "for two", sid, task_id=waiting.id)
    # the snapshot of the head turn is written by the runtime: pending until durable, then retryable
    await sim.set_option("snapshot_pending", True)
    t5 = await send(api, "What is 1+1?", sid)
    code, details, reason = await failure(create_cp(api, sid, t5.id, "pending", wait=1.0))
    assert (details, reason) == ("snapshot for the expected task is not ready", "KAGENT_CHECKPOINT_SNAPSHOT_PENDING")
    row = await store.session_by_id(UUID(sid))
    await sim.set_option("snapshot_pending", False)
    await sim.complete_snapshots(row.actor_atespace, row.actor_name)
    cp = await create_cp(api, sid, t5.id, "pending", wait=10.0)
    assert cp.state == checkpoints_pb2.CHECKPOINT_STATE_READY and t3.id and done.id


@pytest.mark.clause("CKPT-4")
async def test_list_pages_and_only_the_callers(api, store, sim, conversation):
    sid, _t1, t2 = conversation
    ids = [(await create_cp(api, sid, t2.id, f"p{i}")).id for i in range(3)]
    seen, token = [], ""
    while True:
        r = await cps(api).ListCheckpoints(checkpoints_pb2.ListCheckpointsRequest(
            session_id=sid, page=common_pb2.PageRequest(limit=2, page_token=token)), metadata=api.md(), timeout=5)
        seen += [c.id for c in r.checkpoints]
        token = r.page.next_page_token
        if not token:
            break
    assert seen == sorted(ids)
    r = await cps(api).ListCheckpoints(checkpoints_pb2.ListCheckpointsRequest(session_id=sid), metadata=api.md(), timeout=5)
    assert len(r.checkpoints) == 3 and not r.page.next_page_token  # default page of 50
    for limit in (-1, 101):
        code, _, _ = await failure(cps(api).ListCheckpoints(checkpoints_pb2.ListCheckpointsRequest(
            session_id=sid, page=common_pb2.PageRequest(limit=limit)), metadata=api.md(), timeout=5))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
    missing = "0198c3d7-4f2a-7b61-9c3e-5d8f7a2b4e10"
    # issue 15: another user's Session is NOT_FOUND like a missing one (as GetSession), not an empty page
    for session, user in ((sid, "bob"), (missing, "alice")):
        code, details, _ = await failure(cps(api).ListCheckpoints(checkpoints_pb2.ListCheckpointsRequest(
            session_id=session, page=common_pb2.PageRequest(limit=100)), metadata=api.md(user), timeout=5))
        assert code == grpc.StatusCode.NOT_FOUND and details == f"session {session} not found"
    for cid, user in ((ids[0], "bob"), (missing, "alice")):
        code, details, _ = await failure(cps(api).GetCheckpoint(checkpoints_pb2.GetCheckpointRequest(checkpoint_id=cid),
                                                                metadata=api.md(user), timeout=5))
        assert code == grpc.StatusCode.NOT_FOUND and details == f"checkpoint {cid} not found"
    code, _, _ = await failure(cps(api).GetCheckpoint(checkpoints_pb2.GetCheckpointRequest(checkpoint_id="bad"),
                                                      metadata=api.md(), timeout=5))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    renamed = await cps(api).UpdateCheckpointName(checkpoints_pb2.UpdateCheckpointNameRequest(checkpoint_id=ids[0], name="mine"),
                                                  metadata=api.md(), timeout=5)
    assert renamed.checkpoint.name == "mine"
    back = await cps(api).UpdateCheckpointName(checkpoints_pb2.UpdateCheckpointNameRequest(checkpoint_id=ids[0], name=""),
                                               metadata=api.md(), timeout=5)
    assert back.checkpoint.name == "my-first-agent turn 4"


@pytest.mark.clause("CKPT-6")
async def test_checkpoint_being_created_blocks_turns_lifecycle_and_idle_work(api, store, sim, conversation):
    sid, _t1, t2 = conversation
    row = await store.session_by_id(UUID(sid))
    await turn_pinned(store, sid, t2.id)  # the quiescence worker's own tag (a turn pin) is made first
    block = await sim.inject("create_tag", "block")
    creating = asyncio.create_task(create_cp(api, sid, t2.id, "blocked"))
    await sim.wait_blocked(block)
    from sessionq.errors import SessionqError
    for call in (store.admit_turn(row.id, "alice", None, {"parts": [{"text": "x"}]}, None, 600),
                 store.admit_operation(row.id, "alice", None, "SUSPEND")):
        with pytest.raises(SessionqError) as e:
            await call
        assert e.value.sqlstate == "SQ409" and "checkpoint" in e.value.message
    async with store.pool.connection() as conn:
        await conn.execute("UPDATE sessionq.sessions SET idle_boundary_id = sessionq.uuid_v7(), idle_boundary_at = now()"
                           " WHERE id = %s", (row.id,))
    assert await store.claim_idle(__import__("uuid").uuid4()) is None
    await sim.release(block)
    cp = await creating
    assert cp.state == checkpoints_pb2.CHECKPOINT_STATE_READY


@pytest.mark.clause("FORK-1")
@pytest.mark.clause("FORK-2")
@pytest.mark.clause("FORK-3")
@pytest.mark.clause("FORK-5")
async def test_fork_continues_from_the_pinned_turns_and_diverges(api, store, sim, conversation):
    sid, t1, t2 = conversation
    cp = await create_cp(api, sid, t2.id, "cp")
    source = await store.session_by_id(UUID(sid))
    await apply_agent(store, sim)  # same spec: no new revision; apply another to move the Agent on
    from sessionq.domain.agents import compile_egress, parse_spec, prepare_revision
    spec = parse_spec({"name": "my-first-agent", "template": "image:v2"})
    await store.apply_agent("kagent", spec.name, spec.to_json(), spec.spec_hash(), spec.image, compile_egress(spec), "alice")
    await prepare_revision(store, sim, (await store.get_agent("kagent", spec.name)).desired_revision_id)

    f = await fork(api, cp.id, "fork-1")
    assert f.state == runtime_pb2.RUNTIME_STATE_READY and f.name == cp.name and f.context_id == f.id != sid
    assert f.prepared_revision == str(source.revision_id)  # the source Session's revision, not the Agent's newest
    again = await fork(api, cp.id, "fork-1")
    assert again.id == f.id
    code, _, _ = await failure(fork(api, "0198c3d7-4f2a-7b61-9c3e-5d8f7a2b4e10", "fork-1"))
    assert code == grpc.StatusCode.ALREADY_EXISTS  # the request id belongs to the fork of another checkpoint
    code, _, _ = await failure(fork(api, "0198c3d7-4f2a-7b61-9c3e-5d8f7a2b4e10", "fork-2"))
    assert code == grpc.StatusCode.NOT_FOUND
    # own task ids, original timestamps, idle clock from the fork's creation
    async with store.pool.connection() as conn:
        src = await (await conn.execute("SELECT id, seq, created_at FROM sessionq.tasks WHERE session_id = %s ORDER BY seq", (sid,))).fetchall()
        dst = await (await conn.execute("SELECT id, seq, created_at, task FROM sessionq.tasks WHERE session_id = %s ORDER BY seq", (f.id,))).fetchall()
        ev_src = await (await conn.execute("SELECT seq, created_at FROM sessionq.events WHERE session_id = %s AND seq <= 4 ORDER BY seq", (sid,))).fetchall()
        ev_dst = await (await conn.execute("SELECT seq, created_at FROM sessionq.events WHERE session_id = %s ORDER BY seq", (f.id,))).fetchall()
    assert [r["seq"] for r in dst] == [r["seq"] for r in src[:2]]
    assert {r["id"] for r in dst}.isdisjoint({t1.id, t2.id})
    assert [r["created_at"] for r in dst] == [r["created_at"] for r in src[:2]]
    assert ev_dst == ev_src
    assert all(r["task"]["contextId"] == f.id for r in dst)
    forked = await store.session_by_id(UUID(f.id))
    assert forked.created_at > ev_dst[-1]["created_at"] and forked.last_event_at is None
    # the fork answers from the pinned turns; the two conversations diverge from here
    first = await send(api, "What did I ask you first?", f.id)
    assert "What is 2+2?" in answer(first)
    await send(api, "Remember the number 7.", sid)
    recall = await send(api, "What number did I ask you to remember?", f.id)
    assert "7" not in answer(recall)
    assert "7" in answer(await send(api, "What number did I ask you to remember?", sid))


@pytest.mark.clause("FORK-4")
async def test_fork_retry_must_match_the_retained_snapshot(api, store, sim, conversation):
    sid, _t1, t2 = conversation
    cp = await create_cp(api, sid, t2.id, "cp")
    # the tag is replaced by one on a newer snapshot of the source actor
    await send(api, "What is 9+9?", sid)
    row = await store.session_by_id(UUID(sid))
    for _ in range(100):
        row = await store.session_by_id(UUID(sid))
        if row.idle_boundary_id is None:
            break
        await asyncio.sleep(0.05)
    await sim.delete_tag("kagent", f"checkpoint-{cp.id}")
    await sim.create_tag("kagent", f"checkpoint-{cp.id}", row.actor_name, row.actor_uid)
    code, details, _ = await failure(fork(api, cp.id, "fork-x"))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "holds snapshot generation" in details
    assert await sim.mutation_count(method="create_actor") == 1  # only the source's


@pytest.mark.clause("CKPT-7")
@pytest.mark.clause("DEL-6")
async def test_checkpoint_outlives_source_and_live_fork_pins_it(api, store, sim, conversation):
    sid, _t1, t2 = conversation
    cp = await create_cp(api, sid, t2.id, "cp")
    sessions = sessions_pb2_grpc.SessionServiceStub(api.channel)
    await sessions.DeleteSession(sessions_pb2.DeleteSessionRequest(session_id=sid), metadata=api.md(), timeout=10)
    got = await cps(api).GetCheckpoint(checkpoints_pb2.GetCheckpointRequest(checkpoint_id=cp.id), metadata=api.md(), timeout=5)
    assert got.checkpoint.state == checkpoints_pb2.CHECKPOINT_STATE_READY
    listed = await cps(api).ListCheckpoints(checkpoints_pb2.ListCheckpointsRequest(session_id=sid), metadata=api.md(), timeout=5)
    assert [c.id for c in listed.checkpoints] == [cp.id]  # still listed by its owner after the Session is gone
    code, _, _ = await failure(cps(api).ListCheckpoints(checkpoints_pb2.ListCheckpointsRequest(session_id=sid),
                                                        metadata=api.md("bob"), timeout=5))
    assert code == grpc.StatusCode.NOT_FOUND
    f = await fork(api, cp.id, "after-delete")
    assert "What is 2+2?" in answer(await send(api, "What did I ask you first?", f.id))
    row = await store.session_by_id(UUID(f.id))
    assert row.pinned_checkpoint_id == UUID(cp.id) and row.source_checkpoint_id == UUID(cp.id)
    code, details, _ = await failure(cps(api).DeleteCheckpoint(
        checkpoints_pb2.DeleteCheckpointRequest(checkpoint_id=cp.id), metadata=api.md(), timeout=10))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "pinned by live session" in details
    # the generated column is a real RESTRICT foreign key while the fork is live
    with pytest.raises(Exception, match="sessions_pinned_checkpoint_fk"):
        async with store.pool.connection() as conn:
            await conn.execute("DELETE FROM sessionq.checkpoints WHERE id = %s", (UUID(cp.id),))
    await sessions.DeleteSession(sessions_pb2.DeleteSessionRequest(session_id=f.id), metadata=api.md(), timeout=10)
    row = await store.session_by_id(UUID(f.id))
    assert row.pinned_checkpoint_id is None and row.source_checkpoint_id == UUID(cp.id)  # request identity stays
    await cps(api).DeleteCheckpoint(checkpoints_pb2.DeleteCheckpointRequest(checkpoint_id=cp.id), metadata=api.md(), timeout=10)
    assert await count(store, "SELECT count(*) FROM sessionq.checkpoints") == 0
    # a deleted Session without checkpoints of the caller: NOT_FOUND, as GetSession
    code, _, _ = await failure(cps(api).ListCheckpoints(checkpoints_pb2.ListCheckpointsRequest(session_id=sid),
                                                        metadata=api.md(), timeout=5))
    assert code == grpc.StatusCode.NOT_FOUND
