"""Every task that SQL defers is named once, with its queue and its queueing lock
(schema/06_jobs.sql, sessionq.job_kinds), and the worker registers exactly those tasks on those
queues (jobs/app.py) besides its periodic ones."""

from __future__ import annotations

import psycopg
import pytest
from sessionq.jobs import events, periodic, purge, reaper
from sessionq.jobs.app import build_app

PERIODIC = {"expire_idle_sessions", "collect_runtime_revisions", "fail_stalled_turns", reaper.TASK, purge.TASK, events.TASK}


def kinds(url: str) -> dict[str, tuple[str, str]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT task_name, queue_name, lock_prefix FROM sessionq.job_kinds").fetchall()
    return {task: (queue, prefix) for task, queue, prefix in rows}


def test_the_worker_registers_every_kind_on_its_queue(database_url: str) -> None:
    app = build_app(database_url)
    registered = {name: task.queue for name, task in app.tasks.items() if "procrastinate.builtin_tasks" not in name}  # procrastinate's own
    declared = kinds(database_url)
    assert {task: queue for task, (queue, _) in declared.items()} == {
        name: queue for name, queue in registered.items() if name in declared
    }
    assert set(registered) - set(declared) == PERIODIC  # the rest are periodic tasks, deferred by procrastinate
    assert hasattr(periodic, "register")


def test_defer_builds_the_queueing_lock_and_refuses_an_unknown_task(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        job = conn.execute("SELECT sessionq.defer('retry_quiescence', 'abc', '{\"session_id\": \"abc\"}')").fetchone()
        assert job is not None and job[0] is not None
        row = conn.execute(
            "SELECT queue_name, queueing_lock FROM sessionq.job_rows WHERE id = %s", (job[0],)
        ).fetchone()
        assert tuple(row) == ("operations", "quiescence:abc")
        assert conn.execute("SELECT sessionq.job_lock('create_checkpoint', 'x')").fetchone() == ("checkpoint:x",)
        with pytest.raises(psycopg.errors.RaiseException, match="unknown task"):
            conn.execute("SELECT sessionq.defer('no_such_task', 'x', '{}')")
