"""Scenario `burst`: N Sessions settle at once; time until all are suspended.

Set-up (bulk SQL, not timed): N clones of a real READY Session (tests.bench.bulk) with their
Actors in the simulator, RUNNING on a worker each; one turn per Session admitted, created and
its final update staged through the product's procedures (sessionq.admit_turn, task_create,
task_update), all in SQL; the dispatch jobs that admission queued are removed (this benchmark
plays the Actor). Then one `sessionq worker` process starts (procrastinate + the quiescence pool
with sessions.quiescenceWorkers = 4, the default, + the simulated runtime at zero latency), and
one transaction settles all N turns (sessionq.task_settle for each): N idle boundaries and N
NOTIFYs appear at one commit.

Measured: from that commit to the last recorded suspension (the newest `updated_at` of the N
Sessions once none has an idle boundary left), and to the first SuspendActor. Baseline in the
same run on the same server: raw procrastinate no-op job throughput at concurrency 8 (N jobs
deferred in one batch, with the raw worker already running).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import psycopg

from tests.bench import baselines, bulk
from tests.bench.common import (
    Census,
    CpuMeter,
    Server,
    census_lines,
    free_port,
    processes,
    ratio,
    say,
    setup_agent,
    start_workers,
    table,
    wait_for,
)

QUIESCENCE_WORKERS = 4  # the default of sessions.quiescenceWorkers


def stage_turns(conn: psycopg.Connection[Any], prefix: str) -> int:
    """Admit a turn on every clone, create its task and stage its final update, with the
    product's procedures; remove the dispatch jobs the admissions queued."""
    working = {"state": "TASK_STATE_WORKING"}
    done = {"state": "TASK_STATE_COMPLETED"}
    with conn.transaction():
        conn.execute(
            """
            DO $$
            DECLARE
              r record;
              v jsonb;
              d uuid;
              tid text;
            BEGIN
              FOR r IN SELECT id, creator FROM sessionq.sessions WHERE request_id LIKE '%(like)s' ORDER BY id LOOP
                v := sessionq.admit_turn(r.id, r.creator, NULL,
                       jsonb_build_object('messageId', 'u-' || r.id, 'role', 'ROLE_USER',
                                          'parts', jsonb_build_array(jsonb_build_object('text', 'q'))), NULL, 600);
                d := (v ->> 'dispatch_id')::uuid;
                tid := 'bt-' || r.id;
                PERFORM sessionq.task_create(r.id, tid, jsonb_build_object('id', tid, 'contextId', r.id::text,
                          'status', '%(working)s'::jsonb), d, 'bench-1');
                PERFORM sessionq.task_update(r.id, tid, jsonb_build_object('id', tid, 'contextId', r.id::text,
                          'status', '%(done)s'::jsonb), 1, NULL, d, 'bench-2');
              END LOOP;
            END $$
            """.replace("%(like)s", prefix + "-%").replace("%(working)s", json.dumps(working))
               .replace("%(done)s", json.dumps(done)))  # type: ignore[arg-type]
        conn.execute("DELETE FROM procrastinate_jobs WHERE task_name = 'dispatch_turn' AND status = 'todo'")
        # the turns were "delivered" by hand: drop their reservations too, or the reaper (which ends
        # reservations whose dispatch job is gone) would abandon them before the burst settles them
        conn.execute("UPDATE sessionq.sessions SET dispatch_id = NULL, dispatch_expires_at = NULL,"
                     " dispatch_message = NULL WHERE request_id LIKE %s", (prefix + "-%",))
        row = conn.execute("SELECT count(*) FROM sessionq.sessions WHERE request_id LIKE %s"
                           " AND unsettled_task_id IS NOT NULL", (prefix + "-%",)).fetchone()
    return int(row[0]) if row else 0


def run_actors(conn: psycopg.Connection[Any], prefix: str, pool_size: int) -> int:
    """Every clone's Actor RUNNING on its own simulated worker (as a resumed Actor mid-turn)."""
    with conn.transaction():
        conn.execute(
            """
            WITH a AS (SELECT a.uid, a.atespace, a.name, row_number() OVER (ORDER BY a.name) AS rn
                         FROM substrate_sim.actors a JOIN sessionq.sessions s
                           ON s.actor_atespace = a.atespace AND s.actor_name = a.name
                        WHERE s.request_id LIKE %(like)s AND a.worker IS NULL),
                 w AS (SELECT name, row_number() OVER (ORDER BY idx) AS rn FROM substrate_sim.workers
                        WHERE holder_uid IS NULL AND idx < %(pool)s)
            UPDATE substrate_sim.workers SET holder_atespace = a.atespace, holder_name = a.name, holder_uid = a.uid
              FROM a JOIN w USING (rn) WHERE workers.name = w.name
            """, {"like": prefix + "-%", "pool": pool_size})
        cur = conn.execute(
            """
            UPDATE substrate_sim.actors a SET state = 'ACTOR_STATE_RUNNING', worker = w.name,
                   durable = coalesce(a.durable, '{}'::jsonb), version = a.version + 1
              FROM substrate_sim.workers w WHERE w.holder_uid = a.uid AND a.worker IS NULL
            """)
        return cur.rowcount


async def run(srv: Server, log_dir: Path, quick: bool, sizes: dict[str, Any] | None = None) -> dict[str, Any]:
    sizes = {"sessions": 500 if quick else 5000, "raw_concurrency": 8, "pgqueuer_batch": 10, "census_sessions": 100 if quick else 200,
             "quiescence_workers": QUIESCENCE_WORKERS, "worker_processes": 1, **(sizes or {})}
    qw, wp = int(sizes["quiescence_workers"]), int(sizes["worker_processes"])
    n = int(sizes["sessions"])
    pool = n + int(sizes["census_sessions"]) + 64
    say("", f"== burst: {n} Sessions settle at once ==")
    url = srv.fresh_database("burst")
    await setup_agent(url, worker_pool_size=pool)
    tpl = await bulk.template_session(url, sim_workers=pool)
    port = free_port()
    settings = {"runtime.simulator.workers": pool, "workers.pollInterval": 1.0,
                "sessions.quiescenceWorkers": qw, **sizes.get("settings", {})}
    async with processes(log_dir / "burst") as procs:
        # baseline: raw procrastinate no-op throughput at concurrency 8
        await baselines.start_raw_worker(procs, url, concurrency=int(sizes["raw_concurrency"]), poll=1.0)
        raw = await baselines.raw_throughput(url, jobs=n)
        procs.stop_all()
        say(f"raw procrastinate: {n} no-op jobs at concurrency {sizes['raw_concurrency']}: "
            f"{raw['jobs_per_s']} jobs/s ({raw['seconds']} s)")
        # baseline: PgQueuer no-op throughput, dequeue batch 10
        await baselines.start_pgqueuer_worker(procs, url, batch=int(sizes["pgqueuer_batch"]))
        pgq = await baselines.pgqueuer_throughput(url, jobs=n)
        procs.stop_all()
        say(f"PgQueuer: {n} no-op jobs at batch {sizes['pgqueuer_batch']}: {pgq['jobs_per_s']} jobs/s ({pgq['seconds']} s)")

        def prepare(prefix: str, count: int) -> dict[str, int]:
            with psycopg.connect(url, autocommit=True) as conn:
                made = bulk.clone_sessions(conn, tpl, count, prefix)
                actors = bulk.clone_actors(conn, tpl, prefix)
                running = run_actors(conn, prefix, pool)
                staged = stage_turns(conn, prefix)
                conn.execute("VACUUM ANALYZE sessionq.sessions")
            return {"sessions": made, "actors": actors, "running": running, "staged": staged}

        prep = await asyncio.to_thread(prepare, "burst", n)
        census_prep = await asyncio.to_thread(prepare, "census", int(sizes["census_sessions"]))
        assert prep["staged"] == n and census_prep["staged"] == int(sizes["census_sessions"]), (prep, census_prep)
        workers = await start_workers(procs, url, port, settings, wp)
        await asyncio.sleep(1.0)  # past the workers' start-up scan

        cpu = CpuMeter(srv, {f"sessionq worker {i}": w.pid for i, w in enumerate(workers)})
        result = await settle_all(url, "burst", n, timeout=max(120.0, n / 5), procs=procs, meter=cpu)
        # the statements one quiescence costs inside a burst (a smaller one, counted)
        census = Census(srv, url)
        async with census:
            await settle_all(url, "census", int(sizes["census_sessions"]), timeout=120, procs=procs)
    srv.drop(url)
    result["sessions_per_s"] = round(n / result["drain_seconds"], 1) if result["drain_seconds"] else None
    r = ratio(result["sessions_per_s"], raw["jobs_per_s"])
    r_pgq = ratio(result["sessions_per_s"], pgq["jobs_per_s"])
    anatomy = census.per(int(sizes["census_sessions"]))
    say(table(f"burst: {n} settles in one transaction -> all suspended ({wp} x sessionq worker, "
              f"{qw} quiescence workers each)",
              ["what", "n", "seconds", "per s", "first suspend ms"],
              [("sessionq quiescence", n, result["drain_seconds"], result["sessions_per_s"],
                result["first_suspend_ms"]),
               (f"raw procrastinate no-op jobs (concurrency {sizes['raw_concurrency']})", n, raw["seconds"],
                raw["jobs_per_s"], None),
               (f"PgQueuer no-op jobs (batch {sizes['pgqueuer_batch']})", n, pgq["seconds"], pgq["jobs_per_s"], None)]))
    met = r is not None and r >= 2.0
    met_pgq = r_pgq is not None and r_pgq >= 0.5
    say(f"ratio line: burst = {result['sessions_per_s']} sessions/s = {r} x raw procrastinate no-op throughput "
        f"({raw['jobs_per_s']} jobs/s); target >= 2x: {'met' if met else 'NOT met'}")
    say(f"ratio line: burst = {r_pgq} x PgQueuer no-op throughput ({pgq['jobs_per_s']} jobs/s); "
        f"target >= 0.5x: {'met' if met_pgq else 'NOT met'}")
    say(f"machine CPU busy {cpu.result.get('machine_busy_pct')}% during the drain (other tenants included); "
        f"CPU ms per Session {cpu.per_unit_ms(n)}; with every CPU to itself at most {cpu.ceiling_per_s(n)} sessions/s")
    say(*census_lines(anatomy, "quiesced Session in a burst"))
    return {
        "processes": f"{wp} x sessionq worker (quiescenceWorkers {qw}); raw procrastinate worker "
                     "and PgQueuer worker each in its own process; settles by this process in one transaction",
        "settings": settings,
        "sizes": sizes,
        "setup": prep,
        "burst": result,
        "raw_procrastinate_throughput": raw,
        "pgqueuer_throughput": pgq,
        "ratio": r,
        "ratio_to_pgqueuer": r_pgq,
        "target": {"ratio_to_raw_procrastinate": 2.0, "met": met, "ratio_to_pgqueuer": 0.5, "met_pgqueuer": met_pgq},
        "census": anatomy,
        "cpu": cpu.result,
        "cpu_ms_per_session": cpu.per_unit_ms(n),
        "cpu_ceiling_sessions_per_s": cpu.ceiling_per_s(n),
    }


async def settle_all(url: str, prefix: str, n: int, *, timeout: float, procs: Any,
                     meter: CpuMeter | None = None) -> dict[str, Any]:
    """Settle every staged turn of the `<prefix>-*` Sessions in one transaction and wait until
    every suspension is recorded (the CPU meter, if any, runs from the commit to the end)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        async with conn.transaction():
            cur = await conn.execute(
                "SELECT count(sessionq.task_settle(s.id, s.unsettled_task_id, 2)) FROM sessionq.sessions s"
                " WHERE s.request_id LIKE %s AND s.unsettled_task_id IS NOT NULL", (prefix + "-%",))
            settled = (await cur.fetchone())[0]  # type: ignore[index]
        committed = (await (await conn.execute("SELECT clock_timestamp()")).fetchone())[0]  # type: ignore[index]
        assert settled == n, (settled, n)

        async def all_done() -> bool:
            c = await conn.execute("SELECT count(*) FROM sessionq.sessions WHERE request_id LIKE %s"
                                   " AND (idle_boundary_id IS NOT NULL OR idle_executor IS NOT NULL)", (prefix + "-%",))
            return (await c.fetchone())[0] == 0  # type: ignore[index]

        with meter if meter is not None else contextlib.nullcontext():
            await wait_for(all_done, timeout, f"{n} suspensions", 0.1, procs)
        cur = await conn.execute(
            "SELECT max(s.updated_at), min(c.at), max(c.at), count(c.id) FROM sessionq.sessions s"
            " LEFT JOIN substrate_sim.calls c ON c.name = s.actor_name AND c.method = 'suspend_actor'"
            " WHERE s.request_id LIKE %s", (prefix + "-%",))
        last, first_call, last_call, calls = await cur.fetchone()  # type: ignore[misc]
    return {
        "settled": settled,
        "suspend_calls": calls,
        "drain_seconds": round((last - committed).total_seconds(), 3),
        "last_suspend_seconds": round((last_call - committed).total_seconds(), 3) if last_call else None,
        "first_suspend_ms": round((first_call - committed).total_seconds() * 1000, 1) if first_call else None,
    }
