"""Scenario `fleet`: labels, search and count, and bulk actions over a large table (docs/fleet.md).

Set-up (bulk SQL, not timed): 1,000,000 clones (quick 100,000) of a real READY Session, every one
labelled (`team=common`, `n=<i mod 50>`), one in 1,000 `team=rare` instead; VACUUM ANALYZE.

Measured:
- search: SearchSessions' page of 50 (`sessionq.search_session_views`, limit 51, fetched), the same
  page as JSON rows (`sessionq.search_sessions`) and the count (`sessionq.count_sessions`) of the
  selective selector `team=rare`, for an administrator (every creator) and for the creator, 50 runs
  each, interleaved with the same-run baselines ListSessions' page of 50 (`list_session_views`)
  and the idle sweep's page (`idle_candidates`, nothing due): median / p99, and EXPLAIN (ANALYZE,
  BUFFERS) of the page and the count. Target: page <= 10 ms (the idle sweep's page budget), count
  too.
- creation with labels vs without, the issue's measure: CreateSession end to end through the API
  on that table (`FleetService.CreateSession` with three labels vs with none: admission, the
  execute_operation job, the simulated Actor, the answer), one `sessionq serve` and one `sessionq
  worker` (the `create` scenario's settings), 64 clients, closed loop, alternating rounds, each
  started just after a CHECKPOINT: creations/s. Target >= 0.95x.
- the same comparison on the admissions alone, stricter (the part labels change, without the rest
  of a CreateSession): `sessionq.admit_create` vs `sessionq.admit_create_labeled` with three labels,
  16 concurrent clients in this process, closed loop, alternating rounds: admissions/s (reported).
- bulk suspend: 10,000 more clones (quick 1,000) with their Actors RUNNING in the simulator; one
  `sessionq worker`; `sessionq.start_bulk_action(SUSPEND)` over their label, until every one is
  SUSPENDED: Sessions/s. Baseline in the same run: the `burst` scenario's quiescence of as many
  Sessions (tests.bench.burst: one transaction settles N turns, until all are suspended).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from tests.bench import bulk, burst, create
from tests.bench.common import (
    AGENT,
    NAMESPACE,
    USER,
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

RARE = {"selector": [{"key": "team", "op": "in", "values": ["rare"]}]}
LABELS = {"team": "billing", "tier": "gold", "env": "prod"}


def label_clones(conn: psycopg.Connection[Any], prefix: str, rare_every: int) -> int:
    """Label the `<prefix>-*` clones: team=rare on one in `rare_every`, team=common and n=<i mod 50>
    on the others (one UPDATE; the clones are fresh, so it is one pass)."""
    with conn.transaction():
        bulk._try_replica(conn)
        cur = conn.execute(
            "UPDATE sessionq.sessions SET labels = CASE WHEN split_part(request_id, '-', 2)::int %% %(every)s = 0"
            " THEN '{\"team\": \"rare\"}'::jsonb"
            " ELSE jsonb_build_object('team', 'common', 'n', (split_part(request_id, '-', 2)::int %% 50)::text) END"
            " WHERE request_id LIKE %(like)s", {"every": rare_every, "like": prefix + "-%"})
        conn.execute("SET LOCAL session_replication_role = origin")
        return cur.rowcount


def interleaved(conn: psycopg.Connection[Any], queries: dict[str, tuple[str, Any]], runs: int) -> dict[str, Any]:
    """Each query run `runs` times, one of each in turn (so a burst of the machine's load falls on
    all of them alike), fetched: name -> summary."""
    seconds: dict[str, list[float]] = {name: [] for name in queries}
    for _ in range(runs):
        for name, (sql, params) in queries.items():
            t0 = time.perf_counter()
            conn.execute(sql, params).fetchall()
            seconds[name].append(time.perf_counter() - t0)
    return {name: summary_ms(xs) for name, xs in seconds.items()}


def measure_search(url: str, runs: int) -> dict[str, Any]:
    """For an administrator (every creator) and for the creator: SearchSessions' page read
    (search_session_views, fetched), the same page as JSON rows (search_sessions: the dry run's and
    the console's), the count; beside them in the same runs, the baselines: ListSessions' page of as
    many rows (list_session_views) and the idle sweep's page with nothing due (idle_candidates)."""
    out: dict[str, Any] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for who, caller, everyone in (("admin", "someone", True), ("creator", USER, False)):
            args = (caller, everyone, Jsonb(RARE))
            out[who] = interleaved(conn, {
                "page_ms": ("SELECT * FROM sessionq.search_session_views(%s, NULL, %s, %s, NULL, 51)", args),
                "page_json_ms": ("SELECT * FROM sessionq.search_sessions(%s, NULL, %s, %s, NULL, 51)", args),
                "count_ms": ("SELECT sessionq.count_sessions(%s, NULL, %s, %s)", args),
                "list_page_ms": ("SELECT * FROM sessionq.list_session_views(%s, %s, NULL, NULL, NULL, 51)",
                                 (USER, everyone)),
                "sweep_page_ms": ("SELECT * FROM sessionq.idle_candidates(604800, NULL, NULL, 100)", ()),
            }, runs)
            where = conn.execute("SELECT sessionq.session_filter_sql(%s, NULL, %s, %s)", args).fetchone()[0]  # type: ignore[index]
            out[who]["explain"] = [r[0] for r in conn.execute(
                f"EXPLAIN (ANALYZE, BUFFERS) SELECT t.id FROM sessionq.sessions t WHERE {where}"
                " ORDER BY t.id LIMIT 51").fetchall()]
            out[who]["explain_count"] = [r[0] for r in conn.execute(
                f"EXPLAIN (ANALYZE, BUFFERS) SELECT count(*) FROM sessionq.sessions t WHERE {where}").fetchall()]
            out[who]["matched"] = conn.execute("SELECT sessionq.count_sessions(%s, NULL, %s, %s)", args).fetchone()[0]  # type: ignore[index]
    return out


async def admissions(url: str, labeled: bool, seconds: float, clients: int) -> float:
    from sessionq.db.store import Store

    store = await Store.open(url, pool_size=clients, listen=False, name="bench-fleet")
    done = 0
    stop = time.monotonic() + seconds
    try:
        async def client() -> None:
            nonlocal done
            while time.monotonic() < stop:
                rid = str(uuid.uuid4())
                if labeled:
                    await store.admit_create_labeled(USER, rid, NAMESPACE, AGENT, "", LABELS, None)
                else:
                    await store.admit_create(USER, rid, NAMESPACE, AGENT, "")
                done += 1

        t0 = time.monotonic()
        await asyncio.gather(*(client() for _ in range(clients)))
        return done / (time.monotonic() - t0)
    finally:
        await store.close()


async def run(srv: Server, log_dir: Path, quick: bool, sizes: dict[str, Any] | None = None) -> dict[str, Any]:
    sizes = {"sessions": 100_000 if quick else 1_000_000, "rare_every": 1000, "runs": 50,
             "create_seconds": 2.0 if quick else 4.0, "create_rounds": 3, "create_clients": 16,
             "bulk": 1000 if quick else 10_000, "e2e_clients": 64, "e2e_seconds": 3.0 if quick else 8.0,
             "e2e_rounds": 2 if quick else 10, **(sizes or {})}
    n, nb = int(sizes["sessions"]), int(sizes["bulk"])
    pool = 2 * nb + 64
    say("", f"== fleet: {n} labelled Sessions; bulk suspend of {nb} ==")
    url = srv.fresh_database("fleet")
    await setup_agent(url, worker_pool_size=pool)
    tpl = await bulk.template_session(url, sim_workers=pool)

    def prepare() -> dict[str, int]:
        with psycopg.connect(url, autocommit=True) as conn:
            made = bulk.clone_sessions(conn, tpl, n, "fleet")
            labelled = label_clones(conn, "fleet", int(sizes["rare_every"]))
            conn.execute("VACUUM ANALYZE sessionq.sessions")
        return {"sessions": made, "labelled": labelled}

    t0 = time.monotonic()
    prep = await asyncio.to_thread(prepare)
    say(f"set-up: {prep['sessions']} clones labelled in {time.monotonic() - t0:.0f} s")
    search = await asyncio.to_thread(measure_search, url, int(sizes["runs"]))
    names = {"page_ms": "SearchSessions' page of 50 (search_session_views)",
             "page_json_ms": "the page as JSON rows (search_sessions)", "count_ms": "count (count_sessions)",
             "list_page_ms": "baseline: ListSessions' page of 50 (list_session_views)",
             "sweep_page_ms": "baseline: the idle sweep's page, nothing due (idle_candidates)"}
    rows = [(f"{who}: {label}", m["matched"], m[key]["p50_ms"], m[key]["p99_ms"])
            for who, m in search.items() for key, label in names.items()]
    say(table(f"search team=rare over {n} Sessions ({int(sizes['runs'])} runs each, interleaved, fetched)",
              ["what", "matches", "p50 ms", "p99 ms"], rows))
    page_p50 = max(m["page_ms"]["p50_ms"] for m in search.values())
    count_p50 = max(m["count_ms"]["p50_ms"] for m in search.values())
    for m in search.values():
        m["ratio_page_to_list_page"] = ratio(m["page_ms"]["p50_ms"], m["list_page_ms"]["p50_ms"])
        m["ratio_page_to_sweep_page"] = ratio(m["page_ms"]["p50_ms"], m["sweep_page_ms"]["p50_ms"])
        m["ratio_json_to_page"] = ratio(m["page_json_ms"]["p50_ms"], m["page_ms"]["p50_ms"])
    search_met = page_p50 <= 10 and count_p50 <= 10
    list_ratios = ", ".join(f"{w} {m['ratio_page_to_list_page']}x" for w, m in search.items())
    say(f"ratio line: fleet search page p50 {page_p50} ms, count p50 {count_p50} ms over {n} Sessions "
        f"(page / ListSessions' page: {list_ratios});"
        f" target <= 10 ms: {'met' if search_met else 'NOT met'}")

    # creation with labels vs without, alternating rounds on the large table
    plain_rates, labeled_rates = [], []
    for _ in range(int(sizes["create_rounds"])):
        for labeled, into in ((False, plain_rates), (True, labeled_rates)):
            into.append(round(await admissions(url, labeled, float(sizes["create_seconds"]),
                                               int(sizes["create_clients"])), 1))
    plain, labeled = sum(plain_rates) / len(plain_rates), sum(labeled_rates) / len(labeled_rates)
    admissions_ratio = ratio(labeled, plain)
    say(table(f"admissions/s at {sizes['create_clients']} clients (rounds alternate)", ["what", "rounds", "mean"],
              [("admit_create", plain_rates, round(plain, 1)),
               ("admit_create_labeled (3 labels)", labeled_rates, round(labeled, 1))]))
    say(f"admissions alone: with labels = {admissions_ratio} x without (reported; the target is CreateSession's, below)")
    with psycopg.connect(url, autocommit=True) as conn:  # the admissions' jobs: nobody runs them here
        conn.execute("DELETE FROM procrastinate_jobs WHERE status = 'todo'")

    # the measure: whole CreateSessions through the API (admission, job, Actor, answer)
    # on the same table, FleetService.CreateSession with the three labels vs with none; beside the
    # throughput, the CPU of every process (the server's backends included) per creation, which the
    # machine's noise moves much less than a round's throughput
    e2e_port = free_port()
    e2e: dict[str, list[float]] = {"plain": [], "labeled": []}
    e2e_cpu: dict[str, list[float]] = {"plain": [], "labeled": []}
    e2e_errors = 0
    async with processes(log_dir / "fleet-create") as procs:
        api, workers = await asyncio.gather(
            start_api(procs, url, e2e_port, create.SETTINGS),
            start_workers(procs, url, e2e_port, create.SETTINGS, create.WORKER_PROCESSES))
        pids = {"sessionq serve": api.pid, **{f"sessionq worker {i}": w.pid for i, w in enumerate(workers)}}
        # a round of each, not counted: the first round of a fresh server pays its warm-up
        for i, labels in enumerate(({}, LABELS)):
            await create.drive(f"127.0.0.1:{e2e_port}", int(sizes["e2e_clients"]), 2.0, 0.5, f"e2e-warm{i}",
                               labels=labels)
        for r in range(int(sizes["e2e_rounds"])):
            for kind, labels in (("plain", {}), ("labeled", LABELS)):
                # every round starts just after a checkpoint: one that the server's timer or WAL
                # volume would start inside a round (its writes, then the first change of each page
                # logged whole) falls on neither kind's rounds alone
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute("CHECKPOINT")
                with CpuMeter(srv, pids) as cpu:
                    out = await create.drive(f"127.0.0.1:{e2e_port}", int(sizes["e2e_clients"]),
                                             float(sizes["e2e_seconds"]), 0.0, f"e2e-{kind}-{r}", labels=labels)
                e2e[kind].append(out["creations_per_s"])
                e2e_cpu[kind].append(round(sum(cpu.result["cpu_seconds"].values()) * 1000
                                           / max(int(out["creations"]), 1), 2))
                e2e_errors += sum(out["errors"].values())
            procs.check()
    e2e_ratio = ratio(sum(e2e["labeled"]), sum(e2e["plain"]))
    e2e_cpu_ratio = ratio(sum(e2e_cpu["plain"]), sum(e2e_cpu["labeled"]))
    say(table(f"CreateSession (FleetService) at {sizes['e2e_clients']} clients, 1 x sessionq serve + "
              f"{create.WORKER_PROCESSES} x sessionq worker (rounds alternate)",
              ["what", "creations/s by round", "mean", "CPU ms per creation by round"],
              [("without labels", e2e["plain"], round(sum(e2e["plain"]) / len(e2e["plain"]), 1), e2e_cpu["plain"]),
               ("with 3 labels", e2e["labeled"], round(sum(e2e["labeled"]) / len(e2e["labeled"]), 1),
                e2e_cpu["labeled"])]))
    e2e_met = e2e_ratio is not None and e2e_ratio >= 0.95
    say(f"ratio line: CreateSession with labels = {e2e_ratio} x without over {n} labelled Sessions (CPU per "
        f"creation without / with: {e2e_cpu_ratio}; {e2e_errors} errors); target >= 0.95x: "
        f"{'met' if e2e_met else 'NOT met'}")

    port = free_port()
    settings = {"runtime.simulator.workers": pool, "workers.pollInterval": 1.0}
    async with processes(log_dir / "fleet") as procs:
        def stage(prefix: str, labels: bool) -> int:
            with psycopg.connect(url, autocommit=True) as conn:
                made = bulk.clone_sessions(conn, tpl, nb, prefix)
                bulk.clone_actors(conn, tpl, prefix)
                burst.run_actors(conn, prefix, pool)
                if labels:
                    conn.execute("UPDATE sessionq.sessions SET labels = '{\"wave\": \"bulk\"}' WHERE request_id LIKE %s",
                                 (prefix + "-%",))
                else:
                    burst.stage_turns(conn, prefix)
                conn.execute("VACUUM ANALYZE sessionq.sessions")
            return made

        await asyncio.to_thread(stage, "wave", True)
        await asyncio.to_thread(stage, "quiet", False)
        await start_workers(procs, url, port, settings, 1)
        await asyncio.sleep(1.0)
        # baseline: the burst scenario's quiescence of as many Sessions
        b = await burst.settle_all(url, "quiet", nb, timeout=max(120.0, nb / 5), procs=procs)
        burst_rate = round(nb / b["drain_seconds"], 1) if b["drain_seconds"] else None
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            t0 = time.monotonic()
            await conn.execute("SELECT sessionq.start_bulk_action('bench-admin', 'bench-bulk', true, 'SUSPEND', %s, NULL)",
                               (Jsonb({"selector": [{"key": "wave", "op": "in", "values": ["bulk"]}]}),))

            async def all_suspended() -> bool:
                c = await conn.execute("SELECT count(*) FROM sessionq.sessions WHERE request_id LIKE 'wave-%%'"
                                       " AND state <> 'SUSPENDED'")
                return (await c.fetchone())[0] == 0  # type: ignore[index]

            await wait_for(all_suspended, max(300.0, nb / 5), f"{nb} bulk suspensions", 0.2, procs)
            bulk_seconds = time.monotonic() - t0
            action = await (await conn.execute(
                "SELECT processed, admitted, refused, extract(epoch FROM finished_at - created_at)"
                " FROM sessionq.bulk_actions WHERE request_id = 'bench-bulk'")).fetchone()
    srv.drop(url)
    bulk_rate = round(nb / bulk_seconds, 1)
    bulk_ratio = ratio(bulk_rate, burst_rate)
    say(table(f"bulk suspend of {nb} Sessions (1 x sessionq worker) vs the burst's quiescence of as many",
              ["what", "n", "seconds", "per s"],
              [("bulk suspend (admitted, executed, SUSPENDED)", nb, round(bulk_seconds, 2), bulk_rate),
               ("burst quiescence (settle -> suspended)", nb, b["drain_seconds"], burst_rate)]))
    say(f"ratio line: bulk suspend = {bulk_rate} sessions/s = {bulk_ratio} x the burst's {burst_rate} sessions/s "
        f"(admission pages took {round(float(action[3] or 0), 2)} s; refused {action[2]})")
    return {
        "sizes": sizes,
        "setup": prep,
        "search": search,
        "search_target": {"page_and_count_p50_ms": 10, "met": search_met},
        "admissions": {"plain_per_s": plain_rates, "labeled_per_s": labeled_rates, "ratio": admissions_ratio},
        "create_session": {"clients": sizes["e2e_clients"], "plain_per_s": e2e["plain"],
                           "labeled_per_s": e2e["labeled"], "ratio": e2e_ratio, "cpu_ms_per_creation": e2e_cpu,
                           "cpu_ratio": e2e_cpu_ratio, "errors": e2e_errors,
                           "target": {"ratio": 0.95, "met": e2e_met}},
        "bulk_suspend": {"sessions": nb, "seconds": round(bulk_seconds, 3), "per_s": bulk_rate,
                         "processed": action[0], "admitted": action[1], "refused": action[2],
                         "admission_seconds": float(action[3] or 0)},
        "burst_baseline": {**b, "per_s": burst_rate},
        "ratio_bulk_to_burst": bulk_ratio,
    }
