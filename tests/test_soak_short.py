"""The short variant of the fault and soak harness (tests/soak): about 45 s of mixed load from 16
clients on 2 API and 2 worker processes, with kill -9s, runtime faults and a PostgreSQL restart,
fixed seed; no invariant may be violated. `make soak DURATION=30m` runs the long one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_short_soak_has_no_invariant_violations(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "tests.soak", "--duration", "45s", "--seed", "7", "--settle", "90s",
               "--out", str(tmp_path / "run"), "--report", str(report), "--quiet"]
    admin_url = os.environ.get("SESSIONQ_TEST_DATABASE_URL")
    if admin_url:  # the suite's other server: a fresh database on it (no restart: connections are cut)
        command += ["--database-url", admin_url]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = proc.communicate(timeout=540)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # the harness stops every process it started
        output, _ = proc.communicate(timeout=60)
        pytest.fail(f"the soak harness did not finish in time:\n{output[-5000:]}")
    assert report.exists(), f"the soak harness failed (exit {proc.returncode}):\n{output[-5000:]}"
    result = json.loads(report.read_text())
    assert result["violations"] == [], output[-8000:]
    assert proc.returncode == 0, output[-5000:]
    ok = sum(n for outcomes in result["operations"].values() for code, n in outcomes.items() if code == "OK")
    assert ok > 100, output[-5000:]  # the load really ran
    assert result["faults"].get("postgresql restart") == 1, output[-5000:]
