"""Traces of the API's calls (src/sessionq/telemetry.py): a server span per call, child of the W3C
trace context of its metadata, exported over OTLP to a receiver built on opentelemetry-proto's
TraceService; log lines inside carry the span's ids; off by default. The context goes with the jobs a
sampled call queues, and with an Actor's task store reports."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from conftest import apply_agent
from starlette.requests import Request
from trace_receiver import Receiver, serving

from sessionq import config, logs, telemetry, webserve
from sessionq._pb.kagent.api.v1alpha1 import (
    common_pb2,
    sessions_pb2,
    sessions_pb2_grpc,
    task_store_pb2,
    task_store_pb2_grpc,
)
from sessionq.agentkit.server import CredentialContextBuilder
from sessionq.api.agentcard import binding_route
from sessionq.errors import SessionqError
from sessionq.runtime.taskstore_client import TRACEPARENT, TaskStoreClient


@pytest.fixture
def trace_receiver() -> Iterator[tuple[Receiver, int]]:
    with serving() as r:
        yield r


TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


def test_tracing_is_off_by_default():
    assert config.defaults()["telemetry.tracing.sampleRatio"] == 0
    assert telemetry.start_tracing("127.0.0.1:4317", service="x", ratio=0) is None
    assert not telemetry.tracing() and telemetry.current_ids() is None
    with pytest.raises(config.ConfigError):
        config.load(env={"SESSIONQ_TELEMETRY__TRACING__SAMPLE_RATIO": "1.5"})


async def test_a_create_session_call_is_a_span_of_the_callers_trace(api, store, sim, trace_receiver):
    r, port = trace_receiver
    await apply_agent(store, sim)
    provider = telemetry.start_tracing(f"127.0.0.1:{port}", service="sessionq-api", ratio=1.0)
    try:
        stub = sessions_pb2_grpc.SessionServiceStub(api.channel)
        await stub.CreateSession(
            sessions_pb2.CreateSessionRequest(request_id="t1", agent=common_pb2.ResourceReference(
                namespace="kagent", name="my-first-agent")),
            metadata=[*api.md(), ("traceparent", f"00-{TRACE_ID}-{PARENT}-01")], timeout=20)
        # log lines written inside a span carry its ids
        with telemetry.server_span("probe", [("traceparent", f"00-{TRACE_ID}-{PARENT}-01")]):
            record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", None, None)
            logs.JobContextFilter().filter(record)
        assert provider is not None and provider.force_flush()
    finally:
        telemetry.stop_tracing(provider)
    create = [s for s in r.spans if s.name == "SessionService/CreateSession"]
    assert len(create) == 1
    assert create[0].trace_id.hex() == TRACE_ID and create[0].parent_span_id.hex() == PARENT
    assert record.trace_id == TRACE_ID and len(record.span_id) == 16  # type: ignore[attr-defined]
    assert '"trace_id": "' + TRACE_ID in logs.JsonFormatter().format(record)


async def test_the_trace_context_goes_with_the_job_only_from_a_sampled_span(store, sim, trace_receiver):
    """A statement made inside a sampled span queues its job with the span's traceparent; outside a
    span, or in an unsampled one, nothing is added."""
    _, port = trace_receiver
    await apply_agent(store, sim)
    provider = telemetry.start_tracing(f"127.0.0.1:{port}", service="sessionq-api", ratio=1.0)
    try:
        with telemetry.span("caller", parent=f"00-{TRACE_ID}-{PARENT}-01"):
            sent = telemetry.traceparent()
            traced = await store.admit_create("alice", "traced", "kagent", "my-first-agent", "")
            with pytest.raises(SessionqError) as refused:  # a refusal inside the pipeline is the same refusal
                await store.admit_create("alice", "missing", "kagent", "no-such-agent", "")
            assert refused.value.code == grpc.StatusCode.NOT_FOUND, refused.value
            again = await store.admit_create("alice", "traced", "kagent", "my-first-agent", "")  # the pool is fine
            assert again.session.id == traced.session.id
        with telemetry.span("unsampled", parent=f"00-{TRACE_ID}-{PARENT}-00"):
            assert telemetry.traceparent() is None
            unsampled = await store.admit_create("alice", "unsampled", "kagent", "my-first-agent", "")
        plain = await store.admit_create("alice", "plain", "kagent", "my-first-agent", "")
    finally:
        telemetry.stop_tracing(provider)
    async with store.pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT args->>'session_id' AS s, args->>'traceparent' AS t FROM procrastinate_jobs"
            " WHERE task_name = 'execute_operation'")).fetchall()
    args = {row["s"]: row["t"] for row in rows}
    assert sent is not None and sent.startswith(f"00-{TRACE_ID}-") and sent.endswith("-01")
    assert args[str(traced.session.id)] == sent
    assert args[str(unsampled.session.id)] is None and args[str(plain.session.id)] is None


async def test_an_actor_process_sends_its_turns_trace_context_with_its_reports():
    """The agent kit takes the traceparent of the turn's A2A request (the worker's `runtime invoke`
    span) and its task store client sends it with every report, so the API's spans of the reports
    join the turn's trace; without one, nothing is sent."""
    seen: list[dict[str, str]] = []

    class Store(task_store_pb2_grpc.TaskStoreServiceServicer):
        async def SettleTask(self, request, context):
            seen.append({k: v for k, v in context.invocation_metadata() if isinstance(v, str)})
            return task_store_pb2.TaskStoreServiceSettleTaskResponse()

    server = grpc.aio.server()
    task_store_pb2_grpc.add_TaskStoreServiceServicer_to_server(Store(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    traceparent = f"00-{TRACE_ID}-{PARENT}-01"
    try:
        async def turn(headers: list[tuple[bytes, bytes]]) -> None:  # one A2A request, in its own task
            context = CredentialContextBuilder().build(Request({"type": "http", "method": "POST", "path": "/",
                                                                "headers": headers, "query_string": b""}))
            assert "x-sessionq-workload-token" not in context.state["headers"]
            async with TaskStoreClient(f"127.0.0.1:{port}", "token") as client:
                await client.settle_task("s", "t", 1)

        await asyncio.create_task(turn([(b"traceparent", traceparent.encode()),
                                        (b"x-sessionq-workload-token", b"tok")]))
        await asyncio.create_task(turn([]))
        assert TRACEPARENT.get() is None  # each turn's own: nothing leaks into another
    finally:
        await server.stop(0)
    assert seen[0].get("traceparent") == traceparent and seen[0]["authorization"] == "Bearer token"
    assert "traceparent" not in seen[1]


@pytest.mark.clause("OBS-1")
async def test_an_http_binding_request_is_a_server_span_of_its_callers_trace_and_nothing_while_off(trace_receiver):
    """`TracedHttp` (the A2A HTTP bindings' server span): while tracing is off it only passes the
    request on (the route is not even computed); on, a binding's request is a span named by its
    route (no namespace, Agent or task id), child of the request's traceparent, with the answer's
    status; other paths make none."""
    r, port = trace_receiver
    answered: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        answered.append(scope["path"])
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    def no_route(path: str) -> str | None:
        raise AssertionError("the route is computed while tracing is off")

    async def call(traced: webserve.TracedHttp, path: str) -> None:
        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            pass

        await traced({"type": "http", "method": "GET", "path": path,
                      "headers": [(b"traceparent", f"00-{TRACE_ID}-{PARENT}-01".encode())]}, receive, send)

    task_path = "/api/a2a/kagent/my-first-agent/rest/tasks/0193-abc"
    await call(webserve.TracedHttp(app, no_route), task_path)  # off
    assert answered == [task_path]
    assert binding_route(task_path) == "/api/a2a/{namespace}/{agent}/rest/tasks/{id}"
    assert binding_route("/api/a2a/kagent/my-first-agent/rest/tasks/t-1:cancel") == \
        "/api/a2a/{namespace}/{agent}/rest/tasks/{id}:cancel"
    assert binding_route("/api/a2a/kagent/my-first-agent/jsonrpc") == "/api/a2a/{namespace}/{agent}/jsonrpc"
    assert binding_route("/api/a2a/kagent/my-first-agent/.well-known/agent-card.json") is None

    provider = telemetry.start_tracing(f"127.0.0.1:{port}", service="sessionq-api", ratio=1.0)
    try:
        traced = webserve.TracedHttp(app, binding_route)
        await call(traced, task_path)
        await call(traced, "/api/a2a/kagent/my-first-agent/.well-known/agent-card.json")
        assert provider is not None and provider.force_flush()
    finally:
        telemetry.stop_tracing(provider)
    assert len(answered) == 3
    assert [s.name for s in r.spans] == ["GET /api/a2a/{namespace}/{agent}/rest/tasks/{id}"]
    one = r.spans[0]
    assert one.trace_id.hex() == TRACE_ID and one.parent_span_id.hex() == PARENT
    assert {a.key: a.value.int_value for a in one.attributes}["http.response.status_code"] == 404
