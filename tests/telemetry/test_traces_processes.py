"""A CreateSession and a turn each appear as one trace whose spans come from the API process and
the worker process: real `sessionq serve` and `sessionq worker` processes exporting over OTLP to a
receiver built on opentelemetry-proto's TraceService; the trace context travels with the job
(sessionq.defer), to the runtime and back to the API with the Actor's reports, and with the
settlement's notification to the quiescence suspend it wakes."""

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
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from conftest import apply_agent
from trace_receiver import Receiver, serving

from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc


@pytest.fixture
def trace_receiver() -> Iterator[tuple[Receiver, int]]:
    with serving() as r:
        yield r


TOKEN = "trace-token"
CREATE_TRACE = "5bf92f3577b34da6a3ce929d0e0e4736"
TURN_TRACE = "6bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


@pytest.mark.clause("OBS-1")
@pytest.mark.timeout(240)
async def test_create_session_and_a_turn_are_each_one_trace_over_the_api_and_worker_processes(
        store, sim, database_url, trace_receiver, tmp_path):
    r, otlp_port = trace_receiver
    await apply_agent(store, sim)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONQ_", "OTEL_"))}
    env.update(PYTHONUNBUFFERED="1", SESSIONQ_DATABASE__URL=database_url,
               SESSIONQ_SERVER__ADDRESS=f"127.0.0.1:{port}", SESSIONQ_SERVER__HTTP_ADDRESS=f"127.0.0.1:{free_port()}",
               SESSIONQ_SERVER__CONSOLE_ADDRESS="", SESSIONQ_AUTH__TOKENS=f"{TOKEN}=alice",
               SESSIONQ_LOGGING__LEVEL="warning", SESSIONQ_WORKERS__POLL_INTERVAL="0.2s",
               SESSIONQ_SESSIONS__IDLE_TTL="0s",
               SESSIONQ_TELEMETRY__OTLP__ENDPOINT=f"127.0.0.1:{otlp_port}",
               SESSIONQ_TELEMETRY__TRACING__SAMPLE_RATIO="1",
               OTEL_BSP_SCHEDULE_DELAY="100")  # the span processor exports every 0.1 s
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
                    s.name for s in spans}
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
                names = {s.name for s in trace_of(r, TURN_TRACE)}
                return {"A2AService/SendMessage", "job dispatch_turn", "runtime invoke", "TaskStoreService/SettleTask",
                        "quiescence suspend", "runtime suspend_actor"} <= names
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
