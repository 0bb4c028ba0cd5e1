"""Usage per Session: the figures kept as the work happens match the runtime's call log for a
scripted sequence of turns, a Suspend, a Resume and a checkpoint; snapshot sizes are those the
runtime reported (unknown ones counted apart, never as 0), and implausible sizes are refused."""

import asyncio
import time
import uuid
from datetime import UTC, datetime

import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from fleet_agent import prepared_agent
from lifecycle import count, raw_session, ready_session, turn_by_store

from sessionq import metrics
from sessionq._pb.kagent.api.v1alpha1 import checkpoints_pb2, checkpoints_pb2_grpc, common_pb2, sessions_pb2
from sessionq._pb.sessionq.v1 import fleet_pb2, fleet_pb2_grpc
from sessionq.domain.checkpoints import refresh_snapshot
from sessionq.domain.quiescence import QuiescencePool
from sessionq.domain.snapshots import MAX_SNAPSHOT_BYTES, pick_snapshot
from sessionq.errors import SessionqError
from sessionq.runtime.base import Snapshot, SnapshotFidelity, SnapshotStatus

AGENT = common_pb2.ResourceReference(namespace="kagent", name="my-first-agent")
TENANT = "kagent/my-first-agent"


async def send(api, text, context_id):
    stub = a2a_pb2_grpc.A2AServiceStub(api.channel)
    msg = a2a_pb2.Message(message_id=f"m-{text}", role=a2a_pb2.ROLE_USER, context_id=context_id,
                          parts=[a2a_pb2.Part(text=text)])
    r = await stub.SendMessage(a2a_pb2.SendMessageRequest(tenant=TENANT, message=msg), metadata=api.md(), timeout=20)
    return r.task


async def quiesced(store, sid, timeout=30.0):
    deadline = time.monotonic() + timeout
    while await count(store, "SELECT count(*) FROM sessionq.sessions WHERE id = %s AND (idle_boundary_id IS NOT NULL"
                             " OR dispatch_id IS NOT NULL OR active_task_id IS NOT NULL)", sid):
        assert time.monotonic() < deadline, "not quiesced"
        await asyncio.sleep(0.05)


@pytest.mark.clause("FLEET-5")
async def test_usage_matches_the_runtimes_call_log(api, store, sim):
    await prepared_agent(store)
    fleet = fleet_pb2_grpc.FleetServiceStub(api.channel)
    created = await fleet.CreateSession(fleet_pb2.CreateSessionRequest(
        session=sessions_pb2.CreateSessionRequest(request_id="u1", agent=AGENT)), metadata=api.md(), timeout=10)
    sid = created.session.session.id
    for i in range(3):
        await send(api, f"turn {i}", sid)
        await quiesced(store, sid)
    from sessionq._pb.kagent.api.v1alpha1 import sessions_pb2_grpc

    kagent = sessions_pb2_grpc.SessionServiceStub(api.channel)
    await kagent.ResumeSession(sessions_pb2.ResumeSessionRequest(session_id=sid), metadata=api.md(), timeout=20)
    await quiesced(store, sid)
    await kagent.SuspendSession(sessions_pb2.SuspendSessionRequest(session_id=sid), metadata=api.md(), timeout=20)
    await kagent.ResumeSession(sessions_pb2.ResumeSessionRequest(session_id=sid), metadata=api.md(), timeout=20)
    await quiesced(store, sid)
    task = await send(api, "turn 3", sid)
    await quiesced(store, sid)
    cp = await checkpoints_pb2_grpc.CheckpointServiceStub(api.channel).CreateCheckpoint(
        checkpoints_pb2.CreateCheckpointRequest(session_id=sid, request_id="cp1", expected_head_task_id=task.id),
        metadata=api.md(), timeout=20)
    assert cp.checkpoint.id
    usage = (await fleet.GetSessionUsage(fleet_pb2.GetSessionUsageRequest(session_id=sid), metadata=api.md(),
                                         timeout=10)).usage
    s = await store.session_by_id(__import__("uuid").UUID(sid))
    calls = await sim.calls(s.actor_name)
    resumes = [c for c in calls if c["method"] == "resume_actor"]
    suspends = [c for c in calls if c["method"] == "suspend_actor"]
    assert usage.turns == 4
    assert usage.resumes == len(resumes) > 0
    assert usage.snapshots == len(suspends) > 0
    # every snapshot's size as the simulator logged it with its suspend (the bytes of what it keeps)
    sizes = [c["detail"]["size_bytes"] for c in suspends]
    assert all(isinstance(n, int) and n > 0 for n in sizes) and len(set(sizes)) > 1  # the memory grew
    assert usage.snapshots_sized == len(suspends)
    assert usage.snapshot_bytes == sum(sizes)
    assert usage.checkpoints_held == 1
    assert not usage.running
    # the running time: every resume to the suspension after it, as the call log timed them
    ran = 0.0
    for r in resumes:
        after = [c for c in suspends if c["id"] > r["id"]]
        ran += (after[0]["at"] - r["at"]).total_seconds()
    assert abs(usage.running_seconds - ran) < 0.5 + 0.1 * ran, (usage.running_seconds, ran)
    assert 0 < usage.resume_seconds_max <= usage.resume_seconds_total
    # another user's Session answers as a missing one
    with pytest.raises(Exception) as e:
        await fleet.GetSessionUsage(fleet_pb2.GetSessionUsageRequest(session_id=sid), metadata=api.md("bob"), timeout=10)
    assert "not found" in str(e.value)
    # summed per Agent for the metrics: one series for the Agent
    metrics.set_overview(await store.gauge_stats(), set())
    assert metrics.AGENT_USAGE["turns"].labels(agent=TENANT)._value.get() == 4
    assert metrics.AGENT_USAGE["resumes"].labels(agent=TENANT)._value.get() == len(resumes)
    assert metrics.AGENT_USAGE["snapshot_bytes"].labels(agent=TENANT)._value.get() == sum(sizes)
    assert metrics.AGENT_USAGE["snapshots_sized"].labels(agent=TENANT)._value.get() == len(suspends)


async def usage_of(store, sid):
    return await store.get_session_usage(sid, "alice", None)


@pytest.mark.clause("FLEET-5")
async def test_a_pending_snapshots_size_is_counted_once_when_it_completes(store, sim, database_url):
    s = await ready_session(store, sim, "pending")
    await turn_by_store(store, sim, s)
    await sim.set_option("snapshot_pending", True)
    pool = QuiescencePool(store, sim, database_url, listen=False, snapshot_wait=0.0)
    work = await store.claim_idle_work(uuid.uuid4(), 0.0, 1)
    assert [c.id for c in work.claimed] == [s.id]
    assert await pool.quiesce(work.claimed[0]) is not None
    row = await raw_session(store, s.id)
    assert row.snapshot_status == "IN_PROGRESS" and row.snapshot_bytes is None
    u = await usage_of(store, s.id)
    assert (u["snapshots"], u["snapshots_sized"], u["snapshot_bytes"]) == (1, 0, 0)  # unknown: not a 0 size
    assert await sim.complete_snapshots(s.actor_atespace, s.actor_name) == 1
    assert await refresh_snapshot(store, sim, s.id, row.snapshot_generation)
    actor = await sim.get_actor(s.actor_atespace, s.actor_name)
    size = next(x.size_bytes for x in actor.snapshots if x.generation == row.snapshot_generation)
    assert size and size > 0
    u = await usage_of(store, s.id)
    assert (u["snapshots"], u["snapshots_sized"], u["snapshot_bytes"]) == (1, 1, size)
    # recorded again (a second refresh finds nothing pending): still counted once
    assert not await refresh_snapshot(store, sim, s.id, row.snapshot_generation)
    assert (await usage_of(store, s.id))["snapshot_bytes"] == size


@pytest.mark.clause("FLEET-5")
async def test_implausible_snapshot_sizes_are_refused_and_nothing_is_written(store, sim):
    s = await ready_session(store, sim, "bad-size")
    await turn_by_store(store, sim, s)
    executor = uuid.uuid4()
    claimed = (await store.claim_idle_work(executor, 0.0, 1)).claimed[0]
    before = await raw_session(store, s.id)
    snap = {"generation": 7, "uri": "sim://x", "status": "COMPLETED"}
    for bad in (-1, 1.5, "12", True, {"n": 1}, MAX_SNAPSHOT_BYTES + 1, 10**30):
        with pytest.raises(SessionqError) as e:
            await store.finish_idle(s.id, claimed.idle_boundary_id, executor, {**snap, "bytes": bad})
        assert e.value.sqlstate == "SQ400" and "snapshot bytes must be" in str(e.value)
        assert str(10**30) not in str(e.value) and len(str(e.value)) < 200
        after = await raw_session(store, s.id)
        assert (after.snapshot_generation, after.idle_executor, after.snapshot_bytes) == (
            before.snapshot_generation, executor, before.snapshot_bytes)
        assert (await usage_of(store, s.id))["snapshots"] == 0
    # a plausible size is recorded with the snapshot, in the same statement
    done = await store.finish_idle(s.id, claimed.idle_boundary_id, executor, {**snap, "bytes": 4096})
    assert done.snapshot_bytes == 4096
    u = await usage_of(store, s.id)
    assert (u["snapshots"], u["snapshots_sized"], u["snapshot_bytes"]) == (1, 1, 4096)
    # a completion's size is checked too
    with pytest.raises(SessionqError) as e:
        await store.record_snapshot_completed(s.id, 7, "sim://x", -5)
    assert e.value.sqlstate == "SQ400"
    # the runtime's figure is taken only when plausible; else the size is unknown (None), never 0
    at = datetime.now(UTC)
    for size, expected in ((123, 123), (0, 0), (None, None), (-1, None), (True, None), (MAX_SNAPSHOT_BYTES + 1, None)):
        picked = pick_snapshot([Snapshot(3, SnapshotFidelity.VOLUMES, SnapshotStatus.COMPLETED, "u", at, size)])
        assert picked is not None and picked["bytes"] == expected, size
    pending = pick_snapshot([Snapshot(3, SnapshotFidelity.VOLUMES, SnapshotStatus.IN_PROGRESS, "", at, 10)])
    assert pending is not None and pending["bytes"] is None
