"""Draining workers: in flight jobs finish (or are aborted and retried elsewhere), nothing is lost
or run twice, the worker exits; by request (durable row + NOTIFY), from another process, and on
SIGTERM."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import optest_app
import pytest
from ophelpers import (  # noqa: F401 (fixtures)
    cli_fixture,
    db_fixture,
    defer,
    drainable_worker,
    eventually,
    job,
    ok,
    one_line_error,
    ops_fixture,
    q,
)

from sessionq.db.operator_store import OperatorStore

HERE = Path(__file__).parent


def events(runs: list[tuple[str, int, str]]) -> Counter[tuple[str, str]]:
    return Counter((k, e) for k, _, e in runs)


async def started(url: str, keys: set[str]) -> bool:
    return keys <= {k for k, _, e in await optest_app.runs(url) if e == "start"}


async def test_drain_lets_jobs_in_flight_finish_and_fetches_nothing_new(database_url, db, ops, cli):
    async with drainable_worker(database_url, "w-drain", concurrency=2) as w:
        ids = [await defer(db, "optest_sleep", {"key": k, "seconds": 1.0}) for k in ("a", "b")]
        await eventually(lambda: started(database_url, {"a", "b"}), what="both jobs started")

        result = ok(await cli("workers", "drain", "w-drain", "--timeout", "20s"))
        assert "requested for 1 worker(s): w-drain" in result.stdout
        # the worker acknowledges at once (NOTIFY): state draining, and it fetches nothing new
        row = await eventually(lambda: _worker(ops, "w-drain", "draining"), timeout=2, what="state draining")
        assert row["drain_timeout"] == 20.0 and row["running_jobs"] == 2
        late = [await defer(db, "optest_sleep", {"key": k, "seconds": 0.0}) for k in ("c", "d")]

        assert await w.outcome() == "drained"
        assert w.stop.is_set()  # the process exits cleanly
    assert [(await job(db, i))["status"] for i in ids] == ["succeeded", "succeeded"]
    assert [(await job(db, i))["status"] for i in late] == ["todo", "todo"]
    assert not await ops.workers() and not await q(db, "SELECT * FROM sessionq.worker_info")

    # another worker takes the rest: every job ran to completion exactly once
    async with drainable_worker(database_url, "w-next") as w2:
        await eventually(lambda: _all_succeeded(db, ids + late), what="all jobs succeeded")
        w2.stop.set()
        assert await w2.outcome() == "stopped"
    counts = events(await optest_app.runs(database_url))
    assert counts == Counter({(k, e): 1 for k in "abcd" for e in ("start", "done")})


async def test_drain_timeout_aborts_cooperatively_and_the_job_is_retried_once(database_url, db, ops):
    async with drainable_worker(database_url, "w-slow", shutdown_timeout=60) as w:
        jid = await defer(db, "optest_sleep", {"key": "slow", "seconds": 30.0})
        await eventually(lambda: started(database_url, {"slow"}), what="slow job started")
        request = await ops.request_drain("w-slow", 0.3, "tester")
        assert request["workers"] == ["w-slow"]
        assert await w.outcome(timeout=10) == "drained"
    after = await job(db, jid)
    assert after["status"] == "todo" and after["attempts"] == 1  # aborted by the drain, retried by procrastinate
    async with drainable_worker(database_url, "w-fast"):
        await eventually(lambda: _all_succeeded(db, [jid]), what="retried job succeeded")
    assert [e for _, _, e in await optest_app.runs(database_url)] == ["start", "aborted", "start", "done"]


async def test_sigterm_drains_the_same_way(database_url, db, ops):
    """The process's stop event (SIGTERM, Ctrl-C) drains: state draining, running jobs finish."""
    async with drainable_worker(database_url, "w-term") as w:
        jid = await defer(db, "optest_sleep", {"key": "t", "seconds": 0.8})
        await eventually(lambda: started(database_url, {"t"}), what="job started")
        w.stop.set()
        await eventually(lambda: _worker(ops, "w-term", "draining"), timeout=2, what="state draining")
        assert await w.outcome() == "stopped"
    assert (await job(db, jid))["status"] == "succeeded"
    assert events(await optest_app.runs(database_url)) == Counter({("t", "start"): 1, ("t", "done"): 1})


async def test_a_drain_requested_while_the_worker_was_not_listening_is_found_in_the_table(database_url, db, ops):
    """Durable: the request row is seen by the periodic check even without a notification."""
    async with drainable_worker(database_url, "w-durable") as w:
        worker_id = (await _worker(ops, "w-durable"))["worker_id"]
        # a row written without NOTIFY (as if the notification was lost)
        await q(db, "INSERT INTO sessionq.worker_drains (worker, timeout, requested_by) VALUES ('*', 5, 'tester')")
        assert await w.outcome(timeout=5) == "drained"
    taken = await q(db, "SELECT * FROM sessionq.worker_drains")
    assert len(taken) == 1 and taken[0]["worker"] == "*"
    assert worker_id not in {w["worker_id"] for w in await ops.workers()}


async def test_a_drain_applies_to_workers_started_before_it_only(database_url, db, ops):
    await q(db, "INSERT INTO sessionq.worker_drains (worker, requested_by) VALUES ('*', 'tester')")
    async with drainable_worker(database_url, "w-later") as w:
        await asyncio.sleep(0.6)  # three checks
        assert not w.task.done()
        assert (await _worker(ops, "w-later", "running"))["drain_requested_at"] is None


def _read(log: Path) -> str:
    return log.read_text()


async def spawn(args: list[str], log: Path, **kwargs: Any) -> asyncio.subprocess.Process:
    """A child process whose output goes to a file (a full pipe cannot block it)."""
    with log.open("w") as out:
        return await asyncio.create_subprocess_exec(*args, stdout=out, stderr=subprocess.STDOUT, **kwargs)


async def finished(proc: asyncio.subprocess.Process, log: Path, timeout: float = 15) -> int:
    try:
        return await asyncio.wait_for(proc.wait(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"process did not exit within {timeout}s:\n{_read(log)}") from None


async def test_drain_of_a_worker_in_another_process(database_url, db, cli, tmp_path):
    log = tmp_path / "worker.log"
    proc = await spawn([sys.executable, str(HERE / "drain_worker.py"), database_url, "w-remote", "20"], log, cwd=HERE)
    try:
        async with OperatorStore.connect(database_url) as ops_:
            await eventually(lambda: _worker(ops_, "w-remote"), timeout=20, what="remote worker registered")
            jid = await defer(db, "optest_sleep", {"key": "r", "seconds": 1.0})
            await eventually(lambda: started(database_url, {"r"}), what="remote job started")
            listed = ok(await cli("workers", "list", "-o", "json"))
            (remote,) = json.loads(listed.stdout)["workers"]
            assert remote["name"] == "w-remote" and remote["running_jobs"] == 1 and remote["pid"] == proc.pid

            result = ok(await cli("workers", "drain", "w-remote", "--wait", "--timeout", "20s"))
            assert "w-remote exited" in result.stdout and "are gone" in result.stdout
            assert await finished(proc, log) == 0, _read(log)
            assert "outcome drained" in _read(log)
            assert (await job(db, jid))["status"] == "succeeded"
            assert not await ops_.workers()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert events(await optest_app.runs(database_url)) == Counter({("r", "start"): 1, ("r", "done"): 1})


def _worker_py_wired() -> bool:
    from sessionq.app import worker

    return "run_drainable_worker" in inspect.getsource(worker)


@pytest.mark.skipif(not _worker_py_wired(), reason="sessionq.app.worker does not run workers through sessionq.jobs.drain yet")
async def test_sessionq_worker_process_drains_on_request_and_on_sigterm(database_url, cli, tmp_path):
    env = {**os.environ, "SESSIONQ_DATABASE__URL": database_url, "SESSIONQ_WORKERS__POLL_INTERVAL": "0.2s",
           "SESSIONQ_LOGGING__FORMAT": "text", "SESSIONQ_RUNTIME__SIMULATOR__WORKERS": "4",
           "SESSIONQ_SESSIONS__QUIESCENCE_WORKERS": "1"}
    sessionq = str(Path(sys.executable).with_name("sessionq"))
    log = tmp_path / "worker.log"

    async def start() -> tuple[asyncio.subprocess.Process, dict[str, Any]]:
        proc = await spawn([sessionq, "worker"], log, env=env, cwd=tmp_path)
        async with OperatorStore.connect(database_url) as o:
            async def mine() -> dict[str, Any] | None:
                if proc.returncode is not None:
                    raise AssertionError(_read(log))
                return next((w for w in await o.workers() if w["pid"] == proc.pid), None)
            return proc, await eventually(mine, timeout=30, what="sessionq worker registered")

    proc, row = await start()
    try:
        ok(await cli("workers", "drain", row["name"], "--wait", "--timeout", "5s"))
        assert await finished(proc, log) == 0, _read(log)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    proc, row = await start()
    try:
        proc.send_signal(signal.SIGTERM)
        assert await finished(proc, log) == 0, _read(log)
        async with OperatorStore.connect(database_url) as o:
            assert not [w for w in await o.workers() if w["worker_id"] == row["worker_id"]]
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_drain_of_an_unknown_worker_is_refused(database_url, cli):
    line = one_line_error(await cli("workers", "drain", "nobody-here"))
    assert "NOT_FOUND" in line and "nobody-here" in line


async def _worker(ops: OperatorStore, name: str, state: str | None = None) -> dict[str, Any] | None:
    for w in await ops.workers():
        if w["name"] == name and (state is None or w["state"] == state):
            return w
    return None


async def _all_succeeded(db: Any, ids: list[int]) -> bool:
    rows = await q(db, "SELECT status FROM procrastinate_jobs WHERE id = ANY(%s)", ids)
    return len(rows) == len(ids) and all(r["status"] == "succeeded" for r in rows)
