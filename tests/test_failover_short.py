"""The short variant of the failover harness (`make failover`; tests/soak/formation.py): 90 s of the
soak's mixed load on a pg_auto_failover formation on loopback (a monitor, a primary and a synchronous
standby; 2 API and 2 worker processes on a multi-host URL with target_session_attrs=read-write); the
primary node is killed (SIGKILL of its postmaster and keeper), the standby promoted, the old primary
rejoins as the standby, and the new primary is killed in turn. Nothing acknowledged may be lost, no
runtime mutation issued twice for a generation, nothing left pending; LISTEN connections and the
leader-only work must be back on the new primary (HA-3). Skipped when the packages are missing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _unavailable() -> str | None:
    from soak.formation import available

    return available()


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.clause("HA-3")
@pytest.mark.failover
def test_two_failovers_lose_nothing(tmp_path: Path) -> None:
    why = _unavailable()
    if why:
        pytest.skip(f"no pg_auto_failover formation here: {why}")
    if os.environ.get("SESSIONQ_TEST_DATABASE_URL"):
        # the formation is its own PostgreSQL 15: a run of the suite on another server would repeat it as is
        pytest.skip("the failover harness builds its own PostgreSQL; `make test-failover` runs it")
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "tests.soak", "--failover", "--duration", "90s", "--seed", "5",
               "--settle", "90s", "--out", str(tmp_path / "run"), "--report", str(report), "--quiet"]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = proc.communicate(timeout=840)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # the harness stops every process and the formation
        output, _ = proc.communicate(timeout=90)
        pytest.fail(f"the failover harness did not finish in time:\n{output[-5000:]}")
    assert report.exists(), f"the failover harness failed (exit {proc.returncode}):\n{output[-5000:]}"
    result = json.loads(report.read_text())
    assert result["violations"] == [], output[-8000:]
    assert proc.returncode == 0, output[-5000:]
    failovers = result["failover"]["failovers"]
    assert len(failovers) == 2, output[-5000:]
    # the second failover went back to the first node: the old primary had rejoined as the standby
    assert failovers[0]["killed"] == failovers[1]["promoted"], failovers
    for event in result["throughput"]["restarts"]:
        assert event["first_ok_after_down_s"] is not None, event  # calls succeed again after each failover
    ok = sum(n for outcomes in result["operations"].values() for code, n in outcomes.items() if code == "OK")
    assert ok > 200, output[-5000:]
