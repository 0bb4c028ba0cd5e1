"""Issue 15 item 3: one message size limit (a2a.maxMessageBytes), enforced at admission; what is
admitted can be stored; a failed turn's status names no internals.

A message of about 1 MB used to pass SendMessage and then fail in the task store (its update
carries the message several times and exceeded the 4 MB gRPC receive limit), ending the task
FAILED with "actor kagent/session-...: TaskStoreService/UpdateTask: RESOURCE_EXHAUSTED ..." in its
user-visible status.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from typing import Any

import grpc
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from conftest import Api, apply_agent, make_settings

from sessionq import config
from sessionq.api.server import ApiServer
from sessionq.domain import turns

pytestmark = pytest.mark.pooler  # also run through PgBouncer (make test-pooler)

TENANT = "kagent/my-first-agent"
SMALL_LIMIT = 4096


def sized_message(size: int, context_id: str = "", message_id: str = "big") -> a2a_pb2.Message:
    """A user message whose protobuf encoding is exactly `size` bytes."""
    msg = a2a_pb2.Message(message_id=message_id, role=a2a_pb2.ROLE_USER, context_id=context_id,
                          parts=[a2a_pb2.Part(text="")])
    text_len = size - msg.ByteSize()
    while True:  # the length prefixes grow with the text: shrink until it fits exactly
        msg.parts[0].text = "y" * text_len
        over = msg.ByteSize() - size
        if over == 0:
            return msg
        assert over > 0 and text_len > 0
        text_len -= over


async def new_session(api: Api, user: str = "alice", request_id: str = "s") -> str:
    from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc

    r = await sessions_pb2_grpc.SessionServiceStub(api.channel).CreateSession(
        sessions_pb2.CreateSessionRequest(request_id=request_id, agent=common_pb2.ResourceReference(
            namespace="kagent", name="my-first-agent")), metadata=api.md(user), timeout=15)
    return r.session.id


async def counts(store: Any) -> dict[str, int]:
    out = {}
    async with store.pool.connection() as conn:
        for table in ("sessionq.sessions", "sessionq.tasks", "sessionq.task_versions", "sessionq.events"):
            cur = await conn.execute(f"SELECT count(*) AS n FROM {table}")
            out[table] = (await cur.fetchone())["n"]
        cur = await conn.execute("SELECT last_value AS n FROM procrastinate_jobs_id_seq")  # no job deferred
        out["jobs deferred"] = (await cur.fetchone())["n"]
        cur = await conn.execute("SELECT count(*) AS n FROM sessionq.sessions WHERE dispatch_id IS NOT NULL")
        out["dispatches"] = (await cur.fetchone())["n"]
    return out


@asynccontextmanager
async def api_with(settings: config.Settings, store: Any, sim: Any):
    server = ApiServer(settings, store, address="127.0.0.1:0", runtime=sim)
    await server.start()
    address = f"127.0.0.1:{server.port}"
    sim.taskstore_address = address
    channel = grpc.aio.insecure_channel(address)
    try:
        yield Api(channel, address)
    finally:
        await channel.close()
        await server.stop(0)


def test_limit_is_configured_and_validated() -> None:
    assert config.defaults()["a2a.maxMessageBytes"] == 1024 * 1024
    assert config.load(env={"SESSIONQ_A2A__MAX_MESSAGE_BYTES": "2048"})["a2a.maxMessageBytes"] == 2048
    for bad in ("0", "1023", "-5", "lots", str(64 * 1024 * 1024 + 1)):
        with pytest.raises(config.ConfigError, match=r"a2a\.maxMessageBytes"):
            config.load(env={"SESSIONQ_A2A__MAX_MESSAGE_BYTES": bad})
    # the channels that carry a task store update take several admitted messages
    assert config.grpc_message_limit(1024 * 1024) >= 5 * 1024 * 1024
    assert config.grpc_message_limit(1024) == 4 * 1024 * 1024  # never below grpcio's default


async def test_message_just_under_the_default_limit_completes_a_turn(api, store, sim):
    """End to end (API, worker, simulated agent reporting through the task store), with a client on
    grpcio's default channel options."""
    await apply_agent(store, sim)
    sid = await new_session(api)
    limit = config.defaults()["a2a.maxMessageBytes"]
    msg = sized_message(limit - 16, sid)
    stub = a2a_pb2_grpc.A2AServiceStub(api.channel)
    r = await stub.SendMessage(a2a_pb2.SendMessageRequest(tenant=TENANT, message=msg), metadata=api.md(), timeout=60)
    task = r.task
    assert task.status.state == a2a_pb2.TASK_STATE_COMPLETED, task.status
    assert task.history[0].parts[0].text == msg.parts[0].text  # stored whole
    answer = task.status.message.parts[0].text
    assert answer.startswith('Thank you for your message: "yyy') and len(answer) < 1000  # quoted, cut
    # the Session goes on taking turns
    r = await stub.SendMessage(a2a_pb2.SendMessageRequest(tenant=TENANT, message=a2a_pb2.Message(
        message_id="after", role=a2a_pb2.ROLE_USER, context_id=sid, parts=[a2a_pb2.Part(text="What is 2+2?")])),
        metadata=api.md(), timeout=30)
    assert r.task.status.state == a2a_pb2.TASK_STATE_COMPLETED and "4" in r.task.status.message.parts[0].text


async def test_message_over_the_limit_is_invalid_argument_and_writes_nothing(store, sim, worker):
    await apply_agent(store, sim)
    settings = make_settings(**{"a2a.maxMessageBytes": SMALL_LIMIT})
    async with api_with(settings, store, sim) as api:
        sid = await new_session(api)
        stub = a2a_pb2_grpc.A2AServiceStub(api.channel)
        # exactly at the limit: admitted and answered
        r = await stub.SendMessage(a2a_pb2.SendMessageRequest(tenant=TENANT, message=sized_message(SMALL_LIMIT, sid)),
                                   metadata=api.md(), timeout=30)
        assert r.task.status.state == a2a_pb2.TASK_STATE_COMPLETED
        before = await counts(store)
        for context_id in (sid, ""):  # a turn of a Session, and a new conversation (which would create one)
            for size in (SMALL_LIMIT + 1, 3 * 1024 * 1024):
                msg = sized_message(size, context_id, message_id=f"over-{size}")
                with pytest.raises(grpc.aio.AioRpcError) as e:
                    await stub.SendMessage(a2a_pb2.SendMessageRequest(tenant=TENANT, message=msg),
                                           metadata=api.md(), timeout=10)
                assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                details = e.value.details()
                assert f"{size} bytes" in details and f"{SMALL_LIMIT} bytes" in details, details
                assert "yyyy" not in details and len(details) < 200
        assert await counts(store) == before


async def test_task_store_failure_gives_a_status_without_internal_names(api, store, sim, caplog):
    """A task store update the Actor cannot make (here: the task's version moved under the turn)
    ends the task FAILED with a generic status; the detail (Actor, RPC path) is only in the log."""
    await apply_agent(store, sim)
    sid = await new_session(api)
    stub = a2a_pb2_grpc.A2AServiceStub(api.channel)
    msg = a2a_pb2.Message(message_id="m1", role=a2a_pb2.ROLE_USER, context_id=sid,
                          parts=[a2a_pb2.Part(text="Tell me something [slow:1.5]")])
    with caplog.at_level(logging.WARNING, logger="sessionq.domain.turns"):
        call = asyncio.ensure_future(stub.SendMessage(a2a_pb2.SendMessageRequest(tenant=TENANT, message=msg),
                                                      metadata=api.md(), timeout=30))
        async with store.pool.connection() as conn:
            for _ in range(200):  # the turn is WORKING: its first task store write is in
                cur = await conn.execute("SELECT count(*) AS n FROM sessionq.tasks WHERE session_id = %s", (sid,))
                if (await cur.fetchone())["n"]:
                    break
                await asyncio.sleep(0.02)
            else:
                raise AssertionError("the turn never started")
            await conn.execute("UPDATE sessionq.tasks SET version = version + 1, published_version = published_version + 1 WHERE session_id = %s", (sid,))
        task = (await call).task
    assert task.status.state == a2a_pb2.TASK_STATE_FAILED
    status = " ".join(p.text for p in task.status.message.parts)
    assert status == f"the turn was interrupted: {turns.RUNTIME_FAILED}"
    got = await stub.GetTask(a2a_pb2.GetTaskRequest(tenant=TENANT, id=task.id), metadata=api.md(), timeout=5)
    assert got.status == task.status
    for internal in ("session-", "kagent/", "TaskStore", "UpdateTask", "ABORTED", "actor"):
        assert internal not in status
    detail = [r.getMessage() for r in caplog.records if r.name == "sessionq.domain.turns"]
    assert any("TaskStoreService/UpdateTask" in line for line in detail), detail
