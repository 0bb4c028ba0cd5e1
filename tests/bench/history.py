"""Scenario `history`: what keeping job history costs (issue 21).

Every job attempt is recorded in sessionq.job_attempts with the attempt's end, and with
jobs.retention above zero (the default, 1 day) a succeeded job is kept as history instead of being
deleted. Measured: CreateSession at 64 clients, closed loop (the `create` set-up: `sessionq serve` +
one `sessionq worker`, simulated runtime at zero latency), with jobs.retention 86400s (history kept)
against jobs.retention 0s (succeeded jobs deleted at once, as before the issue) as the baseline,
alternating, in the same run on the same server. Then the purge: how fast
sessionq.purge_job_history deletes the kept jobs in its batches of 1,000 (jobs/s), against the
creation rate it must keep up with.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from tests.bench.common import (
    Server,
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

KEPT, DELETED = 86400.0, 0.0


async def one(srv: Server, log_dir: Path, retention: float, sizes: dict[str, Any], tag: str) -> dict[str, Any]:
    settings = {**SETTINGS, "jobs.retention": retention}
    url = srv.fresh_database(f"history_{tag}")
    await setup_agent(url, worker_pool_size=int(settings["runtime.simulator.workers"]))
    port = free_port()
    try:
        async with processes(log_dir / f"history-{tag}") as procs:
            await asyncio.gather(start_api(procs, url, port, settings),
                                 start_workers(procs, url, port, settings, WORKER_PROCESSES))
            r = await drive(f"127.0.0.1:{port}", int(sizes["clients"]), float(sizes["seconds"]),
                            float(sizes["warmup"]), tag)
            procs.check()
        r["retention_s"] = retention
        r["succeeded_jobs_kept"] = int(await query_value(
            url, "SELECT count(*) FROM sessionq.job_rows WHERE status = 'succeeded'"))
        r["attempts_recorded"] = int(await query_value(url, "SELECT count(*) FROM sessionq.job_attempts"))
        if retention > 0 and r["succeeded_jobs_kept"]:
            started = time.monotonic()
            purged = 0
            while True:
                n = int(await query_value(url, "SELECT sessionq.purge_job_history(0, 1000)"))
                purged += n
                if n < 1000:
                    break
            took = time.monotonic() - started
            r["purge"] = {"jobs": purged, "seconds": round(took, 3),
                          "jobs_per_s": round(purged / took, 1) if took > 0 else None}
    finally:
        srv.drop(url)
    return r


async def run(srv: Server, log_dir: Path, quick: bool, sizes: dict[str, Any] | None = None) -> dict[str, Any]:
    sizes = {"seconds": 5.0 if quick else 15.0, "warmup": 1.0 if quick else 3.0, "clients": 64,
             "rounds": 1 if quick else 2, **(sizes or {})}
    say("", "== history: CreateSession with job history kept (jobs.retention 1d) vs deleted at once (0s) ==")
    runs: list[dict[str, Any]] = []
    for i in range(int(sizes["rounds"])):
        for retention, tag in ((DELETED, f"deleted{i}"), (KEPT, f"kept{i}")):
            runs.append(await one(srv, log_dir, retention, sizes, tag))
    kept = [r for r in runs if r["retention_s"] > 0]
    deleted = [r for r in runs if r["retention_s"] == 0]

    def mean(rows: list[dict[str, Any]], key: str) -> float | None:
        values = [r[key] for r in rows if r.get(key) is not None]
        return round(sum(values) / len(values), 1) if values else None

    rows = [(("1d (kept)" if r["retention_s"] else "0s (baseline)"), r["creations_per_s"], r["p50_ms"], r["p99_ms"],
             sum(r["errors"].values()), r["succeeded_jobs_kept"], r["attempts_recorded"]) for r in runs]
    say(table(f"CreateSession at {sizes['clients']} clients by jobs.retention (alternating runs)",
              ["retention", "creations/s", "p50 ms", "p99 ms", "errors", "succeeded jobs kept", "attempts recorded"],
              rows))
    throughput = ratio(mean(kept, "creations_per_s"), mean(deleted, "creations_per_s"))
    p99 = ratio(mean(kept, "p99_ms"), mean(deleted, "p99_ms"))
    purge = [r["purge"] for r in kept if r.get("purge")]
    purge_rate = mean(purge, "jobs_per_s") if purge else None
    say(f"ratio line: history kept / deleted at once: throughput {throughput}, p99 {p99}; "
        f"the purge deletes {purge_rate} jobs/s = {ratio(purge_rate, mean(kept, 'creations_per_s'))} x the "
        "creation rate (it must stay well above 1)")
    return {
        "processes": f"1 x sessionq serve + {WORKER_PROCESSES} x sessionq worker + the gRPC client (this process)",
        "settings": SETTINGS,
        "sizes": sizes,
        "runs": runs,
        "ratio_throughput_kept_to_deleted": throughput,
        "ratio_p99_kept_to_deleted": p99,
        "purge_jobs_per_s": purge_rate,
        "ratio_purge_to_creation_rate": ratio(purge_rate, mean(kept, "creations_per_s")),
    }
