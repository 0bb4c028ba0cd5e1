"""Where a read's CPU goes in the API process: cProfile of GetSession and ListSessions under load.

    python -m tests.bench.profile_read [--seconds 8] [--clients 32] [--method get|list] [--top 40]

Starts the embedded PostgreSQL, builds the schema, loads 10,000 Sessions of one creator, runs the
API server in this process (the same ApiServer and Store as `sessionq serve`) under cProfile and
calls it from `tests.bench.read_client` in another process; prints the functions by their own
time and by cumulative time. A tool for the `read` scenario's work (issue 23), not a benchmark.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from tests.bench.bulk import clone_sessions, template_session
from tests.bench.common import TOKEN, USER, bench_module_command, server, setup_agent


async def main(a: argparse.Namespace) -> None:
    import uvloop  # noqa: F401 - the same loop as serve (set by the caller)

    from sessionq import config
    from sessionq.api.paging import encode_token
    from sessionq.api.server import ApiServer
    from sessionq.db.store import Store

    with server(None) as srv:
        await asyncio.to_thread(srv.build_template)
        url = srv.fresh_database("profile")
        await setup_agent(url)
        tpl = await template_session(url, "profile-template")
        with psycopg.connect(url, autocommit=True) as conn:
            clone_sessions(conn, tpl, 9_999, "profile")
            conn.execute("VACUUM ANALYZE sessionq.sessions")
            ids = [r[0] for r in conn.execute(
                "SELECT id::text FROM sessionq.sessions WHERE creator = %s ORDER BY random() LIMIT 1000", (USER,))]
        specs = ids if a.method == "get" else ["", *(encode_token(i) for i in ids[:200])]
        settings = config.defaults().with_overrides(**{"auth.tokens": {TOKEN: USER}})
        store = await Store.open(url, pool_size=10)
        api = ApiServer(settings, store, address="127.0.0.1:0")
        await api.start()
        req = Path(tempfile.mkdtemp()) / "requests.json"
        req.write_text(json.dumps(specs))
        client = subprocess.Popen(  # noqa: ASYNC220 - started once, before the profiled window
            bench_module_command("read_client", f"127.0.0.1:{api.port}", a.method, str(req), "--concurrency",
                                 str(a.clients), "--start-at", str(time.time() + 2), "--warmup", "1",
                                 "--seconds", str(a.seconds), "--token", TOKEN), stdout=subprocess.PIPE)
        await asyncio.sleep(3)
        prof = cProfile.Profile()
        if not a.cpu_only:
            prof.enable()
        cpu0 = time.process_time()
        # read while it runs: its answer (every latency) is larger than a pipe's buffer
        stdout, _ = await asyncio.to_thread(client.communicate)
        cpu = time.process_time() - cpu0
        prof.disable()
        out = json.loads(stdout or b"{}")
        calls = int(out.get("calls") or 0)
        # the process's CPU from about the end of the client's warmup (3 s after its start-at - 2 s,
        # + 1 s warmup) to its exit, over the calls of its window
        print(f"{a.method}: {calls} calls in {out.get('window_seconds', 0):.1f} s, codes {out.get('codes')}, "
              f"API CPU {cpu:.2f} s ({1000 * cpu / max(calls, 1):.3f} ms per call{'' if a.cpu_only else ', profiled'})")
        if a.cpu_only:
            await api.stop(0)
            await store.close()
            return
        await api.stop(0)
        await store.close()
        if a.dump:
            prof.dump_stats(a.dump)
        for key in ("tottime", "cumulative"):
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats(key).print_stats(a.top)
            print(s.getvalue())


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--method", choices=("get", "list"), default="get")
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--dump", default="", help="also write the raw profile here (pstats)")
    p.add_argument("--cpu-only", action="store_true", help="no profiler: the API process's CPU per call only")
    args = p.parse_args()
    import uvloop

    uvloop.run(main(args))
    sys.exit(0)
