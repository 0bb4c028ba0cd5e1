"""Scenario `read`: GetSession and ListSessions at the speed of the frontend (issue 23).

Set-up: one real READY Session (the executor), cloned with SQL into `small` Sessions of the
benchmark user (10,000) and `large` Sessions of another user (1,000,000; quick 100,000), then
VACUUM ANALYZE. Measured, closed loop, `clients` concurrent callers (32) spread over
`client_procs` client processes (`tests.bench.read_client`: the same client for every server):

- the bare servicer (`tests.bench.bare_server`: grpcio aio, a constant Session and a constant page
  of 50, no authentication, validation or database) - the baseline;
- `sessionq serve` with one API process: GetSession of random Sessions of the small user,
  ListSessions pages of 50 starting at random positions of the small user and of the large user;
- `sessionq serve` with `server.processes` N (the number of CPUs; when the key exists);
- `pgbench -S` (primary-key SELECTs) on the same server with the same number of clients.

Reported: calls/s, p50/p99, the CPU per call of the API processes, of PostgreSQL's backends and of
the clients (from /proc), and the ratios against the issue's targets: GetSession on one process
>= 0.7x the bare servicer's calls/s with p99 <= 2x; N processes >= 1.6x one; the ListSessions
p99 over the large user <= 1.5x over the small one. Also the EXPLAIN (ANALYZE, BUFFERS) of a
ListSessions page of the large user (it must use the (creator, id) index).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from tests.bench.baselines import pgbench
from tests.bench.bulk import clone_sessions, template_session
from tests.bench.common import (
    TOKEN,
    USER,
    CpuMeter,
    Procs,
    Server,
    _children,
    bench_module_command,
    free_port,
    processes,
    ratio,
    say,
    setup_agent,
    start_api,
    summary_ms,
    table,
    wait_for,
)

BIG_USER = "bench-big"
BIG_TOKEN = "bench-big-token"


def _has_key(path: str) -> bool:
    from sessionq import config

    return any(k.path == path for k in config.KEYS)


async def _sample(url: str, creator: str, n: int, tail: int = 0) -> list[str]:
    """n random ids of the creator's Sessions (not among the last `tail` in id order)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT id::text FROM (SELECT id, row_number() OVER (ORDER BY id DESC) AS back FROM sessionq.sessions"
            " WHERE creator = %s) x WHERE back > %s ORDER BY random() LIMIT %s", (creator, tail, n))
        return [r[0] for r in await cur.fetchall()]


async def _explain(url: str, creator: str, after: str, limit: int) -> dict[str, Any]:
    """EXPLAIN (ANALYZE, BUFFERS) of one ListSessions page of `creator` as the store runs it (the
    procedure: its Buffers line counts what its statements read), and of the procedure's
    one-creator statement as a cached generic plan (plan_cache_mode = force_generic_plan: what a
    prepared statement runs once the server stops planning it per call)."""
    out: dict[str, Any] = {}
    body = ("SELECT to_jsonb(s) FROM sessionq.sessions s WHERE s.creator = $1"
            " AND s.id > coalesce($2, '00000000-0000-0000-0000-000000000000'::uuid) AND s.state <> 'DELETED'"
            " AND ($3::text IS NULL OR s.agent_namespace = $3) AND ($4::text IS NULL OR s.agent_name = $4)"
            " ORDER BY s.creator, s.id LIMIT $5")
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = psycopg.AsyncClientCursor(conn)
        await cur.execute("EXPLAIN (ANALYZE, BUFFERS) SELECT s FROM sessionq.list_sessions(%s, false, NULL, NULL, %s, %s) s",
                          (creator, after, limit))
        out["call"] = [r[0] for r in await cur.fetchall()]
        await cur.execute("SET plan_cache_mode = force_generic_plan")
        await cur.execute(f"PREPARE body(text, uuid, text, text, integer) AS {body}")
        await cur.execute("EXPLAIN (ANALYZE, BUFFERS) EXECUTE body(%s, %s, NULL, NULL, %s)", (creator, after, limit))
        out["generic_plan_of_the_statement"] = [r[0] for r in await cur.fetchall()]
    return out


async def _measure(srv: Server, log_dir: Path, label: str, address: str, method: str, specs: list[str],
                   token: str, meter_pids: dict[str, int], sizes: dict[str, Any]) -> dict[str, Any]:
    """`clients` callers over `client_procs` client processes for `seconds` after `warmup`."""
    req_file = log_dir / f"requests-{label.replace(' ', '_').replace('/', '_')}.json"
    await asyncio.to_thread(req_file.write_text, json.dumps(specs))
    k = int(sizes["client_procs"])
    clients = int(sizes["clients"])
    per = [clients // k + (1 if i < clients % k else 0) for i in range(k)]
    start_at = time.time() + 3.0
    warmup, seconds = float(sizes["warmup"]), float(sizes["seconds"])
    children = []
    for c in per:
        args = bench_module_command("read_client", address, method, str(req_file), "--concurrency", str(c),
                                    "--channels", str(max(1, min(8, c))), "--start-at", str(start_at),
                                    "--warmup", str(warmup), "--seconds", str(seconds), "--token", token)
        children.append(await asyncio.create_subprocess_exec(
            *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=str(Path.cwd()),
            start_new_session=True))
    pids = {**meter_pids, **{f"client-{i}": ch.pid for i, ch in enumerate(children)}}
    await asyncio.sleep(max(0.0, start_at + warmup - time.time()))
    with CpuMeter(srv, pids) as meter:
        await asyncio.sleep(seconds)
    results = []
    for ch in children:
        out, err = await asyncio.wait_for(ch.communicate(), timeout=120)
        if ch.returncode != 0:
            raise RuntimeError(f"read client failed ({ch.returncode}): {err.decode(errors='replace')[-800:]}")
        results.append(json.loads(out))
    calls = sum(r["calls"] for r in results)
    window = max(r["window_seconds"] for r in results)
    latencies = [x for r in results for x in r["latencies"]]
    codes: dict[str, int] = {}
    for r in results:
        for c, n in r["codes"].items():
            codes[c] = codes.get(c, 0) + n
    cpu = meter.result.get("cpu_seconds", {})
    per_call = meter.per_unit_ms(calls)

    def group(prefix: str) -> float | None:
        vals = [v for name, v in per_call.items() if name.startswith(prefix)]
        return round(sum(vals), 3) if vals else None

    out = {"calls": calls, "per_s": round(calls / window, 1) if window > 0 else None, "codes": codes,
           **summary_ms(latencies), "cpu": meter.result, "cpu_ms_per_call": per_call,
           "api_cpu_ms_per_call": group("api"), "pg_cpu_ms_per_call": group("postgres"),
           "client_cpu_ms_per_call": group("client"), "cpu_seconds_total": round(sum(cpu.values()), 2)}
    if set(codes) - {"OK"}:
        say(f"   !! {label}: calls ended with {codes}")
    return out


async def _serve(procs: Procs, url: str, settings: dict[str, Any], name: str,
                 extra_env: dict[str, str] | None = None) -> tuple[str, dict[str, int]]:
    port = free_port()
    # agent cards on a port of their own: the default one may be another program's on a shared machine
    settings = {**settings, "server.httpAddress": f"127.0.0.1:{free_port()}"}
    p = await start_api(procs, url, port, settings, name=name, extra_env=extra_env)
    pids = {"api": p.pid}
    n = int(settings.get("server.processes", 1))
    if n > 1:  # the supervisor and its API processes

        async def all_up() -> bool:
            return len(_children(p.pid)) >= n

        await wait_for(all_up, 60, f"{n} API processes", 0.2, procs)
        pids = {"api supervisor": p.pid, **{f"api-{i}": c for i, c in enumerate(sorted(_children(p.pid)))}}
    return f"127.0.0.1:{port}", pids


async def _coalesce_ab(srv: Server, log_dir: Path, url: str, settings: dict[str, Any], get_ids: list[str],
                       sizes: dict[str, Any]) -> dict[str, Any]:
    """GetSession on one process with database.coalesceReads on and off, beside the bare servicer:
    the three run at once (idle while not measured) and are measured in alternating rounds, so the
    machine's noise falls on all three alike. Per round and in sum: calls/s, p99, and the ratios
    against the bare servicer of the same round."""
    rounds = int(sizes.get("ab_rounds", 3))
    say(f"   coalescing A/B: {rounds} rounds of bare / on / off (load average {os.getloadavg()[0]:.2f})")
    out: dict[str, Any] = {"rounds": [], "load_before": os.getloadavg()}
    async with processes(log_dir / "ab") as procs:
        port = free_port()
        bare = procs.start("bare", bench_module_command("bare_server", str(port)), dict(os.environ))
        targets = {"bare": (f"127.0.0.1:{port}", {"api": bare.pid})}
        one = {**settings, **({"server.processes": 1} if _has_key("server.processes") else {})}
        targets["on"] = await _serve(procs, url, {**one, "database.coalesceReads": True}, "serve-on")
        targets["off"] = await _serve(procs, url, {**one, "database.coalesceReads": False}, "serve-off")
        names = ["bare", "on", "off"]
        if sizes.get("ab_base_src"):  # "base": another checkout's src (the code before a change), coalescing on
            targets["base"] = await _serve(procs, url, {**one, "database.coalesceReads": True}, "serve-base",
                                           {"PYTHONPATH": str(sizes["ab_base_src"])})
            names.append("base")
        procs.check()
        for r in range(rounds):
            order = names if r % 2 == 0 else names[::-1]
            got: dict[str, Any] = {}
            for name in order:
                address, pids = targets[name]
                m = await _measure(srv, log_dir, f"ab-{r}-{name}", address, "get", get_ids, TOKEN, pids, sizes)
                got[name] = {k: m[k] for k in ("per_s", "p50_ms", "p99_ms", "api_cpu_ms_per_call",
                                               "pg_cpu_ms_per_call", "codes")}
            for name in names[1:]:
                got[name]["over_bare_per_s"] = ratio(got[name]["per_s"], got["bare"]["per_s"])
                got[name]["over_bare_p99"] = ratio(got[name]["p99_ms"], got["bare"]["p99_ms"])
            say(f"   round {r}: bare {got['bare']['per_s']}/s p99 {got['bare']['p99_ms']} ms; "
                f"on {got['on']['per_s']}/s p99 {got['on']['p99_ms']} ms ({got['on']['over_bare_per_s']}x, "
                f"p99 {got['on']['over_bare_p99']}x, api {got['on']['api_cpu_ms_per_call']} ms/call); "
                f"off {got['off']['per_s']}/s p99 {got['off']['p99_ms']} ms ({got['off']['over_bare_per_s']}x, "
                f"p99 {got['off']['over_bare_p99']}x, api {got['off']['api_cpu_ms_per_call']} ms/call)"
                + (f"; base {got['base']['per_s']}/s p99 {got['base']['p99_ms']} ms ({got['base']['over_bare_per_s']}x, "
                   f"api {got['base']['api_cpu_ms_per_call']} ms/call)" if "base" in got else ""))
            out["rounds"].append(got)
    out["load_after"] = os.getloadavg()
    for name in names[1:]:
        out[f"{name}_over_bare_per_s"] = ratio(sum(g[name]["per_s"] for g in out["rounds"]),
                                               sum(g["bare"]["per_s"] for g in out["rounds"]))
    out["on_over_off_per_s"] = ratio(sum(g["on"]["per_s"] for g in out["rounds"]),
                                     sum(g["off"]["per_s"] for g in out["rounds"]))
    if "base" in names:
        out["on_over_base_per_s"] = ratio(sum(g["on"]["per_s"] for g in out["rounds"]),
                                          sum(g["base"]["per_s"] for g in out["rounds"]))
    say(f"   coalescing A/B over {rounds} rounds: on {out['on_over_bare_per_s']}x bare, off "
        f"{out['off_over_bare_per_s']}x bare, on/off {out['on_over_off_per_s']}x"
        + (f"; base {out['base_over_bare_per_s']}x bare, on/base {out['on_over_base_per_s']}x" if "base" in names else ""))
    return out


async def run(srv: Server, log_dir: Path, quick: bool, sizes: dict[str, Any] | None = None) -> dict[str, Any]:
    sizes = {
        "clients": 32, "client_procs": 2, "warmup": 1.0 if quick else 2.0, "seconds": 4.0 if quick else 10.0,
        "small": 10_000, "large": 100_000 if quick else 1_000_000, "processes": os.cpu_count() or 2,
        "pool_size": 10, **(sizes or {}),
    }
    log_dir = log_dir / "read"
    say("", f"== read: GetSession and ListSessions (pages of 50) at {sizes['clients']} clients; "
            f"{sizes['small']:,} and {sizes['large']:,} Sessions of one creator ==")
    url = srv.fresh_database("read")
    results: dict[str, Any] = {"sizes": sizes}
    try:
        await setup_agent(url)
        tpl = await template_session(url, "read-template")
        t0 = time.monotonic()

        def bulk() -> None:
            with psycopg.connect(url, autocommit=True) as conn:
                clone_sessions(conn, tpl, int(sizes["small"]) - 1, "read-small")
                left, i = int(sizes["large"]), 0
                while left > 0:  # in batches: one huge transaction is slower and holds more WAL
                    n = min(left, 250_000)
                    clone_sessions(conn, tpl, n, f"read-large-{i}", creator=BIG_USER)
                    left -= n
                    i += 1
                conn.execute("VACUUM ANALYZE sessionq.sessions")

        await asyncio.to_thread(bulk)
        results["bulk_load_seconds"] = round(time.monotonic() - t0, 1)
        say(f"   {sizes['small']:,} + {sizes['large']:,} Sessions loaded in {results['bulk_load_seconds']} s")
        get_ids = await _sample(url, USER, 1000)
        small_pages = ["", *(await _sample(url, USER, 200, tail=60))]
        large_after = await _sample(url, BIG_USER, 200, tail=60)
        large_pages = ["", *large_after]
        from sessionq.api.common import encode_token

        small_tokens = [encode_token(i) if i else "" for i in small_pages]
        large_tokens = [encode_token(i) if i else "" for i in large_pages]
        results["explain_large_page"] = await _explain(url, BIG_USER, large_after[0], 51)

        settings = {"auth.tokens": f"{TOKEN}={USER},{BIG_TOKEN}={BIG_USER}",
                    "database.poolSize": int(sizes["pool_size"])}
        rows: list[list[Any]] = []
        measured: dict[str, Any] = {}

        def show(label: str, m: dict[str, Any]) -> None:
            measured[label] = m
            rows.append([label, m["per_s"], m["p50_ms"], m["p99_ms"], m["api_cpu_ms_per_call"],
                         m["pg_cpu_ms_per_call"], m["client_cpu_ms_per_call"], m["cpu"].get("machine_busy_pct")])
            say(f"   {label}: {m['per_s']} calls/s, p50 {m['p50_ms']} ms, p99 {m['p99_ms']} ms, CPU/call api "
                f"{m['api_cpu_ms_per_call']} ms, postgres {m['pg_cpu_ms_per_call']} ms")

        async with processes(log_dir) as procs:
            port = free_port()
            bare = procs.start("bare", bench_module_command("bare_server", str(port)), dict(os.environ))
            address = f"127.0.0.1:{port}"
            await asyncio.sleep(1.5)
            procs.check()
            show("bare GetSession", await _measure(srv, log_dir, "bare-get", address, "get", get_ids, TOKEN,
                                                   {"api": bare.pid}, sizes))
            show("bare ListSessions", await _measure(srv, log_dir, "bare-list", address, "list", small_tokens, TOKEN,
                                                     {"api": bare.pid}, sizes))
            bare.stop()

        async with processes(log_dir / "one") as procs:
            one = {**settings, **({"server.processes": 1} if _has_key("server.processes") else {})}
            address, pids = await _serve(procs, url, one, "serve-1")
            show("1 process GetSession", await _measure(srv, log_dir, "one-get", address, "get", get_ids, TOKEN,
                                                        pids, sizes))
            show("1 process ListSessions 10k", await _measure(srv, log_dir, "one-list-small", address, "list",
                                                              small_tokens, TOKEN, pids, sizes))
            show("1 process ListSessions large", await _measure(srv, log_dir, "one-list-large", address, "list",
                                                                large_tokens, BIG_TOKEN, pids, sizes))
        if _has_key("database.coalesceReads"):
            results["coalesce_ab"] = await _coalesce_ab(srv, log_dir, url, settings, get_ids, sizes)
        n = int(sizes["processes"])
        if _has_key("server.processes") and n > 1:
            async with processes(log_dir / "many") as procs:
                address, pids = await _serve(procs, url, {**settings, "server.processes": n}, f"serve-{n}")
                show(f"{n} processes GetSession", await _measure(srv, log_dir, "many-get", address, "get", get_ids,
                                                                 TOKEN, pids, sizes))
                show(f"{n} processes ListSessions 10k", await _measure(srv, log_dir, "many-list-small", address,
                                                                       "list", small_tokens, TOKEN, pids, sizes))
        else:
            say("   (server.processes does not exist yet: the N-process rows are skipped)")

        pgb = await asyncio.to_thread(pgbench, srv, seconds=int(sizes["seconds"]), clients=int(sizes["clients"]),
                                      threads=2, select_only=True)
        results["pgbench_select_only"] = pgb
        results["measured"] = measured
        say(table("read (closed loop, calls/s and per-call CPU in ms)",
                  ["call", "calls/s", "p50 ms", "p99 ms", "api cpu", "pg cpu", "client cpu", "busy %"], rows))
        say(f"   pgbench -S, {sizes['clients']} clients: {pgb.get('tps')} tps ({pgb.get('error', 'ok')})")

        bare_get, one_get = measured["bare GetSession"], measured["1 process GetSession"]
        small, large = measured["1 process ListSessions 10k"], measured["1 process ListSessions large"]
        ratios: dict[str, Any] = {
            "get_one_over_bare_per_s": ratio(one_get["per_s"], bare_get["per_s"]),
            "get_one_over_bare_p99": ratio(one_get["p99_ms"], bare_get["p99_ms"]),
            "list_large_over_small_p99": ratio(large["p99_ms"], small["p99_ms"]),
            "list_one_over_bare_per_s": ratio(small["per_s"], measured["bare ListSessions"]["per_s"]),
        }
        many = measured.get(f"{n} processes GetSession")
        if many is not None:
            ratios["get_many_over_one_per_s"] = ratio(many["per_s"], one_get["per_s"])
            ratios["list_many_over_one_per_s"] = ratio(measured[f"{n} processes ListSessions 10k"]["per_s"],
                                                       small["per_s"])
        results["ratios"] = ratios
        targets = {"get_one_over_bare_per_s": (">=", 0.7), "get_one_over_bare_p99": ("<=", 2.0),
                   "get_many_over_one_per_s": (">=", 1.6), "list_large_over_small_p99": ("<=", 1.5)}
        met = {}
        for key, (op, bound) in targets.items():
            v = ratios.get(key)
            met[key] = None if v is None else (v >= bound if op == ">=" else v <= bound)
        results["targets_met"] = met
        say("ratio line: " + "; ".join(
            f"{k} {ratios.get(k)} (target {op} {b}: {'met' if met[k] else 'NOT met' if met[k] is False else '-'})"
            for k, (op, b) in targets.items()))
        plan = "\n".join(results["explain_large_page"]["generic_plan_of_the_statement"])
        # an index range bounded by the page's position: the (creator, id) index, or the primary key
        # filtered by creator when the statistics say the creator owns most rows
        ranged = "Index Cond" in plan and "id >" in plan and "Seq Scan" not in plan and "Sort" not in plan
        results["large_page_reads_an_index_range"] = ranged
        used = "sessions_creator_idx" if "sessions_creator_idx" in plan else "sessions_pkey" if "sessions_pkey" in plan else "?"
        say(f"   ListSessions page of {BIG_USER} (generic plan): "
            f"{f'an index range of {used}' if ranged else 'NOT an index range'}")
        return results
    finally:
        srv.drop(url)


if __name__ == "__main__":  # pragma: no cover - run through `python -m tests.bench --only read`
    sys.exit("run it as: python -m tests.bench --only read")
