"""Job: execute the current lifecycle operation of one Session (queue ``operations``)."""

from __future__ import annotations

import logging
from uuid import UUID

from procrastinate import JobContext
from sessionq.jobs.bridge import worker_job_manager
from sessionq.jobs.deps import deps

from sessionq.domain.operations import OutcomeStatus
from sessionq.models import OperationStart

log = logging.getLogger(__name__)


async def execute_operation(context: JobContext, session_id: str) -> OutcomeStatus:
    """Deferred by admission (queueing lock ``operation:<session id>``). Runs the claim protocol;
    when another attempt holds a live claim, re-queues itself for when that claim lapses (a
    crashed executor's claim expires, and this job then takes over). The waiting job runs sooner
    when there is reason to: a newer generation, a client's retry, the holder's completion or
    release all make it due now (sessionq.run_waiting_job). Errors after the claim release it and
    raise, so procrastinate retries with backoff."""
    d = deps(context)
    # the completion ends this job in its own transaction when the worker's JobManager can skip
    # its own finish call (jobs/bridge.py, WorkerJobManager)
    ending = worker_job_manager(context)
    job_id = context.job.id if ending is not None and context.job else None
    # the operation begun by the fetch of this job, if it was (WorkerJobManager.begin_operations_at_fetch)
    fetched = ending.take_begun(job_id) if ending is not None and job_id is not None else None
    begun = (fetched.executor, fetched.sent_at, OperationStart.from_row(fetched.row, "begun_")) if fetched else None
    try:
        outcome = await d.executor.run(UUID(session_id), job_id=job_id, begun=begun)
    except BaseException:
        if ending is not None and job_id is not None:
            ending.completion_uncertain(job_id)  # a lost response may hide a committed completion
        raise
    if ending is not None and job_id is not None and outcome.status == OutcomeStatus.COMPLETED:
        ending.ended_with_completion(job_id)
    if outcome.status == OutcomeStatus.BUSY and outcome.retry_at is not None:
        await d.store.queue_operation(UUID(session_id), outcome.retry_at)
    log.debug(
        "execute_operation %s: %s",
        session_id,
        outcome.status,
        extra={"session_id": session_id, "job_id": context.job.id if context.job else None},
    )
    return outcome.status
