"""procrastinate's JobManager as sessionq's workers use it."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Awaitable, Callable

import psycopg
from procrastinate import PsycopgConnector
from procrastinate.exceptions import ConnectorException
from procrastinate.jobs import Job, Status
from procrastinate.manager import JobManager

from sessionq.db.retry import with_db_retry

log = logging.getLogger(__name__)

# how long a worker keeps trying to record the end of a job attempt while PostgreSQL is unreachable
PERSIST_BUDGET = 30.0


class WorkerJobManager(JobManager):
    """procrastinate's JobManager with two changes to how a worker records the end of a job
    attempt (`finish_job`, `retry_job`):

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
        if job.id in self._ended:
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
        await self._end_attempt(job, lambda: super(WorkerJobManager, self).finish_job(job, status, delete_job))

    async def retry_job(
        self,
        job: Job,
        retry_at: datetime.datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        lock: str | None = None,
    ) -> None:
        await self._end_attempt(
            job,
            lambda: super(WorkerJobManager, self).retry_job(
                job, retry_at=retry_at, priority=priority, queue=queue, lock=lock
            ),
        )
