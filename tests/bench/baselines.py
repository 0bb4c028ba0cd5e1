"""Baselines measured in the same run on the same server: pgbench TPC-B, raw procrastinate
(job-start latency of a no-op job; no-op job throughput) and PgQueuer 1.6 (the same two figures
for the fastest Python PostgreSQL queue: batch dequeue, asyncpg).

The raw procrastinate worker runs in its own process (`python -m tests.bench.raw_worker`), as
sessionq's workers do. Timings come from procrastinate's own event rows (``procrastinate_events``:
``deferred`` and ``started`` / ``succeeded``, database clock), so the benchmark client's
scheduling does not enter the numbers.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
from typing import Any

import psycopg

from tests.bench.common import Procs, Server, bench_module_command, percentile, summary_ms, wait_for

RAW_QUEUE = "bench_raw"


def pgbench(srv: Server, *, seconds: int, clients: int = 16, threads: int = 2, scale: int = 1,
            select_only: bool = False) -> dict[str, Any]:
    """`pgbench -i -s scale` into a scratch database, then `pgbench -c clients -j threads -T seconds`
    (TPC-B-like, the default script; `select_only`: `-S`, one primary-key SELECT per transaction).
    Returns tps (without connection time) and latency."""
    exe = srv.pgbench()
    if exe is None:
        return {"error": "pgbench not found"}
    url = srv.empty_database("pgbench")
    try:
        init = subprocess.run([exe, "-i", "-q", "-s", str(scale), url], capture_output=True, text=True, timeout=300)
        if init.returncode != 0:
            return {"error": f"pgbench -i failed: {init.stderr.strip()[-400:]}"}
        mode = ["-S"] if select_only else []
        run = subprocess.run([exe, *mode, "-c", str(clients), "-j", str(threads), "-T", str(seconds), "-n", url],
                             capture_output=True, text=True, timeout=seconds + 120)
        if run.returncode != 0:
            return {"error": f"pgbench failed: {run.stderr.strip()[-400:]}"}
        out = run.stdout
        tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
        lat = re.search(r"latency average = ([\d.]+) ms", out)
        txs = re.search(r"number of transactions actually processed: (\d+)", out)
        return {
            "command": f"pgbench -i -s {scale}; pgbench {' '.join(mode)}{' ' if mode else ''}-c {clients} -j {threads}"
                       f" -T {seconds} -n",
            "tps": float(tps.group(1)) if tps else None,
            "latency_avg_ms": float(lat.group(1)) if lat else None,
            "transactions": int(txs.group(1)) if txs else None,
        }
    finally:
        srv.drop(url)


async def start_raw_worker(procs: Procs, url: str, *, concurrency: int, poll: float, name: str = "raw-worker") -> None:
    before = await _count(url, "SELECT count(*) FROM procrastinate_workers")
    procs.start(name, bench_module_command("raw_worker", url, "--concurrency", str(concurrency),
                                           "--poll", str(poll), "--queue", RAW_QUEUE), {**_env()})

    async def ready() -> bool:
        return await _count(url, "SELECT count(*) FROM procrastinate_workers") > before

    await wait_for(ready, 60, "the raw procrastinate worker", 0.2, procs)
    await asyncio.sleep(0.5)  # its LISTEN is set up right after registration


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


async def _count(url: str, sql: str, params: Any = ()) -> int:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(sql, params)
        row = await cur.fetchone()
        return int(row[0]) if row else 0


def _app(url: str) -> Any:
    from procrastinate import App, PsycopgConnector

    from sessionq.db.connection import conninfo

    return App(connector=PsycopgConnector(conninfo=conninfo(url), min_size=1, max_size=4))


async def raw_job_start_latency(url: str, *, rate: float, seconds: float) -> dict[str, Any]:
    """Defer one no-op job every 1/rate seconds for `seconds` (open loop) from this process; the
    latency of each job is procrastinate's `started` event minus its `deferred` event."""
    app = _app(url)
    ids: list[int] = []
    async with app.open_async():
        deferrer = app.configure_task("noop", queue=RAW_QUEUE, allow_unknown=True)
        t0 = time.monotonic()
        n = int(rate * seconds)
        for i in range(n):
            due = t0 + i / rate
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            ids.append(await deferrer.defer_async(i=i))
    await _wait_jobs_done(url, ids, timeout=60)
    lat = await _event_gaps(url, ids, "deferred", "started")
    out = summary_ms(lat)
    out.update({"rate_per_s": rate, "seconds": seconds, "jobs": len(ids)})
    return out


async def raw_throughput(url: str, *, jobs: int) -> dict[str, Any]:
    """Defer `jobs` no-op jobs in one transaction (one batch), with the raw worker already
    running; throughput = jobs / (last `succeeded` event - commit of the batch)."""
    app = _app(url)
    async with app.open_async():
        deferrer = app.configure_task("noop", queue=RAW_QUEUE, allow_unknown=True)
        ids = await deferrer.batch_defer_async(*({"i": i} for i in range(jobs)))
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        committed = (await (await conn.execute("SELECT clock_timestamp()")).fetchone())[0]  # type: ignore[index]
    await _wait_jobs_done(url, ids, timeout=max(120.0, jobs / 20))
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        row = await (await conn.execute(
            "SELECT max(at) FROM procrastinate_events WHERE job_id = ANY(%s) AND type = 'succeeded'", (ids,))).fetchone()
    assert row is not None
    elapsed = (row[0] - committed).total_seconds()
    return {"jobs": jobs, "seconds": round(elapsed, 3), "jobs_per_s": round(jobs / elapsed, 1) if elapsed > 0 else None}


async def _wait_jobs_done(url: str, ids: list[int], timeout: float) -> None:
    async def done() -> bool:
        n = await _count(url, "SELECT count(*) FROM procrastinate_jobs WHERE id = ANY(%s) AND status IN"
                              " ('succeeded', 'failed')", (ids,))
        return n >= len(ids)

    await wait_for(done, timeout, f"{len(ids)} raw jobs", 0.1)


async def _event_gaps(url: str, ids: list[int], first: str, second: str) -> list[float]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT extract(epoch FROM b.at - a.at) FROM procrastinate_events a JOIN procrastinate_events b"
            " ON a.job_id = b.job_id AND a.type = %s AND b.type = %s WHERE a.job_id = ANY(%s)",
            (first, second, ids))
        return [float(r[0]) for r in await cur.fetchall()]


# -- PgQueuer ----------------------------------------------------------------------------------------
# Its own tables in the same database (`pgqueuer`, `pgqueuer_log`), its worker in its own process
# (tests/bench/pgqueuer_worker.py). Timings from its log table, database clock: a job's `queued` row
# is written by the enqueue statement and its `picked` row by the dequeue statement that claims it.

PGQ_ENTRYPOINT = "bench_noop"


async def _pgqueuer_queries(conn: psycopg.AsyncConnection[Any]) -> Any:
    from pgqueuer import Queries

    queries = Queries.from_psycopg_connection(conn)
    if not await queries.schema_is_installed():
        await queries.install()
    return queries


async def start_pgqueuer_worker(procs: Procs, url: str, *, batch: int = 10, name: str = "pgqueuer-worker") -> None:
    """Install PgQueuer's schema if needed, start its worker process, and wait until it has run one
    job (so its LISTEN and first dequeue are behind it)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        queries = await _pgqueuer_queries(conn)
        procs.start(name, bench_module_command("pgqueuer_worker", url, "--batch", str(batch)), _env())
        ids = await queries.enqueue(PGQ_ENTRYPOINT, None)
    await _wait_pgqueuer_done(url, [int(i) for i in ids], timeout=60, procs=procs)


async def pgqueuer_throughput(url: str, *, jobs: int) -> dict[str, Any]:
    """Enqueue `jobs` no-op jobs in one statement, with the worker running; throughput = jobs / (the
    last job's terminal log row - the enqueue's commit)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        queries = await _pgqueuer_queries(conn)
        ids = [int(i) for i in await queries.enqueue([PGQ_ENTRYPOINT] * jobs, [None] * jobs, [0] * jobs)]
        committed = (await (await conn.execute("SELECT clock_timestamp()")).fetchone())[0]  # type: ignore[index]
    await _wait_pgqueuer_done(url, ids, timeout=max(120.0, jobs / 20))
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        row = await (await conn.execute(
            "SELECT max(created) FROM pgqueuer_log WHERE job_id = ANY(%s) AND status = 'successful'", (ids,))).fetchone()
    assert row is not None and row[0] is not None
    elapsed = (row[0] - committed).total_seconds()
    return {"jobs": jobs, "seconds": round(elapsed, 3), "jobs_per_s": round(jobs / elapsed, 1) if elapsed > 0 else None}


async def pgqueuer_job_start_latency(url: str, *, rate: float, seconds: float) -> dict[str, Any]:
    """Enqueue one no-op job every 1/rate seconds for `seconds` (open loop) from this process; the
    latency of each job is its `picked` log row minus its `queued` log row."""
    ids: list[int] = []
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        queries = await _pgqueuer_queries(conn)
        t0 = time.monotonic()
        for i in range(int(rate * seconds)):
            delay = t0 + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            ids.extend(int(j) for j in await queries.enqueue(PGQ_ENTRYPOINT, None))
    await _wait_pgqueuer_done(url, ids, timeout=60)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT extract(epoch FROM p.created - q.created) FROM pgqueuer_log q JOIN pgqueuer_log p"
            " ON p.job_id = q.job_id AND q.status = 'queued' AND p.status = 'picked' WHERE q.job_id = ANY(%s)",
            (ids,))
        lat = [float(r[0]) for r in await cur.fetchall()]
    out = summary_ms(lat)
    out.update({"rate_per_s": rate, "seconds": seconds, "jobs": len(ids)})
    return out


async def _wait_pgqueuer_done(url: str, ids: list[int], timeout: float, procs: Procs | None = None) -> None:
    async def done() -> bool:
        return await _count(url, "SELECT count(*) FROM pgqueuer WHERE id = ANY(%s)", (ids,)) == 0

    await wait_for(done, timeout, f"{len(ids)} PgQueuer jobs", 0.01, procs)


__all__ = ["percentile", "pgbench", "pgqueuer_job_start_latency", "pgqueuer_throughput", "raw_job_start_latency",
           "raw_throughput", "start_pgqueuer_worker", "start_raw_worker"]
