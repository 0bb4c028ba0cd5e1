"""Usage per Session: the figures kept as the work happens match the runtime's call log for a
scripted sequence of turns, a Suspend, a Resume and a checkpoint."""

import asyncio
import time

import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from fleet_agent import prepared_agent
from lifecycle import count

from sessionq import metrics
from sessionq._pb.kagent.api.v1alpha1 import checkpoints_pb2, checkpoints_pb2_grpc, common_pb2, sessions_pb2
from sessionq._pb.sessionq.v1 import fleet_pb2, fleet_pb2_grpc

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
