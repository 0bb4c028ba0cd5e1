"""Issue 15 item 4: input hygiene of the gRPC frontend.

- a body that is not the method's protobuf message: INVALID_ARGUMENT and one rate-limited WARNING
  line (was UNKNOWN "Unexpected <class DecodeError>" and an ERROR traceback per call); methods not
  implemented and unknown methods: UNIMPLEMENTED, logged the same way;
- a huge invalid value is never echoed back whole (a 1 MB name made a 1 MB status message, which
  default clients see as RESOURCE_EXHAUSTED "metadata size exceeds hard limit");
- several `authorization` headers: UNAUTHENTICATED (not the last one);
- request ids with control characters: INVALID_ARGUMENT.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
import psycopg
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from agentapi import resource
from conftest import apply_agent, make_settings
from psycopg_pool import PoolTimeout

from sessionq import errors
from sessionq._pb.kagent.api.v1alpha1 import (
    agents_pb2,
    agents_pb2_grpc,
    checkpoints_pb2,
    checkpoints_pb2_grpc,
    common_pb2,
    sandboxes_pb2_grpc,
    sessions_pb2,
    sessions_pb2_grpc,
    task_store_pb2,
    task_store_pb2_grpc,
)
from sessionq.api.agentcard import AgentCardServer
from sessionq.api.auth import Authenticator
from sessionq.api.guard import InputGuard, RateLimitedLog, Rejection
from sessionq.api.rpc import rpc, rpc_stream
from sessionq.domain import workload
from sessionq.errors import SessionqError

pytestmark = pytest.mark.pooler  # also run through PgBouncer (make test-pooler)

SC = grpc.StatusCode
AGENT = common_pb2.ResourceReference(namespace="kagent", name="my-first-agent")
MB = "n" * (1024 * 1024)


async def status_of(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await call
    return e.value.code(), e.value.details() or ""


def raw(channel: grpc.aio.Channel, method: str) -> Any:
    """A unary call sending the given bytes as they are (no serializer on either side)."""
    return channel.unary_unary(method, request_serializer=None, response_deserializer=None)


# -- malformed protobuf, unimplemented and unknown methods ----------------------------------------

MALFORMED = {
    "invalid UTF-8 in a string": b"\x0a\x02\xff\xfe",  # field 1 (string) = bytes ff fe
    "truncated message": b"\x0a\x10abc",  # field 1 announces 16 bytes, 3 follow
    "bad varint": b"\x08" + b"\xff" * 11,  # a varint longer than 10 bytes
}


async def test_malformed_bodies_are_invalid_argument_with_one_warning(api, caplog):
    methods = ["/kagent.api.v1alpha1.SessionService/GetSession", "/lf.a2a.v1.A2AService/SendMessage",
               "/kagent.api.v1alpha1.TaskStoreService/GetTask"]
    with caplog.at_level(logging.INFO):
        for method in methods:
            for what, body in MALFORMED.items():
                # before authentication: no token at all, and a user's
                for md in ((), api.md()):
                    code, details = await status_of(raw(api.channel, method)(body, metadata=md, timeout=5))
                    assert code == SC.INVALID_ARGUMENT, (method, what, code, details)
                    assert "not a valid protobuf message" in details and "Unexpected" not in details
        # the servers' streaming methods are guarded too (reflection is a bidirectional stream)
        stream = api.channel.stream_stream("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                           request_serializer=None, response_deserializer=None)
        call = stream(iter([MALFORMED["bad varint"]]), timeout=5)
        with pytest.raises(grpc.aio.AioRpcError) as e:
            async for _ in call:
                pass
        assert e.value.code() == SC.INVALID_ARGUMENT
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len([w for w in warnings if "malformed request" in w]) == 1, warnings  # rate-limited
    # a well-formed call still works
    r = await sessions_pb2_grpc.SessionServiceStub(api.channel).ListSessions(
        sessions_pb2.ListSessionsRequest(), metadata=api.md(), timeout=5)
    assert list(r.sessions) == []


async def test_unimplemented_and_unknown_methods_are_unimplemented_without_traceback(api, caplog):
    """Every method of sessionq's services is implemented now; InputGuard's answer to a method a
    servicer does not implement is exercised on a server with the generated base servicer."""
    bare = grpc.aio.server(interceptors=[InputGuard()])
    sandboxes_pb2_grpc.add_SandboxServiceServicer_to_server(sandboxes_pb2_grpc.SandboxServiceServicer(), bare)
    port = bare.add_insecure_port("127.0.0.1:0")
    await bare.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            with caplog.at_level(logging.INFO):
                for _ in range(3):
                    code, details = await status_of(
                        raw(channel, "/kagent.api.v1alpha1.SandboxService/ListSandboxes")(b"", timeout=5))
                    assert code == SC.UNIMPLEMENTED and details == "SandboxService/ListSandboxes is not implemented"
                    code, _ = await status_of(raw(api.channel, "/no.such.Service/Method")(b"", timeout=5))
                    assert code == SC.UNIMPLEMENTED
                    stub = a2a_pb2_grpc.A2AServiceStub(api.channel)
                    # every A2A method is implemented (streams too): without a token, UNAUTHENTICATED
                    code, _ = await status_of(
                        stub.SendStreamingMessage(a2a_pb2.SendMessageRequest(), timeout=5).read())
                    assert code == SC.UNAUTHENTICATED
    finally:
        await bare.stop(0)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len([w for w in warnings if Rejection.UNIMPLEMENTED.value in w]) == 1, warnings
    assert len([w for w in warnings if Rejection.UNKNOWN_METHOD.value in w]) == 1, warnings


def test_rejection_log_is_rate_limited_per_kind_and_counts_what_it_suppressed(caplog):
    limited = RateLimitedLog(interval=0.2, logger=logging.getLogger("sessionq.test"))
    with caplog.at_level(logging.WARNING, logger="sessionq.test"):
        assert limited.warn(Rejection.MALFORMED, "/a/B", "bad")
        assert not any(limited.warn(Rejection.MALFORMED, "/a/B", "bad") for _ in range(5))
        assert limited.warn(Rejection.UNIMPLEMENTED, "/a/C", "x")  # another kind has its own budget
        import time

        time.sleep(0.25)
        assert limited.warn(Rejection.MALFORMED, "/a/B", "x" * 100000)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3
    assert "5 more since the last such line" in lines[2] and len(lines[2]) < 600


# -- echoed values are cut --------------------------------------------------------------------------


async def test_huge_invalid_values_get_a_short_invalid_argument(api, store, sim):
    """Each call uses grpcio's default channel options: a status message of a megabyte would come
    back as RESOURCE_EXHAUSTED "metadata size exceeds hard limit" instead."""
    await apply_agent(store, sim)
    sessions = sessions_pb2_grpc.SessionServiceStub(api.channel)
    agents = agents_pb2_grpc.AgentServiceStub(api.channel)
    cps = checkpoints_pb2_grpc.CheckpointServiceStub(api.channel)
    a2a = a2a_pb2_grpc.A2AServiceStub(api.channel)
    sid = (await sessions.CreateSession(sessions_pb2.CreateSessionRequest(request_id="s", agent=AGENT),
                                        metadata=api.md(), timeout=15)).session.id
    calls = {
        "agent name": agents.CreateAgent(agents_pb2.CreateAgentRequest(
            ref=common_pb2.ResourceReference(namespace="kagent", name=MB), resource=resource({})),
            metadata=api.md(), timeout=10),
        "agent namespace": agents.GetAgent(agents_pb2.GetAgentRequest(
            ref=common_pb2.ResourceReference(namespace=MB, name="x")), metadata=api.md(), timeout=10),
        "egress URL": agents.CreateAgent(agents_pb2.CreateAgentRequest(
            ref=common_pb2.ResourceReference(namespace="kagent", name="egress"),
            resource=resource({"egress": [{"url": "ftp://" + MB + MB}]})), metadata=api.md(), timeout=10),
        "egress host": agents.CreateAgent(agents_pb2.CreateAgentRequest(
            ref=common_pb2.ResourceReference(namespace="kagent", name="egress"),
            resource=resource({"egress": [{"url": "https://" + "_" * (1024 * 1024) + ".example.com"}]})),
            metadata=api.md(), timeout=10),
        "session agent": sessions.CreateSession(sessions_pb2.CreateSessionRequest(
            request_id="r", agent=common_pb2.ResourceReference(namespace="kagent", name=MB)),
            metadata=api.md(), timeout=10),
        "session name": sessions.UpdateSessionName(sessions_pb2.UpdateSessionNameRequest(session_id=sid, name=MB),
                                                   metadata=api.md(), timeout=10),
        "request id": sessions.CreateSession(sessions_pb2.CreateSessionRequest(request_id=MB, agent=AGENT),
                                             metadata=api.md(), timeout=10),
        "session id": sessions.GetSession(sessions_pb2.GetSessionRequest(session_id=MB), metadata=api.md(), timeout=10),
        "checkpoint head task": cps.CreateCheckpoint(checkpoints_pb2.CreateCheckpointRequest(
            session_id=sid, request_id="c", expected_head_task_id=MB), metadata=api.md(), timeout=10),
        "fork request id": cps.ForkSession(checkpoints_pb2.ForkSessionRequest(
            checkpoint_id=str(uuid.uuid4()), request_id=MB), metadata=api.md(), timeout=10),
        "a2a tenant": a2a.SendMessage(a2a_pb2.SendMessageRequest(tenant="kagent/" + MB, message=a2a_pb2.Message(
            message_id="m", parts=[a2a_pb2.Part(text="hi")])), metadata=api.md(), timeout=10),
    }
    bad = []
    for what, call in calls.items():
        code, details = await status_of(call)
        if code not in (SC.INVALID_ARGUMENT, SC.NOT_FOUND) or len(details) > 300 or "n" * 100 in details:
            bad.append((what, code, len(details), details[:100]))
    assert not bad
    # the task store (an Actor's workload credential): a huge task id
    secret = await store.secret("workload")
    ts = task_store_pb2_grpc.TaskStoreServiceStub(api.channel)
    code, details = await status_of(ts.GetTask(task_store_pb2.TaskStoreServiceGetTaskRequest(
        session_id=sid, task_id=MB), metadata=[("authorization", f"Bearer {workload.token_for(secret, uuid.UUID(sid))}")],
        timeout=10))
    assert code == SC.NOT_FOUND and len(details) <= 300


async def test_status_messages_are_capped_as_a_backstop():
    """A message that quotes more than it should is still cut before it becomes a status."""

    class Loud:
        @rpc
        async def Echo(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            raise SessionqError("SQ400", "bad value " + "v" * 200000, "SOME_REASON")

    server = grpc.aio.server()
    loud = Loud()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "test.Loud", {"Echo": grpc.unary_unary_rpc_method_handler(loud.Echo)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            code, details = await status_of(raw(channel, "/test.Loud/Echo")(b"", timeout=5))
    finally:
        await server.stop(0)
    assert code == SC.INVALID_ARGUMENT
    assert details.startswith("bad value vvv") and len(details) == errors.MAX_STATUS_MESSAGE + 1


_RAISED = {
    "SessionqError": (lambda: SessionqError("SQ404", "no such thing"), SC.NOT_FOUND, "no such thing"),
    "DataError": (lambda: psycopg.DataError("bad byte"), SC.INVALID_ARGUMENT, "cannot be stored"),
    "PoolTimeout": (lambda: PoolTimeout("no connection"), SC.UNAVAILABLE, "the database is unavailable"),
    "OperationalError": (lambda: psycopg.OperationalError("gone"), SC.UNAVAILABLE, "the database is unavailable"),
    "unexpected": (lambda: RuntimeError("bug"), SC.INTERNAL, "internal error; see the server log"),
}


@pytest.mark.parametrize("raised", sorted(_RAISED))
async def test_unary_and_streaming_methods_map_errors_the_same_way(raised: str) -> None:
    """`rpc` and `rpc_stream` share one mapping: the same error is the same status, before a stream's
    first item or after it; only what UNAVAILABLE tells the client to do differs."""
    make, expected, text = _RAISED[raised]

    class Failing:
        @rpc
        async def Unary(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            raise make()

        @rpc_stream
        async def Stream(self, request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
            if request:
                yield b"first"
            raise make()

    failing = Failing()
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Failing", {
        "Unary": grpc.unary_unary_rpc_method_handler(failing.Unary),
        "Stream": grpc.unary_stream_rpc_method_handler(failing.Stream),
    }),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            unary = await status_of(raw(channel, "/test.Failing/Unary")(b"", timeout=5))
            streamed = []
            for request in (b"", b"after an item"):
                call = channel.unary_stream("/test.Failing/Stream")(request, timeout=5)
                with pytest.raises(grpc.aio.AioRpcError) as e:
                    async for _ in call:
                        pass
                streamed.append((e.value.code(), e.value.details() or ""))
    finally:
        await server.stop(0)
    for code, details in [unary, *streamed]:
        assert code == expected and text in details, (code, details)
    if expected == SC.UNAVAILABLE:
        assert unary[1].endswith("retry the same call")
        assert all(details.endswith("subscribe again") for _, details in streamed)


def test_clip() -> None:
    assert errors.clip("short") == "short"
    assert errors.clip("x" * 81) == "x" * 80 + "\u2026"
    assert errors.clip("x" * 10, 5) == "xxxxx\u2026"


async def test_sql_messages_clip_values(aconn):
    cur = await aconn.execute("SELECT sessionq.clip(repeat('a', 100)), sessionq.clip('short'), sessionq.clip(NULL)")
    assert await cur.fetchone() == ("a" * 80 + "\u2026", "short", None)


# -- several authorization headers ----------------------------------------------------------------


async def test_several_authorization_headers_are_unauthenticated(api, store, sim):
    await apply_agent(store, sim)
    sessions = sessions_pb2_grpc.SessionServiceStub(api.channel)
    for md in ([("authorization", "Bearer bob-token"), ("authorization", "Bearer alice-token")],
               [("authorization", "Bearer alice-token"), ("authorization", "Bearer alice-token")],
               [("authorization", "Bearer alice-token"), ("authorization", "")],
               [("authorization", "Bearer alice-token"), ("x-kagent-share-token", "a"), ("x-kagent-share-token", "b")]):
        code, details = await status_of(sessions.ListSessions(sessions_pb2.ListSessionsRequest(), metadata=md, timeout=5))
        assert code == SC.UNAUTHENTICATED and "once" in details, (md, code, details)
    # one header is fine
    await sessions.ListSessions(sessions_pb2.ListSessionsRequest(), metadata=api.md(), timeout=5)
    # the task store reads its workload credential the same way
    sid = (await sessions.CreateSession(sessions_pb2.CreateSessionRequest(request_id="s", agent=AGENT),
                                        metadata=api.md(), timeout=15)).session.id
    token = workload.token_for(await store.secret("workload"), uuid.UUID(sid))
    ts = task_store_pb2_grpc.TaskStoreServiceStub(api.channel)
    request = task_store_pb2.TaskStoreServiceListTasksRequest(session_id=sid, request=a2a_pb2.ListTasksRequest())
    await ts.ListTasks(request, metadata=[("authorization", f"Bearer {token}")], timeout=5)
    code, _ = await status_of(ts.ListTasks(request, metadata=[("authorization", f"Bearer {token}")] * 2, timeout=5))
    assert code == SC.UNAUTHENTICATED


async def test_agent_card_with_several_authorization_headers_is_401(store, sim):
    await apply_agent(store, sim)
    settings = make_settings()
    cards = AgentCardServer(store, Authenticator(settings["auth.tokens"]), "grpc://127.0.0.1:8083")
    await cards.start("127.0.0.1:0")

    async def get(headers: str) -> tuple[int, dict[str, Any]]:
        reader, writer = await asyncio.open_connection("127.0.0.1", cards.port)
        writer.write(f"GET /api/a2a/kagent/my-first-agent/.well-known/agent-card.json HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     f"{headers}\r\n".encode())
        await writer.drain()
        data = await reader.read()
        writer.close()
        head, _, body = data.partition(b"\r\n\r\n")
        return int(head.split()[1]), json.loads(body)

    try:
        assert (await get("Authorization: Bearer alice-token\r\n"))[0] == 200
        status, body = await get("Authorization: Bearer bob-token\r\nauthorization: Bearer alice-token\r\n")
        assert status == 401 and "once" in body["error"]
    finally:
        await cards.stop()


# -- request ids ----------------------------------------------------------------------------------


@pytest.mark.parametrize("request_id", ["a\nb", "tab\there", "nul\x00", "del\x7f", "c1\x85x", "esc\x1b]0;x\x07"])
async def test_request_ids_with_control_characters_are_invalid(api, store, sim, request_id):
    await apply_agent(store, sim)
    sessions = sessions_pb2_grpc.SessionServiceStub(api.channel)
    cps = checkpoints_pb2_grpc.CheckpointServiceStub(api.channel)
    calls = [
        sessions.CreateSession(sessions_pb2.CreateSessionRequest(request_id=request_id, agent=AGENT),
                               metadata=api.md(), timeout=10),
        cps.ForkSession(checkpoints_pb2.ForkSessionRequest(checkpoint_id=str(uuid.uuid4()), request_id=request_id),
                        metadata=api.md(), timeout=10),
        cps.CreateCheckpoint(checkpoints_pb2.CreateCheckpointRequest(
            session_id=str(uuid.uuid4()), request_id=request_id, expected_head_task_id="t"), metadata=api.md(), timeout=10),
        a2a_pb2_grpc.A2AServiceStub(api.channel).SendMessage(a2a_pb2.SendMessageRequest(
            tenant="kagent/my-first-agent", message=a2a_pb2.Message(message_id=request_id, parts=[a2a_pb2.Part(text="hi")])),
            metadata=api.md(), timeout=10),
    ]
    for call in calls:
        code, details = await status_of(call)
        if "\x00" in request_id and code == SC.INVALID_ARGUMENT and "NUL" in details:
            continue  # refused earlier, as every text field holding NUL is
        assert code == SC.INVALID_ARGUMENT and "control characters" in details, (code, details)
    async with store.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM sessionq.sessions")
        assert (await cur.fetchone())["n"] == 0


async def test_long_a2a_message_ids_name_distinct_conversations(api, store, sim):
    """A new conversation's Session is created under a request id named by the message id; ids too
    long for a request id used to be cut to a prefix, so two of them joined one Session."""
    await apply_agent(store, sim)
    a2a = a2a_pb2_grpc.A2AServiceStub(api.channel)
    contexts = set()
    for suffix in ("one", "two", "one"):
        msg = a2a_pb2.Message(message_id="p" * 200 + suffix, parts=[a2a_pb2.Part(text="What is 1+1?")])
        r = await a2a.SendMessage(a2a_pb2.SendMessageRequest(tenant="kagent/my-first-agent", message=msg),
                                  metadata=api.md(), timeout=30)
        contexts.add(r.task.context_id)
    assert len(contexts) == 2  # the resend of "one" joined its conversation
