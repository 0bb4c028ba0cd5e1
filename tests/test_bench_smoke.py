"""`make bench` smoke test: the create scenario with tiny sizes produces well-formed results.

No timing assertions (machines are noisy): only that the benchmark runs end to end, stops by
itself, and writes numbers and ratios that are present and consistent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TINY = {"create": {"seconds": 1.5, "warmup": 0.1, "levels": [1, 4], "pgbench_seconds": 1, "census_seconds": 0}}


@pytest.mark.slow
def test_bench_quick_create_writes_well_formed_results(tmp_path: Path, pg_admin_url: str) -> None:
    """Runs `python -m tests.bench --quick --only create` with tiny sizes on the suite's server
    (the benchmark creates and drops its own sq_bench_* databases there)."""
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "-m", "tests.bench", "--quick", "--only", "create", "--sizes", json.dumps(TINY),
           "--out", str(out), "--database-url", pg_admin_url]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONQ_")}
    before = _bench_databases(pg_admin_url)  # an earlier run's leftovers (a benchmark killed by hand) are not this one's
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=150)
    assert r.returncode == 0, f"stdout:\n{r.stdout[-4000:]}\nstderr:\n{r.stderr[-4000:]}"

    data = json.loads(out.read_text())
    assert data["errors"] == {}
    assert data["meta"]["mode"] == "quick" and data["meta"]["postgres"]["server_version"]
    create = data["scenarios"]["create"]
    tps = create["pgbench"]["tps"]
    assert isinstance(tps, float) and tps > 0, create["pgbench"]
    levels = {lv["clients"]: lv for lv in create["levels"]}
    assert set(levels) == {1, 4}
    for lv in levels.values():
        assert lv["creations"] > 0 and lv["creations_per_s"] > 0 and not lv["errors"], lv
        assert 0 < lv["p50_ms"] <= lv["p99_ms"] <= lv["max_ms"], lv
        assert lv["ratio_to_pgbench_tps"] == round(lv["creations_per_s"] / tps, 3)
        assert lv["cpu"]["wall_seconds"] > 0
    assert isinstance(create["target"]["met"], bool)
    # the printed table and the ratio line
    assert "creations/s" in r.stdout and "ratio line: create@4" in r.stdout
    # it cleaned up after itself
    left = _bench_databases(pg_admin_url) - before
    assert not left, left


def _bench_databases(url: str) -> set[str]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return {name for (name,) in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'sq_bench%'")}


async def test_pgqueuer_baseline_measures_its_own_jobs(tmp_path: Path, database_url: str) -> None:
    """The PgQueuer baseline of `burst` and `wake` (its worker in its own process, its schema in the
    scenario's database) runs its jobs and reports throughput and enqueue -> pick latency from its
    own log rows: every job enqueued is counted, none left queued."""
    import psycopg

    from tests.bench import baselines
    from tests.bench.common import processes

    async with processes(tmp_path) as procs:
        await baselines.start_pgqueuer_worker(procs, database_url, batch=10)
        thr = await baselines.pgqueuer_throughput(database_url, jobs=200)
        lat = await baselines.pgqueuer_job_start_latency(database_url, rate=40, seconds=0.5)
    assert thr["jobs"] == 200 and thr["seconds"] > 0 and thr["jobs_per_s"] > 0, thr
    assert lat["jobs"] == 20 and lat["n"] == 20, lat
    assert 0 <= lat["p50_ms"] <= lat["p99_ms"] <= lat["max_ms"], lat
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pgqueuer").fetchone() == (0,)
        done = conn.execute("SELECT count(DISTINCT job_id) FROM pgqueuer_log WHERE status = 'successful'").fetchone()
    assert done == (221,), done  # the start-up job, 200 and 20
