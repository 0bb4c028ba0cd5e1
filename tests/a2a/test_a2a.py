"""Conversations over A2A: SendMessage, GetTask, continuation, not-found rules (A2A-*, TUT-2/3)."""

import asyncio

import grpc
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from conftest import apply_agent
from conversation import TENANT, answer, code_of, new_session, send

from sessionq._pb.kagent.api.v1alpha1 import runtime_pb2, sessions_pb2, sessions_pb2_grpc

pytestmark = pytest.mark.pooler  # also run through PgBouncer (make test-pooler)


@pytest.mark.clause("A2A-3")
async def test_conversation_over_a2a(api, store, sim):
    await apply_agent(store, sim)
    sid = await new_session(api)
    t1 = await send(api, "What is 2+2?", sid)
    assert t1.status.state == a2a_pb2.TASK_STATE_COMPLETED and "4" in answer(t1)
    assert t1.context_id == sid
    t2 = await send(api, "What did I ask you first?", sid)
    assert "What is 2+2?" in answer(t2) and t2.id != t1.id
    got = await a2a_pb2_grpc.A2AServiceStub(api.channel).GetTask(a2a_pb2.GetTaskRequest(tenant=TENANT, id=t1.id),
                                                                 metadata=api.md(), timeout=5)
    assert got.status.state == a2a_pb2.TASK_STATE_COMPLETED
    # without context or task id: a new conversation (a new Session) of the existing Agent
    t3 = await send(api, "What is 3*5?")
    assert "15" in answer(t3) and t3.context_id not in ("", sid)
    s3 = await sessions_pb2_grpc.SessionServiceStub(api.channel).GetSession(
        sessions_pb2.GetSessionRequest(session_id=t3.context_id), metadata=api.md(), timeout=5)
    assert s3.session.agent.name == "my-first-agent"
    code, _ = await code_of(send(api, "hi", tenant="kagent/no-such-agent"))
    assert code == grpc.StatusCode.NOT_FOUND


@pytest.mark.clause("A2A-1")
@pytest.mark.clause("A2A-2")
async def test_missing_expired_and_foreign_contexts_are_task_not_found(api, store, sim):
    await apply_agent(store, sim)
    sid = await new_session(api)
    t = await send(api, "What is 1+1?", sid)
    missing = "0198c3d7-4f2a-7b61-9c3e-5d8f7a2b4e10"
    answers = [
        await code_of(send(api, "hi", missing)),
        await code_of(send(api, "hi", task_id="no-such-task")),
        await code_of(send(api, "hi", sid, user="bob")),
        await code_of(send(api, "hi", task_id=t.id, user="bob")),
        await code_of(a2a_pb2_grpc.A2AServiceStub(api.channel).GetTask(
            a2a_pb2.GetTaskRequest(tenant=TENANT, id=t.id), metadata=api.md("bob"), timeout=5)),
    ]
    assert {a for a in answers} == {(grpc.StatusCode.NOT_FOUND, "TaskNotFound: no such task or context")}
    # a deleted Session's context is gone the same way
    await sessions_pb2_grpc.SessionServiceStub(api.channel).DeleteSession(
        sessions_pb2.DeleteSessionRequest(session_id=sid), metadata=api.md(), timeout=10)
    assert await code_of(send(api, "hi", sid)) == answers[0]
    code, _ = await code_of(send(api, "hi", sid, user="nobody"))
    assert code == grpc.StatusCode.UNAUTHENTICATED


async def test_input_required_turn_is_continued_by_task_id(api, store, sim):
    await apply_agent(store, sim)
    sid = await new_session(api)
    t = await send(api, "Book a table [input-required]", sid)
    assert t.status.state == a2a_pb2.TASK_STATE_INPUT_REQUIRED
    done = await send(api, "for two", sid, task_id=t.id)
    assert done.id == t.id and done.status.state == a2a_pb2.TASK_STATE_COMPLETED


@pytest.mark.clause("TUT-2")
@pytest.mark.clause("TUT-3")
async def test_actor_suspends_between_turns_and_runs_during_one(api, store, sim):
    await apply_agent(store, sim)
    sid = await new_session(api)
    name = f"session-{sid}"
    sessions = sessions_pb2_grpc.SessionServiceStub(api.channel)

    async def session_state():
        r = await sessions.GetSession(sessions_pb2.GetSessionRequest(session_id=sid), metadata=api.md(), timeout=5)
        return r.session.state

    async def settled_actor():
        for _ in range(200):
            a = await sim.get_actor("kagent", name)
            if a.state.value == "ACTOR_STATE_SUSPENDED":
                return a
            await asyncio.sleep(0.02)
        raise AssertionError("actor not suspended")

    await send(api, "What is 2+2?", sid)
    first = await settled_actor()
    assert first.worker is None
    slow = asyncio.create_task(send(api, "Summarize this conversation so far. [slow:1.0]", sid))
    running = None
    for _ in range(200):
        a = await sim.get_actor("kagent", name)
        if a.state.value == "ACTOR_STATE_RUNNING":
            running = a
            break
        await asyncio.sleep(0.01)
    assert running is not None and running.worker and running.uid == first.uid
    assert running.version > first.version
    assert await session_state() == runtime_pb2.RUNTIME_STATE_READY
    task = await slow
    assert "What is 2+2?" in answer(task)
    after = await settled_actor()
    assert after.uid == first.uid and after.worker is None and after.version > running.version
    assert await session_state() == runtime_pb2.RUNTIME_STATE_READY
