"""A turn's call to its Actor that fails after the Actor settled the turn fails nothing.

The Actor reports and settles its turn through the task store before its answer to the dispatch's
call comes back; the idle suspension that the settlement wakes can end the Actor's process in
between (under gVisor, for almost every turn). The dispatch then sees UNAVAILABLE "the actor's
process ended during the turn" for a turn that is already COMPLETED: it is not a failure, and an
operator must not read "dispatch failed" in the log for every turn."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from conftest import Api, apply_agent

from sessionq.runtime.base import Code, SubstrateError

TENANT = "kagent/my-first-agent"


async def new_session(api: Api) -> str:
    from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc

    r = await sessions_pb2_grpc.SessionServiceStub(api.channel).CreateSession(
        sessions_pb2.CreateSessionRequest(request_id="after-settle", agent=common_pb2.ResourceReference(
            namespace="kagent", name="my-first-agent")), metadata=api.md(), timeout=15)
    return str(r.session.id)


async def test_a_call_that_fails_after_its_turn_settled_is_not_a_failed_dispatch(
        api: Api, store: Any, sim: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    await apply_agent(store, sim)
    sid = await new_session(api)
    settled_then_lost = 0
    real_invoke = sim.invoke

    async def invoke_then_lose_the_process(*args: Any, **kwargs: Any) -> None:
        nonlocal settled_then_lost
        await real_invoke(*args, **kwargs)  # the simulated Actor settles the turn through the task store
        settled_then_lost += 1
        raise SubstrateError(Code.UNAVAILABLE, "the actor's process ended during the turn: killed by SIGTERM")

    monkeypatch.setattr(sim, "invoke", invoke_then_lose_the_process)
    stub = a2a_pb2_grpc.A2AServiceStub(api.channel)
    with caplog.at_level(logging.DEBUG, logger="sessionq.domain.turns"):
        for i in range(2):  # the Session goes on taking turns
            r = await stub.SendMessage(a2a_pb2.SendMessageRequest(tenant=TENANT, message=a2a_pb2.Message(
                message_id=f"m{i}", role=a2a_pb2.ROLE_USER, context_id=sid,
                parts=[a2a_pb2.Part(text="What is 2+2?")])), metadata=api.md(), timeout=30)
            assert r.task.status.state == a2a_pb2.TASK_STATE_COMPLETED, r.task.status
            deadline = time.monotonic() + 15
            # the dispatch job handles its call's error after SendMessage has answered
            while sum("after its turn settled" in rec.getMessage() for rec in caplog.records) <= i:
                assert time.monotonic() < deadline, [rec.getMessage() for rec in caplog.records]
                await asyncio.sleep(0.05)
            got = await stub.GetTask(a2a_pb2.GetTaskRequest(tenant=TENANT, id=r.task.id), metadata=api.md(), timeout=5)
            assert got.status.state == a2a_pb2.TASK_STATE_COMPLETED
    assert settled_then_lost == 2
    assert not [rec for rec in caplog.records if rec.levelno >= logging.WARNING and rec.name == "sessionq.domain.turns"]
    async with store.pool.connection() as conn:
        cur = await conn.execute("SELECT failure_reason, dispatch_id FROM sessionq.sessions WHERE id = %s", (sid,))
        row = await cur.fetchone()
    assert row["failure_reason"] is None and row["dispatch_id"] is None
