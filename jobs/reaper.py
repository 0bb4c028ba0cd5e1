"""Job: the built-in reaper, every 15 seconds (queue ``periodic``; see sessionq.reaper)."""

from __future__ import annotations

import logging

from procrastinate import App, JobContext
from sessionq.jobs.deps import deps

from sessionq import reaper
from sessionq.operator_store import OperatorStore

log = logging.getLogger(__name__)

QUEUE = "periodic"  # with the other periodic jobs (jobs/periodic.py)
TASK = "reap"
PERIODIC_ID = "sessionq-reaper"
CRON = "* * * * * */15"  # procrastinate's optional sixth field: seconds (every 15 s, UTC)


def stall_timeout(settings: object) -> float:
    """workers.stallTimeout when the configuration has it, else the reaper's default (30 s)."""
    values = getattr(settings, "values", {})
    return float(values.get("workers.stallTimeout", reaper.STALL_TIMEOUT))


def register(app: App) -> None:
    """Register the periodic reaper on `app`. Whether a stalled job is requeued or failed follows
    its task's retry policy, read from the app when the reaper runs (so the order of registration
    does not matter)."""

    @app.periodic(cron=CRON, periodic_id=PERIODIC_ID)
    @app.task(name=TASK, queue=QUEUE, pass_context=True, queueing_lock=PERIODIC_ID, priority=10)
    async def reap(context: JobContext, timestamp: int) -> str:
        d = deps(context)
        report = await reaper.reap(
            OperatorStore.from_pool(d.store.pool),
            stall_timeout=stall_timeout(d.settings),
            retry_limits=reaper.retry_limits(context.app),
        )
        summary = report.summary()
        log.debug("reaper tick %s: %s", timestamp, summary,
                  extra={"job_id": context.job.id if context.job else None})
        return summary
