"""Scenario `restart`: steady CreateSession at half the measured capacity while PostgreSQL restarts.

Processes: one `sessionq serve` and one `sessionq worker` (the `create` set-up), this process as the
gRPC client. First the capacity: closed-loop CreateSession at 16 clients (the baseline, same run).
Then an open loop at half of it: one creation every 1/rate s, each a client that retries the same
request (same request_id) on UNAVAILABLE and DEADLINE_EXCEEDED with backoff, as the client contract
says, for up to 60 s. A third of the way in, PostgreSQL restarts (`pg_ctl stop -m fast`, a 1 s pause,
`pg_ctl start` on the same data directory; on an external server every backend of the database is
terminated instead). Reported: the time from PostgreSQL answering again (and from the stop) until a
3-s window of completions is back at 90 % of the rate before (target: within 10 s), and that nothing
was lost: every creation answered OK exists as a READY Session, and no operation is left pending.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import grpc
import psycopg

from tests.bench.common import (
    AGENT,
    METADATA,
    NAMESPACE,
    Server,
    free_port,
    processes,
    ratio,
    say,
    setup_agent,
    start_api,
    start_workers,
    table,
)
from tests.bench.create import SETTINGS, drive

RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}
WINDOW = 3.0  # seconds of the recovery window
TARGET = 10.0  # seconds from PostgreSQL answering again to 90 % throughput


def restarter(srv: Server, url: str, work: Path) -> Any:
    """A blocking callable(pause) -> (down, up, how) that restarts the server (the soak's Database)."""
    from tests.soak.cluster import Database

    db = Database(work, None)
    if srv.embedded and srv._stop is not None:
        db._embedded = srv._stop[0]
    db.url = url
    return db.restart


async def open_loop(address: str, rate: float, seconds: float, tag: str, restart_at: float,
                    restart: Any) -> dict[str, Any]:
    from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc

    channels = [grpc.aio.insecure_channel(address) for _ in range(4)]
    stubs = [sessions_pb2_grpc.SessionServiceStub(c) for c in channels]
    agent = common_pb2.ResourceReference(namespace=NAMESPACE, name=AGENT)
    start = time.monotonic()
    done: list[float] = []  # completion times (monotonic) of creations answered OK
    acked: list[str] = []  # their Session ids
    failed: dict[str, int] = {}
    attempts = 0
    event: dict[str, float] = {}

    async def create(i: int) -> None:
        nonlocal attempts
        stub = stubs[i % len(stubs)]
        deadline = time.monotonic() + 60
        delay = 0.1
        while True:
            attempts += 1
            try:
                r = await stub.CreateSession(
                    sessions_pb2.CreateSessionRequest(request_id=f"{tag}-{i}", agent=agent),
                    metadata=METADATA, timeout=10)
            except grpc.aio.AioRpcError as e:
                if e.code() in RETRYABLE and time.monotonic() < deadline:
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 2.0)
                    continue
                failed[e.code().name] = failed.get(e.code().name, 0) + 1
                return
            done.append(time.monotonic())
            acked.append(r.session.id)
            return

    async def do_restart() -> None:
        await asyncio.sleep(restart_at)
        down, up, how = await asyncio.to_thread(restart, 1.0)
        now_wall, now_mono = time.time(), time.monotonic()
        event.update(down=now_mono - (now_wall - down), up=now_mono - (now_wall - up))
        event["how"] = how  # type: ignore[assignment]

    restarting = asyncio.create_task(do_restart())
    tasks = []
    i = 0
    while time.monotonic() - start < seconds:
        tasks.append(asyncio.create_task(create(i)))
        i += 1
        next_at = start + i / rate
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
    await restarting
    await asyncio.gather(*tasks)
    for c in channels:
        await c.close()
    return {"start": start, "done": sorted(done), "acked": acked, "failed": failed, "attempts": attempts,
            "requested": i, "event": event}


def recovery(done: list[float], start: float, event: dict[str, Any], end: float) -> dict[str, Any]:
    import bisect

    def count(lo: float, hi: float) -> int:
        return bisect.bisect_left(done, hi) - bisect.bisect_left(done, lo)

    base_from = max(start + 3.0, event["down"] - 10.0)
    before = count(base_from, event["down"]) / max(event["down"] - base_from, 1e-9)
    recovered = None
    d = 0.0
    while event["up"] + d + WINDOW <= end:
        if count(event["up"] + d, event["up"] + d + WINDOW) / WINDOW >= 0.9 * before:
            recovered = d + WINDOW
            break
        d += 0.25
    return {"before_per_s": round(before, 1), "down_for_s": round(event["up"] - event["down"], 2),
            "to_90pct_after_up_s": None if recovered is None else round(recovered, 2),
            "to_90pct_after_stop_s": None if recovered is None else round(event["up"] - event["down"] + recovered, 2),
            "target_met": recovered is not None and recovered <= TARGET}


async def run(srv: Server, log_dir: Path, quick: bool, sizes: dict[str, Any] | None = None) -> dict[str, Any]:
    sizes = {"capacity_seconds": 4 if quick else 8, "capacity_clients": 16, "seconds": 30 if quick else 45,
             **(sizes or {})}
    say("", "== restart: steady creations at half capacity while PostgreSQL restarts ==")
    url = srv.fresh_database("restart")
    await setup_agent(url, worker_pool_size=int(SETTINGS["runtime.simulator.workers"]))
    port = free_port()
    settings = dict(SETTINGS)
    async with processes(log_dir / "restart") as procs:
        await start_api(procs, url, port, settings)
        await start_workers(procs, url, port, settings)
        address = f"127.0.0.1:{port}"
        cap = await drive(address, int(sizes["capacity_clients"]), float(sizes["capacity_seconds"]), 2.0, "cap")
        capacity = float(cap["creations_per_s"])
        rate = max(1.0, capacity / 2)
        say(f"capacity (closed loop, {sizes['capacity_clients']} clients): {capacity:.1f} creations/s;"
            f" open loop at {rate:.1f}/s for {sizes['seconds']} s, PostgreSQL restarts at {sizes['seconds'] / 3:.0f} s")
        restart = restarter(srv, url, log_dir / "restart")
        out = await open_loop(address, rate, float(sizes["seconds"]), "rs", float(sizes["seconds"]) / 3, restart)
        end = out["start"] + float(sizes["seconds"])
        rec = recovery(out["done"], out["start"], out["event"], end)
        # nothing lost: every acknowledged creation is a READY Session; nothing pending
        await asyncio.sleep(2.0)
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            cur = await conn.execute("SELECT count(*) FROM sessionq.sessions WHERE id = ANY(%s::uuid[]) AND state = 'READY'",
                                     (out["acked"],))
            row = await cur.fetchone()
            present = int(row[0]) if row else 0
            cur = await conn.execute("SELECT count(*) FROM sessionq.sessions WHERE operation <> 'NONE'")
            row = await cur.fetchone()
            pending = int(row[0]) if row else 0
        lost = len(out["acked"]) - present
    result = {
        "sizes": sizes,
        "capacity_per_s": round(capacity, 1),
        "rate_per_s": round(rate, 1),
        "requested": out["requested"],
        "acknowledged": len(out["acked"]),
        "failed": out["failed"],
        "attempts": out["attempts"],
        "lost": lost,
        "pending_after": pending,
        "restart": {**rec, "how": out["event"].get("how", "")},
    }
    say(table("restart", ["capacity/s", "rate/s", "before/s", "down s", "90% after up s", "90% after stop s",
                          "acked", "lost", "pending"],
              [[result["capacity_per_s"], result["rate_per_s"], rec["before_per_s"], rec["down_for_s"],
                rec["to_90pct_after_up_s"], rec["to_90pct_after_stop_s"], len(out["acked"]), lost, pending]]))
    say(f"ratio line: steady rate / capacity {ratio(rate, capacity)}; back to 90 % of the rate before"
        f" {rec['to_90pct_after_up_s']} s after PostgreSQL answered again (target <= {TARGET:.0f} s:"
        f" {'met' if rec['target_met'] else 'MISSED'}); lost {lost} of {len(out['acked'])} acknowledged,"
        f" {pending} pending")
    srv.drop(url)
    return result
