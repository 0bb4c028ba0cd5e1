"""Scenario `checkpoint`: CreateCheckpoint and ForkSession latency over gRPC.

Processes: `sessionq serve` + `sessionq worker` (simulated runtime at zero latency; the
simulated Actors report to the API's task store). Set-up (not timed): M Sessions created over
gRPC one at a time (their latencies are printed too, as the CreateSession reference of the same
processes), one SendMessage turn each ("What is 2+2?") through the A2A API, then a wait until
every Session's suspension and snapshot are recorded (a checkpoint needs them: otherwise
CreateCheckpoint answers KAGENT_CHECKPOINT_SNAPSHOT_PENDING). Measured, one client, one call at
a time: CreateCheckpoint of each Session's head turn, then ForkSession of each checkpoint.
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
    CpuMeter,
    Server,
    free_port,
    processes,
    ratio,
    say,
    setup_agent,
    start_api,
    start_workers,
    summary_ms,
    table,
    wait_for,
)

SETTINGS: dict[str, Any] = {
    "workers.concurrency": 32,
    "workers.pollInterval": 1.0,
    "database.poolSize": 20,
    "runtime.simulator.workers": 512,
}


async def run(srv: Server, log_dir: Path, quick: bool, sizes: dict[str, Any] | None = None) -> dict[str, Any]:
    from a2a.types import a2a_pb2, a2a_pb2_grpc

    from sessionq._pb.kagent.api.v1alpha1 import (
        checkpoints_pb2,
        checkpoints_pb2_grpc,
        common_pb2,
        sessions_pb2,
        sessions_pb2_grpc,
    )

    sizes = {"sessions": 20 if quick else 200, **(sizes or {})}
    m = int(sizes["sessions"])
    say("", f"== checkpoint: CreateCheckpoint and ForkSession latency ({m} each, one client) ==")
    url = srv.fresh_database("checkpoint")
    await setup_agent(url, worker_pool_size=int(SETTINGS["runtime.simulator.workers"]))
    port = free_port()
    async with processes(log_dir / "checkpoint") as procs:
        api = await start_api(procs, url, port, SETTINGS)
        (worker,) = await start_workers(procs, url, port, SETTINGS, 1)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            sessions = sessions_pb2_grpc.SessionServiceStub(ch)
            a2a = a2a_pb2_grpc.A2AServiceStub(ch)
            cps = checkpoints_pb2_grpc.CheckpointServiceStub(ch)
            agent = common_pb2.ResourceReference(namespace=NAMESPACE, name=AGENT)

            create_lat: list[float] = []
            sids: list[str] = []
            for i in range(m):
                t0 = time.monotonic()
                r = await sessions.CreateSession(sessions_pb2.CreateSessionRequest(request_id=f"ck-{i}", agent=agent),
                                                 metadata=METADATA, timeout=30)
                create_lat.append(time.monotonic() - t0)
                sids.append(r.session.id)

            heads: dict[str, str] = {}
            turn_lat: list[float] = []
            sem = asyncio.Semaphore(8)

            async def turn(sid: str) -> None:
                async with sem:
                    msg = a2a_pb2.Message(message_id=f"m-{sid}", role=a2a_pb2.ROLE_USER, context_id=sid,
                                          parts=[a2a_pb2.Part(text="What is 2+2?")])
                    t0 = time.monotonic()
                    r = await a2a.SendMessage(a2a_pb2.SendMessageRequest(tenant=f"{NAMESPACE}/{AGENT}", message=msg),
                                              metadata=METADATA, timeout=60)
                    turn_lat.append(time.monotonic() - t0)
                    heads[sid] = r.task.id

            await asyncio.gather(*(turn(s) for s in sids))

            async def snapshots_recorded() -> bool:
                async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                    cur = await conn.execute(
                        "SELECT count(*) FROM sessionq.sessions WHERE id = ANY(%s::uuid[]) AND idle_boundary_id IS NULL"
                        " AND snapshot_status = 'COMPLETED' AND snapshot_event_seq = last_event_seq", (sids,))
                    return (await cur.fetchone())[0] == len(sids)  # type: ignore[index]

            await wait_for(snapshots_recorded, 120, "the snapshots of the turns", 0.2, procs)

            errors: dict[str, int] = {}
            ck_lat: list[float] = []
            cp_ids: list[str] = []
            with CpuMeter(srv, {"sessionq serve": api.pid, "sessionq worker": worker.pid}) as ck_cpu:
                for i, sid in enumerate(sids):
                    t0 = time.monotonic()
                    try:
                        r = await cps.CreateCheckpoint(checkpoints_pb2.CreateCheckpointRequest(
                            session_id=sid, expected_head_task_id=heads[sid], request_id=f"cp-{i}"),
                            metadata=METADATA, timeout=30)
                    except grpc.aio.AioRpcError as e:
                        errors[f"CreateCheckpoint {e.code().name}"] = errors.get(f"CreateCheckpoint {e.code().name}", 0) + 1
                        continue
                    ck_lat.append(time.monotonic() - t0)
                    if r.checkpoint.state == checkpoints_pb2.CHECKPOINT_STATE_READY:
                        cp_ids.append(r.checkpoint.id)
                    else:
                        errors["checkpoint not READY"] = errors.get("checkpoint not READY", 0) + 1
            fork_lat: list[float] = []
            with CpuMeter(srv, {"sessionq serve": api.pid, "sessionq worker": worker.pid}) as fork_cpu:
                for i, cid in enumerate(cp_ids):
                    t0 = time.monotonic()
                    try:
                        r = await cps.ForkSession(checkpoints_pb2.ForkSessionRequest(checkpoint_id=cid, request_id=f"fk-{i}"),
                                                  metadata=METADATA, timeout=30)
                    except grpc.aio.AioRpcError as e:
                        errors[f"ForkSession {e.code().name}"] = errors.get(f"ForkSession {e.code().name}", 0) + 1
                        continue
                    fork_lat.append(time.monotonic() - t0)
        procs.check()
    srv.drop(url)
    create_s, turn_s, ck_s, fork_s = (summary_ms(x) for x in (create_lat, turn_lat, ck_lat, fork_lat))
    say(table("latency, one call at a time (sessionq serve + sessionq worker, simulated runtime at zero latency)",
              ["call", "n", "p50 ms", "p90 ms", "p99 ms", "max ms"],
              [("CreateCheckpoint", ck_s["n"], ck_s["p50_ms"], ck_s["p90_ms"], ck_s["p99_ms"], ck_s["max_ms"]),
               ("ForkSession", fork_s["n"], fork_s["p50_ms"], fork_s["p90_ms"], fork_s["p99_ms"], fork_s["max_ms"]),
               ("CreateSession (set-up, reference)", create_s["n"], create_s["p50_ms"], create_s["p90_ms"],
                create_s["p99_ms"], create_s["max_ms"]),
               ("SendMessage 'What is 2+2?' (set-up, 8 at a time)", turn_s["n"], turn_s["p50_ms"], turn_s["p90_ms"],
                turn_s["p99_ms"], turn_s["max_ms"])]))
    r_ck, r_fork = ratio(ck_s["p50_ms"], create_s["p50_ms"]), ratio(fork_s["p50_ms"], create_s["p50_ms"])
    say(f"ratio line: CreateCheckpoint p50 = {r_ck} x CreateSession p50, ForkSession p50 = {r_fork} x CreateSession p50"
        f" (same processes, same run){'; errors: ' + str(errors) if errors else ''}")
    return {
        "processes": "1 x sessionq serve + 1 x sessionq worker + the gRPC client (this process)",
        "settings": SETTINGS,
        "sizes": sizes,
        "create_checkpoint": ck_s,
        "fork_session": fork_s,
        "create_session_reference": create_s,
        "send_message_setup": turn_s,
        "ratio_checkpoint_to_create_p50": r_ck,
        "ratio_fork_to_create_p50": r_fork,
        "errors": errors,
        "cpu": {"create_checkpoint": ck_cpu.result, "create_checkpoint_ms_per_call": ck_cpu.per_unit_ms(len(ck_lat)),
                "fork_session": fork_cpu.result, "fork_session_ms_per_call": fork_cpu.per_unit_ms(len(fork_lat))},
    }
