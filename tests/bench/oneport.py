"""The `oneport` scenario: what the one-port front (sessionq.oneport) costs native gRPC.

The same grpcio servicer twice, at once, in alternating rounds: listening alone on TCP, and
behind the front on the same kind of TCP port (grpcio on a private unix socket, the connection
piped). Two servicers (`tests/bench/bare_server.py`): the bare one (a constant Session: the
strictest measure, the routing's cost against the cheapest handler) and the floor one (reads its
Session from PostgreSQL as GetSession does). GetSession calls/s with h2load (32 connections x 1
stream, when `nghttp2-client` is installed) else the Python client (`read_client.py`); the ratio
is front / alone of the same round, and the median of the rounds is reported.

Target: >= 0.9x. Then gRPC-Web: the same unary GetSession as `application/grpc-web+proto` over
HTTP/1.1 (h2load --h1, 32 connections) to the bare servicer behind the front (api/grpcweb.py makes
each call native to the same grpcio), against native gRPC through the same port in the same
round: target >= 0.5x; and the same over HTTP/2 (h2c prior knowledge, h2load; reported, no
target). The MCP invoke_agent turn against A2A JSON-RPC is measured by scenario `a2a`, beside
its other kinds of turn.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from tests.bench.bulk import template_session
from tests.bench.common import (
    TOKEN,
    USER,
    Server,
    bench_module_command,
    free_port,
    processes,
    ratio,
    say,
    setup_agent,
    table,
    wait_for,
)
from tests.bench.read import _run_h2load, _sample

TARGET = 0.9
WEB_TARGET = 0.5


async def _python_client(log_dir: Path, label: str, address: str, session_id: str, sizes: dict[str, Any]) -> dict[str, Any]:
    """calls/s of the Python client (read_client.py) when h2load is missing."""
    requests = log_dir / f"{label}.json"
    requests.write_text(json.dumps([session_id]))
    args = [sys.executable, "-m", "tests.bench.read_client", address, "get", str(requests),
            "--concurrency", str(sizes["clients"]), "--start-at", str(time.time() + 1),
            "--warmup", str(sizes["warmup"]), "--seconds", str(sizes["seconds"]), "--channels", "8",
            "--token", TOKEN]
    child = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await child.communicate()
    if child.returncode != 0:
        raise RuntimeError(f"read_client failed: {err.decode(errors='replace')[-500:]}")
    got = json.loads(out)
    return {"calls": got["calls"], "window_seconds": got["seconds"]}


async def _grpc_web(log_dir: Path, label: str, address: str, session_id: str, sizes: dict[str, Any],
                    http2: bool = False) -> float:
    """gRPC-Web unary GetSession calls/s over HTTP/1.1 with h2load --h1, or over HTTP/2 (h2c prior
    knowledge, 1 stream a connection) with `http2` (every answer 200 with a body:
    h2load's succeeded count; a gRPC error would still be 200, so one call is checked first)."""
    from sessionq._pb.kagent.api.v1alpha1 import sessions_pb2
    from tests.bench import h2load

    exe = h2load.binary()
    assert exe is not None
    body = log_dir / f"{label}.body"
    body.write_bytes(h2load.grpc_frame(sessions_pb2.GetSessionRequest(session_id=session_id)))
    check = await asyncio.create_subprocess_exec(
        "curl", "-s", "-D", "-", "-o", "/dev/null", "-H", "content-type: application/grpc-web+proto",
        "--data-binary", f"@{body}", f"http://{address}/kagent.api.v1alpha1.SessionService/GetSession",
        stdout=asyncio.subprocess.PIPE)
    head, _ = await check.communicate()
    if b"grpc-status" in head.lower():  # trailers-only: an error
        raise RuntimeError(f"gRPC-Web GetSession failed: {head.decode(errors='replace')[:300]}")
    seconds = float(sizes["seconds"])
    child = await asyncio.create_subprocess_exec(
        exe, *([] if http2 else ["--h1"]), "-D", f"{round(seconds * 1000)}ms", "-c", str(sizes["h2load_connections"]), "-t", "1",
        "-H", "content-type: application/grpc-web+proto", "-H", f"authorization: Bearer {TOKEN}", "-d", str(body),
        f"http://{address}/kagent.api.v1alpha1.SessionService/GetSession",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await child.communicate()
    m = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded", out.decode())
    if child.returncode != 0 or m is None:
        raise RuntimeError(f"h2load --h1 failed: {(out + err).decode(errors='replace')[-500:]}")
    return int(m.group(1)) / seconds


async def _listening(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    return True


async def run(srv: Server, log_dir: Path, quick: bool, sizes: dict[str, Any] | None = None) -> dict[str, Any]:
    from tests.bench import h2load

    sizes = {"clients": 32, "h2load_connections": 32, "warmup": 1.0, "seconds": 3.0 if quick else 8.0,
             "rounds": 3 if quick else 5, **(sizes or {})}
    log_dir = log_dir / "oneport"
    log_dir.mkdir(parents=True, exist_ok=True)
    use_h2load = h2load.binary() is not None
    say("", f"== oneport: GetSession through the one-port front vs grpcio alone, {sizes['rounds']} alternating "
            f"rounds ({'h2load' if use_h2load else 'Python client'}) ==")
    url = srv.fresh_database("oneport")
    await setup_agent(url)
    await template_session(url, "oneport-template")
    session_id = (await _sample(url, USER, 1))[0]
    results: dict[str, Any] = {"sizes": sizes, "client": "h2load" if use_h2load else "python"}
    async with processes(log_dir) as procs:
        servers: dict[str, str] = {}
        for kind, extra in (("bare", []), ("floor", ["--read", url, "--user", USER])):
            for where in ("alone", "oneport"):
                port = free_port()
                args = [str(port), *extra, *(["--oneport"] if where == "oneport" else [])]
                procs.start(f"{kind}-{where}", bench_module_command("bare_server", *args), dict(os.environ))
                await wait_for(lambda p=port: _listening(p), 60, f"{kind}-{where} listening", 0.2, procs)
                servers[f"{kind}-{where}"] = f"127.0.0.1:{port}"

        async def no_meter(pid: int) -> dict[str, int]:
            return {}

        per_s: dict[str, list[float]] = {k: [] for k in servers}
        ratios: dict[str, list[float]] = {"bare": [], "floor": []}
        for r in range(int(sizes["rounds"])):
            for kind in ("bare", "floor"):
                order = ("alone", "oneport") if r % 2 == 0 else ("oneport", "alone")
                got: dict[str, float] = {}
                for where in order:
                    label = f"{kind}-{where}"
                    if use_h2load:
                        m = await _run_h2load(log_dir, f"{label}-{r}", servers[label], "get", [session_id], TOKEN,
                                              sizes, no_meter)
                    else:
                        m = await _python_client(log_dir, f"{label}-{r}", servers[label], session_id, sizes)
                    got[where] = m["calls"] / m["window_seconds"]
                    per_s[label].append(round(got[where], 1))
                ratios[kind].append(got["oneport"] / got["alone"])
                if kind == "bare" and use_h2load:  # gRPC-Web through the same port, beside native
                    web = await _grpc_web(log_dir, f"grpcweb-{r}", servers["bare-oneport"], session_id, sizes)
                    per_s.setdefault("bare-grpcweb", []).append(round(web, 1))
                    ratios.setdefault("grpcweb", []).append(web / got["oneport"])
                    web2 = await _grpc_web(log_dir, f"grpcweb-h2-{r}", servers["bare-oneport"], session_id, sizes, True)
                    per_s.setdefault("bare-grpcweb-h2", []).append(round(web2, 1))
                    ratios.setdefault("grpcweb_h2", []).append(web2 / got["oneport"])
    rows = []
    for kind in ("bare", "floor"):
        median = round(statistics.median(ratios[kind]), 3)
        results[kind] = {"alone_calls_per_s": per_s[f"{kind}-alone"], "oneport_calls_per_s": per_s[f"{kind}-oneport"],
                         "ratios": [round(x, 3) for x in ratios[kind]], "median_ratio": median,
                         "target": TARGET, "met": median >= TARGET}
        rows.append([kind, statistics.median(per_s[f"{kind}-alone"]), statistics.median(per_s[f"{kind}-oneport"]),
                     median])
    say(table("GetSession calls/s (median of the rounds)", ["servicer", "grpcio alone", "through the one port",
                                                           "ratio (median of rounds)"], rows))
    web_line = "gRPC-Web not measured (needs h2load)"
    if ratios.get("grpcweb"):
        web_median = round(statistics.median(ratios["grpcweb"]), 3)
        results["grpcweb"] = {"calls_per_s": per_s["bare-grpcweb"], "ratios": [round(x, 3) for x in ratios["grpcweb"]],
                              "median_ratio": web_median, "target": WEB_TARGET, "met": web_median >= WEB_TARGET}
        web2_median = round(statistics.median(ratios["grpcweb_h2"]), 3)
        results["grpcweb_h2"] = {"calls_per_s": per_s["bare-grpcweb-h2"],
                                 "ratios": [round(x, 3) for x in ratios["grpcweb_h2"]], "median_ratio": web2_median}
        web_line = (f"gRPC-Web unary / native through the port {web_median}x over HTTP/1.1 (target >= {WEB_TARGET}x: "
                    f"{'met' if web_median >= WEB_TARGET else 'NOT met'}), {web2_median}x over HTTP/2 (h2c)")
    say(f"ratio line: one port / grpcio alone, bare {results['bare']['median_ratio']}x, floor "
        f"{results['floor']['median_ratio']}x (target >= {TARGET}x: "
        f"{'met' if results['bare']['met'] and results['floor']['met'] else 'NOT met'}); {web_line}; "
        f"MCP invoke_agent vs A2A JSON-RPC: scenario a2a")
    results["ratio"] = ratio(statistics.median(per_s["bare-oneport"]), statistics.median(per_s["bare-alone"]))
    return results
