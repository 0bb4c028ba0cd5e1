"""Scenario `create`: CreateSession end-to-end over gRPC at 1, 16 and 64 concurrent clients.

Processes: one `sessionq serve` (API) and `sessionq worker` process(es) (procrastinate workers
+ quiescence + the simulated runtime at zero latency), each its own OS process, plus this
process as the gRPC client (closed loop: every client sends its next CreateSession as soon as
the previous one answers). Each request has a fresh request id, so each is a real creation:
admission + execute_operation job + Actor and egress policy in the simulator + completion,
with the API woken by NOTIFY. Baseline: pgbench TPC-B on the same server in the same run.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc

from tests.bench import baselines
from tests.bench.common import (
    AGENT,
    METADATA,
    NAMESPACE,
    Census,
    CpuMeter,
    Server,
    census_lines,
    free_port,
    processes,
    ratio,
    say,
    setup_agent,
    start_api,
    start_workers,
    summary_ms,
    table,
)

# The knobs used (see docs/performance.md for the alternatives that were measured).
SETTINGS: dict[str, Any] = {
    "workers.concurrency": 32,
    "workers.pollInterval": 1.0,
    "database.poolSize": 20,
    "runtime.simulator.workers": 512,
}
WORKER_PROCESSES = 1


async def drive(address: str, clients: int, seconds: float, warmup: float, tag: str,
                channels: int = 4, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """Closed-loop CreateSession from `clients` concurrent callers; counts the calls that finish
    inside the measured window (after the warm-up) and their latencies. `labels` given (empty or
    not): sessionq's FleetService.CreateSession with those labels instead of kagent's."""
    from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc
    from sessionq._pb.sessionq.v1 import fleet_pb2, fleet_pb2_grpc

    chans = [grpc.aio.insecure_channel(address) for _ in range(max(1, min(channels, clients)))]
    agent = common_pb2.ResourceReference(namespace=NAMESPACE, name=AGENT)
    calls: list[Callable[[str], Awaitable[Any]]] = []
    for c in chans:
        if labels is None:
            kagent = sessions_pb2_grpc.SessionServiceStub(c)
            calls.append(lambda rid, stub=kagent: stub.CreateSession(
                sessions_pb2.CreateSessionRequest(request_id=rid, agent=agent), metadata=METADATA, timeout=30))
        else:
            fleet = fleet_pb2_grpc.FleetServiceStub(c)
            calls.append(lambda rid, stub=fleet: stub.CreateSession(fleet_pb2.CreateSessionRequest(
                session=sessions_pb2.CreateSessionRequest(request_id=rid, agent=agent), labels=labels),
                metadata=METADATA, timeout=30))
    start = time.monotonic()
    t_measure = start + warmup
    t_end = t_measure + seconds
    latencies: list[float] = []
    errors: dict[str, int] = {}

    async def client(i: int) -> None:
        call = calls[i % len(calls)]
        n = 0
        while time.monotonic() < t_end:
            n += 1
            t0 = time.monotonic()
            try:
                await call(f"{tag}-{i}-{n}")
            except grpc.aio.AioRpcError as e:
                key = e.code().name
                errors[key] = errors.get(key, 0) + 1
                continue
            t1 = time.monotonic()
            if t0 >= t_measure and t1 <= t_end:
                latencies.append(t1 - t0)

    try:
        await asyncio.wait_for(asyncio.gather(*(client(i) for i in range(clients))), timeout=warmup + seconds + 60)
    finally:
        for c in chans:
            await c.close()
    out = summary_ms(latencies)
    out.update({"clients": clients, "seconds": seconds, "creations": len(latencies),
                "creations_per_s": round(len(latencies) / seconds, 1), "errors": errors})
    return out


async def run(srv: Server, log_dir: Path, quick: bool, sizes: dict[str, Any] | None = None) -> dict[str, Any]:
    sizes = {"seconds": 5.0 if quick else 15.0, "warmup": 1.0 if quick else 3.0,
             "pgbench_seconds": 5 if quick else 10, "levels": [1, 16, 64], "census_seconds": 2.0,
             "census_clients": 1, **(sizes or {})}
    settings = {**SETTINGS, **sizes.get("settings", {})}
    say("", "== create: CreateSession end-to-end over gRPC ==")
    pgb = await asyncio.to_thread(baselines.pgbench, srv, seconds=int(sizes["pgbench_seconds"]))
    say(f"pgbench TPC-B (-c 16 -j 2 -T {sizes['pgbench_seconds']}, scale 1): {pgb.get('tps')} tps"
        + (f"  [{pgb['error']}]" if "error" in pgb else ""))
    url = srv.fresh_database("create")
    await setup_agent(url, worker_pool_size=int(settings["runtime.simulator.workers"]))
    port = free_port()
    levels: list[dict[str, Any]] = []
    async with processes(log_dir / "create") as procs:
        api, workers = await asyncio.gather(start_api(procs, url, port, settings),
                                            start_workers(procs, url, port, settings, WORKER_PROCESSES))
        pids = {"sessionq serve": api.pid, **{f"sessionq worker {i}": w.pid for i, w in enumerate(workers)}}
        for clients in sizes["levels"]:
            with CpuMeter(srv, pids) as cpu:
                r = await drive(f"127.0.0.1:{port}", clients, float(sizes["seconds"]), float(sizes["warmup"]),
                                f"c{clients}")
            r["ratio_to_pgbench_tps"] = ratio(r["creations_per_s"], pgb.get("tps"))
            # CPU over the whole drive (warm-up included) per creation counted in the window: an upper bound
            r["cpu"] = cpu.result
            done = int(r["creations"] * (float(sizes["seconds"]) + float(sizes["warmup"])) / float(sizes["seconds"]))
            r["cpu_ms_per_creation"] = cpu.per_unit_ms(done)
            # the client's CPU per creation is the same work in every run, so the total in units of it
            # compares runs made while the shared machine ran at different speeds
            client_ms = r["cpu_ms_per_creation"].get("bench (this process)")
            r["cpu_per_creation_in_client_units"] = (
                round(sum(r["cpu_ms_per_creation"].values()) / client_ms, 1) if client_ms else None)
            r["cpu_ceiling_creations_per_s"] = cpu.ceiling_per_s(done)
            r["backend_cpu_ms_per_creation"] = cpu.per_unit_ms(done, "backends_by_role")
            levels.append(r)
            procs.check()
        anatomy: dict[str, Any] = {}
        if float(sizes["census_seconds"]) > 0:
            census = Census(srv, url)
            async with census:
                counted = await drive(f"127.0.0.1:{port}", int(sizes["census_clients"]),
                                      float(sizes["census_seconds"]), 0.0, "census")
            anatomy = census.per(counted["creations"])
    srv.drop(url)
    rows = [(r["clients"], r["creations_per_s"], r["p50_ms"], r["p99_ms"], r["max_ms"],
             sum(r["errors"].values()), r["ratio_to_pgbench_tps"]) for r in levels]
    say(table("CreateSession (sessionq serve + sessionq worker, simulated runtime at zero latency)",
              ["clients", "creations/s", "p50 ms", "p99 ms", "max ms", "errors", "ratio to pgbench tps"], rows))
    for r in levels:
        say(f"  {r['clients']:>3} clients: machine CPU busy {r['cpu'].get('machine_busy_pct')}% (other tenants "
            f"included); CPU ms per creation {r['cpu_ms_per_creation']} (in all "
            f"{r['cpu_per_creation_in_client_units']}x the client's own); with all {os.cpu_count()} CPUs to "
            f"itself at most {r['cpu_ceiling_creations_per_s']} creations/s")
        if r.get("backend_cpu_ms_per_creation"):
            say(f"       the server's CPU ms per creation by role: {r['backend_cpu_ms_per_creation']}")
    if float(sizes["census_seconds"]) > 0:
        say(*census_lines(anatomy, f"creation ({sizes['census_clients']} client(s))"))
    top = next((r for r in levels if r["clients"] == 64), levels[-1])
    met = top["creations_per_s"] >= 300 and (top["p99_ms"] or 1e9) <= 250
    say(f"ratio line: create@{top['clients']} = {top['creations_per_s']} creations/s = "
        f"{top['ratio_to_pgbench_tps']} x pgbench TPC-B tps ({pgb.get('tps')}); "
        f"target >= 300/s with p99 <= 250 ms: {'met' if met else 'NOT met'}")
    return {
        "processes": f"1 x sessionq serve + {WORKER_PROCESSES} x sessionq worker + the gRPC client (this process)",
        "settings": settings,
        "sizes": sizes,
        "pgbench": pgb,
        "levels": levels,
        "target": {"creations_per_s_at_64": 300, "p99_ms_at_64": 250, "met": met},
        "census": anatomy,
    }
