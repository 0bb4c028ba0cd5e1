"""The Python bridge to procrastinate: the one module that uses anything of procrastinate's beyond
its public API.

Everything else in sessionq uses procrastinate's public API only (`App`, `@app.task`,
`defer_async`, periodic tasks, `JobContext`, `RetryStrategy`, `PsycopgConnector`, the public
methods of `JobManager`) and this module for the rest; the SQL side has its own bridge
(schema/05_procrastinate.sql). What this module assumes of procrastinate's internals is pinned by
tests/bridge/ (docs/operating.md, "Upgrading procrastinate"):

- how a worker fetches a job and ends a job attempt: `WorkerJobManager` overrides
  `JobManager.fetch_job` (paused queues are left out: sessionq.fetch_job; an execute_operation
  job's operation begins in the same statement: sessionq.fetch_job_begun), `JobManager.finish_job`
  and `JobManager.retry_job` (the attempt is recorded in sessionq.job_attempts in the same
  transaction: sessionq.end_job_attempt, retry_job_attempt), which procrastinate's `Worker` calls
  through `app.job_manager`;
- how a worker sees the error of an attempt: a worker middleware (`Worker(worker_middleware=...)`,
  `AttemptObserver`) notes the exception that ended it, for the manager to record;
- how a queue gets a bounded share of a worker's slots (`WorkerJobManager.limit_queues`): the
  manager's `fetch_job` leaves out a queue while the worker runs its limit of that queue's jobs,
  and the worker middleware wakes the worker's fetch loop (the private `Worker._new_job_event`,
  which procrastinate sets on a job notification) when one of them ends;
- how a worker is started, observed and stopped: `RunningWorker` wraps `procrastinate.worker.Worker`
  (its `worker_id`, set once registered; its private `_running_jobs`; `shutdown_graceful_timeout`;
  the graceful `stop()`), started with the app's `worker_defaults` as `App.run_worker_async` does;
- how a job's trace context reaches the worker: `sessionq.defer` adds a traced statement's
  `traceparent` to the job's args, and a worker middleware (`JobTrace`) takes it out of
  `Job.task_kwargs` before the task is called with them, running the job in a span of that trace;
- the task retry limits the reaper needs (`retry_limits`: `App.tasks`, `Task.retry_strategy`);
- where a worker's listener connects: `SessionConnector` overrides
  `PsycopgConnector._get_standalone_connection` (the connection `listen_notify` LISTENs on, opened
  apart from the pool) so that it goes to the direct URL while the pool's queries may go through a
  transaction pooler (database.directUrl).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from procrastinate import App, JobContext, PsycopgConnector, RetryStrategy
from procrastinate.exceptions import ConnectorException, JobAborted
from procrastinate.jobs import Job, Status
from procrastinate.manager import JobManager
from procrastinate.worker import Worker

from sessionq import metrics, telemetry
from sessionq.db.retry import with_db_retry
from sessionq.models import JobAttemptOutcome

log = logging.getLogger(__name__)

# The procrastinate release (major.minor) whose internals this module and schema/05_procrastinate.sql
# were checked against; tests/bridge fails on any other, so an upgrade is always reviewed.
CHECKED_VERSION = "3.10"

# how long a worker keeps trying to record the end of a job attempt while PostgreSQL is unreachable
PERSIST_BUDGET = 30.0
MESSAGE_LIMIT = 2000  # characters of an attempt's error message kept (sessionq.job_attempts)
TRACEBACK_LIMIT = 8000  # characters of the end of its traceback kept
LINE_LIMIT = 500  # characters of one line of the traceback kept


# -- what ended an attempt --------------------------------------------------------------------------


@dataclass(frozen=True)
class AttemptError:
    """The error that ended a job attempt, bounded as sessionq.job_attempts keeps it."""

    error_type: str
    message: str
    traceback: str
    aborted: bool  # cancelled (a drain, an operator's abort) rather than failed

    @classmethod
    def of(cls, error: BaseException) -> AttemptError:
        kind = type(error)
        name = kind.__qualname__ if kind.__module__ in ("builtins", "asyncio.exceptions") else (
            f"{kind.__module__}.{kind.__qualname__}")
        message = " ".join(str(error).split()) or name
        # every line cut to LINE_LIMIT, so that a huge message leaves room for the frames
        lines = [line if len(line) <= LINE_LIMIT else line[:LINE_LIMIT] + "…\n"
                 for chunk in traceback.TracebackException.from_exception(error).format() for line in
                 chunk.splitlines(keepends=True)]
        text = "".join(lines)
        return cls(name[:200], message[:MESSAGE_LIMIT], text[-TRACEBACK_LIMIT:],
                   isinstance(error, JobAborted | asyncio.CancelledError))


class AttemptObserver:
    """A procrastinate worker middleware (async: it wraps every job on the event loop) that notes
    the exception ending an attempt for its WorkerJobManager, which records it with the attempt's
    end. It changes nothing of the job's outcome: the exception is raised again.

    When the job held a slot of a limited queue that was full, it also wakes the worker's fetch
    loop: the queue can be fetched from again, and procrastinate would otherwise look only at the
    next job notification or poll."""

    def __init__(self, manager: WorkerJobManager) -> None:
        self.manager = manager

    async def __call__(self, call_next: Callable[[], Awaitable[Any]], context: JobContext, worker: Any) -> Any:
        try:
            return await call_next()
        except BaseException as e:
            job_id = context.job.id if context.job else None
            if job_id is not None:
                self.manager.note_error(job_id, AttemptError.of(e))
            raise
        finally:
            if context.job is not None and self.manager.release_slot(context.job):
                worker._new_job_event.set()


class JobTrace:
    """A procrastinate worker middleware: the W3C `traceparent` a traced statement added to the
    job's args (schema/06_jobs.sql, sessionq.defer) is taken out of the keyword arguments the task
    is called with, and the job runs in a consumer span `job <task>` of that trace (made only when
    tracing is on in this process; a job without one makes no span)."""

    async def __call__(self, call_next: Callable[[], Awaitable[Any]], context: JobContext, worker: Any) -> Any:
        job = context.job
        traceparent = job.task_kwargs.pop("traceparent", None) if job is not None else None
        if traceparent is None or not telemetry.tracing() or job is None:
            return await call_next()
        with telemetry.span(f"job {job.task_name}", parent=str(traceparent), kind=telemetry.CONSUMER,
                            attributes={"messaging.system": "procrastinate", "messaging.message.id": str(job.id),
                                        "messaging.destination.name": job.queue}):
            return await call_next()


# -- ending job attempts ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Begun:
    """What the fetch of an execute_operation job began (sessionq.fetch_job_begun): the executor
    id it began as, when the fetch was sent (time.monotonic(): the claim's lifetime counts from
    there) and the fetched row, whose begun_* columns are sessionq.begin_operation's answer."""

    executor: uuid.UUID
    sent_at: float
    row: Mapping[str, Any]


class WorkerJobManager(JobManager):
    """procrastinate's JobManager with these changes to how a worker fetches jobs and records the
    end of a job attempt (`fetch_job`, `finish_job`, `retry_job`):

    - Fetching leaves out the paused queues (sessionq.fetch_job; `sessionq queues pause`), and
      a limited queue (`limit_queues`) while the worker fetching runs its limit of that queue's
      jobs: those jobs can never take the slots the other queues' jobs need.
    - With `begin_operations_at_fetch`, the fetch of an execute_operation job also begins its
      operation (sessionq.fetch_job_begun: begin_operation, the claim of a first creation
      attempt, in the fetch's transaction): one round trip less per operation. Nothing runs in
      between but the worker handing the job to its task, which takes it with `take_begun`.
    - Every attempt that ends is recorded in sessionq.job_attempts in the same transaction as its
      end (sessionq.end_job_attempt, retry_job_attempt): the error noted by the AttemptObserver
      middleware (type, message, the end of the traceback) goes with it. A job deleted at its
      success (delete_jobs = successful, jobs.retention 0s) takes its attempts along.

    - An execute_operation job can end in the transaction that completes its operation
      (sessionq.complete_operation deletes its row, as procrastinate does for a succeeded job under
      delete_jobs = 'successful'). The task says so (`ended_with_completion`) and the worker's own
      call is skipped: one round trip and one commit less per operation. When the task failed
      (`completion_uncertain`: if it got as far as its completion, that may have committed with its
      response lost), the attempt is looked up first, and only an attempt still open is ended by
      procrastinate.
    - The call is retried when the connection fails (a PostgreSQL restart or failover) with
      sessionq's `with_db_retry`, for up to `persist_budget` seconds, with the attempt looked up
      before each retry (the failed call may have committed). procrastinate makes the call once;
      a failure would leave the job `doing` under a live worker, which neither procrastinate nor
      the reaper would ever run again.
    """

    def __init__(self, connector: PsycopgConnector, *, persist_budget: float = PERSIST_BUDGET) -> None:
        super().__init__(connector=connector)
        self.persist_budget = persist_budget
        self._ended: set[int] = set()
        self._uncertain: set[int] = set()
        self._errors: dict[int, AttemptError] = {}
        self._limits: dict[str, int] = {}
        self._known_queues: tuple[str, ...] = ()
        self._slots: dict[int, tuple[int, str]] = {}  # job id -> (worker id, queue) of running limited jobs
        self._begin_lifetime: float | None = None  # set: execute_operation jobs begin at their fetch
        self._begun: dict[int, Begun] = {}  # job id -> what its fetch began, until the job takes it

    def limit_queues(self, limits: Mapping[str, int], known_queues: Iterable[str]) -> None:
        """Let each worker of this manager run at most limits[q] jobs of queue q at a time.
        `known_queues` are every queue the app's tasks use: a worker that fetches from every queue
        (queues None) fetches from these, but the full ones."""
        if any(n < 1 for n in limits.values()):
            raise ValueError(f"a queue limit must be at least 1: {dict(limits)}")
        self._limits = dict(limits)
        self._known_queues = tuple(known_queues)

    def running_in(self, worker_id: int, queue: str) -> int:
        """Jobs of the limited `queue` that worker `worker_id` runs now."""
        return sum(1 for w, q in self._slots.values() if w == worker_id and q == queue)

    def _fetchable(self, queues: Iterable[str] | None, worker_id: int) -> list[str] | None:
        """The queues a worker fetches from now (None: every queue): `queues` but the limited
        queues whose slots this worker holds all."""
        full = {q for q, limit in self._limits.items() if self.running_in(worker_id, q) >= limit}
        if not full:
            return list(queues) if queues is not None else None
        return [q for q in (queues if queues is not None else self._known_queues) if q not in full]

    def release_slot(self, job: Job) -> bool:
        """Forget the slot `job` held in its limited queue (once; later calls do nothing). Returns
        whether its worker had held every slot of that queue: it may fetch from it again."""
        held = self._slots.pop(job.id, None) if job.id is not None else None
        if held is None:
            return False
        worker_id, queue = held
        return self.running_in(worker_id, queue) + 1 >= self._limits[queue]

    def note_error(self, job_id: int, error: AttemptError) -> None:
        """The exception that ended the running attempt of `job_id` (AttemptObserver)."""
        self._errors[job_id] = error

    def observer(self) -> AttemptObserver:
        """The worker middleware that notes attempt errors for this manager."""
        return AttemptObserver(self)

    def begin_operations_at_fetch(self, lifetime: float) -> None:
        """Fetch an execute_operation job and begin its operation (sessionq.begin_operation, which
        claims a first attempt at a plain creation for `lifetime` seconds) in one statement
        (sessionq.fetch_job_begun); the job takes what was begun with `take_begun`."""
        self._begin_lifetime = lifetime

    def take_begun(self, job_id: int) -> Begun | None:
        """What the fetch of `job_id` began (once; None: nothing, or already taken)."""
        return self._begun.pop(job_id, None)

    async def fetch_job(self, queues: Any, worker_id: int) -> Job | None:
        fetchable = self._fetchable(queues, worker_id)
        if fetchable is not None and not fetchable:
            return None  # every queue it serves is full
        executor = uuid.uuid4() if self._begin_lifetime is not None else None
        fetched_at = time.monotonic()
        row = await self.connector.execute_query_one_async(
            "SELECT id, status, task_name, priority, lock, queueing_lock, args, scheduled_at, queue_name,"
            " attempts, worker_id, begun_status, begun_previous_executor, begun_expires_at, begun_session,"
            " begun_revision FROM sessionq.fetch_job_begun(%(queues)s::varchar[], %(worker_id)s, %(executor)s,"
            " %(lifetime)s)",
            queues=fetchable,
            worker_id=worker_id,
            executor=executor,
            lifetime=self._begin_lifetime,
        )
        if row["id"] is None:
            return None
        job = Job.from_row(row)
        if job.id is not None and executor is not None and row["begun_status"] is not None:
            self._begun[job.id] = Begun(executor, fetched_at, row)
        if job.id is not None and job.queue in self._limits:
            self._slots[job.id] = (worker_id, job.queue)
        return job

    def ended_with_completion(self, job_id: int) -> None:
        self._ended.add(job_id)

    def completion_uncertain(self, job_id: int) -> None:
        self._uncertain.add(job_id)

    async def _attempt_open(self, job: Job) -> bool:
        """Is this attempt of the job still running here (doing, on this worker, not retried)?"""
        row = await self.connector.execute_query_one_async(
            "SELECT count(*) AS n FROM procrastinate_jobs WHERE id = %(job_id)s AND status = 'doing'"
            " AND worker_id IS NOT DISTINCT FROM %(worker_id)s AND attempts = %(attempts)s",
            job_id=job.id,
            worker_id=job.worker_id,
            attempts=job.attempts,
        )
        return bool(row["n"])

    async def _end_attempt(self, job: Job, call: Callable[[], Awaitable[None]]) -> None:
        assert job.id is not None
        self._errors.pop(job.id, None)
        self._begun.pop(job.id, None)  # a job that never ran never took it
        self.release_slot(job)  # already released by the AttemptObserver, unless the job never ran
        if job.id in self._ended:  # ended by its operation's completion: succeeded
            self._ended.discard(job.id)
            return
        look_first = job.id in self._uncertain
        self._uncertain.discard(job.id)

        async def attempt() -> None:
            nonlocal look_first
            try:
                if look_first and not await self._attempt_open(job):
                    log.info("job %s: its attempt has already ended", job.id)
                    return
                look_first = True  # if this call fails, it may still have committed
                await call()
            except ConnectorException as e:
                if isinstance(e.__cause__, (psycopg.OperationalError, psycopg.InterfaceError)):
                    raise e.__cause__ from e  # a lost connection: with_db_retry tries again
                raise

        await with_db_retry(attempt, budget=self.persist_budget)

    async def finish_job(self, job: Job, status: Status, delete_job: bool) -> None:
        error = self._errors.get(job.id) if job.id is not None else None
        if status == Status.SUCCEEDED:
            error = None

        async def end() -> None:
            await self.connector.execute_query_async(
                "SELECT sessionq.end_job_attempt(%(job_id)s, %(status)s, %(delete)s, %(error_type)s, %(message)s,"
                " %(traceback)s)",
                job_id=job.id,
                status=status.value,
                delete=delete_job,
                error_type=error.error_type if error else None,
                message=error.message if error else None,
                traceback=error.traceback if error else None,
            )

        await self._end_attempt(job, end)
        metrics.JOB_ATTEMPTS.labels(task=job.task_name, outcome=status.value).inc()

    async def retry_job(
        self,
        job: Job,
        retry_at: datetime.datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        lock: str | None = None,
    ) -> None:
        error = self._errors.get(job.id) if job.id is not None else None
        outcome = JobAttemptOutcome.ABORTED if error is not None and error.aborted else JobAttemptOutcome.RETRIED

        async def retry() -> None:
            await self.connector.execute_query_async(
                "SELECT sessionq.retry_job_attempt(%(job_id)s, %(retry_at)s, %(priority)s, %(queue)s, %(lock)s,"
                " %(outcome)s, %(error_type)s, %(message)s, %(traceback)s)",
                job_id=job.id,
                retry_at=retry_at or datetime.datetime.now(datetime.UTC),
                priority=priority,
                queue=queue,
                lock=lock,
                outcome=outcome.value,
                error_type=error.error_type if error else None,
                message=error.message if error else None,
                traceback=error.traceback if error else None,
            )

        await self._end_attempt(job, retry)
        metrics.JOB_ATTEMPTS.labels(task=job.task_name, outcome=outcome.value).inc()


LISTEN_APPLICATION_NAME = "sessionq-listen-jobs"  # procrastinate's listener, as pg_stat_activity shows it


class SessionConnector(PsycopgConnector):
    """procrastinate's connector whose listener connects to `direct_url`.

    procrastinate runs each of its queries as one statement on a pooled connection (which may go
    through a pooler in transaction mode) but LISTENs on a standalone connection that it opens with
    the pool's conninfo (`_get_standalone_connection`, used by `listen_notify` only). A LISTEN
    through a transaction pooler would be lost at the next transaction, so that connection is
    opened on the direct URL here, with the pool's connection options (autocommit, as procrastinate's own)."""

    def __init__(self, *, direct_url: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.direct_url = direct_url

    @contextlib.asynccontextmanager
    async def _get_standalone_connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        options = dict(self._pool_args.get("kwargs") or {})
        options.pop("prepare_threshold", None)  # the pooler's constraint, not the direct server's
        options["application_name"] = LISTEN_APPLICATION_NAME
        async with await psycopg.AsyncConnection.connect(self.direct_url, **options, autocommit=True) as connection:
            yield connection


def install_job_manager(app: App, connector: PsycopgConnector) -> WorkerJobManager:
    """Make the workers of `app` (whose connector is `connector`) end job attempts through a
    WorkerJobManager; returns it."""
    manager = WorkerJobManager(connector)
    app.job_manager = manager
    return manager


def worker_job_manager(context: JobContext) -> WorkerJobManager | None:
    """The WorkerJobManager of the worker running this job, or None when its app has none (a
    plain procrastinate app: then nothing may skip procrastinate's own finish call)."""
    manager = context.app.job_manager if context.app else None
    return manager if isinstance(manager, WorkerJobManager) else None


# -- task retry limits ------------------------------------------------------------------------------


def retry_limits(app: App) -> dict[str, int | None]:
    """Task name -> how many attempts a job of it may make (None: unlimited, 0: never retried),
    following each task's procrastinate retry strategy."""
    limits: dict[str, int | None] = {}
    for name, task in app.tasks.items():
        strategy = task.retry_strategy
        if strategy is None:
            limits[name] = 0
        elif isinstance(strategy, RetryStrategy):
            limits[name] = strategy.max_attempts or None  # procrastinate: 0 / None means no limit
        else:
            limits[name] = None
    return limits


# -- running a worker -------------------------------------------------------------------------------


class RunningWorker:
    """One procrastinate worker of an open `app`, run as a task of this event loop: started,
    observed (its worker id once registered, its running jobs) and stopped gracefully.

    `options` are procrastinate's worker options (name, queues, concurrency,
    fetch_job_polling_interval, shutdown_graceful_timeout, stalled_worker_timeout,
    additional_context, delete_jobs, ...), over the app's worker_defaults as
    `App.run_worker_async` takes them; a worker named by neither gets `default_name`. Signal
    handlers are never installed: the process owns its signals (procrastinate's would replace them)."""

    def __init__(self, app: App, *, default_name: str, **options: Any) -> None:
        self.options: dict[str, Any] = {**app.worker_defaults, **options, "install_signal_handlers": False}
        self.options["name"] = str(self.options.get("name") or default_name)
        manager = app.job_manager
        middleware = [*self.options.get("worker_middleware", []), JobTrace()]
        if isinstance(manager, WorkerJobManager):  # attempt errors are recorded with the attempt
            middleware.append(manager.observer())
        self.options["worker_middleware"] = middleware
        app.perform_import_paths()
        self._worker = Worker(app=app, **self.options)
        self._task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return str(self.options["name"])

    @property
    def queues(self) -> list[str] | None:
        queues = self.options.get("queues")
        return list(queues) if queues is not None else None

    @property
    def concurrency(self) -> int:
        return int(self.options.get("concurrency") or 1)

    def start(self) -> asyncio.Task[None]:
        """Run the worker (registration, fetching, heartbeats) until it is stopped or ends by
        itself (e.g. a failed side task); the task raises what ended it, if anything."""
        assert self._task is None, "a worker runs once"
        self._task = asyncio.create_task(self._worker.run(), name=f"procrastinate-worker {self.name}")
        return self._task

    async def registered(self, stop: asyncio.Event | None = None) -> int | None:
        """Wait until procrastinate registered the worker (procrastinate_workers) and return its
        id, or None when the worker ended first or `stop` was set first (the database is slow or
        gone: there is nothing to drain yet). A stop() before registration would be lost."""
        assert self._task is not None, "start() first"
        while self._worker.worker_id is None and not self._task.done():
            if stop is not None and stop.is_set():
                return None
            await asyncio.sleep(0.01)
        if self._task.done():
            return None
        return int(self._worker.worker_id)  # type: ignore[arg-type]

    @property
    def worker_id(self) -> int | None:
        """procrastinate's id of the worker while it is registered (None before and after)."""
        worker_id = self._worker.worker_id
        return int(worker_id) if worker_id is not None else None

    @property
    def running_jobs(self) -> int:
        """Jobs this worker runs now (procrastinate keeps no public count)."""
        return len(self._worker._running_jobs)

    @property
    def graceful_timeout(self) -> float | None:
        """Seconds a stop waits for running jobs before aborting them (None: forever)."""
        return self._worker.shutdown_graceful_timeout

    @graceful_timeout.setter
    def graceful_timeout(self, seconds: float | None) -> None:
        self._worker.shutdown_graceful_timeout = seconds

    def stop(self) -> None:
        """Stop gracefully: fetch nothing new, let running jobs finish for up to graceful_timeout,
        then abort them cooperatively and deregister. The worker's task ends when that is done.
        Never cancel the task instead (a second cancellation orphans running jobs)."""
        self._worker.stop()
