"""Scenario `failover`: the failover harness (`make failover`, tests/soak/formation.py) as a benchmark.

A pg_auto_failover formation on loopback (monitor, primary, synchronous standby), 2 `sessionq serve`
and 2 `sessionq worker` processes on the multi-host URL with target_session_attrs=read-write, the
soak's 16 clients of mixed load; the primary node is killed (SIGKILL of its postmaster and keeper),
the standby promoted, the old primary rejoins, and the new primary is killed in turn. Reported for
each failover: the promotion time, the time from the kill to the first successful call begun after
it and to a 3-s window at 90 % of the throughput of the 10 s before (the baseline, same run), and the
invariant violations (must be 0). It does not use the benchmark's PostgreSQL: the formation is its
own. Skipped (reported as such) when pg_auto_failover is not installed.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.bench.common import Server, say, table


async def run(srv: Server, log_dir: Path, quick: bool, sizes: dict[str, Any] | None = None) -> dict[str, Any]:
    from tests.soak.formation import available

    sizes = {"seconds": 90 if quick else 150, "seed": 5, **(sizes or {})}
    say("", "== failover: two failovers of a pg_auto_failover formation under the soak's mixed load ==")
    why = available()
    if why:
        say(f"skipped: {why}")
        return {"skipped": why}
    out = Path(tempfile.mkdtemp(prefix="sessionq-bench-failover-"))
    report = out / "report.json"
    command = [sys.executable, "-m", "tests.soak", "--failover", "--duration", f"{sizes['seconds']}s",
               "--seed", str(sizes["seed"]), "--settle", "90s", "--out", str(out / "run"), "--report", str(report),
               "--quiet"]
    proc = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True,
                                   timeout=float(sizes["seconds"]) + 600, check=False)
    (log_dir / "failover").mkdir(parents=True, exist_ok=True)
    (log_dir / "failover" / "harness.log").write_text(proc.stdout + proc.stderr)
    if not report.exists():
        raise RuntimeError(f"the failover harness failed (exit {proc.returncode}): {(proc.stdout + proc.stderr)[-1500:]}")
    r = json.loads(report.read_text())
    events = []
    for ev, fo in zip(r["throughput"]["restarts"], r["failover"]["failovers"], strict=False):
        events.append({"killed": fo["killed"], "promoted": fo["promoted"], "promoted_after_s": fo["promoted_after_s"],
                       "baseline_ops_per_s": ev["baseline_ops_per_s"],
                       "first_ok_after_kill_s": ev["first_ok_after_down_s"],
                       "to_90pct_after_kill_s": ev["full_throughput_after_down_s"]})
    result = {"sizes": sizes, "failovers": events, "violations": len(r["violations"]),
              "mean_ops_per_s": r["throughput"]["mean_ops_per_s"], "listeners": r["failover"]["listeners"],
              "leaders": r["failover"]["leaders"], "out": str(out)}
    say(table("failover", ["killed", "promoted", "promotion s", "baseline ops/s", "first ok s", "90% s"],
              [[e["killed"], e["promoted"], e["promoted_after_s"], e["baseline_ops_per_s"], e["first_ok_after_kill_s"],
                e["to_90pct_after_kill_s"]] for e in events]))
    say(f"ratio line: after each kill, first success {[e['first_ok_after_kill_s'] for e in events]} s and 90 % of"
        f" the baseline throughput {[e['to_90pct_after_kill_s'] for e in events]} s later (promotion"
        f" {[e['promoted_after_s'] for e in events]} s); {len(r['violations'])} invariant violations")
    return result
