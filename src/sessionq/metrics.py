"""Prometheus metrics of sessionq processes (served over HTTP when metrics.enabled)."""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, start_http_server

GRPC_REQUESTS = Counter(
    "sessionq_grpc_requests", "gRPC requests by method and status code", ["method", "code"]
)
GRPC_LATENCY = Histogram(
    "sessionq_grpc_request_duration_seconds", "gRPC request latency by method", ["method"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
OPERATIONS = Counter(
    "sessionq_operations", "Lifecycle operation outcomes by kind (admitted, completed, failed, ...)",
    ["kind", "outcome"],
)
CLAIM_CONFLICTS = Counter(
    "sessionq_claim_conflicts", "Execution claims not taken because another attempt held or superseded them",
    ["status"],
)

QUIESCENCE_LATENCY = Histogram(
    "sessionq_quiescence_latency_seconds", "From a turn's settlement (idle boundary) to its recorded suspension",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)


def serve(address: str, registry: CollectorRegistry = REGISTRY) -> None:
    host, _, port = address.rpartition(":")
    start_http_server(int(port), addr=host or "0.0.0.0", registry=registry)
