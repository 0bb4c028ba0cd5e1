"""A CreateSession and a turn each appear as one trace whose spans come from the API process and
the worker process: real `sessionq serve` and `sessionq worker` processes exporting over OTLP to a
receiver built on opentelemetry-proto's TraceService; the trace context travels with the job
(sessionq.defer), to the runtime and back to the API with the Actor's reports, and with the
settlement's notification to the quiescence suspend it wakes. A turn sent over the A2A HTTP
bindings (JSON-RPC, HTTP+JSON's stream) joins its caller's trace as the gRPC one does, and so
does an MCP tool's call."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import httpx2
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from conftest import apply_agent
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from trace_receiver import Receiver, serving

from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc
from tests.ports import free_port


@pytest.fixture
def trace_receiver() -> Iterator[tuple[Receiver, int]]:
    with serving() as r:
        yield r


TOKEN = "trace-token"
CREATE_TRACE = "5bf92f3577b34da6a3ce929d0e0e4736"
TURN_TRACE = "6bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


@contextlib.contextmanager
def process(args: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "sessionq.cli.main", *args], env=env, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


async def until(what: str, predicate: Any, timeout: float, logs: list[Path]) -> None:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {p.name}\n" + p.read_text()[-3000:] for p in logs if p.exists())
            pytest.fail(f"timed out waiting for {what}\n{tails}")
        await asyncio.sleep(0.1)


def trace_of(r: Any, trace_id: str) -> list[Any]:
    return [s for s in list(r.spans) if s.trace_id.hex() == trace_id]


def connected(spans: list[Any], root_parent: str) -> bool:
    """Every span's parent is a span of the trace, or the caller's span."""
    ids = {s.span_id for s in spans}
    return all(s.parent_span_id in ids or s.parent_span_id.hex() == root_parent for s in spans)


def traced_env(database_url: str, port: int, otlp_port: int) -> dict[str, str]:
    """`sessionq serve` and `worker` on `database_url`, the API at `port`, every trace sampled and
    exported to the receiver at `otlp_port` every 0.1 s."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONQ_", "OTEL_"))}
    env.update(PYTHONUNBUFFERED="1", SESSIONQ_DATABASE__URL=database_url,
               SESSIONQ_SERVER__ADDRESS=f"127.0.0.1:{port}", SESSIONQ_SERVER__HTTP_ADDRESS=f"127.0.0.1:{free_port()}",
               SESSIONQ_SERVER__CONSOLE_ADDRESS="", SESSIONQ_AUTH__TOKENS=f"{TOKEN}=alice",
               SESSIONQ_LOGGING__LEVEL="warning", SESSIONQ_WORKERS__POLL_INTERVAL="0.2s",
               SESSIONQ_SESSIONS__IDLE_TTL="0s",
               SESSIONQ_TELEMETRY__OTLP__ENDPOINT=f"127.0.0.1:{otlp_port}",
               SESSIONQ_TELEMETRY__TRACING__SAMPLE_RATIO="1",
               OTEL_BSP_SCHEDULE_DELAY="100")  # the span processor exports every 0.1 s
    return env


@pytest.mark.clause("OBS-1")
@pytest.mark.timeout(240)
async def test_create_session_and_a_turn_are_each_one_trace_over_the_api_and_worker_processes(
        store, sim, database_url, trace_receiver, tmp_path):
    r, otlp_port = trace_receiver
    await apply_agent(store, sim)
    port = free_port()
    env = traced_env(database_url, port, otlp_port)
    logs = [tmp_path / "api.log", tmp_path / "worker.log"]
    with process(["serve"], env, logs[0]), process(["worker"], env, logs[1]):
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        md = [("authorization", f"Bearer {TOKEN}")]
        try:
            stub = sessions_pb2_grpc.SessionServiceStub(channel)

            async def create() -> Any:
                try:
                    return await stub.CreateSession(sessions_pb2.CreateSessionRequest(
                        request_id="traced", agent=common_pb2.ResourceReference(namespace="kagent",
                                                                                name="my-first-agent")),
                        metadata=[*md, ("traceparent", f"00-{CREATE_TRACE}-{PARENT}-01")], timeout=30)
                except grpc.aio.AioRpcError as e:
                    if e.code() == grpc.StatusCode.UNAVAILABLE:  # still starting
                        return None
                    raise

            created: list[Any] = []

            async def answered() -> bool:
                got = await create()
                if got is not None:
                    created.append(got)
                return bool(created)

            await until("CreateSession answered", answered, 90, logs)
            session = created[0].session
            assert session.id

            # the creation: the API's call and the worker's job and runtime calls, one trace
            def create_traced() -> bool:
                spans = trace_of(r, CREATE_TRACE)
                return {"SessionService/CreateSession", "job execute_operation", "runtime create_actor"} <= {
                    s.name for s in spans} and connected(spans, PARENT)  # a parent may come a batch later
            await until("the creation's spans", create_traced, 30, logs)
            spans = trace_of(r, CREATE_TRACE)
            by_name = {s.name: s for s in spans}
            api_span, job_span = by_name["SessionService/CreateSession"], by_name["job execute_operation"]
            assert r.services[api_span.span_id] == "sessionq-api"
            assert r.services[job_span.span_id] == "sessionq-worker"
            assert api_span.parent_span_id.hex() == PARENT
            assert job_span.parent_span_id == api_span.span_id  # the job carried the call's context
            assert by_name["runtime create_actor"].parent_span_id == job_span.span_id
            assert connected(spans, PARENT)

            # a turn: the API's SendMessage, the worker's dispatch and runtime invoke, the simulated
            # Actor's reports to the API (the settlement), and the quiescence suspend it wakes
            a2a = a2a_pb2_grpc.A2AServiceStub(channel)
            message = a2a_pb2.Message(message_id="m-traced", role=a2a_pb2.ROLE_USER, context_id=session.id,
                                      parts=[a2a_pb2.Part(text="hello")])
            task = (await a2a.SendMessage(a2a_pb2.SendMessageRequest(tenant="kagent/my-first-agent", message=message),
                                          metadata=[*md, ("traceparent", f"00-{TURN_TRACE}-{PARENT}-01")],
                                          timeout=60)).task
            assert task.status.state == a2a_pb2.TASK_STATE_COMPLETED, task.status

            def turn_traced() -> bool:
                spans = trace_of(r, TURN_TRACE)
                return {"A2AService/SendMessage", "job dispatch_turn", "runtime invoke", "TaskStoreService/SettleTask",
                        "quiescence suspend", "runtime suspend_actor"} <= {s.name for s in spans} and connected(spans, PARENT)
            await until("the turn's spans", turn_traced, 30, logs)
            spans = trace_of(r, TURN_TRACE)
            by_name = {s.name: s for s in spans}
            assert connected(spans, PARENT)
            assert {r.services[s.span_id] for s in spans} == {"sessionq-api", "sessionq-worker"}
            settle, suspend = by_name["TaskStoreService/SettleTask"], by_name["quiescence suspend"]
            assert r.services[settle.span_id] == "sessionq-api"
            assert r.services[suspend.span_id] == "sessionq-worker"
            assert suspend.parent_span_id == settle.span_id  # the suspend the settlement woke
            assert by_name["runtime invoke"].parent_span_id == by_name["job dispatch_turn"].span_id
            assert by_name["job dispatch_turn"].parent_span_id == by_name["A2AService/SendMessage"].span_id
            # the settlement's call came from the runtime call that carried the turn
            invoke_ids = {s.span_id for s in spans if s.name == "runtime invoke"}
            assert settle.parent_span_id in invoke_ids
        finally:
            await channel.close()


RPC_TRACE = "7bf92f3577b34da6a3ce929d0e0e4736"
STREAM_TRACE = "8bf92f3577b34da6a3ce929d0e0e4736"
MCP_TRACE = "9bf92f3577b34da6a3ce929d0e0e4736"
JSONRPC_SPAN = "POST /api/a2a/{namespace}/{agent}/jsonrpc"
STREAM_SPAN = "POST /api/a2a/{namespace}/{agent}/rest/message:stream"


def attributes(one: Any) -> dict[str, str]:
    return {a.key: a.value.string_value or str(a.value.int_value) for a in one.attributes}


@pytest.mark.clause("OBS-1")
@pytest.mark.timeout(240)
async def test_turns_over_the_http_bindings_and_an_mcp_call_join_the_callers_trace(
        store, sim, database_url, trace_receiver, tmp_path):
    """A turn sent over JSON-RPC and one over HTTP+JSON's SSE stream, each with a traceparent, are
    each one trace: the API's HTTP server span (child of the caller's span), the worker's dispatch
    job under it and the runtime call under that; an MCP tool's native call joins its caller's
    trace too."""
    r, otlp_port = trace_receiver
    await apply_agent(store, sim)
    port = free_port()
    env = traced_env(database_url, port, otlp_port)
    logs = [tmp_path / "api.log", tmp_path / "worker.log"]
    base = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {TOKEN}", "A2A-Version": "1.0"}
    with process(["serve"], env, logs[0]), process(["worker"], env, logs[1]):
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        try:
            async with httpx.AsyncClient(timeout=90) as http:
                async def ready() -> bool:
                    with contextlib.suppress(httpx.HTTPError):
                        return (await http.get(f"{base}/readyz")).status_code == 200
                    return False

                await until("the API ready", ready, 90, logs)
                stub = sessions_pb2_grpc.SessionServiceStub(channel)
                sessions = [(await stub.CreateSession(sessions_pb2.CreateSessionRequest(
                    request_id=f"http-{i}", agent=common_pb2.ResourceReference(namespace="kagent", name="my-first-agent")),
                    metadata=[("authorization", f"Bearer {TOKEN}")], timeout=60)).session.id for i in range(2)]
                agent_url = f"{base}/api/a2a/kagent/my-first-agent"

                # JSON-RPC, one blocking SendMessage
                answer = await http.post(f"{agent_url}/jsonrpc", headers={
                    **auth, "traceparent": f"00-{RPC_TRACE}-{PARENT}-01"}, json={
                    "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
                        "messageId": "m-rpc", "role": "ROLE_USER", "contextId": sessions[0],
                        "parts": [{"text": "hello"}]}}})
                assert answer.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answer.text

                # HTTP+JSON, the turn as a stream of Server-Sent Events, read to its end
                events = []
                async with http.stream("POST", f"{agent_url}/rest/message:stream", headers={
                        **auth, "traceparent": f"00-{STREAM_TRACE}-{PARENT}-01"}, json={"message": {
                        "messageId": "m-stream", "role": "ROLE_USER", "contextId": sessions[1],
                        "parts": [{"text": "hello"}]}}) as streamed:
                    assert streamed.status_code == 200
                    events = [line async for line in streamed.aiter_lines() if line.startswith("data:")]
                assert "TASK_STATE_COMPLETED" in events[-1], events

                # MCP: a tool's native call carries the request's trace context
                async with httpx2.AsyncClient(timeout=60, headers={
                        "Authorization": f"Bearer {TOKEN}", "traceparent": f"00-{MCP_TRACE}-{PARENT}-01"}) as h2, \
                        streamable_http_client(f"{base}/mcp", http_client=h2) as (read, write), \
                        ClientSession(read, write) as mcp:
                    await mcp.initialize()
                    got = await mcp.call_tool("get_session", {"session_id": sessions[0]})
                    assert not got.is_error, got.content

            for trace_id, http_span, method in ((RPC_TRACE, JSONRPC_SPAN, "on_message_send"),
                                                (STREAM_TRACE, STREAM_SPAN, "on_message_send_stream")):
                def turn_traced(trace_id: str = trace_id, http_span: str = http_span) -> bool:
                    # each process exports its spans in batches as they end, so a child (the idle
                    # suspension's runtime call) can arrive a batch before its parent: wait for both
                    spans = trace_of(r, trace_id)
                    return ({http_span, "job dispatch_turn", "runtime invoke"} <= {s.name for s in spans}
                            and connected(spans, PARENT))
                await until(f"the spans of {http_span}", turn_traced, 30, logs)
                spans = trace_of(r, trace_id)
                by_name = {s.name: s for s in spans}
                server, job = by_name[http_span], by_name["job dispatch_turn"]
                assert r.services[server.span_id] == "sessionq-api"
                assert server.parent_span_id.hex() == PARENT  # the caller's span
                assert attributes(server).get("rpc.method") == method, attributes(server)
                assert attributes(server)["http.response.status_code"] == "200"
                assert r.services[job.span_id] == "sessionq-worker"
                assert job.parent_span_id == server.span_id  # the job carried the HTTP call's context
                assert by_name["runtime invoke"].parent_span_id == job.span_id
                assert connected(spans, PARENT)

            def mcp_traced() -> bool:
                return "SessionService/GetSession" in {s.name for s in trace_of(r, MCP_TRACE)}
            await until("the MCP call's span", mcp_traced, 30, logs)
            native = next(s for s in trace_of(r, MCP_TRACE) if s.name == "SessionService/GetSession")
            assert native.parent_span_id.hex() == PARENT
        finally:
            await channel.close()
