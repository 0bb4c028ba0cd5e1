"""OpenTelemetry metrics (src/sessionq/telemetry.py): one MeterProvider exporting over OTLP when
telemetry.otlp.endpoint is set, received here by an OTLP receiver built on opentelemetry-proto's
service definitions; the Prometheus names are the OpenTelemetry names as OBS-2 spells them."""

from __future__ import annotations

import http.server
import re
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any, ClassVar

import grpc
import pytest
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from prometheus_client import generate_latest

from sessionq import config, metrics, telemetry


class Receiver(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self) -> None:
        self.requests: list[metrics_service_pb2.ExportMetricsServiceRequest] = []

    def Export(self, request: Any, context: Any) -> metrics_service_pb2.ExportMetricsServiceResponse:
        self.requests.append(request)
        return metrics_service_pb2.ExportMetricsServiceResponse()

    def metrics(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for request in self.requests:
            for rm in request.resource_metrics:
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        out[m.name] = (m, {a.key: a.value.string_value for a in rm.resource.attributes})
        return out


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, int]]:
    r = Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))  # the exporter is synchronous: its own threads
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(r, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield r, port
    server.stop(0)


@pytest.mark.clause("OBS-1")
def test_metrics_go_through_one_meter_provider_exported_over_otlp(receiver):
    r, port = receiver
    assert config.defaults()["telemetry.otlp.endpoint"] == ""  # off by default
    assert telemetry.start("", service="x").provider is None  # and then nothing runs
    assert config.defaults()["metrics.enabled"] is False  # Prometheus scraping is opt-in
    tel = telemetry.start(f"127.0.0.1:{port}", service="sessionq-test", interval=3600)
    try:
        own = tel.provider.get_meter("test").create_counter("sessionq.test.own")  # an instrument of the provider
        own.add(2)
        metrics.SESSION_EXPIRED.inc()
        metrics.REVISION_GC.observe("discovery", 0.2)
        tel.flush()
    finally:
        tel.shutdown()
    got = r.metrics()
    expired, resource = got["kagent.session.expired"]
    assert resource["service.name"] == "sessionq-test"
    assert expired.sum.is_monotonic and expired.sum.data_points[0].as_double >= 1
    gc, _ = got["kagent.runtime_revision.gc.duration"]
    assert gc.unit == "s" and gc.histogram.data_points
    point = next(p for p in gc.histogram.data_points
                 if {a.key: a.value.string_value for a in p.attributes}.get("kagent.gc.stage") == "discovery")
    assert point.count >= 1 and sum(point.bucket_counts) == point.count
    assert "sessionq.test.own" in got  # the provider's own instruments go out with the bridged ones
    assert not any(name.startswith(("process", "python")) for name in got)


def prometheus_names() -> set[str]:
    text = generate_latest(metrics.REGISTRY).decode()
    return set(re.findall(r"^# TYPE (\S+) ", text, re.MULTILINE))


@pytest.mark.clause("OBS-2")
def test_prometheus_names_are_the_opentelemetry_names_with_underscores_and_suffixes():
    assert telemetry.otel_name("kagent_session_expired") == ("kagent.session.expired", "")
    assert telemetry.otel_name("kagent_runtime_revision_gc_duration_seconds") == (
        "kagent.runtime_revision.gc.duration", "s")
    assert telemetry.OTEL_ATTRIBUTES == {"kagent_gc_stage": "kagent.gc.stage", "error_type": "error.type"}
    # every family: the exposed Prometheus name is its OpenTelemetry name, dots as underscores, with
    # the unit's suffix, and counters end in _total
    exposed = {line for line in generate_latest(metrics.REGISTRY).decode().splitlines() if line and line[0] != "#"}
    for family in metrics.REGISTRY.collect():
        if not family.name.startswith(telemetry.EXPORTED_PREFIXES):
            continue
        name, unit = telemetry.otel_name(family.name)
        expected = name.replace(".", "_") + {"s": "_seconds", "By": "_bytes", "": ""}[unit]
        assert expected == family.name, (family.name, name)
        if family.type == "counter":
            assert any(line.startswith(family.name + "_total") for line in exposed) or not family.samples
    assert {"kagent_session_expired_total", "kagent_runtime_revision_gc_duration_seconds"} <= prometheus_names()


class HttpReceiver(http.server.BaseHTTPRequestHandler):
    """OTLP/HTTP (http/protobuf): the bodies POSTed to /v1/metrics and /v1/traces, parsed as
    opentelemetry-proto's export requests."""

    got: ClassVar[dict[str, list[Any]]] = {}

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        kind = {"/v1/metrics": metrics_service_pb2.ExportMetricsServiceRequest,
                "/v1/traces": trace_service_pb2.ExportTraceServiceRequest}.get(self.path)
        if kind is None or self.headers.get("content-type") != "application/x-protobuf":
            self.send_response(404)
            self.end_headers()
            return
        self.got.setdefault(self.path, []).append(kind.FromString(body))
        answer = (metrics_service_pb2.ExportMetricsServiceResponse() if self.path == "/v1/metrics"
                  else trace_service_pb2.ExportTraceServiceResponse()).SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.clause("OBS-1")
def test_metrics_and_traces_go_out_over_otlp_http_protobuf():
    assert config.load(env={"SESSIONQ_TELEMETRY__OTLP__PROTOCOL": "http/protobuf"}).telemetry.otlp.protocol == (
        "http/protobuf")
    with pytest.raises(config.ConfigError):
        config.load(env={"SESSIONQ_TELEMETRY__OTLP__PROTOCOL": "http/json"})
    HttpReceiver.got = {}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HttpReceiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"127.0.0.1:{server.server_address[1]}"  # no scheme: http:// (insecure)
    tel = telemetry.start(endpoint, service="sessionq-http", interval=3600, protocol="http/protobuf")
    provider = telemetry.start_tracing(endpoint, service="sessionq-http", ratio=1.0, protocol="http/protobuf")
    try:
        metrics.SESSION_EXPIRED.inc()
        tel.flush()
        with telemetry.span("probe"):
            pass
        assert provider is not None and provider.force_flush()
    finally:
        tel.shutdown()
        telemetry.stop_tracing(provider)
        server.shutdown()
    names = {m.name for request in HttpReceiver.got["/v1/metrics"] for rm in request.resource_metrics
             for sm in rm.scope_metrics for m in sm.metrics}
    assert "kagent.session.expired" in names
    spans = [s for request in HttpReceiver.got["/v1/traces"] for rs in request.resource_spans
             for ss in rs.scope_spans for s in ss.spans]
    assert [s.name for s in spans] == ["probe"]
