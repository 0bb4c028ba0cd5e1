"""Prometheus metrics of sessionq processes (served over HTTP when metrics.enabled).

Every family, its labels and what to alert on are listed in docs/metrics.md (a test checks the list
against this registry). Counters and histograms expose no `_created` series (they would double the
series for nothing: Prometheus reads resets from the counters themselves)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import socketserver
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    make_wsgi_app,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

disable_created_metrics()  # no `_created` series beside each counter and histogram

GRPC_REQUESTS = Counter("sessionq_grpc_requests", "gRPC requests by method and status code", ["method", "code"])
GRPC_LATENCY = Histogram(
    "sessionq_grpc_request_duration_seconds",
    "gRPC request latency by method",
    ["method"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
# counted by the A2A streams (api/a2a.py), on every binding
A2A_STREAMS = Gauge("sessionq_open_streams", "A2A streams (SendStreamingMessage, SubscribeToTask) open in this process")
A2A_STREAMS_REFUSED = Counter(
    "sessionq_streams_refused", "A2A streams refused because their user had a2a.stream.maxPerUser open"
)
TURNS_QUEUED = Counter(
    "sessionq_turns_queued", "A2A messages queued behind their Session's running turn (busy policy enqueue, interrupt)"
)
TURNS_STALLED = Counter(
    "sessionq_turns_stalled", "Turns failed as stalled: no task update for sessions.stalledTurnTimeout"
)
ACTORS_PAUSED = Counter(
    "sessionq_actors_paused", "Actors paused, not suspended, as their turn waits for input (sessions.pausedRuntimeTtl)"
)
OPERATIONS = Counter(
    "sessionq_operations",
    "Lifecycle operation outcomes by kind (admitted, completed, failed, ...)",
    ["kind", "outcome"],
)
CLAIM_CONFLICTS = Counter(
    "sessionq_claim_conflicts",
    "Execution claims not taken because another attempt held or superseded them",
    ["status"],
)

QUIESCENCE_LATENCY = Histogram(
    "sessionq_quiescence_latency_seconds",
    "From a turn's settlement (idle boundary) to its recorded suspension",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)

QUEUE_DEPTH = Gauge("sessionq_queue_depth", "procrastinate jobs waiting (todo) per queue", ["queue"])
QUEUE_OLDEST = Gauge("sessionq_queue_oldest_job_age_seconds", "Age of the oldest waiting job per queue", ["queue"])
SESSION_EXPIRED = Counter("kagent_session_expired", "Idle Sessions removed by completed expiration sweeps")
SANDBOX_EXPIRED = Counter(
    "sessionq_sandbox_expired", "Sandboxes removed at their expires_at by completed expiration sweeps"
)

# what the console's overview shows, refreshed from the database (refresh_gauges)
JOBS = Gauge(
    "sessionq_jobs", "procrastinate jobs per queue and status (succeeded history left out)", ["queue", "status"]
)
QUEUE_PAUSED = Gauge("sessionq_queue_paused", "1 while a queue is paused (`sessionq queues pause`), else 0", ["queue"])
STALLED_JOBS = Gauge("sessionq_stalled_jobs", "Running jobs whose worker stopped heartbeating")
WORKERS = Gauge("sessionq_workers", "Registered worker processes by state (running, draining, stalled)", ["state"])
SESSIONS = Gauge("sessionq_sessions", "Sessions by state (DELETED tombstones included)", ["state"])
# usage summed per Agent over its live Sessions (schema/45_usage.sql, sessionq.agent_usage): one
# series an Agent, never one a Session
AGENT_USAGE = {
    "turns": Gauge("sessionq_agent_turns", "Turns of the Agent's live Sessions", ["agent"]),
    "running_seconds": Gauge(
        "sessionq_agent_running_seconds", "Seconds the Actors of the Agent's live Sessions ran", ["agent"]
    ),
    "snapshots": Gauge("sessionq_agent_snapshots", "Snapshots taken of the Agent's live Sessions", ["agent"]),
    # sizes as the runtime reported them: snapshot_bytes covers snapshots_sized of the snapshots
    "snapshot_bytes": Gauge(
        "sessionq_agent_snapshot_bytes",
        "Bytes of the snapshots of the Agent's live Sessions whose size the runtime reported",
        ["agent"],
    ),
    "snapshots_sized": Gauge(
        "sessionq_agent_snapshots_sized",
        "Snapshots of the Agent's live Sessions whose size the runtime reported (counted in snapshot_bytes)",
        ["agent"],
    ),
    "checkpoints_held": Gauge(
        "sessionq_agent_checkpoints_held", "Checkpoints held by the Agent's live Sessions", ["agent"]
    ),
    "resumes": Gauge("sessionq_agent_resumes", "Actor resumes of the Agent's live Sessions", ["agent"]),
    "resume_seconds": Gauge(
        "sessionq_agent_resume_seconds", "Total latency of the Actor resumes of the Agent's live Sessions", ["agent"]
    ),
}
# counted by the worker that ends each attempt (jobs/bridge.py)
JOB_ATTEMPTS = Counter(
    "sessionq_job_attempts",
    "Ended job attempts by task and outcome (succeeded, failed, retried, aborted)",
    ["task", "outcome"],
)
# counted by the deliver_push job (domain/push.py)
PUSH_DELIVERIES = Counter(
    "sessionq_push_attempts",
    "A2A push notification attempts by outcome (delivered, retried, failed)",
    ["outcome"],
)

JOB_STATES = ("todo", "doing", "failed", "cancelled", "aborted")
WORKER_STATES = ("running", "draining", "stalled")
SESSION_STATES = ("CREATING", "READY", "SUSPENDED", "FAILED", "DELETING", "DELETED")


async def refresh_queue_gauges(store: Any, stop: asyncio.Event, interval: float = 15.0) -> None:
    """Keep sessionq_queue_depth and sessionq_queue_oldest_job_age_seconds current (scrapes only
    read the gauges). Queues with nothing waiting read 0."""
    seen: set[str] = set()
    while not stop.is_set():
        try:
            stats = await store.queue_stats()
        except Exception as e:  # keep the last values; the database may be failing over
            log.warning("cannot refresh queue gauges: %s", e)
        else:
            current = {q for q, _, _ in stats}
            for queue in seen - current:
                QUEUE_DEPTH.labels(queue=queue).set(0)
                QUEUE_OLDEST.labels(queue=queue).set(0)
            for queue, depth, age in stats:
                QUEUE_DEPTH.labels(queue=queue).set(depth)
                QUEUE_OLDEST.labels(queue=queue).set(age)
            seen |= current
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval)


def set_overview(stats: dict[str, Any], seen_queues: set[str]) -> set[str]:
    """Set the overview gauges from `Store.gauge_stats()`; returns the queues seen so far (a queue
    that disappears reads 0, not its last value)."""
    queues = {q for q, _ in stats["jobs"]} | set(stats["paused"]) | seen_queues
    for queue in queues:
        for status in JOB_STATES:
            JOBS.labels(queue=queue, status=status).set(stats["jobs"].get((queue, status), 0))
        QUEUE_PAUSED.labels(queue=queue).set(1 if queue in stats["paused"] else 0)
    STALLED_JOBS.set(stats["stalled"])
    for state in WORKER_STATES:
        WORKERS.labels(state=state).set(stats["workers"].get(state, 0))
    for state in SESSION_STATES:
        SESSIONS.labels(state=state).set(stats["sessions"].get(state, 0))
    for agent, row in stats.get("agent_usage", {}).items():
        for figure, gauge in AGENT_USAGE.items():
            gauge.labels(agent=agent).set(float(row[figure] or 0))
    return queues


async def refresh_gauges(store: Any, stop: asyncio.Event, interval: float = 15.0) -> None:
    """Keep the queue gauges and the overview gauges (jobs, paused queues, stalled jobs, workers,
    Sessions by state) current until `stop`; scrapes only read them."""
    seen: set[str] = set()
    queue_task = asyncio.create_task(refresh_queue_gauges(store, stop, interval))
    try:
        while not stop.is_set():
            try:
                seen = set_overview(await store.gauge_stats(), seen)
            except Exception as e:  # keep the last values; the database may be failing over
                log.warning("cannot refresh the overview gauges: %s", e)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval)
    finally:
        queue_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await queue_task


class Readiness:
    """Whether this process is ready (the database and the runtime answer), as its metrics server's
    ``/ready`` answers it: 200 "ready", else 503 with the reason. Set from the event loop, read by
    the server's threads (one reference assignment: no lock needed)."""

    def __init__(self) -> None:
        self.problem: str | None = "starting"

    def set(self, problem: str | None) -> None:
        self.problem = problem

    @property
    def ready(self) -> bool:
        return self.problem is None


SCRAPE_TIMEOUT = 10.0  # seconds one read or write of a metrics connection may take
MAX_SCRAPES = 64  # metrics connections served at once (a thread each); more are closed at once


class _QuietHandler(WSGIRequestHandler):
    timeout = SCRAPE_TIMEOUT  # a client that stops sending or reading is cut off (no slowloris)

    def log_message(self, format: str, *args: Any) -> None:
        """No access log (the scrapes and probes would fill it)."""


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    """A thread per connection, at most MAX_SCRAPES of them: a flood of connections to the metrics
    port neither grows the process's threads and descriptors without bound nor waits in a queue."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 128  # the listen backlog: connections past the cap are accepted and closed at once

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that timed out or went away is no error of the server's (socketserver would
        print its traceback to stderr); anything else is logged with its traceback."""
        error = sys.exc_info()[1]
        if isinstance(error, OSError):
            log.debug("metrics connection ended: %s", error)
        else:
            log.exception("metrics request failed")

    def server_activate(self) -> None:
        self._slots = threading.BoundedSemaphore(MAX_SCRAPES)
        super().server_activate()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def _app(registry: CollectorRegistry, readiness: Readiness | None) -> Callable[..., Iterable[bytes]]:
    metrics_app = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if readiness is not None and environ.get("PATH_INFO") == "/ready":
            problem = readiness.problem
            status = "200 OK" if problem is None else "503 Service Unavailable"
            body = b"ready\n" if problem is None else f"not ready: {problem}\n".encode()
            start_response(status, [("Content-Type", "text/plain; charset=utf-8"),
                                    ("Content-Length", str(len(body)))])
            return [body]
        return metrics_app(environ, start_response)

    return app


def serve(address: str, registry: CollectorRegistry = REGISTRY, readiness: Readiness | None = None) -> int:
    """Serve the metrics at `address` (and ``/ready`` from `readiness`, when given) from daemon
    threads; returns the bound port."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    server_class = type("_Server", (_ThreadingServer,), {"address_family": socket.AF_INET6 if ":" in host
                                                                         else socket.AF_INET})
    httpd: WSGIServer = make_server(host, int(port), _app(registry, readiness), server_class,
                                    handler_class=_QuietHandler)
    threading.Thread(target=httpd.serve_forever, name="metrics", daemon=True).start()
    return int(httpd.server_address[1])


class RevisionGcMetrics(Collector):
    """The two revision GC families, exactly as the requirements define them:

    - ``kagent_runtime_revision_gc_pending`` (gauge): eligible revisions from the last successful
      discovery; absent before the first, on standby replicas and after GC stops; zero means a
      successful empty discovery; discovery errors keep the last count; scrapes read this cache.
    - ``kagent_runtime_revision_gc_duration_seconds`` (histogram) labelled ``kagent_gc_stage``
      (discovery | collection) and ``error_type`` only on failures (a gRPC code name or _OTHER).
    """

    BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, float("inf"))

    def __init__(self) -> None:
        self.pending: int | None = None
        self.active = False
        self._lock = threading.Lock()
        self._series: dict[tuple[str, str | None], list[float]] = {}  # bucket counts + [sum, count]

    def observe(self, stage: str, seconds: float, error_type: str | None = None) -> None:
        with self._lock:
            series = self._series.setdefault((stage, error_type), [0.0] * (len(self.BUCKETS) + 2))
            for i, bound in enumerate(self.BUCKETS):
                if seconds <= bound:
                    series[i] += 1
            series[-2] += seconds
            series[-1] += 1

    def stop(self) -> None:
        self.active = False

    def collect(self) -> Iterator[Metric]:
        if self.active and self.pending is not None:
            yield GaugeMetricFamily(
                "kagent_runtime_revision_gc_pending",
                "Eligible persisted revisions from the last successful discovery",
                value=self.pending,
            )
        hist = Metric(
            "kagent_runtime_revision_gc_duration_seconds",
            "Each revision GC discovery or collection attempt",
            "histogram",
        )
        with self._lock:
            for (stage, error_type), series in sorted(self._series.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
                labels = {"kagent_gc_stage": stage}
                if error_type:
                    labels["error_type"] = error_type
                for i, bound in enumerate(self.BUCKETS):
                    le = "+Inf" if bound == float("inf") else repr(bound)
                    hist.add_sample(
                        "kagent_runtime_revision_gc_duration_seconds_bucket", {**labels, "le": le}, series[i]
                    )
                hist.add_sample("kagent_runtime_revision_gc_duration_seconds_count", labels, series[-1])
                hist.add_sample("kagent_runtime_revision_gc_duration_seconds_sum", labels, series[-2])
        yield hist


REVISION_GC = RevisionGcMetrics()
REGISTRY.register(REVISION_GC)
