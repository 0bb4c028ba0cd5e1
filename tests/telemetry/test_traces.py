"""Traces of the API's calls (src/sessionq/telemetry.py): a server span per call, child of the W3C
trace context of its metadata, exported over OTLP to a receiver built on opentelemetry-proto's
TraceService; log lines inside carry the span's ids; off by default."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from conftest import apply_agent
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from sessionq import config, logs, telemetry
from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans: list[Any] = []

    def Export(self, request: Any, context: Any) -> trace_service_pb2.ExportTraceServiceResponse:
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                self.spans.extend(ss.spans)
        return trace_service_pb2.ExportTraceServiceResponse()


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, int]]:
    r = Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(r, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield r, port
    server.stop(0)


def test_tracing_is_off_by_default():
    assert config.defaults()["telemetry.tracing.sampleRatio"] == 0
    assert telemetry.start_tracing("127.0.0.1:4317", service="x", ratio=0) is None
    assert not telemetry.tracing() and telemetry.current_ids() is None
    with pytest.raises(config.ConfigError):
        config.load(env={"SESSIONQ_TELEMETRY__TRACING__SAMPLE_RATIO": "1.5"})


async def test_a_create_session_call_is_a_span_of_the_callers_trace(api, store, sim, receiver):
    r, port = receiver
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
