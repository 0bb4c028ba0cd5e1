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
- `pgbench -S` (primary-key SELECTs) on the same server with the same number of clients;
- the scaling rounds (`_scaling`): the bare servicer, one process and N processes running at once,
  GetSession measured in alternating order with h2load (`tests.bench.h2load`: a client of a few
  hundredths of a ms of CPU per call, every call checked) and with the Python client, with the
  connections each API process holds, the CPU of each API process's threads, the cores other work
  took meanwhile, and the N/1 ceiling that the machine's cores allow at the measured CPU per call.

Reported: calls/s, p50/p99, the CPU per call of the API processes, of PostgreSQL's backends and of
the clients (from /proc), and the ratios against the issue's targets: GetSession on one process
>= 0.7x the bare servicer's calls/s with p99 <= 2x; N processes >= 1.6x one (also from the scaling
rounds, with h2load when it is installed); the ListSessions
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
    background_load,
    bench_module_command,
    connections_by_process,
    free_port,
    listening_sockets,
    processes,
    ratio,
    say,
    setup_agent,
    start_api,
    summary_ms,
    table,
    thread_cpu_seconds,
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


def _request(method: str, spec: str) -> Any:
    from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2

    if method == "get":
        return sessions_pb2.GetSessionRequest(session_id=spec)
    return sessions_pb2.ListSessionsRequest(page=common_pb2.PageRequest(limit=50, page_token=spec))


async def _answer_bytes(address: str, method: str, request: Any, token: str) -> int:
    """One call through the Python client, which must answer OK: its answer's gRPC frame length."""
    import grpc

    from sessionq._pb.kagent.api.v1alpha1 import sessions_pb2_grpc

    async with grpc.aio.insecure_channel(address) as ch:
        stub = sessions_pb2_grpc.SessionServiceStub(ch)
        call = stub.GetSession if method == "get" else stub.ListSessions
        answer = await call(request, metadata=(("authorization", f"Bearer {token}"),), timeout=30)
    return 5 + len(answer.SerializeToString())


async def _run_h2load(log_dir: Path, label: str, address: str, method: str, specs: list[str], token: str,
                      sizes: dict[str, Any], meter: Any) -> dict[str, Any]:
    """One h2load run of the first request of `specs` (every call the same request), checked before
    and after with the Python client and during by the bytes received (tests/bench/h2load.py)."""
    from tests.bench import h2load

    exe = h2load.binary()
    assert exe is not None
    request = _request(method, specs[0])
    expected = await _answer_bytes(address, method, request, token)
    body = log_dir / f"h2load-{label}.body"
    log_file = log_dir / f"h2load-{label}.log"
    await asyncio.to_thread(body.write_bytes, h2load.grpc_frame(request))
    warmup, seconds = float(sizes["warmup"]), float(sizes["seconds"])
    path = f"/kagent.api.v1alpha1.SessionService/{'GetSession' if method == 'get' else 'ListSessions'}"
    args = h2load.command(exe, address, path, body, token, connections=int(sizes["h2load_connections"]),
                          streams=max(1, int(sizes["clients"]) // int(sizes["h2load_connections"])),
                          seconds=warmup + seconds + 0.5, log_file=log_file)
    child = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE,
                                                 stderr=asyncio.subprocess.PIPE, start_new_session=True)
    await asyncio.sleep(warmup + 0.2)  # h2load connects first: its first request starts the log's clock
    spread = await meter(child.pid)
    out, err = await asyncio.wait_for(child.communicate(), timeout=warmup + seconds + 60)
    if child.returncode != 0:
        raise RuntimeError(f"h2load failed ({child.returncode}): {err.decode(errors='replace')[-800:]}")
    after = await _answer_bytes(address, method, request, token)
    if after != expected:
        raise RuntimeError(f"{label}: the answer changed during the run ({expected} -> {after} bytes)")
    got = h2load.parse(out.decode(errors="replace"), log_file, expected, warmup + 0.2, seconds)
    return {**got, "connections_by_process": spread}


async def _measure(srv: Server, log_dir: Path, label: str, address: str, method: str, specs: list[str],
                   token: str, meter_pids: dict[str, int], sizes: dict[str, Any],
                   client: str = "python") -> dict[str, Any]:
    """`clients` callers for `seconds` after `warmup`: over `client_procs` Python client processes
    (`client` "python"), or h2load's connections (`client` "h2load": the first request of `specs`
    only). The CPU of the named processes, PostgreSQL's backends and the client(s) is metered over
    the window, and how the client's connections landed on the API processes is counted in it."""
    port = int(address.rsplit(":", 1)[1])
    api_pids = {k: v for k, v in meter_pids.items() if k.startswith("api") and k != "api supervisor"}
    meter_box: dict[str, Any] = {}

    async def metered(client_pids: dict[str, int], warm: float) -> dict[str, int]:
        # inside the calls' window by a margin: a client ends with its window, and one reaped before the
        # meter's last look has no CPU to read; calls are scaled to the meter's span below
        pids = {**meter_pids, **client_pids}
        span = max(0.5, float(sizes["seconds"]) - 0.4)
        await asyncio.sleep(warm + 0.1)
        with CpuMeter(srv, pids) as m:
            t0 = time.monotonic()
            threads0 = {k: thread_cpu_seconds(p) for k, p in api_pids.items()}
            await asyncio.sleep(span / 2)
            spread = connections_by_process(port, api_pids)
            await asyncio.sleep(max(0.0, t0 + span - time.monotonic()))
            threads1 = {k: thread_cpu_seconds(p) for k, p in api_pids.items()}
        meter_box["meter"] = m
        wall = max(m.result.get("wall_seconds") or 0.0, 1e-6)
        # cores each API process's main thread (the interpreter) and its other threads used
        meter_box["threads"] = {k: {"main_cores": round((b[0] - a[0]) / wall, 2), "other_cores": round((b[1] - a[1]) / wall, 2)}
                                for k, a in threads0.items() if a is not None and (b := threads1.get(k)) is not None}
        return spread

    if client == "h2load":

        async def h2_meter(pid: int) -> dict[str, int]:
            return await metered({"client-h2load": pid}, 0.0)

        r = await _run_h2load(log_dir, label.replace(" ", "_").replace("/", "_"), address, method, specs, token,
                              sizes, h2_meter)
        calls, window, latencies_ms, codes = r["calls"], r["window_seconds"], r, r["codes"]
        spread, extra = r["connections_by_process"], {"h2load": r["h2load"]}
    else:
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
        spread = await metered({f"client-{i}": ch.pid for i, ch in enumerate(children)},
                               max(0.0, start_at + warmup - time.time()))
        results = []
        for ch in children:
            out, err = await asyncio.wait_for(ch.communicate(), timeout=120)
            if ch.returncode != 0:
                raise RuntimeError(f"read client failed ({ch.returncode}): {err.decode(errors='replace')[-800:]}")
            results.append(json.loads(out))
        calls = sum(r["calls"] for r in results)
        window = max(r["window_seconds"] for r in results)
        latencies_ms = summary_ms([x for r in results for x in r["latencies"]])
        codes = {}
        for r in results:
            for c, n in r["codes"].items():
                codes[c] = codes.get(c, 0) + n
        extra = {}
    meter = meter_box["meter"]
    cpu = meter.result.get("cpu_seconds", {})
    # the calls made while the meter ran: the window's calls at its rate over the meter's span
    metered_calls = round(calls * float(meter.result.get("wall_seconds") or 0.0) / window) if window > 0 else 0
    per_call = meter.per_unit_ms(metered_calls)

    def group(prefix: str) -> float | None:
        vals = [v for name, v in per_call.items() if name.startswith(prefix)]
        return round(sum(vals), 3) if vals else None

    cores = round(sum(cpu.values()) / max(meter.result.get("wall_seconds") or 0.0, 1e-6), 2)
    result: dict[str, Any] = {
           "client": client, "calls": calls, "per_s": round(calls / window, 1) if window > 0 else None,
           "codes": codes, **{k: latencies_ms[k] for k in ("n", "p50_ms", "p90_ms", "p99_ms", "max_ms", "mean_ms")
                              if k in latencies_ms},
           "cpu": meter.result, "cpu_ms_per_call": per_call,
           "api_cpu_ms_per_call": group("api"), "pg_cpu_ms_per_call": group("postgres"),
           "client_cpu_ms_per_call": group("client"), "cpu_seconds_total": round(sum(cpu.values()), 2),
           "connections_by_process": spread, "api_threads": meter_box.get("threads", {}),
           "cpu_ms_per_call_total": round(sum(per_call.values()), 3),
           "others_cores": _others_cores(meter.result), "cores_used": cores, **extra}
    if set(codes) - {"OK"}:
        say(f"   !! {label}: calls ended with {codes}")
    return result


def _others_cores(cpu: dict[str, Any]) -> float | None:
    """Cores the machine spent on other work than the measured processes during a measurement
    (other tenants, the test suite of another session): its busy share less what was metered."""
    busy, wall = cpu.get("machine_busy_pct"), cpu.get("wall_seconds") or 0.0
    if busy is None or wall <= 0:
        return None
    return round(max(0.0, busy / 100.0 * (cpu.get("cpus") or 1) - sum(cpu.get("cpu_seconds", {}).values()) / wall), 2)


async def _quiet(sizes: dict[str, Any]) -> float | None:
    """Wait (up to `quiet_wait` seconds) until other work uses less than `quiet_below_pct` of the
    machine over a second; returns the last busy share seen (the servers of the scenario idle)."""
    deadline = time.monotonic() + float(sizes.get("quiet_wait", 0))
    while True:
        busy = await asyncio.to_thread(background_load, 1.0)
        if busy is None or busy < float(sizes.get("quiet_below_pct", 100)) or time.monotonic() >= deadline:
            return busy
        await asyncio.sleep(2.0)


async def _serve(procs: Procs, url: str, settings: dict[str, Any], name: str,
                 extra_env: dict[str, str] | None = None) -> tuple[str, dict[str, int]]:
    port = free_port()
    p = await start_api(procs, url, port, settings, name=name, extra_env=extra_env)
    pids = {"api": p.pid}
    n = int(settings.get("server.processes", 1))
    if n > 1:  # the supervisor and its API processes, each listening (a client that connects before the
        # last one listens lands every connection on the others: SO_REUSEPORT spreads over listeners)

        async def all_up() -> bool:
            return len(_children(p.pid)) >= n and listening_sockets(port) >= n

        await wait_for(all_up, 60, f"{n} API processes listening", 0.2, procs)
        pids = {"api supervisor": p.pid, **{f"api-{i}": c for i, c in enumerate(sorted(_children(p.pid)))}}
    return f"127.0.0.1:{port}", pids


async def _coalesce_ab(srv: Server, log_dir: Path, url: str, settings: dict[str, Any], get_ids: list[str],
                       sizes: dict[str, Any]) -> dict[str, Any]:
    """GetSession on one process with database.coalesceReads on and off, beside the bare servicer
    and (`ab_floor`, default on) the floor under GetSession: the bare servicer that waits once for
    the event loop ("suspend") and the one that reads its answer from PostgreSQL as GetSession does
    (Store.get_session_view) with no authentication, validation or metrics ("floor"). All run at
    once (idle while not measured) and are measured in alternating rounds (`ab_client`: "python"
    or "h2load"), so the machine's noise falls on all alike. Per round and in sum: calls/s, p99,
    and the ratios against the bare servicer of the same round."""
    rounds = int(sizes.get("ab_rounds", 3))
    say(f"   coalescing A/B: {rounds} rounds of bare / suspend / floor / on / off (load average {os.getloadavg()[0]:.2f})")
    out: dict[str, Any] = {"rounds": [], "load_before": os.getloadavg()}
    async with processes(log_dir / "ab") as procs:
        port = free_port()
        bare = procs.start("bare", bench_module_command("bare_server", str(port)), dict(os.environ))
        targets = {"bare": (f"127.0.0.1:{port}", {"api": bare.pid})}
        one = {**settings, **({"server.processes": 1} if _has_key("server.processes") else {})}
        targets["on"] = await _serve(procs, url, {**one, "database.coalesceReads": True}, "serve-on")
        targets["off"] = await _serve(procs, url, {**one, "database.coalesceReads": False}, "serve-off")
        names = ["bare", "on", "off"]
        if sizes.get("ab_floor", True):
            # the floor under GetSession: the bare servicer waiting once for the event loop ("suspend"),
            # and reading its answer as GetSession does, with none of its checks ("floor")
            for extra, args in (("suspend", ["--suspend"]), ("floor", ["--read", url, "--user", USER])):
                xport = free_port()
                child = procs.start(extra, bench_module_command("bare_server", str(xport), *args), dict(os.environ))
                targets[extra] = (f"127.0.0.1:{xport}", {"api": child.pid})
                await wait_for(lambda p=xport: _listening(p), 30, f"the {extra} servicer", 0.2, procs)
            names[1:1] = ["suspend", "floor"]
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
                m = await _measure(srv, log_dir, f"ab-{r}-{name}", address, "get", get_ids, TOKEN, pids, sizes,
                                   client=str(sizes.get("ab_client", "python")))
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
                + (f"; suspend {got['suspend']['per_s']}/s ({got['suspend']['over_bare_per_s']}x, "
                   f"api {got['suspend']['api_cpu_ms_per_call']} ms/call)" if "suspend" in got else "")
                + (f"; floor {got['floor']['per_s']}/s p99 {got['floor']['p99_ms']} ms ({got['floor']['over_bare_per_s']}x, "
                   f"api {got['floor']['api_cpu_ms_per_call']} ms/call)" if "floor" in got else "")
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
        + (f"; suspend {out['suspend_over_bare_per_s']}x bare" if "suspend" in names else "")
        + (f"; floor {out['floor_over_bare_per_s']}x bare, on/floor "
           f"{ratio(sum(g['on']['per_s'] for g in out['rounds']), sum(g['floor']['per_s'] for g in out['rounds']))}x"
           if "floor" in names else "")
        + (f"; base {out['base_over_bare_per_s']}x bare, on/base {out['on_over_base_per_s']}x" if "base" in names else ""))
    return out


async def _scaling(srv: Server, log_dir: Path, url: str, settings: dict[str, Any], get_ids: list[str],
                   sizes: dict[str, Any]) -> dict[str, Any]:
    """GetSession on the bare servicer, on one API process and on N, with each client (h2load when
    installed, and the Python client): the three servers run at once (idle while not measured) and
    are measured in alternating rounds, so the other tenants' load falls on all alike. Per round and
    in sum: calls/s, p99, CPU per call by process kind, how the connections spread over the API
    processes, and the ratios N / 1 and 1 / bare of the same client."""
    from tests.bench import h2load

    rounds, n = int(sizes.get("scale_rounds", 2)), int(sizes["processes"])
    clients = [c for c in sizes.get("scale_clients", ["h2load", "python"]) if c != "h2load" or h2load.binary()]
    if "h2load" not in clients:
        say("   (h2load is not installed - Debian package nghttp2-client: only the Python client is used)")
    names = ["bare", "one", "many"]
    say(f"   scaling: {rounds} rounds of bare / 1 / {n} processes with {' and '.join(clients)} "
        f"(load average {os.getloadavg()[0]:.2f})")
    out: dict[str, Any] = {"clients": clients, "processes": n, "rounds": [], "load_before": os.getloadavg(),
                           "machine_busy_before_pct": await asyncio.to_thread(background_load, 2.0)}
    async with processes(log_dir / "scaling") as procs:
        port = free_port()
        bare = procs.start("bare", bench_module_command("bare_server", str(port)), dict(os.environ))
        targets = {"bare": (f"127.0.0.1:{port}", {"api": bare.pid})}
        await wait_for(lambda: _listening(port), 30, "the bare servicer", 0.2, procs)
        targets["one"] = await _serve(procs, url, {**settings, "server.processes": 1}, "serve-1")
        targets["many"] = await _serve(procs, url, {**settings, "server.processes": n}, f"serve-{n}")
        procs.check()
        for r in range(rounds):
            got: dict[str, Any] = {}
            for client in clients:
                order = names if r % 2 == 0 else names[::-1]
                row: dict[str, Any] = {}
                for name in order:
                    address, pids = targets[name]
                    busy_before = await _quiet(sizes)
                    m = await _measure(srv, log_dir, f"scale-{r}-{name}-{client}", address, "get", get_ids, TOKEN,
                                       pids, sizes, client=client)
                    row[name] = {k: m.get(k) for k in ("per_s", "p50_ms", "p99_ms", "api_cpu_ms_per_call",
                                                       "pg_cpu_ms_per_call", "client_cpu_ms_per_call", "codes",
                                                       "connections_by_process", "api_threads", "cores_used",
                                                       "cpu_ms_per_call_total")}
                    row[name]["api_cpu_ms_per_call_by_process"] = {
                        k: v for k, v in m["cpu_ms_per_call"].items() if k.startswith("api")}
                    row[name]["machine_busy_pct"] = m["cpu"].get("machine_busy_pct")
                    row[name]["others_cores"] = m["others_cores"]
                    row[name]["machine_busy_before_pct"] = busy_before
                row["one_over_bare_per_s"] = ratio(row["one"]["per_s"], row["bare"]["per_s"])
                row["many_over_one_per_s"] = ratio(row["many"]["per_s"], row["one"]["per_s"])
                row["many_over_one_ceiling"] = _ceiling(row["one"], row["many"], n)
                say(f"   round {r} ({client}): bare {row['bare']['per_s']}/s, 1 process {row['one']['per_s']}/s "
                    f"({row['one_over_bare_per_s']}x bare), {n} processes {row['many']['per_s']}/s "
                    f"({row['many_over_one_per_s']}x, ceiling {row['many_over_one_ceiling']}x; connections "
                    f"{row['many']['connections_by_process']}; cores used: 1 process {row['one']['cores_used']}, "
                    f"threads {row['one']['api_threads']}); "
                    f"CPU ms/call api/pg/client: 1 process {row['one']['api_cpu_ms_per_call']}/"
                    f"{row['one']['pg_cpu_ms_per_call']}/{row['one']['client_cpu_ms_per_call']}, {n} processes "
                    f"{row['many']['api_cpu_ms_per_call']}/{row['many']['pg_cpu_ms_per_call']}/"
                    f"{row['many']['client_cpu_ms_per_call']}; cores taken by other work during bare/1/N: "
                    f"{row['bare']['others_cores']}/{row['one']['others_cores']}/{row['many']['others_cores']}")
                got[client] = row
            out["rounds"].append(got)
    out["load_after"] = os.getloadavg()
    for client in clients:
        def total(name: str, c: str = client) -> float:
            return sum(g[c][name]["per_s"] or 0 for g in out["rounds"])

        ceilings = [g[client]["many_over_one_ceiling"] for g in out["rounds"] if g[client]["many_over_one_ceiling"]]
        out[client] = {"one_over_bare_per_s": ratio(total("one"), total("bare")),
                       "many_over_one_ceiling_median": sorted(ceilings)[len(ceilings) // 2] if ceilings else None,
                       "many_over_one_per_s": ratio(total("many"), total("one")),
                       "many_over_bare_per_s": ratio(total("many"), total("bare"))}
        say(f"   scaling over {rounds} rounds ({client}): 1 process {out[client]['one_over_bare_per_s']}x bare, "
            f"{n} processes {out[client]['many_over_one_per_s']}x 1 process (ceiling from CPU per call: "
            f"{out[client]['many_over_one_ceiling_median']}x)")
    return out


def _ceiling(one: dict[str, Any], many: dict[str, Any], n: int) -> float | None:
    """The most N processes could answer over what one process answered: N processes share the
    machine's cores with PostgreSQL and the client, so they answer at most cpus / T calls/s (T: all
    CPU per call of the N run - every thread of the API processes, PostgreSQL's backends, the
    client, this process). Ceiling = min(N, cpus / (T x one process's calls/s)). It holds when no
    other work takes cores during the N run (`others_cores`), and says something about the code
    when the one-process run was bound by its own interpreter (its main thread near one core,
    `api_threads`), not by a machine that other work kept busy."""
    rate, total = one.get("per_s"), many.get("cpu_ms_per_call_total")
    if not rate or not total:
        return None
    return round(min(float(n), (os.cpu_count() or 1) * 1000.0 / total / rate), 2)


async def _listening(port: int) -> bool:
    return listening_sockets(port) >= 1


async def run(srv: Server, log_dir: Path, quick: bool, sizes: dict[str, Any] | None = None) -> dict[str, Any]:
    sizes = {
        "clients": 32, "client_procs": 2, "warmup": 1.0 if quick else 2.0, "seconds": 4.0 if quick else 10.0,
        "small": 10_000, "large": 100_000 if quick else 1_000_000, "processes": os.cpu_count() or 2,
        "pool_size": 10, "h2load_connections": 32, "scale_rounds": 2 if quick else 3, **(sizes or {}),
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
        from sessionq.api.paging import encode_token

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
            if int(sizes.get("scale_rounds", 2)) > 0:
                results["scaling"] = await _scaling(srv, log_dir, url, settings, get_ids, sizes)
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
        ab = results.get("coalesce_ab") or {}
        for key in ("suspend_over_bare_per_s", "floor_over_bare_per_s", "on_over_bare_per_s"):
            if key in ab:  # the floor under GetSession, from the alternating A/B rounds (no target)
                ratios[f"ab_{key}"] = ab[key]
        if "floor_over_bare_per_s" in ab:
            ratios["ab_get_over_floor_per_s"] = ratio(ab["on_over_bare_per_s"], ab["floor_over_bare_per_s"])
        targets = {"get_one_over_bare_per_s": (">=", 0.7), "get_one_over_bare_p99": ("<=", 2.0),
                   "get_many_over_one_per_s": (">=", 1.6), "list_large_over_small_p99": ("<=", 1.5)}
        scaling = results.get("scaling")
        if scaling:  # the alternating rounds: the fairer measure of both calls/s ratios
            for client in scaling["clients"]:
                ratios[f"scaling_{client}_get_one_over_bare_per_s"] = scaling[client]["one_over_bare_per_s"]
                ratios[f"scaling_{client}_get_many_over_one_per_s"] = scaling[client]["many_over_one_per_s"]
            best = "h2load" if "h2load" in scaling["clients"] else "python"
            targets = {f"scaling_{best}_get_one_over_bare_per_s": (">=", 0.7), **targets,
                       f"scaling_{best}_get_many_over_one_per_s": (">=", 1.6)}
        results["ratios"] = ratios
        met = {}
        for key, (op, bound) in targets.items():
            v = ratios.get(key)
            met[key] = None if v is None else (v >= bound if op == ">=" else v <= bound)
        results["targets_met"] = met
        if "ab_get_over_floor_per_s" in ratios:
            say(f"floor line (A/B rounds): suspend {ratios.get('ab_suspend_over_bare_per_s')}x bare, floor "
                f"{ratios['ab_floor_over_bare_per_s']}x bare, GetSession {ratios['ab_on_over_bare_per_s']}x bare = "
                f"{ratios['ab_get_over_floor_per_s']}x the floor")
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
