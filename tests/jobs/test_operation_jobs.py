"""How a worker ends a job attempt (jobs/bridge.py, WorkerJobManager).

A completion ends the execute_operation job that ran it, in the completing transaction
(sessionq.finish_operation_job), and the worker then skips procrastinate's own finish call. Ending
an attempt survives a lost connection, and an attempt whose end is uncertain is looked up first, so
it never ends a later attempt of the same job."""

from __future__ import annotations

from typing import Any
from uuid import UUID, uuid4

import pytest
from conftest import apply_agent
from lifecycle import AGENT, count
from procrastinate import App
from procrastinate.exceptions import ConnectorException
from procrastinate.jobs import Job, Status
from procrastinate.manager import JobManager
from sessionq.jobs.app import build_app
from sessionq.jobs.bridge import WorkerJobManager

from sessionq.db.store import Store
from sessionq.domain.operations import OperationExecutor
from sessionq.errors import SessionqError


async def running_job(app: App, worker_id: int, session_id: UUID) -> Job:
    """Fetch the execute_operation job of `session_id` as a worker would (status doing)."""
    job = await app.job_manager.fetch_job(queues=["operations"], worker_id=worker_id)
    assert job is not None and job.task_kwargs == {"session_id": str(session_id)}
    return job


async def job_status(store: Store, job_id: int) -> str | None:
    async with store.pool.connection() as conn:
        cur = await conn.execute("SELECT status::text AS status FROM procrastinate_jobs WHERE id = %s", (job_id,))
        row = await cur.fetchone()
    return row["status"] if row else None


@pytest.fixture
async def app(database_url: str) -> Any:
    app = build_app(database_url, expiry=False)
    async with app.open_async():
        yield app


async def test_the_worker_app_uses_the_operation_job_manager(app: App) -> None:
    assert isinstance(app.job_manager, WorkerJobManager)


async def test_completion_ends_its_own_running_job_and_no_other(store: Store, sim: Any, app: App) -> None:
    await apply_agent(store, sim)
    a = await store.admit_create("alice", "a", "kagent", AGENT, "")
    b = await store.admit_create("alice", "b", "kagent", AGENT, "")
    worker_id = await app.job_manager.register_worker()
    job_a = await running_job(app, worker_id, a.session.id)
    job_b = await running_job(app, worker_id, b.session.id)
    assert job_a.id is not None and job_b.id is not None
    executor = OperationExecutor(store, sim, 30)

    # another Session's job is never ended by this completion
    out = await executor.run(a.session.id, job_id=job_b.id)
    assert out.status == "completed" and out.session is not None and out.session.state == "READY"
    assert await job_status(store, job_b.id) == "doing"
    assert await job_status(store, job_a.id) == "doing"

    # its own running job ends with it, as procrastinate ends a succeeded job (row deleted)
    out = await executor.run(b.session.id, job_id=job_b.id)
    assert out.status == "completed"
    assert await job_status(store, job_b.id) is None
    assert await count(store, "SELECT count(*) FROM procrastinate_events WHERE job_id = %s", job_b.id) == 0


async def test_a_failed_completion_keeps_the_job(store: Store, sim: Any, app: App) -> None:
    await apply_agent(store, sim)
    adm = await store.admit_create("alice", "r", "kagent", AGENT, "")
    worker_id = await app.job_manager.register_worker()
    job = await running_job(app, worker_id, adm.session.id)
    assert job.id is not None
    with pytest.raises(SessionqError):  # a stale executor: nothing changes, the job included
        await store.complete_operation(adm.session.id, adm.generation, uuid4(), {}, job.id)
    assert await job_status(store, job.id) == "doing"


async def test_the_worker_skips_finishing_a_job_its_completion_ended(store: Store, sim: Any, app: App) -> None:
    await apply_agent(store, sim)
    manager = app.job_manager
    assert isinstance(manager, WorkerJobManager)
    worker_id = await manager.register_worker()
    executor = OperationExecutor(store, sim, 30)
    jobs = {}
    for name in ("ended", "uncertain", "still-running"):
        adm = await store.admit_create("alice", name, "kagent", AGENT, "")
        jobs[name] = (adm.session.id, await running_job(app, worker_id, adm.session.id))

    sid, ended = jobs["ended"]
    assert (await executor.run(sid, job_id=ended.id)).status == "completed"
    # procrastinate's own finish of a job that is gone fails: this is what the manager skips
    with pytest.raises(ConnectorException) as gone:
        await JobManager.finish_job(manager, ended, Status.SUCCEEDED, delete_job=True)
    assert "not found" in str(gone.value.__cause__)
    assert ended.id is not None
    manager.ended_with_completion(ended.id)
    await manager.finish_job(ended, Status.SUCCEEDED, delete_job=True)  # skipped: no error

    # a completion that may have committed (its response lost): looked up, gone, not retried
    sid, uncertain = jobs["uncertain"]
    assert uncertain.id is not None
    assert (await executor.run(sid, job_id=uncertain.id)).status == "completed"
    manager.completion_uncertain(uncertain.id)
    await manager.retry_job(uncertain)
    assert await job_status(store, uncertain.id) is None

    # an uncertain job that is still running is retried by procrastinate as usual
    _, running = jobs["still-running"]
    assert running.id is not None
    manager.completion_uncertain(running.id)
    await manager.retry_job(running)
    assert await job_status(store, running.id) == "todo"
    # each mark is used once: a later finish of the same job id goes to procrastinate
    with pytest.raises(ConnectorException) as again:
        await manager.finish_job(ended, Status.SUCCEEDED, delete_job=True)
    assert "not found" in str(again.value.__cause__)


async def kill_procrastinate_connections(store: Store) -> int:
    """Terminate the backends of procrastinate's pool (its connections carry no application name)."""
    return await count(
        store,
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name = '' AND pid <> pg_backend_pid()",
    )


async def test_a_lost_connection_while_ending_an_attempt_is_retried(store: Store, sim: Any, app: App) -> None:
    await apply_agent(store, sim)
    manager = app.job_manager
    assert isinstance(manager, WorkerJobManager)
    worker_id = await manager.register_worker()
    finished = await store.admit_create("alice", "finished", "kagent", AGENT, "")
    retried = await store.admit_create("alice", "retried", "kagent", AGENT, "")
    job_f = await running_job(app, worker_id, finished.session.id)
    job_r = await running_job(app, worker_id, retried.session.id)
    assert job_f.id is not None and job_r.id is not None

    # PostgreSQL drops the worker's connections (a restart, a failover) just before it records
    # the end of an attempt: the worker reconnects and records it (procrastinate alone gives up and
    # the job stays doing under a live worker for good)
    assert await kill_procrastinate_connections(store) >= 1
    await manager.finish_job(job_f, Status.FAILED, delete_job=False)
    assert await job_status(store, job_f.id) == "failed"
    assert await kill_procrastinate_connections(store) >= 1
    await manager.retry_job(job_r)
    assert await job_status(store, job_r.id) == "todo"


async def test_an_uncertain_attempt_never_ends_a_later_attempt(store: Store, sim: Any, app: App) -> None:
    await apply_agent(store, sim)
    manager = app.job_manager
    assert isinstance(manager, WorkerJobManager)
    first, second = await manager.register_worker(), await manager.register_worker()
    adm = await store.admit_create("alice", "r", "kagent", AGENT, "")
    attempt = await running_job(app, first, adm.session.id)
    assert attempt.id is not None
    # the first worker's retry committed but its answer was lost; the job then ran again elsewhere
    await JobManager.retry_job(manager, attempt)
    again = await running_job(app, second, adm.session.id)
    assert again.id == attempt.id and again.attempts == attempt.attempts + 1
    # the first worker, unsure, looks before it ends the attempt: it leaves the second one alone
    manager.completion_uncertain(attempt.id)
    await manager.retry_job(attempt)
    assert await job_status(store, attempt.id) == "doing"
    manager.completion_uncertain(attempt.id)
    await manager.finish_job(attempt, Status.FAILED, delete_job=False)
    assert await job_status(store, attempt.id) == "doing"
    # the second worker's own attempt ends normally
    await manager.finish_job(again, Status.SUCCEEDED, delete_job=True)
    assert await job_status(store, attempt.id) is None
