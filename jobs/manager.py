"""procrastinate's JobManager as sessionq's workers use it."""

from __future__ import annotations

import datetime
import logging

from procrastinate import PsycopgConnector
from procrastinate.jobs import Job, Status
from procrastinate.manager import JobManager

log = logging.getLogger(__name__)


class OperationJobManager(JobManager):
    """procrastinate's JobManager, aware that an execute_operation job can end in the transaction
    that completes its operation (sessionq.complete_operation deletes its row, as procrastinate
    does for a succeeded job under delete_jobs = 'successful').

    The task says which of its jobs ended that way (`ended_with_completion`); the worker's own
    finish or retry call for such a job is skipped: one round trip and one commit less per
    operation. When the task failed after trying to complete (`completion_uncertain`: a lost
    response of the completion), the job is looked up first, and only a job still running is
    finished or retried by procrastinate."""

    def __init__(self, connector: PsycopgConnector) -> None:
        super().__init__(connector=connector)
        self._ended: set[int] = set()
        self._uncertain: set[int] = set()

    def ended_with_completion(self, job_id: int) -> None:
        self._ended.add(job_id)

    def completion_uncertain(self, job_id: int) -> None:
        self._uncertain.add(job_id)

    async def _still_running(self, job: Job) -> bool:
        assert job.id is not None
        if job.id in self._ended:
            self._ended.discard(job.id)
            return False
        if job.id in self._uncertain:
            self._uncertain.discard(job.id)
            row = await self.connector.execute_query_one_async(
                "SELECT count(*) AS n FROM procrastinate_jobs WHERE id = %(job_id)s AND status = 'doing'",
                job_id=job.id,
            )
            if not row["n"]:
                log.info("job %s ended with its operation's completion", job.id)
                return False
        return True

    async def finish_job(self, job: Job, status: Status, delete_job: bool) -> None:
        if await self._still_running(job):
            await super().finish_job(job, status, delete_job)

    async def retry_job(
        self,
        job: Job,
        retry_at: datetime.datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        lock: str | None = None,
    ) -> None:
        if await self._still_running(job):
            await super().retry_job(job, retry_at=retry_at, priority=priority, queue=queue, lock=lock)
