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

REPO = Path(__file__).resolve().parents[1]
TINY = {"create": {"seconds": 1, "warmup": 0.2, "levels": [1, 4], "pgbench_seconds": 1, "census_seconds": 0}}


def test_bench_quick_create_writes_well_formed_results(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "-m", "tests.bench", "--quick", "--only", "create", "--sizes", json.dumps(TINY),
           "--out", str(out)]
    if os.environ.get("SESSIONQ_TEST_DATABASE_URL"):  # the suite's other server (make test-pg15)
        cmd += ["--database-url", os.environ["SESSIONQ_TEST_DATABASE_URL"]]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=150)
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
