"""OpenTelemetry metrics (src/sessionq/telemetry.py): one MeterProvider exporting over OTLP when
telemetry.otlp.endpoint is set, received here by an OTLP receiver built on opentelemetry-proto's
service definitions; the Prometheus names are the OpenTelemetry names as OBS-2 spells them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
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
