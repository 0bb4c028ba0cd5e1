"""Scenario `expiry`: the idle sweep with many Sessions in the table.

Set-up (bulk SQL, timed and printed): N READY Sessions cloned from a real one (tests.bench.bulk:
INSERT ... SELECT FROM generate_series, unique request ids, CHECK constraints hold), all recently
active, so nothing is due. Then, ANALYZEd:

1. the sweep's page query, ``sessionq.idle_candidates(ttl, NULL, NULL, 100)`` with the default
   TTL (604800 s) and nothing to expire: 50 runs through `Store.idle_candidates` (client round
   trip included), median and p99; with EXPLAIN (ANALYZE, BUFFERS) of the call (PostgreSQL inlines
   this SQL function, so the plan shows which index is used and how), of its body written out,
   and, for comparison, of the body with the cutoff computed once as a constant.
2. K more Sessions idle for longer than the TTL, their Actors created in bulk in the simulator's
   tables (SUSPENDED, with an egress policy, as after a real creation): the time
   `sessionq.domain.expiry.sweep` takes to expire all of them (admission under the row lock, the
   deletion through the operation/claim machinery, the Actor deleted in the simulated runtime at
   zero latency, the row removed), run in this process with the product defaults (pages of 100,
   4 deletions in flight).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import psycopg

from tests.bench import bulk
from tests.bench.common import (
    Census,
    CpuMeter,
    Server,
    census_lines,
    percentile,
    say,
    setup_agent,
    summary_ms,
    table,
)

TTL = 604800.0  # sessions.idleTtl default
RUNS = 50


def explain(conn: psycopg.Connection[Any], sql: str, params: Any = None) -> str:
    rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params).fetchall()  # type: ignore[arg-type]
    return "\n".join(r[0] for r in rows)


BODY = """
  SELECT s.id, greatest(s.created_at, s.last_event_at)
    FROM sessionq.sessions s
   WHERE s.state IN ('READY', 'SUSPENDED')
     AND greatest(s.created_at, s.last_event_at) < clock_timestamp() - make_interval(secs => {ttl})
     AND (NULL::timestamptz IS NULL OR (greatest(s.created_at, s.last_event_at), s.id) > (NULL::timestamptz, NULL::uuid))
   ORDER BY greatest(s.created_at, s.last_event_at), s.id
   LIMIT 100
"""
BODY_CONSTANT_CUTOFF = BODY.replace("clock_timestamp() - make_interval(secs => {ttl})", "{cutoff}")


async def run(srv: Server, log_dir: Path, quick: bool, sizes: dict[str, Any] | None = None) -> dict[str, Any]:
    from sessionq.db.store import Store
    from sessionq.domain.expiry import sweep
    from sessionq.domain.operations import OperationExecutor
    from sessionq.runtime.simulator import SimulatedSubstrate

    sizes = {"sessions": 100_000 if quick else 1_000_000, "idle": 1_000 if quick else 10_000, **(sizes or {})}
    n, k = int(sizes["sessions"]), int(sizes["idle"])
    say("", f"== expiry: {n:,} Sessions in the table; the sweep's page query; expiring {k:,} idle ones ==")
    url = srv.fresh_database("expiry")
    await setup_agent(url)
    tpl = await bulk.template_session(url)

    def load_active() -> dict[str, Any]:
        with psycopg.connect(url, autocommit=True) as conn:
            t0 = time.monotonic()
            made = bulk.clone_sessions(conn, tpl, n, "bulk")
            t1 = time.monotonic()
            conn.execute("VACUUM ANALYZE sessionq.sessions")
            t2 = time.monotonic()
            size = conn.execute("SELECT pg_size_pretty(pg_total_relation_size('sessionq.sessions'))").fetchone()
        return {"inserted": made, "insert_seconds": round(t1 - t0, 1), "vacuum_analyze_seconds": round(t2 - t1, 1),
                "table_size_with_indexes": size[0] if size else None}

    load = await asyncio.to_thread(load_active)
    say(f"bulk insert: {load['inserted']:,} Sessions in {load['insert_seconds']} s "
        f"(+ VACUUM ANALYZE {load['vacuum_analyze_seconds']} s); sessions table with indexes: "
        f"{load['table_size_with_indexes']}")

    # 1. the page query with nothing to expire
    store = await Store.open(url, pool_size=10, listen=False)  # named "sessionq", as a worker's store
    sim = SimulatedSubstrate(url)
    await sim.open()
    try:
        await store.idle_candidates(TTL, None, 100)  # warm the connection and the plan
        page_s: list[float] = []
        for _ in range(RUNS):
            t0 = time.monotonic()
            got = await store.idle_candidates(TTL, None, 100)
            page_s.append(time.monotonic() - t0)
            assert not got, "nothing should be due"
        page = summary_ms(page_s)
        page["median_ms"] = round(percentile([x * 1000 for x in page_s], 50) or 0, 2)

        def plans() -> dict[str, str]:
            with psycopg.connect(url, autocommit=True) as conn:
                cutoff = conn.execute("SELECT (clock_timestamp() - make_interval(secs => %s))::text", (TTL,)).fetchone()
                assert cutoff is not None
                return {
                    "call": explain(conn, f"SELECT id, idle_since FROM sessionq.idle_candidates({TTL}, NULL, NULL, 100)"),
                    "body": explain(conn, BODY.format(ttl=TTL)),
                    "body_with_constant_cutoff": explain(conn, BODY_CONSTANT_CUTOFF.format(cutoff=f"'{cutoff[0]}'::timestamptz")),
                }

        plan = await asyncio.to_thread(plans)
        say(table(f"sweep page query, nothing due, {n:,} Sessions ({RUNS} runs through Store.idle_candidates)",
                  ["query", "median ms", "p90 ms", "p99 ms", "max ms", "target"],
                  [("idle_candidates(604800, NULL, NULL, 100)", page["median_ms"], page["p90_ms"], page["p99_ms"],
                    page["max_ms"], "<= 10 ms: " + ("met" if page["median_ms"] <= 10 else "NOT met"))]))
        say("EXPLAIN (ANALYZE, BUFFERS) SELECT ... FROM sessionq.idle_candidates(604800, NULL, NULL, 100):",
            _indent(plan["call"]),
            "EXPLAIN (ANALYZE, BUFFERS) of its body written out:", _indent(plan["body"]),
            "for comparison, the body with the cutoff as a constant (clock_timestamp() - ttl computed once):",
            _indent(plan["body_with_constant_cutoff"]))

        # 2. expire K idle Sessions
        def load_idle() -> dict[str, Any]:
            with psycopg.connect(url, autocommit=True) as conn:
                t0 = time.monotonic()
                made = bulk.clone_sessions(conn, tpl, k, "idle", age_seconds=TTL + 86400)
                actors = bulk.clone_actors(conn, tpl, "idle")
                conn.execute("ANALYZE sessionq.sessions")
                conn.execute("ANALYZE substrate_sim.actors")
            return {"idle_sessions": made, "actors": actors, "seconds": round(time.monotonic() - t0, 1)}

        idle = await asyncio.to_thread(load_idle)
        executor = OperationExecutor(store, sim, 120)
        with CpuMeter(srv, {}) as cpu:
            t0 = time.monotonic()
            result = await sweep(store, executor, url, TTL, "bench-sweeper")
            elapsed = time.monotonic() - t0
        # a second, small sweep with the statements counted
        census_n = min(200, k)
        await asyncio.to_thread(_more_idle, url, tpl, census_n)
        census = Census(srv, url)
        async with census:
            counted = await sweep(store, executor, url, TTL, "bench-sweeper")
        remaining = await _count(url, "SELECT count(*) FROM sessionq.sessions WHERE request_id LIKE 'idle-%'")
        deleted_actors = await _count(url, "SELECT count(*) FROM substrate_sim.calls WHERE method = 'delete_actor'")
    finally:
        await sim.close()
        await store.close()
    srv.drop(url)
    sweep_res = {"seconds": round(elapsed, 2), "leader": result.leader, "scanned": result.scanned,
                 "admitted": result.admitted, "expired": result.expired, "failed": result.failed,
                 "outcomes": result.outcomes, "per_s": round(result.expired / elapsed, 1) if elapsed else None,
                 "remaining_idle_rows": remaining, "delete_actor_calls": deleted_actors}
    met_sweep = result.expired == k and elapsed <= 60
    say(table(f"expiring {k:,} idle Sessions with sessionq.domain.expiry.sweep ({n:,} others in the table; Actors created in "
              "bulk in the simulator, so every delete is a real one)",
              ["what", "expired", "seconds", "per s", "failed", "target"],
              [("sweep", result.expired, sweep_res["seconds"], sweep_res["per_s"], result.failed,
                "<= 60 s" if k >= 10_000 else f"<= 60 s for 10,000 (scaled: {60 * k / 10_000:.0f} s)")]))
    say(f"ratio line: expiry page query median = {page['median_ms']} ms (target 10 ms: "
        f"{round(page['median_ms'] / 10, 2)} x target); {k:,} expirations in {sweep_res['seconds']} s "
        f"({round(sweep_res['seconds'] / (60 * k / 10_000), 2)} x the 60 s per 10,000 budget); "
        f"machine CPU busy {cpu.result.get('machine_busy_pct')}% during the sweep")
    say(f"CPU ms per expiration: {cpu.per_unit_ms(result.expired)}; with every CPU to itself at most "
        f"{cpu.ceiling_per_s(result.expired)} expirations/s")
    anatomy = census.per(counted.expired)
    say(*census_lines(anatomy, "expired Session"))
    return {
        "sizes": sizes,
        "ttl_seconds": TTL,
        "load": load,
        "page_query": page,
        "page_query_target": {"median_ms": 10, "met": page["median_ms"] <= 10},
        "explain": plan,
        "idle_setup": idle,
        "actors": "created in bulk in the simulator's tables (SUSPENDED + egress policy): deletes are real, "
                  "not NOT_FOUND",
        "sweep": sweep_res,
        "sweep_target": {"seconds_for_10000": 60, "met": met_sweep},
        "cpu": cpu.result,
        "cpu_ms_per_expiration": cpu.per_unit_ms(result.expired),
        "cpu_ceiling_expirations_per_s": cpu.ceiling_per_s(result.expired),
        "census": anatomy,
    }


def _more_idle(url: str, tpl: Any, count: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        bulk.clone_sessions(conn, tpl, count, "cidle", age_seconds=TTL + 86400)
        bulk.clone_actors(conn, tpl, "cidle")


async def _count(url: str, sql: str) -> int:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        row = await (await conn.execute(sql)).fetchone()  # type: ignore[arg-type]
        return int(row[0]) if row else 0


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())
