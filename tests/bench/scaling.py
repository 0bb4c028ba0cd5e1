"""Scenario `scaling`: what one unit of work costs the primary (docs/scaling.md).

Processes: one `sessionq serve` and one `sessionq worker` (the `create` set-up). Phases, each over the
same N Sessions at 8 concurrent clients: CreateSession, SuspendSession, ResumeSession (followed by the
automatic suspension of the idle Session, waited for), and a turn (A2A
SendMessage, which also dispatches, resumes the Actor, records the task, settles and is followed by
the automatic suspension of the idle Session, waited for). For each phase: WAL bytes
(pg_current_wal_insert_lsn) and WAL records (pg_stat_wal) of the server, commits of the database
(pg_stat_database.xact_commit) and, on the embedded server, the statements (the census) per unit;
the same quantities measured while idle for a few seconds (heartbeats, polls, the periodic jobs) are
subtracted pro rata. The simulated runtime keeps its own tables in the same database (`substrate_sim`);
its share is reported apart where the census can tell (application `substrate_sim`).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import grpc
import psycopg

from tests.bench.common import (
    AGENT,
    METADATA,
    NAMESPACE,
    Census,
    Server,
    free_port,
    processes,
    say,
    setup_agent,
    start_api,
    start_workers,
    table,
)
from tests.bench.create import SETTINGS

CLIENTS = 8
TENANT = f"{NAMESPACE}/{AGENT}"


async def counters(admin_url: str, url: str) -> dict[str, float]:
    db = urlsplit(url).path.lstrip("/")
    async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::float8,"
            " (SELECT wal_records FROM pg_stat_wal)::float8, (SELECT wal_fpi FROM pg_stat_wal)::float8,"
            " (SELECT xact_commit FROM pg_stat_database WHERE datname = %s)::float8", (db,))
        row = await cur.fetchone()
        assert row is not None
        await conn.execute("SELECT pg_stat_clear_snapshot()")
    return {"wal_bytes": row[0], "wal_records": row[1], "wal_fpi": row[2], "commits": row[3], "t": time.monotonic()}


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in after}


async def phase(srv: Server, url: str, name: str, n: int, work: Any, idle: dict[str, float],
                settle: Any = None) -> dict[str, Any]:
    census = Census(srv, url)
    async with census:
        before = await counters(srv.admin_url, url)
        await work()
        if settle is not None:
            await settle()
        after = await counters(srv.admin_url, url)
    d = delta(after, before)
    seconds = d.pop("t")
    net = {k: max(0.0, v - idle[k] * seconds) for k, v in d.items()}
    anatomy = census.per(n)
    sim = anatomy.get("by_application", {}).get("substrate_sim", 0.0) if anatomy else None
    return {"phase": name, "units": n, "seconds": round(seconds, 2),
            "wal_bytes_per_unit": round(net["wal_bytes"] / n), "wal_records_per_unit": round(net["wal_records"] / n, 1),
            "wal_fpi_per_unit": round(net["wal_fpi"] / n, 2), "commits_per_unit": round(net["commits"] / n, 1),
            "statements_per_unit": anatomy.get("statements_per_unit") if anatomy else None,
            "simulator_statements_per_unit": sim, "census": anatomy}


async def run(srv: Server, log_dir: Path, quick: bool, sizes: dict[str, Any] | None = None) -> dict[str, Any]:
    from a2a.types import a2a_pb2, a2a_pb2_grpc

    from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc

    sizes = {"sessions": 100 if quick else 300, "idle_seconds": 5.0, **(sizes or {})}
    n = int(sizes["sessions"])
    say("", "== scaling: WAL, commits and statements per creation, suspension, resumption and turn ==")
    url = srv.fresh_database("scaling")
    await setup_agent(url, worker_pool_size=int(SETTINGS["runtime.simulator.workers"]))
    port = free_port()
    settings = dict(SETTINGS)
    phases: list[dict[str, Any]] = []
    async with processes(log_dir / "scaling") as procs:
        await start_api(procs, url, port, settings)
        await start_workers(procs, url, port, settings)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        sessions = sessions_pb2_grpc.SessionServiceStub(channel)
        a2a = a2a_pb2_grpc.A2AServiceStub(channel)
        agent = common_pb2.ResourceReference(namespace=NAMESPACE, name=AGENT)
        ids: list[str] = []

        async def each(items: list[Any], call: Any) -> None:
            queue = list(items)

            async def client() -> None:
                while queue:
                    await call(queue.pop())
            await asyncio.gather(*(client() for _ in range(CLIENTS)))

        async def create(i: int) -> None:
            r = await sessions.CreateSession(sessions_pb2.CreateSessionRequest(request_id=f"sc-{i}", agent=agent),
                                             metadata=METADATA, timeout=30)
            ids.append(r.session.id)

        async def suspend(sid: str) -> None:
            await sessions.SuspendSession(sessions_pb2.SuspendSessionRequest(session_id=sid), metadata=METADATA,
                                          timeout=30)

        async def resume(sid: str) -> None:
            await sessions.ResumeSession(sessions_pb2.ResumeSessionRequest(session_id=sid), metadata=METADATA,
                                         timeout=30)

        async def turn(sid: str) -> None:
            msg = a2a_pb2.Message(message_id=f"m-{sid}", role=a2a_pb2.ROLE_USER, context_id=sid,
                                  parts=[a2a_pb2.Part(text="What is 2+2?")])
            await a2a.SendMessage(a2a_pb2.SendMessageRequest(tenant=TENANT, message=msg), metadata=METADATA,
                                  timeout=60)

        async def quiet() -> None:  # every idle Session suspended again (the turn's automatic suspension)
            deadline = time.monotonic() + 60
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                while time.monotonic() < deadline:
                    cur = await conn.execute("SELECT count(*) FROM sessionq.sessions WHERE idle_boundary_id IS NOT NULL"
                                             " OR idle_executor IS NOT NULL OR dispatch_id IS NOT NULL")
                    row = await cur.fetchone()
                    if row is not None and row[0] == 0:
                        return
                    await asyncio.sleep(0.2)

        await asyncio.sleep(2.0)
        t0 = await counters(srv.admin_url, url)
        await asyncio.sleep(float(sizes["idle_seconds"]))
        idle_delta = delta(await counters(srv.admin_url, url), t0)
        idle = {k: v / idle_delta["t"] for k, v in idle_delta.items() if k != "t"}
        phases.append(await phase(srv, url, "create", n, lambda: each(list(range(n)), create), idle))
        phases.append(await phase(srv, url, "suspend", n, lambda: each(list(ids), suspend), idle))
        # a resumed Session with no turn is idle: it is suspended again automatically (waited for)
        phases.append(await phase(srv, url, "resume (+ idle suspension)", n, lambda: each(list(ids), resume), idle,
                                  settle=quiet))
        phases.append(await phase(srv, url, "turn (+ idle suspension)", n, lambda: each(list(ids), turn), idle,
                                  settle=quiet))
        await channel.close()
    result = {"sizes": sizes, "idle_per_s": {k: round(v, 1) for k, v in idle.items()}, "phases": phases}
    say(table("scaling: per unit of work", ["phase", "units", "WAL bytes", "WAL records", "FPI", "commits",
                                            "statements", "of which simulator"],
              [[p["phase"], p["units"], p["wal_bytes_per_unit"], p["wal_records_per_unit"], p["wal_fpi_per_unit"],
                p["commits_per_unit"], p["statements_per_unit"], p["simulator_statements_per_unit"]] for p in phases]))
    say(f"idle (subtracted): {result['idle_per_s']} per second")
    srv.drop(url)
    return result
