"""The short variant of the fault and soak harness (tests/soak): about 45 s of mixed load from 16
clients on 2 API and 2 worker processes, with kill -9s, runtime faults and a PostgreSQL restart,
fixed seed; no invariant may be violated. `make soak DURATION=30m` runs the long one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import UTC
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.serial
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


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.clause("HA-1")
@pytest.mark.clause("HA-2")
@pytest.mark.serial
def test_short_soak_through_pgbouncer_has_no_invariant_violations(tmp_path: Path) -> None:
    """The same harness with every process's database.url through a real PgBouncer in transaction mode
    (database.directUrl: the server), PostgreSQL restarted behind it."""
    import pgbouncer

    why = pgbouncer.available()
    if why:
        pytest.skip(why)
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "tests.soak", "--duration", "40s", "--seed", "11", "--settle", "90s",
               "--pooler", "pgbouncer", "--out", str(tmp_path / "run"), "--report", str(report), "--quiet"]
    admin_url = os.environ.get("SESSIONQ_TEST_DATABASE_URL")
    if admin_url:
        command += ["--database-url", admin_url]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = proc.communicate(timeout=540)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
        pytest.fail(f"the soak harness did not finish in time:\n{output[-5000:]}")
    assert report.exists(), f"the soak harness failed (exit {proc.returncode}):\n{output[-5000:]}"
    result = json.loads(report.read_text())
    assert result["database"].endswith("via pgbouncer")
    assert result["violations"] == [], output[-8000:]
    assert proc.returncode == 0, output[-5000:]
    ok = sum(n for outcomes in result["operations"].values() for code, n in outcomes.items() if code == "OK")
    assert ok > 100, output[-5000:]


def test_soak_checks_detect_violations(tmp_path: Path) -> None:
    """The final checks are not vacuous: synthetic histories with known violations are caught,
    a clean one is not (no cluster needed)."""
    from datetime import datetime, timedelta

    from soak.checks import final_checks
    from soak.history import History

    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def at(s: float) -> datetime:
        return t0 + timedelta(seconds=s)

    def session(sid: str, state: str, uid: str | None, **kw: object) -> dict:
        row = {"id": sid, "state": state, "operation": "NONE", "operation_id": "g", "executor_id": None,
               "executor_expires_at": None, "claim_expired": None, "actor_atespace": "kagent",
               "actor_name": f"session-{sid}", "actor_uid": uid, "idle_executor": None, "idle_claimed_at": None,
               "idle_boundary_id": None, "idle_boundary_at": None, "dispatch_id": None, "dispatch_expires_at": None,
               "dispatch_expired": None, "failure_reason": None, "failure_message": None, "name": "n"}
        row.update(kw)
        return row

    def audit(i: int, sid: str, s: float, state: str, op: str, gen: str | None, ex: str | None = None,
              idle: tuple[str, str] | None = None) -> dict:
        return {"id": i, "session_id": sid, "change": "UPDATE", "state": state, "operation": op, "operation_id": gen,
                "executor_id": ex, "dispatch_id": None, "idle_executor": idle and idle[0],
                "idle_boundary_id": idle and idle[1], "at": at(s)}

    def call(i: int, method: str, sid: str, s: float, uid: str = "u1") -> dict:
        return {"id": i, "method": method, "atespace": "kagent", "name": f"session-{sid}", "uid": uid,
                "detail": {}, "pid": 1, "at": at(s)}

    data = {
        "sessions": [session("a", "READY", "u1"), session("b", "DELETED", None), session("c", "READY", "u1"),
                     session("d", "READY", "u1"),
                     # an idle claim still held at the end, whose boundary two executors suspended
                     session("e", "READY", "u1", idle_executor="x2", idle_claimed_at=at(4.0),
                             idle_boundary_id="be", idle_boundary_at=at(2.5))],
        "actors": [{"atespace": "kagent", "name": f"session-{x}", "uid": "u1", "state": "ACTOR_STATE_SUSPENDED",
                    "worker": None} for x in ("a", "b", "c", "d", "e")],
        "calls": [call(1, "create_actor", "a", 1.5), call(2, "create_egress_policy", "a", 1.6),
                  call(3, "create_actor", "b", 1.5), call(4, "delete_actor", "b", 3.5),
                  call(5, "create_actor", "b", 5.0, uid="u2"),  # resurrection after deletion
                  call(6, "create_actor", "c", 1.5), call(7, "suspend_actor", "c", 3.2),
                  call(8, "suspend_actor", "c", 3.4),  # twice in one SUSPEND generation
                  call(9, "create_actor", "d", 1.5), call(10, "resume_actor", "d", 9.0),  # no window explains it
                  call(11, "create_actor", "e", 1.5), call(12, "suspend_actor", "e", 3.5),
                  call(13, "suspend_actor", "e", 4.5)],  # the claim taken over: one boundary suspended twice
        "tags": [], "checkpoints": [], "tasks": [], "jobs": [],
        "audit": [audit(1, "a", 1.0, "CREATING", "CREATE", "ga"), audit(2, "a", 2.0, "READY", "NONE", "ga"),
                  audit(3, "b", 1.0, "CREATING", "CREATE", "gb"), audit(4, "b", 2.0, "READY", "NONE", "gb"),
                  audit(5, "b", 3.0, "DELETING", "DELETE", "gb2"), audit(6, "b", 4.0, "DELETED", "NONE", "gb2"),
                  audit(7, "c", 1.0, "CREATING", "CREATE", "gc"), audit(8, "c", 2.0, "READY", "NONE", "gc"),
                  audit(9, "c", 3.0, "READY", "SUSPEND", "gc2"), audit(10, "c", 4.0, "SUSPENDED", "NONE", "gc2"),
                  audit(11, "d", 1.0, "CREATING", "CREATE", "gd"), audit(12, "d", 2.0, "READY", "NONE", "gd"),
                  audit(13, "e", 1.0, "CREATING", "CREATE", "ge"), audit(14, "e", 2.0, "READY", "NONE", "ge"),
                  audit(15, "e", 3.0, "READY", "NONE", "ge", idle=("x1", "be")),
                  audit(16, "e", 4.0, "READY", "NONE", "ge", idle=("x2", "be"))],
    }
    data["sessions"][2]["state"] = "SUSPENDED"
    history = History(tmp_path)
    history.attempts += [
        {"t0": 1.0, "t1": 2.0, "rpc": "SuspendSession", "session": "d", "code": "OK", "attempt": 1, "resp": {}},
        {"t0": 3.0, "t1": 4.0, "rpc": "SendMessage", "session": "a", "code": "OK", "attempt": 1,
         "resp": {"task": "t-lost", "context": "a", "state": "TASK_STATE_COMPLETED"}},
    ]
    final_checks(data, history)
    kinds = {v["kind"] for v in history.violations}
    assert kinds == {"actor-created-twice", "actor-created-after-deletion", "mutation-outside-generation",
                     "generation-mutated-twice", "actor-behind-deletion", "acknowledged-effect-missing",
                     "lost-turn", "quiescence-suspended-twice", "uncertain-quiescence-claim"}, history.violations
    assert not any("session a" in v["detail"] or "session-a " in v["detail"] for v in history.violations
                   if v["kind"] != "lost-turn")

    clean = History(tmp_path / "clean")
    data["sessions"], data["actors"] = data["sessions"][:1], data["actors"][:1]
    data["calls"], data["audit"] = data["calls"][:2], data["audit"][:2]
    final_checks(data, clean)
    assert clean.violations == []
