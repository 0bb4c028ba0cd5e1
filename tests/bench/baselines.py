"""Baselines measured in the same run on the same server: pgbench TPC-B, and raw procrastinate
(job-start latency of a no-op job; no-op job throughput).

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


__all__ = ["percentile", "pgbench", "raw_job_start_latency", "raw_throughput", "start_raw_worker"]
