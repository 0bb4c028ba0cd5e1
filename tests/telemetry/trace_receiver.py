"""The OTLP receiver of the trace tests: opentelemetry-proto's TraceService, served by grpcio
(`serving`: a context manager yielding the receiver and its port)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.services: dict[bytes, str] = {}  # span id -> service.name of the process that made it

    def Export(self, request: Any, context: Any) -> trace_service_pb2.ExportTraceServiceResponse:
        for rs in request.resource_spans:
            service = next((a.value.string_value for a in rs.resource.attributes if a.key == "service.name"), "")
            for ss in rs.scope_spans:
                self.spans.extend(ss.spans)
                for one in ss.spans:
                    self.services[one.span_id] = service
        return trace_service_pb2.ExportTraceServiceResponse()


@contextlib.contextmanager
def serving() -> Iterator[tuple[Receiver, int]]:
    r = Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(r, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield r, port
    server.stop(0)
