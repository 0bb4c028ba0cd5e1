"""Scenario `wake`: settle commit -> SuspendActor issued in another process.

The quiescence workers run in their own process (`tests.bench.quiesce_proc`: the product's
QuiescencePool, 4 workers, LISTEN sessionq_idle, simulated runtime at zero latency). This process
plays the turns through the store, as the tests' `turn_by_store` does (admit_turn, resume the
Actor, task_create, final task_update staged) for a pool of READY Sessions, and settles one
staged turn every 1/rate seconds (open loop: a settle is started on schedule whatever the
previous ones are doing). A Session is staged again once its suspension has been recorded.

Latency of one settle = the simulator's `substrate_sim.calls.at` of the first `suspend_actor`
of that Actor after the settle, minus the settle event's `sessionq.events.created_at` (both the
database clock, taken inside the respective transactions; the settle's commit follows its event
timestamp by well under a millisecond).

Baseline in the same run: raw procrastinate job-start latency (a no-op job deferred at the same
rate from this process; procrastinate's `started` minus `deferred` event times), with a raw
procrastinate worker in another process.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

from tests.bench import baselines
from tests.bench.common import (
    AGENT,
    LISTENERS_SQL,
    NAMESPACE,
    USER,
    Census,
    CpuMeter,
    Server,
    bench_module_command,
    census_lines,
    processes,
    query_value,
    ratio,
    say,
    setup_agent,
    summary_ms,
    table,
    wait_for,
)

SIM_WORKERS = 512
QUIESCENCE_WORKERS = 4  # sessions.quiescenceWorkers default
RAW_CONCURRENCY = 16  # workers.concurrency default


def task_json(task_id: str, session_id: Any, state: str, text: str) -> dict[str, Any]:
    return {
        "id": task_id,
        "contextId": str(session_id),
        "status": {"state": state, "message": {"messageId": f"m-{task_id}-{state}", "role": "ROLE_AGENT",
                                               "parts": [{"text": text}]}},
        "history": [{"messageId": f"u-{task_id}", "role": "ROLE_USER", "parts": [{"text": text}]}],
    }


class Turns:
    """Plays turns through the store for a pool of Sessions (what the frontend, the dispatcher
    and the Actor would do), leaving each turn staged (final update written, not settled)."""

    def __init__(self, store: Any, sim: Any) -> None:
        self.store = store
        self.sim = sim

    async def create_sessions(self, n: int, prefix: str, concurrency: int = 8) -> list[Any]:
        from sessionq.domain.operations import OperationExecutor

        executor = OperationExecutor(self.store, self.sim, 120)
        out: list[Any] = []
        sem = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with sem:
                adm = await self.store.admit_create(USER, f"{prefix}-{i}", NAMESPACE, AGENT, "")
                res = await executor.run(adm.session.id)
                assert res.status == "completed" and res.session is not None, res
                out.append(res.session)

        await asyncio.gather(*(one(i) for i in range(n)))
        return out

    async def stage(self, session: Any) -> tuple[Any, str, int]:
        msg = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "q"}]}
        admitted = await self.store.admit_turn(session.id, session.creator, None, msg, None, 600)
        actor = await self.sim.get_actor(session.actor_atespace, session.actor_name)
        if actor.state.value != "ACTOR_STATE_RUNNING":
            await self.sim.resume_actor(session.actor_atespace, session.actor_name, actor.uid)
        tid = f"t-{uuid.uuid4()}"
        v = await self.store.task_create(session.id, tid, task_json(tid, session.id, "TASK_STATE_WORKING", "q"),
                                         admitted.dispatch_id)
        v = await self.store.task_update(session.id, tid, task_json(tid, session.id, "TASK_STATE_COMPLETED", "done"),
                                         v, None, admitted.dispatch_id)
        return session, tid, v


async def settle_latencies(url: str, task_ids: list[str]) -> list[float]:
    """Seconds from each settle's event to the first suspend_actor of its Actor after it."""
    return [lat for _, lat in await settle_series(url, task_ids)]


async def settle_series(url: str, task_ids: list[str]) -> list[tuple[float, float]]:
    """(settle time as epoch seconds, latency in seconds) of each settle, in settle order."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "WITH s AS (SELECT e.session_id, max(e.created_at) AS settled_at FROM sessionq.events e"
            "            WHERE e.task_id = ANY(%s) GROUP BY e.session_id, e.task_id)"
            " SELECT extract(epoch FROM s.settled_at),"
            "        extract(epoch FROM (SELECT min(c.at) FROM substrate_sim.calls c"
            "                             WHERE c.name = 'session-' || s.session_id AND c.method = 'suspend_actor'"
            "                               AND c.at >= s.settled_at) - s.settled_at) FROM s ORDER BY 1",
            (task_ids,))
        return [(float(r[0]), float(r[1])) for r in await cur.fetchall() if r[1] is not None]


def windows(series: list[tuple[float, float]], width: float = 10.0) -> list[dict[str, Any]]:
    """p50/p99 per `width`-second window of settle time (where a latency tail comes from)."""
    if not series:
        return []
    t0 = series[0][0]
    out: dict[int, list[float]] = {}
    for t, lat in series:
        out.setdefault(int((t - t0) // width), []).append(lat)
    return [{"from_s": k * width, **{key: summary_ms(v)[key] for key in ("n", "p50_ms", "p99_ms", "max_ms")}}
            for k, v in sorted(out.items())]


async def play(url: str, store: Any, sim: Any, sessions: list[Any], *, rate: float, seconds: float,
               stagers: int = 4) -> dict[str, Any]:
    """Settle `rate` staged turns per second for `seconds`; returns task ids and counters."""
    turns = Turns(store, sim)
    staged: asyncio.Queue[tuple[Any, str, int]] = asyncio.Queue()
    to_stage: asyncio.Queue[Any] = asyncio.Queue()
    waiting: dict[Any, Any] = {}  # settled, suspension not recorded yet: id -> session
    settled: list[str] = []
    stats = {"skipped_ticks": 0, "settle_errors": 0, "stage_errors": 0}
    stop_staging = asyncio.Event()
    stop_recycling = asyncio.Event()
    for s in sessions:
        to_stage.put_nowait(s)

    async def stager() -> None:
        while not stop_staging.is_set():
            try:
                s = await asyncio.wait_for(to_stage.get(), timeout=0.1)
            except TimeoutError:
                continue
            try:
                staged.put_nowait(await turns.stage(s))
            except Exception:
                stats["stage_errors"] += 1
                await asyncio.sleep(0.05)
                to_stage.put_nowait(s)

    async def recycler() -> None:
        while not stop_recycling.is_set():
            await asyncio.sleep(0.05)
            if not waiting:
                continue
            async with store.pool.connection() as conn:
                cur = await conn.execute(
                    "SELECT id FROM sessionq.sessions WHERE id = ANY(%s) AND idle_boundary_id IS NULL"
                    " AND idle_executor IS NULL", (list(waiting),))
                done = [r["id"] for r in await cur.fetchall()]
            for sid in done:
                s = waiting.pop(sid)
                if not stop_staging.is_set():
                    to_stage.put_nowait(s)

    async def settle(item: tuple[Any, str, int], record: bool = True) -> None:
        s, tid, v = item
        try:
            await store.task_settle(s.id, tid, v)
        except Exception:
            stats["settle_errors"] += 1
            return
        if record:
            settled.append(tid)
        waiting[s.id] = s

    stagers_ = [asyncio.create_task(stager()) for _ in range(stagers)]
    recycler_ = asyncio.create_task(recycler())
    # everything staged before the clock starts
    await wait_for(lambda: _ready(staged, len(sessions)), 120, "the turns to be staged", 0.1)
    inflight: set[asyncio.Task[None]] = set()
    t0 = time.monotonic()
    n = int(rate * seconds)
    for i in range(n):
        delay = t0 + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        try:
            item = staged.get_nowait()
        except asyncio.QueueEmpty:
            stats["skipped_ticks"] += 1
            continue
        t = asyncio.create_task(settle(item))
        inflight.add(t)
        t.add_done_callback(inflight.discard)
    elapsed = time.monotonic() - t0
    if inflight:
        await asyncio.gather(*inflight)
    # wind down: stop staging, settle what is still staged (not measured), wait for every suspension
    stop_staging.set()
    await asyncio.gather(*stagers_, return_exceptions=True)
    while not staged.empty():
        await settle(staged.get_nowait(), record=False)
    unsuspended = 0
    try:
        await wait_for(lambda: _empty(waiting), 60, "the last suspensions", 0.1)
    except TimeoutError:
        unsuspended = len(waiting)
    stop_recycling.set()
    await recycler_
    return {"task_ids": settled, "elapsed": elapsed, **stats, "unsuspended_at_end": unsuspended}


async def count_statements(srv: Server, url: str, store: Any, sim: Any, sessions: list[Any], n: int,
                           rate: float) -> tuple[Census, int]:
    """The statements one settle and its quiescence cost: stage n turns first, then count while
    settling them at `rate` and until every suspension is recorded (the benchmark's own polling
    connection is left out of the count)."""
    turns = Turns(store, sim)
    items = [await turns.stage(s) for s in sessions[:n]]
    ids = [s.id for s, _, _ in items]
    census = Census(srv, url)
    async with census:
        t0 = time.monotonic()
        for i, (s, tid, v) in enumerate(items):
            delay = t0 + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await store.task_settle(s.id, tid, v)

        async def quiesced() -> bool:
            async with store.pool.connection() as conn:
                cur = await conn.execute("SELECT count(*) AS n FROM sessionq.sessions WHERE id = ANY(%s)"
                                         " AND (idle_boundary_id IS NOT NULL OR idle_executor IS NOT NULL)", (ids,))
                row = await cur.fetchone()
                return row is not None and row["n"] == 0

        await wait_for(quiesced, 60, "the counted suspensions", 0.1)
        await asyncio.sleep(0.3)
    return census, len(items)


async def _ready(q: asyncio.Queue[Any], n: int) -> bool:
    return q.qsize() >= n


async def _empty(d: dict[Any, Any]) -> bool:
    return not d


async def run(srv: Server, log_dir: Path, quick: bool, sizes: dict[str, Any] | None = None) -> dict[str, Any]:
    sizes = {"rate": 50.0, "seconds": 10.0 if quick else 60.0, "sessions": 60 if quick else 150,
             "raw_seconds": 5.0 if quick else 20.0, "census_seconds": 2.0 if quick else 4.0, **(sizes or {})}
    say("", "== wake: settle commit -> SuspendActor issued in another process ==")
    from sessionq.db.store import Store
    from sessionq.runtime.simulator import SimulatedSubstrate

    url = srv.fresh_database("wake")
    await setup_agent(url, worker_pool_size=SIM_WORKERS)
    rate, seconds = float(sizes["rate"]), float(sizes["seconds"])
    async with processes(log_dir / "wake") as procs:
        # baseline: raw procrastinate job start at the same rate
        await baselines.start_raw_worker(procs, url, concurrency=RAW_CONCURRENCY, poll=5.0)
        raw = await baselines.raw_job_start_latency(url, rate=rate, seconds=float(sizes["raw_seconds"]))
        procs.stop_all()
        # baseline: PgQueuer enqueue -> pick at the same rate (dequeue batch 10)
        await baselines.start_pgqueuer_worker(procs, url, batch=10)
        pgq = await baselines.pgqueuer_job_start_latency(url, rate=rate, seconds=float(sizes["raw_seconds"]))
        procs.stop_all()

        store = await Store.open(url, pool_size=12, listen=False, name="bench-turns")
        sim = SimulatedSubstrate(url, worker_pool_size=SIM_WORKERS)
        await sim.open()
        try:
            sessions = await Turns(store, sim).create_sessions(int(sizes["sessions"]), "wake")
            listening = int(await query_value(url, LISTENERS_SQL))
            qproc = procs.start("quiescence", bench_module_command("quiesce_proc", url, "--workers", str(QUIESCENCE_WORKERS),
                                                           "--sim-workers", str(SIM_WORKERS)),
                                {k: v for k, v in os.environ.items() if k == "PYTHONPATH"})  # an A/B's other checkout

            async def listens() -> bool:
                return int(await query_value(url, LISTENERS_SQL)) > listening

            await wait_for(listens, 60, "the quiescence process to listen", 0.2, procs)
            await asyncio.sleep(0.5)  # its start-up scan is over
            with CpuMeter(srv, {"quiescence process": qproc.pid}) as cpu:
                played = await play(url, store, sim, sessions, rate=rate, seconds=seconds)
            procs.check()
            series = await settle_series(url, played["task_ids"])
            lat = [x for _, x in series]
            census, counted = await count_statements(srv, url, store, sim, sessions,
                                                     int(rate * float(sizes["census_seconds"])), rate)
        finally:
            await sim.close()
            await store.close()
    srv.drop(url)
    res = summary_ms(lat)
    res.update({"rate_per_s": rate, "seconds": seconds, "settles": len(played["task_ids"]),
                "skipped_ticks": played["skipped_ticks"], "settle_errors": played["settle_errors"],
                "stage_errors": played["stage_errors"], "unsuspended_at_end": played["unsuspended_at_end"]})
    anatomy = census.per(counted)
    say(table(f"wake latency at {rate:.0f} settles/s ({len(lat)} samples) vs raw procrastinate job start",
              ["what", "n", "p50 ms", "p90 ms", "p99 ms", "max ms"],
              [("settle -> SuspendActor (quiescence, other process)", res["n"], res["p50_ms"], res["p90_ms"],
                res["p99_ms"], res["max_ms"]),
               ("raw procrastinate defer -> job start", raw["n"], raw["p50_ms"], raw["p90_ms"], raw["p99_ms"],
                raw["max_ms"]),
               ("PgQueuer enqueue -> pick (batch 10)", pgq["n"], pgq["p50_ms"], pgq["p90_ms"], pgq["p99_ms"],
                pgq["max_ms"])]))
    by_window = windows(series)
    say("p99 ms per 10 s window: " + ", ".join(f"{w['p99_ms']}" for w in by_window))
    r50, r99 = ratio(res["p50_ms"], raw["p50_ms"]), ratio(res["p99_ms"], raw["p99_ms"])
    met = (res["p50_ms"] or 1e9) <= 10 and (res["p99_ms"] or 1e9) <= 25
    say(f"ratio line: wake p50 = {r50} x raw procrastinate job-start p50, p99 = {r99} x raw p99; "
        f"target p50 <= 10 ms, p99 <= 25 ms: {'met' if met else 'NOT met'}")
    q50, q99 = ratio(res["p50_ms"], pgq["p50_ms"]), ratio(res["p99_ms"], pgq["p99_ms"])
    met_pgq = q99 is not None and q99 <= 1.2
    say(f"ratio line: wake p50 = {q50} x PgQueuer enqueue -> pick p50, p99 = {q99} x PgQueuer p99; "
        f"target p99 <= 1.2x: {'met' if met_pgq else 'NOT met'}")
    say(f"machine CPU busy {cpu.result.get('machine_busy_pct')}% while playing {rate:.0f} turns/s "
        f"(CPU ms per turn: {cpu.per_unit_ms(len(played['task_ids']))}; this process plays the turns)")
    say(*census_lines(anatomy, "settle, quiescence side (the settle itself adds 1)"))
    return {
        "processes": "quiescence: tests.bench.quiesce_proc (QuiescencePool, 4 workers) in its own process; "
                     "turns played and settled through the store by this process; raw procrastinate worker "
                     f"(concurrency {RAW_CONCURRENCY}) and PgQueuer worker (batch 10) each in its own process",
        "sizes": sizes,
        "wake": res,
        "wake_by_10s_window": by_window,
        "raw_procrastinate_job_start": raw,
        "pgqueuer_job_start": pgq,
        "ratio_p50": r50,
        "ratio_p99": r99,
        "ratio_p50_to_pgqueuer": q50,
        "ratio_p99_to_pgqueuer": q99,
        "target": {"p50_ms": 10, "p99_ms": 25, "met": met, "p99_ratio_to_pgqueuer": 1.2, "met_pgqueuer": met_pgq},
        "census": anatomy,
        "cpu": cpu.result,
        "cpu_ms_per_turn": cpu.per_unit_ms(len(played["task_ids"])),
    }
