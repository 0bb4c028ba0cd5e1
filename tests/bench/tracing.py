"""Scenario `tracing`: what tracing every call costs CreateSession.

The `create` set-up (`sessionq serve` + one `sessionq worker`, simulated runtime at zero latency),
CreateSession at 64 clients, closed loop, alternating in the same run on the same server, both
with `telemetry.otlp.endpoint` set to an OTLP TraceService receiver in this process
(opentelemetry-proto's service definitions, grpcio):

- on: `telemetry.tracing.sampleRatio` 1: every call a trace of the API's and the worker's spans
  (the call, its job, the runtime calls), the trace context carried by each store statement;
- off (baseline): ratio 0, the default: no tracing at all.

Reported: creations/s and p99 of both, their ratio, and the spans received.
"""

from __future__ import annotations

from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from tests.bench.common import Server, free_port, processes, ratio, say, setup_agent, start_api, start_workers, table
from tests.bench.create import SETTINGS, WORKER_PROCESSES, drive


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans = 0
        self.services: set[str] = set()

    def Export(self, request: Any, context: Any) -> trace_service_pb2.ExportTraceServiceResponse:
        for rs in request.resource_spans:
            self.services.update(a.value.string_value for a in rs.resource.attributes if a.key == "service.name")
            self.spans += sum(len(ss.spans) for ss in rs.scope_spans)
        return trace_service_pb2.ExportTraceServiceResponse()


async def one(srv: Server, log_dir: Path, on: bool, sizes: dict[str, Any], tag: str) -> dict[str, Any]:
    receiver = Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)
    otlp = server.add_insecure_port("127.0.0.1:0")
    server.start()
    settings = {**SETTINGS, "telemetry.otlp.endpoint": f"127.0.0.1:{otlp}",
                "telemetry.tracing.sampleRatio": 1.0 if on else 0.0}
    url = srv.fresh_database(f"tracing_{tag}")
    await setup_agent(url, worker_pool_size=int(settings["runtime.simulator.workers"]))
    port = free_port()
    try:
        async with processes(log_dir / f"tracing-{tag}") as procs:
            await start_api(procs, url, port, settings)
            await start_workers(procs, url, port, settings, WORKER_PROCESSES)
            r = await drive(f"127.0.0.1:{port}", int(sizes["clients"]), float(sizes["seconds"]),
                            float(sizes["warmup"]), tag)
            procs.check()
        r["tracing_on"] = on
        r["spans"] = receiver.spans  # the processes' last export happened at their stop
        r["services"] = sorted(receiver.services)
    finally:
        server.stop(0)
        srv.drop(url)
    return r


async def run(srv: Server, log_dir: Path, quick: bool, sizes: dict[str, Any] | None = None) -> dict[str, Any]:
    sizes = {"seconds": 5.0 if quick else 15.0, "warmup": 1.0 if quick else 3.0, "clients": 64,
             "rounds": 1 if quick else 2, **(sizes or {})}
    say("", "== tracing: CreateSession with every call traced vs no tracing ==")
    runs: list[dict[str, Any]] = []
    for i in range(int(sizes["rounds"])):
        for on, tag in ((False, f"off{i}"), (True, f"on{i}")):
            runs.append(await one(srv, log_dir, on, sizes, tag))

    def mean(rows: list[dict[str, Any]], key: str) -> float | None:
        values = [r[key] for r in rows if r.get(key) is not None]
        return round(sum(values) / len(values), 1) if values else None

    on_runs = [r for r in runs if r["tracing_on"]]
    off_runs = [r for r in runs if not r["tracing_on"]]
    say(table(f"CreateSession at {sizes['clients']} clients, tracing sampled 100 % vs off (alternating runs)",
              ["tracing", "creations/s", "p50 ms", "p99 ms", "errors", "spans", "from"],
              [("100 %" if r["tracing_on"] else "off (baseline)", r["creations_per_s"], r["p50_ms"], r["p99_ms"],
                sum(r["errors"].values()), r["spans"], ",".join(r["services"]) or "-") for r in runs]))
    throughput = ratio(mean(on_runs, "creations_per_s"), mean(off_runs, "creations_per_s"))
    p99 = ratio(mean(on_runs, "p99_ms"), mean(off_runs, "p99_ms"))
    say(f"ratio line: tracing 100 % / off: throughput {throughput}, p99 {p99}")
    return {
        "processes": f"1 x sessionq serve + {WORKER_PROCESSES} x sessionq worker + the gRPC client and the OTLP "
                     "receiver (this process)",
        "settings": SETTINGS,
        "sizes": sizes,
        "runs": runs,
        "ratio_throughput_on_to_off": throughput,
        "ratio_p99_on_to_off": p99,
    }
