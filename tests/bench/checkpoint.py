"""Scenario `checkpoint`: CreateCheckpoint, ForkSession and ForkAtTurn latency over gRPC, and what
turn pins (sessions.turnSnapshots) cost per settled turn.

Processes: `sessionq serve` + `sessionq worker` (simulated runtime at zero latency; the
simulated Actors report to the API's task store). Set-up (not timed): M Sessions created over
gRPC one at a time (their latencies are printed too, as the CreateSession reference of the same
processes), one SendMessage turn each ("What is 2+2?") through the A2A API, then a wait until
every Session's suspension and snapshot are recorded (a checkpoint needs them: otherwise
CreateCheckpoint answers KAGENT_CHECKPOINT_SNAPSHOT_PENDING), a second turn after the first was
quiesced and pinned. Measured, one client, one call at a time: CreateCheckpoint of each Session's
head turn, ForkSession of each checkpoint, then ForkAtTurn (sessionq.v1.TurnService) at each
Session's first turn: a fork at a past turn, beside ForkSession from an existing checkpoint (target
<= 1.2x at p50 and p99).

Retention census (separate processes and databases, same run): K Sessions take three turns each,
one at a time with the quiescence waited for, under sessions.turnSnapshots 0 and then 2 (the
third turn releases the first turn's pin); the statements (the embedded server's log) and the WAL
of the third round, per settled turn, with and without retention, and the snapshots each Session
holds after it (sessionq.session_snapshots).
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
    Census,
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
from tests.bench.common import census_lines as _census_lines

SETTINGS: dict[str, Any] = {
    "workers.concurrency": 32,
    "workers.pollInterval": 1.0,
    "database.poolSize": 20,
    "runtime.simulator.workers": 512,
    "sessions.turnSnapshots": 4,
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
    from sessionq._pb.sessionq.v1 import turns_pb2, turns_pb2_grpc

    sizes = {"sessions": 20 if quick else 200, "census_sessions": 10 if quick else 50, **(sizes or {})}
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
            firsts: dict[str, str] = {}
            turn_lat: list[float] = []
            sem = asyncio.Semaphore(8)

            async def turn(sid: str, text: str = "What is 2+2?") -> None:
                async with sem:
                    msg = a2a_pb2.Message(message_id=f"m-{sid}-{len(text)}", role=a2a_pb2.ROLE_USER, context_id=sid,
                                          parts=[a2a_pb2.Part(text=text)])
                    t0 = time.monotonic()
                    r = await a2a.SendMessage(a2a_pb2.SendMessageRequest(tenant=f"{NAMESPACE}/{AGENT}", message=msg),
                                              metadata=METADATA, timeout=60)
                    turn_lat.append(time.monotonic() - t0)
                    heads[sid] = r.task.id

            async def snapshots_recorded() -> bool:
                async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                    cur = await conn.execute(
                        "SELECT count(*) FROM sessionq.sessions WHERE id = ANY(%s::uuid[]) AND idle_boundary_id IS NULL"
                        " AND snapshot_status = 'COMPLETED' AND snapshot_event_seq = last_event_seq", (sids,))
                    return (await cur.fetchone())[0] == len(sids)  # type: ignore[index]

            await asyncio.gather(*(turn(s) for s in sids))
            await wait_for(snapshots_recorded, 120, "the snapshots of the first turns", 0.2, procs)
            firsts.update(heads)  # each first turn is pinned once its quiescence is recorded
            await asyncio.gather(*(turn(s, "What is 3+3?") for s in sids))
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
            turns = turns_pb2_grpc.TurnServiceStub(ch)
            at_lat: list[float] = []
            with CpuMeter(srv, {"sessionq serve": api.pid, "sessionq worker": worker.pid}) as at_cpu:
                for i, sid in enumerate(sids):
                    t0 = time.monotonic()
                    try:
                        await turns.ForkAtTurn(turns_pb2.ForkAtTurnRequest(
                            session_id=sid, task_id=firsts[sid], request_id=f"at-{i}"), metadata=METADATA, timeout=30)
                    except grpc.aio.AioRpcError as e:
                        errors[f"ForkAtTurn {e.code().name}"] = errors.get(f"ForkAtTurn {e.code().name}", 0) + 1
                        continue
                    at_lat.append(time.monotonic() - t0)
        procs.check()
    srv.drop(url)
    create_s, turn_s, ck_s, fork_s = (summary_ms(x) for x in (create_lat, turn_lat, ck_lat, fork_lat))
    at_s = summary_ms(at_lat)
    r_at50, r_at99 = ratio(at_s["p50_ms"], fork_s["p50_ms"]), ratio(at_s["p99_ms"], fork_s["p99_ms"])
    say(table("latency, one call at a time (sessionq serve + sessionq worker, simulated runtime at zero latency)",
              ["call", "n", "p50 ms", "p90 ms", "p99 ms", "max ms"],
              [("CreateCheckpoint", ck_s["n"], ck_s["p50_ms"], ck_s["p90_ms"], ck_s["p99_ms"], ck_s["max_ms"]),
               ("ForkSession", fork_s["n"], fork_s["p50_ms"], fork_s["p90_ms"], fork_s["p99_ms"], fork_s["max_ms"]),
               ("ForkAtTurn (first of two turns)", at_s["n"], at_s["p50_ms"], at_s["p90_ms"], at_s["p99_ms"],
                at_s["max_ms"]),
               ("CreateSession (set-up, reference)", create_s["n"], create_s["p50_ms"], create_s["p90_ms"],
                create_s["p99_ms"], create_s["max_ms"]),
               ("SendMessage 'What is 2+2?' (set-up, 8 at a time)", turn_s["n"], turn_s["p50_ms"], turn_s["p90_ms"],
                turn_s["p99_ms"], turn_s["max_ms"])]))
    r_ck, r_fork = ratio(ck_s["p50_ms"], create_s["p50_ms"]), ratio(fork_s["p50_ms"], create_s["p50_ms"])
    say(f"ratio line: CreateCheckpoint p50 = {r_ck} x CreateSession p50, ForkSession p50 = {r_fork} x CreateSession p50"
        f" (same processes, same run){'; errors: ' + str(errors) if errors else ''}")
    say(f"ratio line: ForkAtTurn at a past turn = {r_at50} x ForkSession p50, {r_at99} x ForkSession p99"
        " (target <= 1.2; same processes, same run)")
    k = int(sizes["census_sessions"])
    off = await _retention_round(srv, log_dir, k, 0)
    on = await _retention_round(srv, log_dir, k, 2)
    extra_statements = (round(on["statements_per_turn"] - off["statements_per_turn"], 2)
                        if on["statements_per_turn"] is not None and off["statements_per_turn"] is not None else None)
    extra_wal = round(on["wal_bytes_per_turn"] - off["wal_bytes_per_turn"])
    say(table(f"retention: the third of three turns of {k} Sessions, one at a time, quiescence waited for",
              ["sessions.turnSnapshots", "statements / settled turn", "WAL bytes / settled turn",
               "snapshots held / Session after"],
              [(0, off["statements_per_turn"], off["wal_bytes_per_turn"], off["snapshots_per_session"]),
               (2, on["statements_per_turn"], on["wal_bytes_per_turn"], on["snapshots_per_session"])]))
    say(*_census_lines(on["census"], "settled turn with retention (sessions.turnSnapshots 2)", top=16))
    say(f"retention line: {extra_statements} more statements and {extra_wal} more WAL bytes per settled turn;"
        f" {on['snapshots_per_session']} snapshots per Session at steady state (the window)")
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
        "fork_at_turn": at_s,
        "ratio_fork_at_turn_to_fork_session_p50": r_at50,
        "ratio_fork_at_turn_to_fork_session_p99": r_at99,
        "retention": {"off": off, "on_2": on, "extra_statements_per_turn": extra_statements,
                      "extra_wal_bytes_per_turn": extra_wal},
        "errors": errors,
        "cpu": {"create_checkpoint": ck_cpu.result, "create_checkpoint_ms_per_call": ck_cpu.per_unit_ms(len(ck_lat)),
                "fork_session": fork_cpu.result, "fork_session_ms_per_call": fork_cpu.per_unit_ms(len(fork_lat)),
                "fork_at_turn": at_cpu.result, "fork_at_turn_ms_per_call": at_cpu.per_unit_ms(len(at_lat))},
    }


async def _retention_round(srv: Server, log_dir: Path, k: int, keep: int) -> dict[str, Any]:
    """K Sessions, three turns each (the quiescence waited for after every turn) under
    sessions.turnSnapshots `keep`: the statements and WAL of the third round per settled turn, and
    the snapshots each Session holds afterwards."""
    from a2a.types import a2a_pb2, a2a_pb2_grpc

    from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc

    settings = {**SETTINGS, "sessions.turnSnapshots": keep}
    url = srv.fresh_database(f"retention{keep}")
    await setup_agent(url, worker_pool_size=int(SETTINGS["runtime.simulator.workers"]))
    port = free_port()
    async with processes(log_dir / f"retention-{keep}") as procs:
        await start_api(procs, url, port, settings)
        await start_workers(procs, url, port, settings, 1)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            sessions = sessions_pb2_grpc.SessionServiceStub(ch)
            a2a = a2a_pb2_grpc.A2AServiceStub(ch)
            agent = common_pb2.ResourceReference(namespace=NAMESPACE, name=AGENT)
            sids = [(await sessions.CreateSession(sessions_pb2.CreateSessionRequest(request_id=f"r-{i}", agent=agent),
                                                  metadata=METADATA, timeout=30)).session.id for i in range(k)]

            async def quiesced() -> bool:
                async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                    cur = await conn.execute(
                        "SELECT count(*) FROM sessionq.sessions WHERE id = ANY(%s::uuid[]) AND idle_boundary_id IS NULL"
                        " AND snapshot_event_seq = last_event_seq AND NOT EXISTS (SELECT 1 FROM sessionq.turn_snapshots p"
                        " WHERE p.session_id = sessions.id AND p.state <> 'PINNED')", (sids,))
                    return (await cur.fetchone())[0] == len(sids)  # type: ignore[index]

            async def round_(n: int) -> None:
                for sid in sids:
                    msg = a2a_pb2.Message(message_id=f"m-{sid}-{n}", role=a2a_pb2.ROLE_USER, context_id=sid,
                                          parts=[a2a_pb2.Part(text=f"Remember the number {n}.")])
                    await a2a.SendMessage(a2a_pb2.SendMessageRequest(tenant=f"{NAMESPACE}/{AGENT}", message=msg),
                                          metadata=METADATA, timeout=60)
                await wait_for(quiesced, 120, f"round {n} quiesced", 0.1, procs)

            await round_(1)
            await round_(2)
            wal0 = await _wal(url)
            census = Census(srv, url)
            async with census:
                await round_(3)
            wal = await _wal(url) - wal0
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                cur = await conn.execute("SELECT avg(snapshots_held)::float FROM sessionq.session_snapshots"
                                         " WHERE session_id = ANY(%s::uuid[])", (sids,))
                held = (await cur.fetchone())[0]  # type: ignore[index]
        procs.check()
    srv.drop(url)
    anatomy = census.per(k)
    return {
        "sessions": k,
        "statements_per_turn": anatomy.get("statements_per_unit") if anatomy else None,
        "wal_bytes_per_turn": round(wal / k),
        "snapshots_per_session": round(held or 0.0, 2),
        "census": anatomy,
    }


async def _wal(url: str) -> int:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
        return int((await cur.fetchone())[0])  # type: ignore[index]
