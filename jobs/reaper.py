"""The reaper: periodic repair of work whose worker died (a periodic task every 15 s, queue ``periodic``).

1. Stalled jobs - `doing` on a worker whose heartbeat is older than the stall timeout (or whose
   worker row is gone) - are put back to run: procrastinate detects them but never retries them.
   A job whose queueing lock is held by a waiting job is cancelled instead (the waiting job does
   the same work; our jobs are idempotent), so the unique index never aborts the requeue. A job
   whose task would not be retried after a failure (no retry strategy, e.g. dispatch_turn, or no
   attempt left) is marked failed instead: a stall is a failure of that attempt.
2. Turn dispatch reservations that expired, or whose dispatch job is gone, are ended with
   sessionq.fail_dispatch (the unfinished task is abandoned, the caller told).
3. Housekeeping: worker rows dead for ten stall timeouts, worker_info rows of exited workers,
   old drain requests and job actions.

Every step is safe to run concurrently on several workers (rows are taken FOR UPDATE SKIP LOCKED
and re-checked), so no leader is needed; the periodic task's queueing lock keeps runs from piling up.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from procrastinate import App, JobContext
from sessionq.jobs.bridge import retry_limits
from sessionq.jobs.deps import deps

from sessionq.db.operator_store import OperatorStore, Row

log = logging.getLogger(__name__)



STALL_TIMEOUT = 30.0  # seconds; procrastinate heartbeats every 10 s
PRUNE_AFTER_STALLS = 10  # worker rows are pruned after this many stall timeouts without heartbeat


@dataclass
class ReapReport:
    jobs: list[Row] = field(default_factory=list)
    dispatches: list[Row] = field(default_factory=list)
    workers_pruned: int = 0

    @property
    def requeued(self) -> list[int]:
        return [r["job_id"] for r in self.jobs if r["action"] == "requeued"]

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for r in self.jobs:
            counts[r["action"]] = counts.get(r["action"], 0) + 1
        parts = [f"{n} stalled job(s) {a}" for a, n in sorted(counts.items())]
        if self.dispatches:
            parts.append(f"{len(self.dispatches)} dispatch(es) ended")
        if self.workers_pruned:
            parts.append(f"{self.workers_pruned} dead worker(s) pruned")
        return ", ".join(parts) or "nothing to do"


async def reap(ops: OperatorStore, *, stall_timeout: float = STALL_TIMEOUT,
               retry_limits: dict[str, int | None] | None = None, prune: bool = True) -> ReapReport:
    """One pass of the reaper. `retry_limits` (task name -> attempts it may make; see
    jobs/bridge.py, retry_limits) decides whether a stalled job is requeued or failed."""
    report = ReapReport()
    report.jobs = await ops.reap_stalled_jobs(stall_timeout, retry_limits or {})
    for r in report.jobs:
        extra: dict[str, Any] = {"job_id": r["job_id"]}
        log.warning("reaper: stalled job %s (%s on %s) %s%s", r["job_id"], r["task_name"], r["queue_name"],
                    r["action"], f": {r['detail']}" if r["detail"] else "", extra=extra)
    report.dispatches = await ops.end_dead_dispatches()
    for d in report.dispatches:
        log.warning("reaper: ended dispatch %s: %s", d["dispatch_id"], d["reason"],
                    extra={"session_id": str(d["session_id"])})
    if prune:
        pruned = await ops.prune(stall_timeout * PRUNE_AFTER_STALLS)
        report.workers_pruned = int(pruned["workers_pruned"])
    return report


# -- the periodic task ---------------------------------------------------------------------------

QUEUE = "periodic"  # with the other periodic jobs (jobs/periodic.py)
TASK = "reap"
PERIODIC_ID = "sessionq-reaper"
CRON = "* * * * * */15"  # procrastinate's optional sixth field: seconds (every 15 s, UTC)


def register(app: App) -> None:
    """Register the periodic reaper on `app`. Whether a stalled job is requeued or failed follows
    its task's retry policy, read from the app when the reaper runs (so the order of registration
    does not matter)."""

    @app.periodic(cron=CRON, periodic_id=PERIODIC_ID)
    @app.task(name=TASK, queue=QUEUE, pass_context=True, queueing_lock=PERIODIC_ID, priority=10)
    async def reap_tick(context: JobContext, timestamp: int) -> str:
        d = deps(context)
        report = await reap(
            OperatorStore.from_pool(d.store.pool),
            stall_timeout=d.settings.workers.stall_timeout,
            retry_limits=retry_limits(context.app),
        )
        summary = report.summary()
        log.debug("reaper tick %s: %s", timestamp, summary,
                  extra={"job_id": context.job.id if context.job else None})
        return summary
