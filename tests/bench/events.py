"""Scenario `events`: what lifecycle events and one webhook subscription cost CreateSession.

The `create` set-up (`sessionq serve` + one `sessionq worker`, simulated runtime at zero latency),
CreateSession at 64 clients, closed loop, alternating in the same run on the same server:

- on: the schema as shipped (an event per transition, written by the triggers of
  schema/45_events.sql) and one webhook subscription of the benchmark's user for every event,
  delivered by the worker to a receiver in this process (loopback allowed);
- off (baseline): the same database with the event triggers dropped and no subscription.

Reported: creations/s and p99 of both, their ratio (target >= 0.9), and the webhook delivery
latency from the transition's commit (the event's created_at, taken in its transaction) to the
receiver's reading of the POST: p50/p99 over the events delivered while the run lasted. Then, in
the on run, what one delivery costs each process when nothing else runs (`delivery_cost`: events
recorded at once, CPU per delivery), a figure the machine's other tenants hardly move.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

from tests.bench.common import (
    AGENT,
    NAMESPACE,
    USER,
    Census,
    CpuMeter,
    Server,
    census_lines,
    free_port,
    processes,
    query_value,
    ratio,
    say,
    setup_agent,
    start_api,
    start_workers,
    table,
)
from tests.bench.create import SETTINGS, WORKER_PROCESSES, drive

OFF = ("sessions_events_insert ON sessionq.sessions", "sessions_events_update ON sessionq.sessions",
       "sessions_events_delete ON sessionq.sessions", "checkpoints_events ON sessionq.checkpoints")


class Receiver:
    """A webhook receiver: 204 for every POST, the time it read each event's body; connections kept."""

    def __init__(self) -> None:
        self.received: list[tuple[float, bytes]] = []
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # keeps the connection, as an HTTP/1.1 receiver does (a job reuses its connections)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.decode("latin-1").split("\r\n"):
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                body = await reader.readexactly(length)
                self.received.append((time.time(), body))
                writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


async def delivery_cost(srv: Server, url: str, receiver: Receiver, pids: dict[str, int], n: int) -> dict[str, Any]:
    """What a webhook delivery costs with nothing else to do: once the run's deliveries are done,
    `n` events recorded in one transaction over the run's Sessions (a few per Session, so the job
    delivers to several Sessions at a time, each in order), and the CPU each process used until
    the receiver had them all, per delivery. Unlike the throughput, CPU per delivery barely
    depends on what other tenants of the machine run."""
    pending = "SELECT count(*) FROM sessionq.webhook_delivery_log WHERE state = 'pending'"
    deadline = time.monotonic() + 120
    while int(await query_value(url, pending)) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    sessions = int(await query_value(url, "SELECT count(*) FROM sessionq.sessions WHERE kind = 'session'"))
    if not sessions:
        return {}
    per = max(1, -(-n // sessions))
    before = len(receiver.received)
    with CpuMeter(srv, pids) as cpu:
        recorded = int(await query_value(
            url, "SELECT count(*) FROM (SELECT sessionq.record_event(s, 'ready') FROM sessionq.sessions s"
                 " CROSS JOIN generate_series(1, %s) WHERE s.kind = 'session') e", (per,)))
        deadline = time.monotonic() + 300
        while len(receiver.received) - before < recorded and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    delivered = len(receiver.received) - before
    return {"events": recorded, "delivered": delivered, "seconds": cpu.result["wall_seconds"],
            "cpu_ms_per_delivery": {k: round(v * 1000 / max(delivered, 1), 3)
                                    for k, v in cpu.result["cpu_seconds"].items()},
            "machine_busy_pct": cpu.result["machine_busy_pct"]}


async def cpu_per_creation(srv: Server, sizes: dict[str, Any]) -> dict[str, Any]:
    """CPU per creation with events and one webhook subscription on vs off, one creation after the
    other in this process (admission, the executor, and, on, the deliveries of its events by the
    deliver_webhooks job's code to a receiver here), alternating rounds on one database: this
    process's CPU plus the server backends'. The throughput of the 64-client runs follows the CPU
    a creation costs on a machine that is CPU-bound; this measure of it hardly depends on what
    other tenants run, where the throughput of one round varies more than the change."""
    from sessionq.db.store import Store
    from sessionq.domain import push, webhooks
    from sessionq.domain.operations import OperationExecutor
    from sessionq.runtime.simulator import SimulatedSubstrate

    receiver = Receiver()
    server = await asyncio.start_server(receiver.handle, "127.0.0.1", 0)
    url = srv.fresh_database("events_cpu")
    await setup_agent(url)
    hook = await query_value(url, "SELECT (sessionq.create_webhook(%s, false, %s, '{}', NULL, NULL, %s) ->> 'id')::uuid",
                             (USER, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/hook",
                              "whsec_" + "QUFB" * 8))
    store = await Store.open(url, pool_size=2, listen=False, name="bench-cpu")
    sim = SimulatedSubstrate(url, worker_pool_size=4)
    await sim.open()
    n = int(sizes["cpu_creations"])
    rounds: list[dict[str, Any]] = []
    try:
        async with server:
            executor = OperationExecutor(store, sim, 60)
            for i in range(int(sizes["cpu_rounds"])):
                for on in (True, False):
                    verb = "ENABLE" if on else "DISABLE"
                    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                        for trigger in OFF:
                            name, table = trigger.split(" ON ")
                            await conn.execute(f"ALTER TABLE {table} {verb} TRIGGER {name}")
                    with CpuMeter(srv, {}) as cpu:
                        for j in range(n):
                            admitted = await store.admit_create(USER, f"cpu-{i}-{on}-{j}", NAMESPACE, AGENT, "")
                            await executor.run(admitted.session.id)
                        delivered = 0
                        while on and delivered < 2 * n:  # created and ready
                            delivered += await webhooks.deliver_subscription(
                                store, hook, policy=push.TargetPolicy(allow_loopback=True), timeout=5)
                    spent = cpu.result["cpu_seconds"]
                    rounds.append({"on": on, "ms": {k: round(v * 1000 / n, 2) for k, v in spent.items()},
                                   "total_ms": round(sum(spent.values()) * 1000 / n, 2)})
    finally:
        await sim.close()
        await store.close()
        srv.drop(url)
    on_ms = [r["total_ms"] for r in rounds if r["on"]]
    off_ms = [r["total_ms"] for r in rounds if not r["on"]]
    return {"creations_per_round": n, "rounds": rounds, "on_ms": round(sum(on_ms) / len(on_ms), 2),
            "off_ms": round(sum(off_ms) / len(off_ms), 2),
            "ratio_off_to_on": round(sum(off_ms) / sum(on_ms), 3)}


async def one(srv: Server, log_dir: Path, on: bool, sizes: dict[str, Any], tag: str) -> dict[str, Any]:
    import json

    receiver = Receiver()
    server = await asyncio.start_server(receiver.handle, "127.0.0.1", 0)
    receiver.port = server.sockets[0].getsockname()[1]
    settings = {**SETTINGS, "webhooks.allowLoopback": True}
    url = srv.fresh_database(f"events_{tag}")
    await setup_agent(url, worker_pool_size=int(settings["runtime.simulator.workers"]))
    if on and sizes.get("webhook", True):
        await query_value(url, "SELECT sessionq.create_webhook(%s, false, %s, '{}', NULL, NULL, %s)",
                          (USER, f"http://127.0.0.1:{receiver.port}/hook", "whsec_" + "QUFB" * 8))
    if not on:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            for trigger in OFF:
                await conn.execute(f"DROP TRIGGER {trigger}")
    port = free_port()
    try:
        async with server, processes(log_dir / f"events-{tag}") as procs:
            api, workers = await asyncio.gather(start_api(procs, url, port, settings),
                                                start_workers(procs, url, port, settings, WORKER_PROCESSES))
            pids = {"serve": api.pid, **{f"worker {i}": w.pid for i, w in enumerate(workers)}}
            with CpuMeter(srv, pids) as cpu:
                r = await drive(f"127.0.0.1:{port}", int(sizes["clients"]), float(sizes["seconds"]),
                                float(sizes["warmup"]), tag)
            # CPU over the whole drive (warm-up included) per creation counted in the window: where it goes
            done = int(r["creations"] * (float(sizes["seconds"]) + float(sizes["warmup"])) / float(sizes["seconds"]))
            r["cpu_ms_per_creation"] = cpu.per_unit_ms(done)
            r["machine_busy_pct"] = cpu.result.get("machine_busy_pct")
            r["backend_cpu_ms_per_creation"] = cpu.per_unit_ms(done, "backends_by_role")
            if float(sizes.get("census_seconds", 0)) > 0:  # the statements per creation, by process
                census = Census(srv, url)
                async with census:
                    counted = await drive(f"127.0.0.1:{port}", int(sizes["clients"]),
                                          float(sizes["census_seconds"]), 0.0, f"{tag}-census")
                r["census"] = census.per(counted["creations"], top=16)
            if on:  # let the deliveries of the last creations arrive
                await asyncio.sleep(float(sizes["drain"]))
            if on and int(sizes.get("delivery_events", 0)) > 0 and sizes.get("webhook", True):
                r["delivery_cost"] = await delivery_cost(srv, url, receiver, pids, int(sizes["delivery_events"]))
            procs.check()
        r["events_on"] = on
        r["events"] = int(await query_value(url, "SELECT count(*) FROM sessionq.lifecycle_events"))
        if on:
            latencies = []
            for at, body in receiver.received:
                created = datetime.fromisoformat(json.loads(body)["data"]["created_at"]).timestamp()
                latencies.append((at - created) * 1000)
            r["webhooks_delivered"] = len(receiver.received)
            r["webhooks_pending"] = int(await query_value(
                url, "SELECT count(*) FROM sessionq.webhook_delivery_log WHERE state = 'pending'"))
            r["webhook_latency_ms"] = {"p50": percentile(latencies, 0.5), "p99": percentile(latencies, 0.99),
                                       "max": percentile(latencies, 1.0)}
    finally:
        srv.drop(url)
    return r


async def run(srv: Server, log_dir: Path, quick: bool, sizes: dict[str, Any] | None = None) -> dict[str, Any]:
    sizes = {"seconds": 5.0 if quick else 15.0, "warmup": 1.0 if quick else 3.0, "clients": 64,
             "rounds": 1 if quick else 2, "drain": 3.0 if quick else 10.0, "census_seconds": 3.0,
             "delivery_events": 1000 if quick else 4000, "cpu_rounds": 4 if quick else 8, "cpu_creations": 100,
             **(sizes or {})}
    say("", "== events: CreateSession with lifecycle events and one webhook subscription vs none ==")
    runs: list[dict[str, Any]] = []
    for i in range(int(sizes["rounds"])):
        for on, tag in ((False, f"off{i}"), (True, f"on{i}")):
            runs.append(await one(srv, log_dir, on, sizes, tag))
    cpu = await cpu_per_creation(srv, sizes) if int(sizes["cpu_rounds"]) > 0 else None
    on_runs = [r for r in runs if r["events_on"]]
    off_runs = [r for r in runs if not r["events_on"]]

    def mean(rows: list[dict[str, Any]], key: str) -> float | None:
        values = [r[key] for r in rows if r.get(key) is not None]
        return round(sum(values) / len(values), 1) if values else None

    rows = [("on (+1 webhook)" if r["events_on"] else "off (baseline)", r["creations_per_s"], r["p50_ms"], r["p99_ms"],
             sum(r["errors"].values()), r["events"], r.get("webhooks_delivered", "-"),
             (r.get("webhook_latency_ms") or {}).get("p50", "-"), (r.get("webhook_latency_ms") or {}).get("p99", "-"))
            for r in runs]
    say(table(f"CreateSession at {sizes['clients']} clients, events on vs off (alternating runs)",
              ["events", "creations/s", "p50 ms", "p99 ms", "errors", "events", "webhooks", "hook p50 ms",
               "hook p99 ms"], rows))
    throughput = ratio(mean(on_runs, "creations_per_s"), mean(off_runs, "creations_per_s"))
    p99 = ratio(mean(on_runs, "p99_ms"), mean(off_runs, "p99_ms"))
    for r in runs:
        say(f"  {'on ' if r['events_on'] else 'off'}: CPU ms per creation {r['cpu_ms_per_creation']} "
            f"(machine busy {r['machine_busy_pct']}%, other tenants included)")
        if r.get("backend_cpu_ms_per_creation"):
            say(f"       the server's CPU ms per creation by role: {r['backend_cpu_ms_per_creation']}")
        if r.get("delivery_cost"):
            d = r["delivery_cost"]
            say(f"  on : {d['delivered']} of {d['events']} events recorded at once delivered in {d['seconds']} s; "
                f"CPU ms per delivery {d['cpu_ms_per_delivery']} (machine busy {d['machine_busy_pct']}%)")
        if r.get("census"):
            say(*census_lines(r["census"], f"creation ({'on' if r['events_on'] else 'off'})", top=16))
    if cpu is not None:
        say(f"CPU per creation, one at a time in this process (+ the server's backends), {cpu['creations_per_round']}"
            f" a round, alternating: on {cpu['on_ms']} ms, off {cpu['off_ms']} ms; rounds "
            + ", ".join(f"{'on' if r['on'] else 'off'} {r['total_ms']}" for r in cpu["rounds"]))
        say(f"ratio line: events + 1 webhook, CPU per creation off / on (the throughput ratio of a CPU-bound"
            f" machine): {cpu['ratio_off_to_on']} (target >= 0.9)")
    say(f"ratio line: events + 1 webhook on / off: throughput {throughput} (target >= 0.9), p99 {p99}")
    return {
        "processes": f"1 x sessionq serve + {WORKER_PROCESSES} x sessionq worker + the gRPC client and the webhook "
                     "receiver (this process)",
        "settings": SETTINGS,
        "sizes": sizes,
        "runs": runs,
        "ratio_throughput_on_to_off": throughput,
        "cpu_per_creation": cpu,
        "ratio_p99_on_to_off": p99,
    }
