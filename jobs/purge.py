"""Purge of job history: succeeded jobs are kept for jobs.retention, then purged (a periodic task every
minute, queue ``periodic``).

Each tick deletes succeeded jobs whose success was recorded more than jobs.retention ago, oldest
first, in batches of BATCH (sessionq.purge_job_history: the jobs, their events and their attempts),
up to MAX_BATCHES batches, so that one tick never holds locks or runs for long however large the
backlog; the next tick goes on. Failed, cancelled and aborted jobs stay until an operator acts.
"""

from __future__ import annotations

import logging

from procrastinate import App, JobContext
from sessionq.jobs.deps import deps

from sessionq.db.operator_store import OperatorStore

log = logging.getLogger(__name__)

TASK = "purge_job_history"
PERIODIC_ID = "sessionq-job-history"
BATCH = 1000
MAX_BATCHES = 20


async def purge(ops: OperatorStore, retention: float, *, batch: int = BATCH, max_batches: int = MAX_BATCHES) -> int:
    """Delete succeeded jobs older than `retention` seconds, `batch` at a time, at most
    `max_batches` batches; returns how many were deleted."""
    total = 0
    for _ in range(max_batches):
        deleted = await ops.purge_job_history(retention, batch)
        total += deleted
        if deleted < batch:
            break
    return total


def register(app: App) -> None:
    @app.periodic(cron="* * * * *", periodic_id=PERIODIC_ID)
    @app.task(name=TASK, queue="periodic", pass_context=True, queueing_lock=PERIODIC_ID)
    async def purge_job_history(context: JobContext, timestamp: int) -> int:
        d = deps(context)
        deleted = await purge(OperatorStore.from_pool(d.store.pool), d.settings.jobs.retention)
        if deleted:
            log.info("purged %d succeeded job(s) older than jobs.retention (%gs)", deleted, d.settings.jobs.retention)
        return deleted
