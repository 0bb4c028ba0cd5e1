"""A real `sessionq worker` process: quiescence across processes and kill -9 mid-suspend (Q-10)."""

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from lifecycle import raw_session, ready_session, turn_by_store

from sessionq.domain.quiescence import QuiescencePool, claim_and_quiesce
from sessionq.errors import SessionqError


def start_worker(database_url: str) -> subprocess.Popen:
    env = {**os.environ,
           "SESSIONQ_DATABASE__URL": database_url,
           "SESSIONQ_RUNTIME__SIMULATOR__WORKERS": "64",
           "SESSIONQ_WORKERS__POLL_INTERVAL": "0.2s",
           "SESSIONQ_SESSIONS__IDLE_TTL": "0s",
           "SESSIONQ_LOGGING__LEVEL": "warning"}
    return subprocess.Popen([sys.executable, "-m", "sessionq.cli.main", "worker"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.mark.clause("Q-10")
@pytest.mark.clause("Q-6")
async def test_kill_9_mid_suspend_leaves_the_claim_blocking_new_work(store, sim, database_url):
    s = await ready_session(store, sim)
    block = await sim.inject("suspend_actor", "block")
    proc = start_worker(database_url)
    try:
        await turn_by_store(store, sim, s)  # the settlement's NOTIFY wakes the other process
        await sim.wait_blocked(block, timeout=15)
        claimed = await raw_session(store, s.id)
        assert claimed.idle_executor is not None
        proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(proc.wait, 10)
    finally:
        if proc.poll() is None:
            proc.kill()
    await sim.release(block)
    await asyncio.sleep(0.2)
    # the claim of possibly issued work survives its executor and blocks new work
    row = await raw_session(store, s.id)
    assert row.idle_executor == claimed.idle_executor
    assert await claim_and_quiesce(QuiescencePool(store, sim, database_url, listen=False)) is None
    with pytest.raises(SessionqError) as e:
        await store.admit_operation(s.id, "alice", None, "SUSPEND")
    assert e.value.sqlstate == "SQ409"
    adm = await store.admit_turn(s.id, "alice", None, {"parts": [{"text": "hi"}]}, None, 600)
    with pytest.raises(SessionqError) as e:
        await store.task_create(s.id, "t-new", {"id": "t-new", "status": {"state": "TASK_STATE_WORKING"}}, adm.dispatch_id)
    assert e.value.sqlstate == "SQ409"
    # completed results stay readable
    assert (await store.get_session(s.id, "alice")).state == "READY"


async def test_worker_process_suspends_after_settlement_and_stops_on_sigterm(store, sim, database_url):
    sessions = [await ready_session(store, sim, f"w{i}") for i in range(3)]
    proc = start_worker(database_url)
    try:
        await asyncio.sleep(1.0)
        for s in sessions:
            await turn_by_store(store, sim, s)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            rows = [await raw_session(store, s.id) for s in sessions]
            if all(r.idle_boundary_id is None for r in rows):
                break
            await asyncio.sleep(0.05)
        assert all(r.idle_boundary_id is None and r.snapshot_status == "COMPLETED" for r in rows)
        for s in sessions:
            assert await sim.mutation_count(actor=s.actor_name, method="suspend_actor") == 1
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 30)
        assert code == 0, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
    assert uuid.UUID(str(sessions[0].id))


async def test_operator_retries_a_dead_workers_quiescence_claim(store, sim, database_url, settings):
    """The way out of Q-10's kept claim: `sessionq quiescence retry` queues an attempt that takes
    the claim over and finishes it."""
    from click.testing import CliRunner
    from conftest import running_worker
    from sessionq.cli.main import main

    s = await ready_session(store, sim)
    await turn_by_store(store, sim, s)
    await sim.inject("suspend_actor", "fail_before", times=5)  # the worker's attempts all fail
    await claim_and_quiesce(QuiescencePool(store, sim, database_url, listen=False))
    assert (await raw_session(store, s.id)).idle_executor is not None
    result = await asyncio.to_thread(CliRunner().invoke, main,
                                     ["quiescence", "retry", str(s.id), "--database-url", database_url])
    assert result.exit_code == 0 and "queued job" in result.output, result.output
    async with running_worker(settings, database_url, store, sim):
        for _ in range(200):
            row = await raw_session(store, s.id)
            if row.idle_executor is None:
                break
            await asyncio.sleep(0.05)
    assert row.idle_executor is None and row.snapshot_status == "COMPLETED"
    again = await asyncio.to_thread(CliRunner().invoke, main,
                                    ["quiescence", "retry", str(s.id), "--database-url", database_url])
    assert again.exit_code == 1 and "has no claimed idle work" in again.output
