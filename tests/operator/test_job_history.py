"""Why did it fail? Every job attempt is recorded with its outcome and error (sessionq.job_attempts),
succeeded jobs are kept for jobs.retention and purged in batches, a job in backoff runs now on
`jobs retry`, queues pause and resume durably, a stalled attempt is recorded and a stalled turn is
failed with a reason its caller reads, and a failed operation attempt shows on its Session."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import psycopg
import pytest
from lifecycle import AGENT, apply_agent, ready_session
from ophelpers import (  # noqa: F401 (fixtures)
    cli_fixture,
    db_fixture,
    dead_worker,
    defer,
    eventually,
    job,
    live_worker,
    make_doing,
    make_failed,
    ok,
    one_line_error,
    ops_fixture,
    q,
)
from procrastinate import App, JobContext, PsycopgConnector, RetryStrategy
from sessionq.jobs import bridge, purge, reaper
from sessionq.jobs.bridge import RunningWorker

from sessionq import errors
from sessionq.db.connection import conninfo
from sessionq.domain.operations import OperationExecutor
from sessionq.runtime.base import Code, SubstrateError

QUEUE = "history"
HUGE = "x" * 10_000


def history_app(url: str) -> App:
    """A test app whose workers end attempts through sessionq's WorkerJobManager, as the real
    worker does: `flaky` fails twice then succeeds, `broken` always fails (2 attempts), `fine`
    succeeds."""
    connector = PsycopgConnector(conninfo=conninfo(url), min_size=1, max_size=4)
    app = App(connector=connector)
    bridge.install_job_manager(app, connector)

    @app.task(name="history_flaky", queue=QUEUE, pass_context=True, retry=RetryStrategy(max_attempts=3))
    async def flaky(context: JobContext) -> str:
        if context.job.attempts < 2:
            raise ValueError(f"attempt {context.job.attempts + 1} fails: the database said {HUGE}")
        return "ok"

    @app.task(name="history_broken", queue=QUEUE, pass_context=True, retry=RetryStrategy(max_attempts=1))
    async def broken(context: JobContext) -> str:
        def inner() -> None:
            raise KeyError("no such thing")
        inner()
        return "never"

    @app.task(name="history_fine", queue=QUEUE)
    async def fine() -> str:
        return "fine"

    return app


async def run_until(url: str, app: App, *, delete_jobs: str, done: Any, then: Any = None,
                    timeout: float = 20.0) -> None:
    """Run a worker of `app`, recorded under its name as run_drainable_worker records it, call
    `then()` (to queue jobs) and wait until `done()` holds."""
    async with app.open_async():
        worker = RunningWorker(app, default_name="history-worker", queues=[QUEUE], concurrency=2,
                               fetch_job_polling_interval=0.05, delete_jobs=delete_jobs)
        task = worker.start()
        try:
            worker_id = await asyncio.wait_for(worker.registered(), 10)
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                # as run_drainable_worker records it: the attempts take the worker's name from here
                await conn.execute("SELECT sessionq.register_worker(%s, 'history-worker', 'h', 1, NULL, 2)",
                                   (worker_id,))
            if then is not None:
                await then()
            await eventually(done, timeout=timeout, what="the jobs ended")
        finally:
            worker.stop()
            await asyncio.wait_for(task, 10)


async def attempts(db: Any, job_id: int) -> list[dict[str, Any]]:
    return await q(db, "SELECT * FROM sessionq.job_attempts WHERE job_id = %s ORDER BY attempt", job_id)


async def test_every_attempt_is_recorded_with_its_error_and_shown(database_url, db, cli):
    app = history_app(database_url)
    ids: dict[str, int] = {}

    async def queue() -> None:
        for name in ("flaky", "broken", "fine"):
            ids[name] = await app.tasks[f"history_{name}"].defer_async()

    async def ended() -> bool:
        rows = await q(db, "SELECT id, status FROM procrastinate_jobs WHERE id = ANY(%s)", list(ids.values()))
        return {r["id"]: r["status"] for r in rows} == {
            ids["flaky"]: "succeeded", ids["broken"]: "failed", ids["fine"]: "succeeded"}

    await run_until(database_url, app, delete_jobs="never", done=ended, then=queue)
    flaky, broken, fine = ids["flaky"], ids["broken"], ids["fine"]

    rows = await attempts(db, flaky)
    assert [(a["attempt"], a["outcome"], a["error_type"]) for a in rows] == [
        (1, "retried", "ValueError"), (2, "retried", "ValueError"), (3, "succeeded", None)]
    first = rows[0]
    assert first["error_message"].startswith("attempt 1 fails: the database said xxx")
    assert len(first["error_message"]) == 2000  # bounded
    assert len(first["traceback"]) <= 8000 and "in flaky" in first["traceback"]
    assert first["traceback"].rstrip().splitlines()[-1].startswith("ValueError: attempt 1 fails")
    assert first["worker_name"] == "history-worker" and first["worker_id"] is not None
    assert first["started_at"] is not None and first["started_at"] <= first["ended_at"]

    rows = await attempts(db, broken)
    assert [(a["outcome"], a["error_type"], a["error_message"]) for a in rows] == [
        ("retried", "KeyError", "'no such thing'"), ("failed", "KeyError", "'no such thing'")]
    assert "in inner" in rows[-1]["traceback"] and 'raise KeyError("no such thing")' in rows[-1]["traceback"]
    assert [(a["outcome"], a["error_type"]) for a in await attempts(db, fine)] == [("succeeded", None)]

    # `sessionq jobs show` prints the attempts and the last traceback
    shown = ok(await cli("jobs", "show", str(broken))).stdout
    assert "ATTEMPTS" in shown and "KeyError: 'no such thing'" in shown and "TRACEBACK (attempt 2" in shown
    assert 'raise KeyError("no such thing")' in shown
    data = json.loads(ok(await cli("jobs", "show", str(flaky), "-o", "json")).stdout)
    assert [a["outcome"] for a in data["attempts"]] == ["retried", "retried", "succeeded"]
    # `jobs list` shows the last error; succeeded jobs are listed as history
    listed = ok(await cli("jobs", "list", "--status", "failed")).stdout
    assert "LAST-ERROR" in listed.splitlines()[0] and "KeyError: 'no such thing'" in listed
    succeeded = json.loads(ok(await cli("jobs", "list", "--status", "succeeded", "-o", "json")).stdout)["jobs"]
    assert {j["job_id"] for j in succeeded} == {flaky, fine}
    # the psql view of recent failures, newest first
    failures = await q(db, "SELECT job_id, outcome, error_type, failed_at FROM sessionq.recent_failures")
    assert [f["failed_at"] for f in failures] == sorted((f["failed_at"] for f in failures), reverse=True)
    assert {(f["job_id"], f["outcome"]) for f in failures} == {
        (flaky, "retried"), (broken, "retried"), (broken, "failed")}
    # `sessionq status` lists them too
    assert "RECENT FAILURES" in ok(await cli("status")).stdout


async def test_without_retention_a_succeeded_job_goes_with_its_attempts(database_url, db):
    app = history_app(database_url)
    async with app.open_async():
        flaky = await app.tasks["history_flaky"].defer_async()

    async def gone() -> bool:
        return not await q(db, "SELECT 1 FROM procrastinate_jobs WHERE id = %s", flaky)

    await run_until(database_url, app, delete_jobs="successful", done=gone)
    assert await attempts(db, flaky) == []


async def succeeded_job(db: Any, worker: int, ended_ago: float) -> int:
    jid = await defer(db, "optest_sleep", {"key": str(uuid.uuid4()), "seconds": 0})
    await make_doing(db, jid, worker)
    await q(db, "SELECT sessionq.end_job_attempt(%s, 'succeeded', false)", jid)
    await q(db, "UPDATE sessionq.job_attempts SET ended_at = now() - make_interval(secs => %s) WHERE job_id = %s",
            ended_ago, jid)
    return jid


async def test_the_purge_deletes_succeeded_jobs_older_than_the_retention_in_batches(db, ops, cli):
    worker = await live_worker(db)
    old = [await succeeded_job(db, worker, 7200) for _ in range(5)]
    recent = await succeeded_job(db, worker, 60)
    failed = await defer(db, "optest_sleep", {"key": "f", "seconds": 0})
    await make_failed(db, failed)

    assert await purge.purge(ops, 3600, batch=2, max_batches=2) == 4  # bounded: two batches of two
    left = {r["id"] for r in await q(db, "SELECT id FROM procrastinate_jobs")}
    assert len(left & set(old)) == 1 and recent in left and failed in left
    assert await purge.purge(ops, 3600, batch=2, max_batches=5) == 1
    left = {r["id"] for r in await q(db, "SELECT id FROM procrastinate_jobs")}
    assert left == {recent, failed}
    assert not await q(db, "SELECT 1 FROM sessionq.job_attempts WHERE job_id = ANY(%s)", old)
    assert not await q(db, "SELECT 1 FROM sessionq.job_events WHERE job_id = ANY(%s)", old)
    # retention 0 keeps none
    assert await purge.purge(ops, 0) == 1
    assert {r["id"] for r in await q(db, "SELECT id FROM procrastinate_jobs")} == {failed}
    listed = ok(await cli("jobs", "list", "--status", "succeeded"))
    assert "No jobs found." in listed.stderr
    with pytest.raises(Exception, match="retention"):
        await ops.purge_job_history(-1, 10)


async def test_the_purge_is_a_periodic_task():
    from sessionq.jobs.app import build_app

    app = build_app("postgresql://unused/", expiry=False)
    assert purge.TASK in app.tasks and app.tasks[purge.TASK].queue == "periodic"
    assert any(p.task.name == purge.TASK for p in app.periodic_registry.periodic_tasks.values())


async def test_retry_runs_a_job_waiting_out_its_backoff_now(db, cli, ops):
    jid = await defer(db, "optest_sleep", {"key": "b", "seconds": 0})
    await q(db, "UPDATE procrastinate_jobs SET scheduled_at = now() + interval '1 hour', attempts = 2 WHERE id = %s",
            jid)
    out = ok(await cli("jobs", "retry", str(jid))).stdout
    assert f"job {jid} (optest_sleep) was scheduled for" in out and "it is due now" in out
    row = await job(db, jid)
    assert row["status"] == "todo" and row["scheduled_at"] is None and row["attempts"] == 2
    (action,) = await q(db, "SELECT action, actor FROM sessionq.job_actions WHERE job_id = %s", jid)
    assert action["action"] == "run_now" and action["actor"]
    line = one_line_error(await cli("jobs", "retry", str(jid)))
    assert "FAILED_PRECONDITION" in line and "already due" in line


async def test_an_action_on_a_job_that_changed_meanwhile_changes_nothing(db, ops):
    jid = await defer(db, "optest_sleep", {"key": "c", "seconds": 0})
    with pytest.raises(errors.SessionqError) as e:
        await ops.retry_job(jid, "tester", expect="failed")  # the page showed it failed; it is todo now
    assert e.value.code.name == "ABORTED" and "no longer failed" in e.value.message
    with pytest.raises(errors.SessionqError) as e:
        await ops.cancel_job(jid, False, "tester", expect="doing")
    assert e.value.code.name == "ABORTED"
    assert (await job(db, jid))["status"] == "todo"
    assert not await q(db, "SELECT 1 FROM sessionq.job_actions WHERE job_id = %s", jid)
    assert (await ops.cancel_job(jid, False, "tester", expect="todo"))["action"] == "cancelled"


async def test_a_paused_queue_is_not_fetched_by_any_worker_until_resumed(db, cli, database_url):
    w1, w2 = await live_worker(db, "fetch-a"), await live_worker(db, "fetch-b")
    jid = await defer(db, "optest_sleep", {"key": "p", "seconds": 0})
    ok(await cli("queues", "pause", "optest", "--reason", "maintenance"))
    assert "already paused" in ok(await cli("queues", "pause", "optest")).stdout
    for worker, queues in ((w1, None), (w2, ["optest", "other"])):  # every queue, or named ones
        (row,) = await q(db, "SELECT id FROM sessionq.fetch_job(%s, %s)", queues, worker)
        assert row["id"] is None
    listed = {r["queue_name"]: r for r in json.loads(ok(await cli("queues", "list", "-o", "json")).stdout)["queues"]}
    assert listed["optest"]["paused"] and listed["optest"]["todo"] == 1 and listed["optest"]["paused_reason"] == "maintenance"
    assert not listed["operations"]["paused"]
    assert "PAUSED QUEUES" in ok(await cli("status")).stdout

    # a job in another queue is still fetched while optest is paused
    other = await q(db, "SELECT sessionq.defer_job('other', 'x', '{}'::jsonb, NULL) AS id")
    (row,) = await q(db, "SELECT id FROM sessionq.fetch_job(NULL, %s)", w1)
    assert row["id"] == other[0]["id"]

    assert "resumed" in ok(await cli("queues", "resume", "optest")).stdout
    assert "was not paused" in ok(await cli("queues", "resume", "optest")).stdout
    (row,) = await q(db, "SELECT id FROM sessionq.fetch_job(ARRAY['optest'], %s)", w2)
    assert row["id"] == jid
    actions = await q(db, "SELECT target, action FROM sessionq.job_actions WHERE job_id IS NULL ORDER BY id")
    assert [(a["target"], a["action"]) for a in actions] == [("queue optest", "paused"), ("queue optest", "resumed")]

    bad = await cli("queues", "pause", "no spaces allowed")
    assert bad.exit_code == 2 and "is not a queue name" in bad.stderr and len(bad.stderr.splitlines()) == 1


async def test_a_worker_does_not_run_jobs_of_a_paused_queue(database_url, db, cli):
    app = history_app(database_url)
    async with app.open_async():
        fine = await app.tasks["history_fine"].defer_async()
    ok(await cli("queues", "pause", QUEUE))
    async with app.open_async():
        worker = RunningWorker(app, default_name="paused-worker", queues=None, concurrency=1,
                               fetch_job_polling_interval=0.05, delete_jobs="never")
        task = worker.start()
        try:
            await asyncio.sleep(0.8)  # many fetches
            assert (await job(db, fine))["status"] == "todo"
            ok(await cli("queues", "resume", QUEUE))

            async def ran() -> bool:
                return (await job(db, fine))["status"] == "succeeded"

            await eventually(ran, what="the job ran after the resume")
        finally:
            worker.stop()
            await asyncio.wait_for(task, 10)


async def test_the_reaper_records_the_stalled_attempt(db, ops):
    dead = await dead_worker(db, 300, name="gone-host-1")
    jid = await defer(db, "optest_sleep", {"key": "s", "seconds": 1})
    await make_doing(db, jid, dead)
    report = await reaper.reap(ops, stall_timeout=30, retry_limits={"optest_sleep": 5})
    assert [r["action"] for r in report.jobs] == ["requeued"]
    (a,) = await attempts(db, jid)
    assert (a["attempt"], a["outcome"], a["error_type"], a["worker_name"]) == (1, "stalled", "WorkerLost", "gone-host-1")
    assert "gone-host-1 stopped heartbeating" in a["error_message"] and "requeued by reaper" in a["error_message"]


async def test_a_stalled_turn_is_failed_with_a_reason_its_caller_reads(db, ops, store, sim):
    s = await ready_session(store, sim, "req-stall")
    msg = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "q"}]}
    admitted = await store.admit_turn(s.id, s.creator, None, msg, None, 600)
    (dispatch_job,) = await q(db, "SELECT id FROM procrastinate_jobs WHERE task_name = 'dispatch_turn'"
                                  " AND args ->> 'session_id' = %s", str(s.id))
    dead = await dead_worker(db, 300)
    await make_doing(db, dispatch_job["id"], dead)
    report = await reaper.reap(ops, stall_timeout=30, retry_limits={"dispatch_turn": 0})
    assert [(r["job_id"], r["action"]) for r in report.jobs] == [(dispatch_job["id"], "failed")]
    (row,) = await q(db, "SELECT dispatch_id, dispatch_failure FROM sessionq.sessions WHERE id = %s", s.id)
    assert row["dispatch_id"] is None
    assert row["dispatch_failure"]["dispatch_id"] == str(admitted.dispatch_id)
    assert "stopped responding, and a turn is never replayed; send the message again" in row["dispatch_failure"]["message"]
    (a,) = await attempts(db, dispatch_job["id"])
    assert a["outcome"] == "stalled" and "allows no further attempt" in a["error_message"]


async def test_a_failed_operation_attempt_shows_on_its_session_until_it_completes(store, sim, db):
    await apply_agent(store, sim)
    adm = await store.admit_create("alice", "req-fail", "kagent", AGENT, "")
    await sim.inject("create_actor", "fail_before", code=Code.RESOURCE_EXHAUSTED)
    ex = OperationExecutor(store, sim, 30)
    with pytest.raises(SubstrateError):
        await ex.run(adm.session.id)
    (row,) = await q(db, "SELECT failure_reason, failure_message, generation, kind, job_id"
                         " FROM sessionq.pending_operations WHERE session_id = %s", adm.session.id)
    assert row["failure_reason"] == "RuntimeError" and row["generation"] == adm.session.operation_id
    assert row["failure_message"].startswith("the runtime answered RESOURCE_EXHAUSTED")
    got = await store.get_session(adm.session.id, "alice", None)
    assert got.failure_reason == "RuntimeError" and got.failure_message == row["failure_message"]
    out = await ex.run(adm.session.id)  # the retry completes: the failure is cleared
    assert out.status == "completed" and out.session is not None and out.session.failure_reason is None


async def test_a_completed_operation_job_is_kept_as_succeeded_when_retention_keeps_history(store, sim, db):
    await apply_agent(store, sim)
    adm = await store.admit_create("alice", "req-keep", "kagent", AGENT, "")
    (row,) = await q(db, "SELECT id FROM procrastinate_jobs WHERE task_name = 'execute_operation'"
                         " AND args ->> 'session_id' = %s", str(adm.session.id))
    worker = await live_worker(db, "keeper")
    await make_doing(db, row["id"], worker)
    out = await OperationExecutor(store, sim, 30, keep_jobs=True).run(adm.session.id, job_id=row["id"])
    assert out.status == "completed"
    kept = await job(db, row["id"])
    assert kept["status"] == "succeeded" and kept["attempts"] == 1
    (a,) = await attempts(db, row["id"])
    assert (a["outcome"], a["worker_name"]) == ("succeeded", "keeper")

    adm2 = await store.admit_create("alice", "req-nokeep", "kagent", AGENT, "")
    (row2,) = await q(db, "SELECT id FROM procrastinate_jobs WHERE task_name = 'execute_operation'"
                          " AND args ->> 'session_id' = %s", str(adm2.session.id))
    await make_doing(db, row2["id"], worker)
    await OperationExecutor(store, sim, 30).run(adm2.session.id, job_id=row2["id"])
    assert not await q(db, "SELECT 1 FROM procrastinate_jobs WHERE id = %s", row2["id"])


async def test_a_drain_of_a_worker_that_changed_meanwhile_changes_nothing(db, ops):
    live = await live_worker(db, "host-x-1")
    dead = await dead_worker(db, 300, name="host-y-1")
    with pytest.raises(errors.SessionqError) as e:  # the page showed host-y-1 running; it stalled since
        await ops.request_drain("host-y-1", None, "tester", worker_id=dead)
    assert e.value.code.name == "ABORTED" and "is stalled now; nothing was changed" in e.value.message
    with pytest.raises(errors.SessionqError) as e:  # another process took the name meanwhile
        await ops.request_drain("host-x-1", None, "tester", worker_id=dead)
    assert e.value.code.name == "ABORTED" and "is no longer running" in e.value.message
    assert not await q(db, "SELECT 1 FROM sessionq.worker_drains")
    row = await ops.request_drain("host-x-1", 5.0, "tester", worker_id=live)
    assert row["worker_ids"] == [live]
    (action,) = await q(db, "SELECT target, action, actor FROM sessionq.job_actions")
    assert (action["target"], action["action"], action["actor"]) == ("worker host-x-1", "drain_requested", "tester")
