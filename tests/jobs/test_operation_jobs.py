"""How a worker ends a job attempt (jobs/bridge.py, WorkerJobManager).

A completion ends the execute_operation job that ran it, in the completing transaction
(sessionq.finish_operation_job), and the worker then skips procrastinate's own finish call. Ending
an attempt survives a lost connection, and an attempt whose end is uncertain is looked up first, so
it never ends a later attempt of the same job."""

from __future__ import annotations

import asyncio
import time
from typing import Any
from uuid import UUID, uuid4

import psycopg
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
from sessionq.models import AdmissionOutcome, OperationStart
from sessionq.runtime.base import SubstrateError


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


# -- an operation begun by its job's fetch (sessionq.fetch_job_begun) ------------------------------


async def executor_of(store: Store, session_id: UUID) -> UUID | None:
    async with store.pool.connection() as conn:
        cur = await conn.execute("SELECT executor_id FROM sessionq.sessions WHERE id = %s", (session_id,))
        row = await cur.fetchone()
    assert row is not None
    return row["executor_id"]  # type: ignore[no-any-return]


def begun_of(manager: WorkerJobManager, job: Job) -> tuple[UUID, float, OperationStart]:
    assert job.id is not None
    fetched = manager.take_begun(job.id)
    assert fetched is not None
    assert manager.take_begun(job.id) is None  # taken once
    return fetched.executor, fetched.sent_at, OperationStart.from_row(fetched.row, "begun_")


@pytest.mark.clause("OP-2")
async def test_racing_fetches_claim_each_first_creation_once_in_the_fetch(store: Store, sim: Any, app: App) -> None:
    await apply_agent(store, sim)
    manager = app.job_manager
    assert isinstance(manager, WorkerJobManager)
    manager.begin_operations_at_fetch(30)
    sessions = [(await store.admit_create("alice", f"race-{i}", "kagent", AGENT, "")).session.id for i in range(12)]
    workers = [await manager.register_worker() for _ in range(4)]
    # 20 fetches on the app's pool of real connections for 12 waiting jobs
    fetched = await asyncio.gather(*(manager.fetch_job(["operations"], workers[i % 4]) for i in range(20)))
    jobs = [job for job in fetched if job is not None]
    assert len(jobs) == 12 and {job.task_kwargs["session_id"] for job in jobs} == {str(s) for s in sessions}
    executor = OperationExecutor(store, sim, 30)
    for job in jobs:
        sid = UUID(job.task_kwargs["session_id"])
        begun = begun_of(manager, job)
        start = begun[2]
        # claimed by the fetch itself, by the executor id the fetch made, in its transaction
        assert start.claim is not None and start.claim.status == "claimed" and start.claim.previous_executor is None
        assert await executor_of(store, sid) == begun[0]
        assert await job_status(store, job.id) == "doing"  # type: ignore[arg-type]
        # the job's attempt goes on from there: no other executor may claim meanwhile
        claim = await store.claim_operation(sid, start.session.operation_id, uuid4(), 30)  # type: ignore[union-attr,arg-type]
        assert claim.status == "busy"
        out = await executor.run(sid, job_id=job.id, begun=begun)
        assert out.status == "completed" and out.session is not None and out.session.state == "READY"
        assert await job_status(store, job.id) is None  # type: ignore[arg-type]
    assert await count(store, "SELECT count(*) FROM sessionq.sessions WHERE state = 'READY'") == 12


@pytest.mark.clause("OP-12")
async def test_an_attempt_begun_at_its_fetch_has_its_deadline_counted_from_the_fetch(
    store: Store, sim: Any, app: App
) -> None:
    await apply_agent(store, sim)
    manager = app.job_manager
    assert isinstance(manager, WorkerJobManager)
    lifetime = 30.0
    manager.begin_operations_at_fetch(lifetime)
    adm = await store.admit_create("alice", "late", "kagent", AGENT, "")
    job = await running_job(app, await manager.register_worker(), adm.session.id)
    executor_id, _, start = begun_of(manager, job)
    # the job reached its task a whole claim lifetime after its fetch was sent: the attempt has
    # no time left for runtime I/O, it fails by its deadline and releases the claim
    late = (executor_id, time.monotonic() - lifetime, start)
    with pytest.raises(SubstrateError) as timed_out:
        await OperationExecutor(store, sim, lifetime).run(adm.session.id, job_id=job.id, begun=late)
    assert "claim lifetime" in str(timed_out.value)
    # released: another attempt claims at once
    claim = await store.claim_operation(adm.session.id, adm.generation, uuid4(), lifetime)
    assert claim.status == "claimed" and claim.previous_executor == executor_id  # the fetch's executor held it
    assert await count(store, "SELECT count(*) FROM substrate_sim.actors") == 0


@pytest.mark.clause("OP-11")
async def test_a_worker_lost_after_a_fetch_that_claimed_leaves_a_claim_that_expires(
    store: Store, sim: Any, app: App
) -> None:
    await apply_agent(store, sim)
    manager = app.job_manager
    assert isinstance(manager, WorkerJobManager)
    manager.begin_operations_at_fetch(1.0)
    adm = await store.admit_create("alice", "lost", "kagent", AGENT, "")
    job = await running_job(app, await manager.register_worker(), adm.session.id)
    lost, _, _ = begun_of(manager, job)  # the worker dies here: its task never runs
    assert await executor_of(store, adm.session.id) == lost
    # a retry before the claim lapses is told to wait; once it has lapsed it claims the same
    # operation with a new executor id and completes it
    executor = OperationExecutor(store, sim, 30)
    assert (await executor.run(adm.session.id)).status == "busy"
    async with store.pool.connection() as conn:  # wait out the lapse on the database's clock
        while (await (await conn.execute(
                "SELECT executor_expires_at > clock_timestamp() AS live FROM sessionq.sessions WHERE id = %s",
                (adm.session.id,))).fetchone())["live"]:  # type: ignore[index]
            await asyncio.sleep(0.05)
    out = await executor.run(adm.session.id)
    assert out.status == "completed" and out.session is not None and out.session.state == "READY"


async def test_a_begin_that_fails_leaves_the_fetch_and_other_tasks_begin_nothing(store: Store, app: App) -> None:
    manager = app.job_manager
    assert isinstance(manager, WorkerJobManager)
    manager.begin_operations_at_fetch(30)
    async with store.pool.connection() as conn:
        # an execute_operation job whose begin_operation fails (its Session id is not one)
        await conn.execute("SELECT sessionq.defer('execute_operation', 'bad', '{\"session_id\": \"not-a-uuid\"}')")
        await conn.execute("SELECT sessionq.defer('refresh_snapshot', 'other', '{\"checkpoint_id\": \"x\"}')")
    worker_id = await manager.register_worker()
    fetched = [await manager.fetch_job(["operations"], worker_id) for _ in range(2)]
    assert {job.task_name for job in fetched if job is not None} == {"execute_operation", "refresh_snapshot"}
    for job in fetched:
        assert job is not None and job.id is not None
        assert await job_status(store, job.id) == "doing"
        assert manager.take_begun(job.id) is None


@pytest.mark.clause("OP-16")
async def test_a_fetch_and_a_retried_creation_holding_its_session_do_not_deadlock(
    store: Store, sim: Any, app: App, database_url: str
) -> None:
    """A retried CreateSession holds its Session's row and defers the job, which waits on the job's
    row; the fetch holds the job's row. The fetch leaves a Session locked elsewhere to the job."""
    await apply_agent(store, sim)
    manager = app.job_manager
    assert isinstance(manager, WorkerJobManager)
    manager.begin_operations_at_fetch(30)
    adm = await store.admit_create("alice", "retried", "kagent", AGENT, "")
    worker_id = await manager.register_worker()
    async with await psycopg.AsyncConnection.connect(database_url) as retry:
        async with retry.transaction():
            await retry.execute("SELECT 1 FROM sessionq.sessions WHERE id = %s FOR UPDATE", (adm.session.id,))
            fetch = asyncio.ensure_future(manager.fetch_job(["operations"], worker_id))
            done, _ = await asyncio.wait({fetch}, timeout=5)
            assert done, "the fetch waited for the Session's row while holding its job's"
            job = fetch.result()
            assert job is not None and job.id is not None and manager.take_begun(job.id) is None
            # the retry joins the creation and makes sure a job waits (the fetched one is running)
            cur = await retry.execute("SELECT outcome FROM sessionq.admit_create(%s, %s, %s, %s, %s)",
                                      ("alice", "retried", "kagent", AGENT, ""))
            assert (await cur.fetchone()) == ("joined",)
    assert await job_status(store, job.id) == "doing"
    assert await count(store, "SELECT count(*) FROM procrastinate_jobs WHERE status = 'todo' "
                              "AND task_name = 'execute_operation'") == 1
    out = await OperationExecutor(store, sim, 30).run(adm.session.id, job_id=job.id)
    assert out.status == "completed" and out.session is not None and out.session.state == "READY"


@pytest.mark.clause("OP-16")
async def test_racing_creation_retries_and_fetches_all_end(store: Store, sim: Any, app: App) -> None:
    await apply_agent(store, sim)
    manager = app.job_manager
    assert isinstance(manager, WorkerJobManager)
    manager.begin_operations_at_fetch(30)
    ids = [f"race-retry-{i}" for i in range(10)]
    for rid in ids:
        await store.admit_create("alice", rid, "kagent", AGENT, "")
    workers = [await manager.register_worker() for _ in range(3)]
    # every retry and every fetch ends (a deadlock aborts one of them with an error)
    results = await asyncio.gather(
        *(store.admit_create("alice", rid, "kagent", AGENT, "") for rid in ids for _ in range(2)),
        *(manager.fetch_job(["operations"], workers[i % 3]) for i in range(20)),
    )
    assert all(r.outcome == AdmissionOutcome.JOINED for r in results[:20])  # type: ignore[union-attr]
    fetched = [job for job in results[20:] if job is not None]
    sessions = await count(store, "SELECT count(*) FROM sessionq.sessions WHERE operation = 'CREATE'")
    assert sessions == 10 and len({job.task_kwargs["session_id"] for job in fetched}) == 10  # type: ignore[union-attr]
