"""OpenTelemetry of a sessionq process: metrics (OBS-1, OBS-2) through one MeterProvider, exported
over OTLP when `telemetry.otlp.endpoint` is set; traces of the API's calls and the work they start
when `telemetry.tracing.sampleRatio` is above 0 (`start_tracing`).

The families of `sessionq.metrics` stay prometheus-client's (the Prometheus endpoint of
`metrics.enabled` serves them as it always has, names unchanged). The MeterProvider's reader
(`BridgeReader`) adds them to every export, converted to OpenTelemetry's model under their
OpenTelemetry names: the Prometheus name is the OpenTelemetry name with dots as underscores and the
unit or `_total` suffix (`kagent.session.expired` <-> `kagent_session_expired_total`;
`kagent.runtime_revision.gc.duration`, unit s <-> `kagent_runtime_revision_gc_duration_seconds`),
attributes `kagent.gc.stage`, `error.type` <-> labels `kagent_gc_stage`, `error_type`. Counters
become monotonic cumulative sums, gauges gauges, histograms explicit-bucket histograms. Any
instrument made on the MeterProvider itself (`meter()`) is exported with them.

Traces: every gRPC call the API answers is a server span (`server_span`, from the `rpc` wrapper),
and so is every call of the A2A HTTP bindings (`http_server_span`, from `webserve.TracedHttp`),
its parent the W3C trace context of the call's metadata or headers (`traceparent`, `tracestate`), sampled
parent-based with the configured ratio; log lines written inside carry its trace and span ids
(`logs.py`). The trace follows the call: `traceparent()` is what travels with the work a sampled
span starts (the store sets it on the statement's transaction, `sessionq.defer` puts it in the
job's args, `sessionq.notify` in the payload; runtime calls send it on), and `span(..., parent=)`
continues it in the worker (the job, the runtime calls, the quiescence suspend). Off (ratio 0, the
default) each of these checks one flag and does nothing else.

Export over OTLP `grpc` or `http/protobuf` (telemetry.otlp.protocol).

Off (no endpoint): no provider, no thread, nothing exported.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
import os
import time
from collections.abc import Iterable, Iterator
from typing import Any

from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.metrics import Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricsData,
    NumberDataPoint,
    PeriodicExportingMetricReader,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from prometheus_client import REGISTRY, CollectorRegistry

log = logging.getLogger(__name__)

SCOPE = InstrumentationScope("sessionq")
# the OpenTelemetry names whose dots cannot be told from the Prometheus name's underscores
OTEL_NAMES = {
    "kagent_session_expired": "kagent.session.expired",
    "kagent_runtime_revision_gc_duration_seconds": "kagent.runtime_revision.gc.duration",
    "kagent_runtime_revision_gc_pending": "kagent.runtime_revision.gc.pending",
}
OTEL_ATTRIBUTES = {"kagent_gc_stage": "kagent.gc.stage", "error_type": "error.type"}
UNITS = {"_seconds": "s", "_bytes": "By"}
EXPORTED_PREFIXES = ("sessionq_", "kagent_")  # the process_* and python_* collectors are Prometheus's own


def otel_name(prometheus_family: str) -> tuple[str, str]:
    """(OpenTelemetry name, unit) of a Prometheus family name (counters without `_total`)."""
    unit = ""
    base = prometheus_family
    for suffix, u in UNITS.items():
        if base.endswith(suffix):
            base, unit = base.removesuffix(suffix), u
    if prometheus_family in OTEL_NAMES:
        return OTEL_NAMES[prometheus_family], unit
    return base.replace("_", ".", 1) if base.startswith("sessionq_") else base, unit


def _attributes(labels: dict[str, str], drop: str = "") -> dict[str, str]:
    return {OTEL_ATTRIBUTES.get(k, k): v for k, v in labels.items() if k != drop}


def bridged(registry: CollectorRegistry, start_ns: int, now_ns: int) -> list[Metric]:
    """The registry's sessionq and kagent families as OpenTelemetry metrics."""
    out: list[Metric] = []
    for family in registry.collect():
        if not family.name.startswith(EXPORTED_PREFIXES):
            continue
        name, unit = otel_name(family.name)
        data: Any
        if family.type == "counter":
            points = [NumberDataPoint(_attributes(s.labels), start_ns, now_ns, s.value)
                      for s in family.samples if s.name.endswith("_total")]
            data = Sum(points, AggregationTemporality.CUMULATIVE, is_monotonic=True)
        elif family.type == "gauge":
            data = Gauge([NumberDataPoint(_attributes(s.labels), start_ns, now_ns, s.value) for s in family.samples])
        elif family.type == "histogram":
            data = Histogram(list(_histogram_points(family.samples, start_ns, now_ns)),
                             AggregationTemporality.CUMULATIVE)
        else:
            continue
        out.append(Metric(name, family.documentation, unit, data))
    return out


def _histogram_points(samples: Iterable[Any], start_ns: int, now_ns: int) -> Iterable[HistogramDataPoint]:
    series: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
    for s in samples:
        key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
        one = series.setdefault(key, {"buckets": [], "sum": 0.0, "count": 0})
        if s.name.endswith("_bucket"):
            one["buckets"].append((float(s.labels["le"]), s.value))
        elif s.name.endswith("_sum"):
            one["sum"] = s.value
        elif s.name.endswith("_count"):
            one["count"] = int(s.value)
    for key, one in series.items():
        cumulative = sorted(one["buckets"])
        bounds = [le for le, _ in cumulative if not math.isinf(le)]
        counts, before = [], 0.0
        for _, total in cumulative:
            counts.append(int(total - before))
            before = total
        yield HistogramDataPoint(dict(_attributes(dict(key))), start_ns, now_ns, one["count"], one["sum"],
                                 counts, bounds, min=math.nan, max=math.nan)


class BridgeReader(PeriodicExportingMetricReader):
    """The MeterProvider's reader: every export carries the provider's own instruments and the
    Prometheus registry's families (see the module docstring)."""

    def __init__(self, exporter: MetricExporter, interval: float, resource: Resource,
                 registry: CollectorRegistry = REGISTRY) -> None:
        super().__init__(exporter, export_interval_millis=interval * 1000)
        self.registry = registry
        self.resource = resource
        self.started_ns = time.time_ns()

    def _receive_metrics(self, metrics_data: MetricsData | None, timeout_millis: float = 10_000,
                         **kwargs: Any) -> None:
        scope = ScopeMetrics(SCOPE, bridged(self.registry, self.started_ns, time.time_ns()), "")
        resource_metrics = list(metrics_data.resource_metrics) if metrics_data else []
        if resource_metrics:
            first = resource_metrics[0]
            resource_metrics[0] = ResourceMetrics(first.resource, [*first.scope_metrics, scope], first.schema_url)
        else:
            resource_metrics = [ResourceMetrics(self.resource, [scope], "")]
        super()._receive_metrics(MetricsData(resource_metrics), timeout_millis, **kwargs)


class Telemetry:
    """What `start` set up, to flush and stop at the end."""

    def __init__(self, provider: MeterProvider | None) -> None:
        self.provider = provider

    def flush(self) -> None:
        if self.provider is not None:
            self.provider.force_flush()

    def shutdown(self) -> None:
        if self.provider is not None:
            self.provider.shutdown()
            self.provider = None


GRPC, HTTP_PROTOBUF = "grpc", "http/protobuf"  # telemetry.otlp.protocol


def http_url(endpoint: str, signal: str, insecure: bool) -> str:
    """The OTLP/HTTP URL of `signal` (metrics, traces) at a collector's base `endpoint`."""
    base = endpoint if "://" in endpoint else ("http://" if insecure else "https://") + endpoint
    return f"{base.rstrip('/')}/v1/{signal}"


def metric_exporter(endpoint: str, protocol: str, insecure: bool) -> MetricExporter:
    if protocol == HTTP_PROTOBUF:
        # imported here: the HTTP exporter (and requests) costs every process's start otherwise
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetricExporter

        return HttpMetricExporter(endpoint=http_url(endpoint, "metrics", insecure))
    return OTLPMetricExporter(endpoint=endpoint, insecure=insecure)


def span_exporter(endpoint: str, protocol: str, insecure: bool) -> SpanExporter:
    if protocol == HTTP_PROTOBUF:
        # imported here: the HTTP exporter (and requests) costs every process's start otherwise
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter

        return HttpSpanExporter(endpoint=http_url(endpoint, "traces", insecure))
    return OTLPSpanExporter(endpoint=endpoint, insecure=insecure)


def start(endpoint: str, *, service: str, interval: float = 60.0, insecure: bool = True, protocol: str = GRPC,
          exporter: MetricExporter | None = None, registry: CollectorRegistry = REGISTRY) -> Telemetry:
    """The process's MeterProvider, exporting to the OTLP `endpoint` (`protocol` grpc or
    http/protobuf) every `interval` seconds; nothing at all when the endpoint is empty (and no
    exporter is given)."""
    if not endpoint and exporter is None:
        return Telemetry(None)
    resource = Resource.create({"service.name": service, "service.instance.id": f"{os.uname().nodename}:{os.getpid()}"})
    reader = BridgeReader(exporter or metric_exporter(endpoint, protocol, insecure), interval, resource, registry)
    provider = MeterProvider(metric_readers=[reader], resource=resource)
    # the SDK hands a reader nothing when no instrument of the provider has a point, and then the
    # bridged families would not go out: this one always has one
    started = time.time()
    provider.get_meter("sessionq").create_observable_gauge(
        "sessionq.process.start_time", [lambda _options: [Observation(started)]], unit="s",
        description="When this process started (Unix time).")
    otel_metrics.set_meter_provider(provider)
    log.info("OpenTelemetry metrics exported over OTLP (%s) to %s every %gs", protocol, endpoint, interval)
    return Telemetry(provider)


# -- traces -------------------------------------------------------------------------------------------

_tracer: trace.Tracer | None = None  # set while tracing is on: the rpc wrapper does nothing else otherwise
_propagator = TraceContextTextMapPropagator()
_http_span: contextvars.ContextVar[trace.Span | None] = contextvars.ContextVar("sessionq_http_span", default=None)


CLIENT, CONSUMER, INTERNAL = trace.SpanKind.CLIENT, trace.SpanKind.CONSUMER, trace.SpanKind.INTERNAL


def tracing() -> bool:
    return _tracer is not None


def start_tracing(endpoint: str, *, service: str, ratio: float, insecure: bool = True, protocol: str = GRPC,
                  exporter: SpanExporter | None = None) -> TracerProvider | None:
    """A TracerProvider sampling `ratio` of the traces that do not come sampled already (parent
    based), exporting to the OTLP `endpoint` (`protocol` grpc or http/protobuf); None (tracing off)
    when the ratio is 0 or there is nowhere to export."""
    global _tracer
    if ratio <= 0 or (not endpoint and exporter is None):
        return None
    resource = Resource.create({"service.name": service, "service.instance.id": f"{os.uname().nodename}:{os.getpid()}"})
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(ratio)), resource=resource)
    provider.add_span_processor(BatchSpanProcessor(exporter or span_exporter(endpoint, protocol, insecure)))
    _tracer = provider.get_tracer("sessionq")
    log.info("OpenTelemetry traces sampled at %g and exported over OTLP (%s) to %s", ratio, protocol, endpoint)
    return provider


def stop_tracing(provider: TracerProvider | None) -> None:
    global _tracer
    _tracer = None
    if provider is not None:
        provider.shutdown()


@contextlib.contextmanager
def server_span(name: str, metadata: Iterable[tuple[str, Any]] | None) -> Iterator[None]:
    """A server span for a call, child of the W3C trace context its metadata carries."""
    if _tracer is None:
        yield
        return
    carrier = {k.lower(): v for k, v in (metadata or ()) if isinstance(v, str)}
    with _tracer.start_as_current_span(name, context=_propagator.extract(carrier), kind=trace.SpanKind.SERVER,
                                       attributes={"rpc.system": "grpc", "rpc.method": name}):
        yield


@contextlib.contextmanager
def http_server_span(method: str, route: str, path: str,
                     headers: Iterable[tuple[bytes, bytes]]) -> Iterator[trace.Span | None]:
    """A server span for an HTTP request (named `method route`, the route a template, no ids in
    it), child of the W3C trace context of its headers (`traceparent`, `tracestate`); the span, to
    record the answer's status (`http_status`), or None while tracing is off."""
    if _tracer is None:
        yield None
        return
    carrier = {}
    for k, v in headers:
        name = k.decode("latin-1").lower()
        if name in ("traceparent", "tracestate"):
            carrier[name] = v.decode("latin-1")
    with _tracer.start_as_current_span(f"{method} {route}", context=_propagator.extract(carrier),
                                       kind=trace.SpanKind.SERVER,
                                       attributes={"http.request.method": method, "http.route": route,
                                                   "url.path": path}) as one:
        token = _http_span.set(one)
        try:
            yield one
        finally:
            _http_span.reset(token)


def http_status(one: trace.Span | None, status: int) -> None:
    """The HTTP answer's status on its server span (a 5xx marks the span an error)."""
    if one is None or not status:
        return
    one.set_attribute("http.response.status_code", status)
    if status >= 500:
        one.set_status(trace.StatusCode.ERROR)


def annotate(attributes: dict[str, str]) -> None:
    """Attributes on the server span of the HTTP request being answered, when tracing is on (one
    check otherwise). Its own: libraries in between (the a2a-sdk) may make spans of their own,
    non-recording ones when they trace with OpenTelemetry's global provider."""
    if _tracer is None:
        return
    one = _http_span.get()
    if one is not None:
        one.set_attributes(attributes)


def traceparent() -> str | None:
    """The W3C traceparent of the active span when tracing is on and it is sampled, else None: what
    travels with the work a traced call starts (a job's args, a notification, runtime calls).
    Unsampled work carries nothing, so its downstream spans are never made (traces begin at the
    API, sampled there)."""
    if _tracer is None:
        return None
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid or not ctx.trace_flags.sampled:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"


@contextlib.contextmanager
def span(name: str, *, parent: str | None = None, kind: trace.SpanKind = trace.SpanKind.INTERNAL,
         attributes: dict[str, Any] | None = None, root: bool = True) -> Iterator[None]:
    """A span `name`, child of the traceparent `parent` (work that carried one) or else of the active
    span. Without either it is made only when `root` (then sampled at the configured ratio); nothing
    at all while tracing is off."""
    if _tracer is None:
        yield
        return
    context = _propagator.extract({"traceparent": parent}) if parent else None
    if context is None and not root and not trace.get_current_span().get_span_context().is_valid:
        yield
        return
    with _tracer.start_as_current_span(name, context=context, kind=kind, attributes=attributes):
        yield


def with_traceparent(metadata: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """`metadata` (of a gRPC call or HTTP headers) with the active span's traceparent added."""
    tp = traceparent()
    if tp is not None:
        metadata.append(("traceparent", tp))
    return metadata


def current_ids() -> tuple[str, str] | None:
    """(trace id, span id) of the active span, in hex, when there is one (for log lines)."""
    if _tracer is None:
        return None
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"
