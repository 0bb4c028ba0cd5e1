"""Scenario `adapter`: the gRPC adapter (runtime.kind: substrate) + the served simulator against
the simulator in process, `create` at 64 clients and `burst`, both ways in the same run.

In process: `sessionq serve` + `sessionq worker` with the simulator inside them (as the `create`
and `burst` scenarios run). Over the wire: the same processes with runtime.kind substrate, talking
ateapi.Control to a `sessionq runtime serve --simulator` process (its Actors' A2A endpoints on a
second port), which owns the simulated runtime's database work. Reported: the ratio adapter / in
process of creations/s and of quiesced Sessions/s (target: at least 0.75 at 64 clients), and the
CPU per creation of every process, the runtime server included. `create` runs in rounds (2 by
default, 1 with --quick) whose order alternates, since the other tenants' load comes in bursts.
"""

from __future__ import annotations

import asyncio
import statistics
from pathlib import Path
from typing import Any

import psycopg

from tests.bench import bulk
from tests.bench.burst import run_actors, settle_all, stage_turns
from tests.bench.common import (
    CpuMeter,
    Procs,
    Server,
    free_port,
    processes,
    ratio,
    say,
    service_env,
    sessionq_command,
    setup_agent,
    start_api,
    start_workers,
    table,
    wait_for,
)
from tests.bench.create import SETTINGS as CREATE_SETTINGS
from tests.bench.create import drive


async def start_runtime_server(procs: Procs, url: str, settings: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """`sessionq runtime serve --simulator`; returns the process and the settings that point the
    services at it (runtime.kind substrate)."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    port, actor_port = free_port(), free_port()
    env = service_env(url, free_port(), settings)
    p = procs.start("runtime", [*sessionq_command(), "runtime", "serve", "--simulator", "--address",
                                f"127.0.0.1:{port}", "--actor-address", f"127.0.0.1:{actor_port}"], env)

    async def serving() -> bool:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            try:
                r = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=1)
                return r.status == health_pb2.HealthCheckResponse.SERVING
            except grpc.aio.AioRpcError:
                return False

    await wait_for(serving, 60, "the runtime server to serve", 0.2, procs)
    wire = {
        "runtime.kind": "substrate",
        "runtime.substrate.address": f"127.0.0.1:{port}",
        "runtime.substrate.uidPreflight": False,
        "runtime.substrate.actorAddressPattern": f"http://127.0.0.1:{actor_port}/actors/{{atespace}}/{{name}}",
    }
    return p, wire


async def create_once(srv: Server, log_dir: Path, sizes: dict[str, Any], over_wire: bool) -> dict[str, Any]:
    kind = "wire" if over_wire else "inproc"
    settings = dict(CREATE_SETTINGS)
    url = srv.fresh_database(f"adapter_create_{kind}")
    await setup_agent(url, worker_pool_size=int(settings["runtime.simulator.workers"]))
    port = free_port()
    async with processes(log_dir / f"create-{kind}") as procs:
        pids: dict[str, int] = {}
        if over_wire:
            rt, wire = await start_runtime_server(procs, url, settings)
            settings.update(wire)
            pids["sessionq runtime serve"] = rt.pid
        api, workers = await asyncio.gather(start_api(procs, url, port, settings),
                                            start_workers(procs, url, port, settings, 1))
        pids.update({"sessionq serve": api.pid, "sessionq worker": workers[0].pid})
        with CpuMeter(srv, pids) as cpu:
            r = await drive(f"127.0.0.1:{port}", int(sizes["clients"]), float(sizes["seconds"]),
                            float(sizes["warmup"]), f"a{kind}")
        procs.check()
    srv.drop(url)
    done = int(r["creations"] * (float(sizes["seconds"]) + float(sizes["warmup"])) / float(sizes["seconds"]))
    r["cpu"] = cpu.result
    r["cpu_ms_per_creation"] = cpu.per_unit_ms(done)
    return r


async def burst_once(srv: Server, log_dir: Path, sizes: dict[str, Any], over_wire: bool) -> dict[str, Any]:
    kind = "wire" if over_wire else "inproc"
    n = int(sizes["sessions"])
    pool = n + 64
    url = srv.fresh_database(f"adapter_burst_{kind}")
    await setup_agent(url, worker_pool_size=pool)
    tpl = await bulk.template_session(url, sim_workers=pool)
    settings: dict[str, Any] = {"runtime.simulator.workers": pool, "workers.pollInterval": 1.0}
    async with processes(log_dir / f"burst-{kind}") as procs:
        def prepare() -> int:
            with psycopg.connect(url, autocommit=True) as conn:
                bulk.clone_sessions(conn, tpl, n, "burst")
                bulk.clone_actors(conn, tpl, "burst")
                run_actors(conn, "burst", pool)
                staged = stage_turns(conn, "burst")
                conn.execute("VACUUM ANALYZE sessionq.sessions")
            return staged

        assert await asyncio.to_thread(prepare) == n
        pids: dict[str, int] = {}
        port = free_port()
        if over_wire:
            rt, wire = await start_runtime_server(procs, url, settings)
            settings.update(wire)
            pids["sessionq runtime serve"] = rt.pid
        workers = await start_workers(procs, url, port, settings, 1)
        pids["sessionq worker"] = workers[0].pid
        await asyncio.sleep(1.0)
        cpu = CpuMeter(srv, pids)
        result = await settle_all(url, "burst", n, timeout=max(120.0, n / 5), procs=procs, meter=cpu)
    srv.drop(url)
    result["sessions_per_s"] = round(n / result["drain_seconds"], 1) if result["drain_seconds"] else None
    result["cpu_ms_per_session"] = cpu.per_unit_ms(n)
    return result


def _mean_cpu(results: list[dict[str, Any]], key: str) -> dict[str, float]:
    names = {n for r in results for n in (r.get(key) or {})}
    return {n: round(sum((r.get(key) or {}).get(n, 0.0) for r in results) / len(results), 2) for n in sorted(names)}


async def run(srv: Server, log_dir: Path, quick: bool, sizes: dict[str, Any] | None = None) -> dict[str, Any]:
    sizes = {"clients": 64, "seconds": 5.0 if quick else 15.0, "warmup": 1.0 if quick else 3.0,
             "sessions": 300 if quick else 2000, "rounds": 1 if quick else 2, **(sizes or {})}
    say("", "== adapter: the gRPC adapter + served simulator vs the simulator in process ==")
    # `create` in rounds, the order alternating (in process first, then over the wire first), so
    # that the other tenants' load, which comes in bursts, weighs on both sides alike
    rounds: list[dict[str, Any]] = []
    for i in range(int(sizes["rounds"])):
        got: dict[bool, dict[str, Any]] = {}
        for over_wire in ((False, True) if i % 2 == 0 else (True, False)):
            got[over_wire] = await create_once(srv, log_dir, sizes, over_wire=over_wire)
        rounds.append({"inproc": got[False], "wire": got[True],
                       "ratio": ratio(got[True]["creations_per_s"], got[False]["creations_per_s"])})
    inproc = {"creations_per_s": round(statistics.mean(r["inproc"]["creations_per_s"] for r in rounds), 1),
              "p99_ms": round(statistics.mean(r["inproc"]["p99_ms"] for r in rounds)),
              "cpu_ms_per_creation": _mean_cpu([r["inproc"] for r in rounds], "cpu_ms_per_creation")}
    wire = {"creations_per_s": round(statistics.mean(r["wire"]["creations_per_s"] for r in rounds), 1),
            "p99_ms": round(statistics.mean(r["wire"]["p99_ms"] for r in rounds)),
            "cpu_ms_per_creation": _mean_cpu([r["wire"] for r in rounds], "cpu_ms_per_creation")}
    # the median of the rounds' ratios: one round hit by a burst of the other tenants' load moves a
    # mean of the throughputs, not this
    per_round = [r["ratio"] for r in rounds if r["ratio"] is not None]
    create_ratio = round(statistics.median(per_round), 3) if per_round else None
    b_in = await burst_once(srv, log_dir, sizes, over_wire=False)
    b_wire = await burst_once(srv, log_dir, sizes, over_wire=True)
    burst_ratio = ratio(b_wire["sessions_per_s"], b_in["sessions_per_s"])
    say(table(f"create at {sizes['clients']} clients ({len(rounds)} round(s), mean) and burst of {sizes['sessions']}",
              ["what", "in process", "adapter + served", "ratio"],
              [("creations/s", inproc["creations_per_s"], wire["creations_per_s"],
                ratio(wire["creations_per_s"], inproc["creations_per_s"])),
               ("create p99 ms", inproc["p99_ms"], wire["p99_ms"], ratio(wire["p99_ms"], inproc["p99_ms"])),
               ("burst sessions/s", b_in["sessions_per_s"], b_wire["sessions_per_s"], burst_ratio)]))
    if len(rounds) > 1:
        say(f"  create ratio per round: {[r['ratio'] for r in rounds]}; median {create_ratio}")
    say(f"  CPU ms per creation, in process: {inproc['cpu_ms_per_creation']} "
        f"(total {round(sum(inproc['cpu_ms_per_creation'].values()), 2)})")
    say(f"  CPU ms per creation, over the wire: {wire['cpu_ms_per_creation']} "
        f"(total {round(sum(wire['cpu_ms_per_creation'].values()), 2)})")
    say(f"  CPU ms per quiesced Session, in process: {b_in['cpu_ms_per_session']}; over the wire: "
        f"{b_wire['cpu_ms_per_session']}")
    met = create_ratio is not None and create_ratio >= 0.75
    say(f"ratio line: adapter/in-process = {create_ratio} (create@{sizes['clients']}), {burst_ratio} (burst); "
        f"target >= 0.75 at {sizes['clients']} clients: {'met' if met else 'NOT met'}")
    return {
        "processes": "sessionq serve + sessionq worker (+ sessionq runtime serve --simulator over the wire)",
        "sizes": sizes,
        "create": {"inproc": inproc, "wire": wire, "ratio": create_ratio, "rounds": rounds},
        "burst": {"inproc": b_in, "wire": b_wire, "ratio": burst_ratio},
        "target": {"ratio_at_64": 0.75, "met": met},
    }
