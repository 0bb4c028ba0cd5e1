"""The reaper: stalled jobs back to run (queueing-lock collisions resolved, retry policies
respected), dead dispatch reservations ended, the periodic registration; and the guard that
resolves the same collision inside procrastinate's own retry."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from typing import Any

import croniter
import optest_app
import psycopg
from lifecycle import ready_session
from ophelpers import (  # noqa: F401 (fixtures)
    cli_fixture,
    db_fixture,
    dead_worker,
    defer,
    drainable_worker,
    eventually,
    job,
    live_worker,
    make_doing,
    ops_fixture,
    q,
)
from procrastinate.exceptions import AlreadyEnqueued
from sessionq.jobs import reaper


async def actions(db: Any, job_id: int) -> list[dict[str, Any]]:
    return await q(db, "SELECT action, actor, covered_by, detail FROM sessionq.job_actions WHERE job_id = %s"
                       " ORDER BY id", job_id)


async def test_stalled_jobs_are_requeued_and_jobs_of_live_workers_are_not(db, ops):
    dead = await dead_worker(db, 300, name="dead-1")
    live = await live_worker(db)
    on_dead = await defer(db, "optest_sleep", {"key": "a", "seconds": 1})
    on_live = await defer(db, "optest_sleep", {"key": "b", "seconds": 1})
    orphan = await defer(db, "optest_sleep", {"key": "c", "seconds": 1})
    await make_doing(db, on_dead, dead)
    await make_doing(db, on_live, live)
    await make_doing(db, orphan, None)  # its worker row is gone (procrastinate pruned it)
    stalled = {r["job_id"]: r for r in await ops.view("stalled_jobs")}
    assert set(stalled) == {on_dead, orphan}
    assert stalled[on_dead]["worker_name"] == "dead-1" and stalled[on_dead]["heartbeat_age"] > dt.timedelta(seconds=299)

    report = await reaper.reap(ops, stall_timeout=30, retry_limits=reaper.retry_limits(optest_app.build("x")))
    assert sorted(report.requeued) == [on_dead, orphan]
    assert "2 stalled job(s) requeued" in report.summary()
    for jid in (on_dead, orphan):
        after = await job(db, jid)
        assert after["status"] == "todo" and after["attempts"] == 1
        assert [(a["action"], a["actor"]) for a in await actions(db, jid)] == [("requeued", "reaper")]
    assert (await job(db, on_live))["status"] == "doing"
    assert await ops.view("stalled_jobs") == []
    # a second run finds nothing
    assert (await reaper.reap(ops, stall_timeout=30)).summary() == "nothing to do"


async def test_a_stalled_job_whose_queueing_lock_is_held_by_a_waiting_job_is_covered(db, ops):
    dead = await dead_worker(db, 300)
    stalled = await defer(db, "optest_sleep", {"key": "x", "seconds": 1}, queueing_lock="operation:x")
    await make_doing(db, stalled, dead)
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    waiting = await defer(db, "optest_sleep", {"key": "x", "seconds": 1}, queueing_lock="operation:x")
    await q(db, "UPDATE procrastinate_jobs SET scheduled_at = %s WHERE id = %s", later, waiting)

    report = await reaper.reap(ops, stall_timeout=30)  # no unique violation
    (row,) = report.jobs
    assert (row["job_id"], row["action"], row["covered_by"]) == (stalled, "covered", waiting)
    assert (await job(db, stalled))["status"] == "cancelled"
    w = await job(db, waiting)
    assert w["status"] == "todo" and w["scheduled_at"] <= dt.datetime.now(dt.UTC)  # runs now, as the retry would
    (a,) = await actions(db, stalled)
    assert a["action"] == "covered" and a["covered_by"] == waiting and a["actor"] == "reaper"


async def test_stalled_jobs_follow_their_tasks_retry_policy(db, ops):
    dead = await dead_worker(db, 300)
    limits = {"optest_once": 0, "optest_sleep": 5}
    never = await defer(db, "optest_once", {"key": "n"})
    last = await defer(db, "optest_sleep", {"key": "l", "seconds": 1})
    more = await defer(db, "optest_sleep", {"key": "m", "seconds": 1})
    aborting = await defer(db, "optest_sleep", {"key": "ab", "seconds": 1})
    for jid in (never, last, more, aborting):
        await make_doing(db, jid, dead)
    await q(db, "UPDATE procrastinate_jobs SET attempts = 4 WHERE id = %s", last)
    await q(db, "UPDATE procrastinate_jobs SET attempts = 2 WHERE id = %s", more)
    await q(db, "UPDATE procrastinate_jobs SET abort_requested = true WHERE id = %s", aborting)

    report = await reaper.reap(ops, stall_timeout=30, retry_limits=limits)
    assert {r["job_id"]: r["action"] for r in report.jobs} == {
        never: "failed", last: "failed", more: "requeued", aborting: "aborted"}
    assert [(await job(db, j))["status"] for j in (never, last, more, aborting)] == ["failed", "failed", "todo", "aborted"]


def test_retry_limits_come_from_the_apps_tasks():
    from sessionq.jobs.app import build_app

    limits = reaper.retry_limits(build_app("postgresql://unused/", expiry=False))
    assert limits["dispatch_turn"] == 0  # a failed dispatch is ended, never retried
    assert limits["execute_operation"] == 25
    test_limits = reaper.retry_limits(optest_app.build("x"))
    assert {k: test_limits[k] for k in ("optest_sleep", "optest_collide", "optest_once")} == {
        "optest_sleep": 5, "optest_collide": 5, "optest_once": 0}


async def test_expired_and_orphaned_dispatches_are_ended(db, ops, store, sim):
    msg = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "q"}]}
    expiring = await ready_session(store, sim, "req-exp")
    orphaned = await ready_session(store, sim, "req-orphan")
    _admitted2 = await store.admit_turn(orphaned.id, orphaned.creator, None, {**msg, "messageId": "m2"}, None, 600)
    (dispatch_job,) = await q(db, "SELECT id FROM procrastinate_jobs WHERE task_name = 'dispatch_turn'"
                                  " AND args ->> 'session_id' = %s", str(orphaned.id))
    await q(db, "SELECT procrastinate_cancel_job_v1(%s, false, false)", dispatch_job["id"])
    claims = {(c["kind"], c["session_id"]): c for c in await ops.view("claims")}
    assert claims[("dispatch", orphaned.id)]["state"] == "live"

    # admitted last, right before the check, so that a loaded machine does not expire it first
    admitted = await store.admit_turn(expiring.id, expiring.creator, None, msg, None, 1.0)
    assert await ops.end_dead_dispatches() == []  # nothing expired yet; the orphan is younger than the grace
    await asyncio.sleep(1.1)
    ended = {r["session_id"]: r for r in await ops.end_dead_dispatches(orphan_grace=0)}
    assert ended[expiring.id]["reason"] == "the dispatch expired"
    assert ended[expiring.id]["dispatch_id"] == admitted.dispatch_id
    assert "job is gone" in ended[orphaned.id]["reason"]
    for sid in (expiring.id, orphaned.id):
        (s,) = await q(db, "SELECT dispatch_id, dispatch_failure FROM sessionq.sessions WHERE id = %s", sid)
        assert s["dispatch_id"] is None and s["dispatch_failure"]["message"] == ended[sid]["reason"]


async def test_procrastinates_own_retry_into_a_held_queueing_lock_is_covered(database_url, db):
    """The known trap: a failing job retried while a duplicate waits. Without the guard the retry
    raises a unique violation in the worker and the job stays in doing forever."""
    first = await defer(db, "optest_collide", {"key": "k"}, queueing_lock="collide:k")
    async with drainable_worker(database_url, "w-collide"):
        async def done() -> bool:
            return ("k", "done") in {(k, e) for k, _, e in await optest_app.runs(database_url)}
        await eventually(done, what="the duplicate ran")
        await eventually(lambda: _status(db, first, "cancelled"), what="the first job cancelled")
    (a,) = await actions(db, first)
    assert a["action"] == "covered" and a["actor"] == "worker retry"
    # the duplicate was scheduled 30 s ahead; it ran when the retry would have
    assert (await job(db, a["covered_by"]))["status"] == "succeeded"
    assert not await q(db, "SELECT id FROM procrastinate_jobs WHERE status = 'doing'")
    assert [e for _, _, e in await optest_app.runs(database_url)] == ["start", "start", "done"]


async def test_the_periodic_reaper_is_registered_every_15_seconds_and_runs_in_a_worker(
        database_url, db, store, sim, settings):
    from jobs_registration import reaper_app

    app = reaper_app(database_url)
    (periodic,) = [p for (task, _), p in app.periodic_registry.periodic_tasks.items() if task == "reap"]
    assert periodic.periodic_id == "sessionq-reaper" and periodic.task.queue == "periodic"
    it = croniter.croniter(periodic.cron, dt.datetime(2026, 1, 1, 0, 0, 7))
    assert [it.get_next(dt.datetime).second for _ in range(5)] == [15, 30, 45, 0, 15]

    from sessionq.jobs.deps import Deps

    from sessionq.domain.operations import OperationExecutor

    dead = await dead_worker(db, 300)
    stalled = (await q(db, "SELECT sessionq.queue_operation(%s) AS id", uuid.uuid4()))[0]["id"]
    await make_doing(db, stalled, dead)
    deps = Deps(settings, store, sim, OperationExecutor(store, sim, settings.sessions.claim_lifetime), database_url)
    async with drainable_worker(database_url, "w-reaper", app=app, queues=None,
                                additional_context={"deps": deps}):
        try:
            await app.configure_task("reap").defer_async(timestamp=0)  # the tick, without waiting for one
        except (AlreadyEnqueued, psycopg.errors.UniqueViolation):
            pass  # the worker's periodic deferrer queued a tick just now (queueing lock sessionq-reaper): it runs
        await eventually(lambda: _status(db, stalled, "succeeded"), what="the requeued job ran")
    assert [(a["action"], a["actor"]) for a in await actions(db, stalled)] == [("requeued", "reaper")]


async def _status(db: Any, job_id: int, status: str) -> bool:
    return (await job(db, job_id))["status"] == status


async def test_prune_removes_rows_of_dead_workers(db, ops):
    old = await dead_worker(db, 3600, name="long-dead")
    recent = await dead_worker(db, 60, name="recent-dead")
    await q(db, "INSERT INTO sessionq.worker_info (worker_id, name, host, pid, concurrency) VALUES (999999, 'gone', 'h', 1, 1)")
    pruned = await ops.prune(600)
    assert pruned["workers_pruned"] == 1
    names = {w["name"] for w in await ops.workers()}
    assert names == {"recent-dead"} and old not in {w["worker_id"] for w in await ops.workers()}
    assert not await q(db, "SELECT * FROM sessionq.worker_info WHERE worker_id IN (999999, %s)", old)
    assert recent in {w["worker_id"] for w in await ops.workers()}
