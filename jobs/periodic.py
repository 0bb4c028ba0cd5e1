"""Periodic jobs (procrastinate periodic tasks, no cron daemon), once a minute: the leader-only idle
expiration (of Sessions, and of Sandboxes at their expires_at) and runtime revision GC, and the
stalled-turn check. procrastinate defers each tick once across all workers; the advisory-lock
leadership inside the first two makes sure no two replicas sweep at the same time (the stalled-turn
check needs none: it skips the rows another holds)."""

from __future__ import annotations

from procrastinate import App, JobContext
from sessionq.jobs.deps import deps
from sessionq.jobs.drain import default_worker_name as worker_name

from sessionq.domain.expiry import fail_stalled_turns as fail_stalled
from sessionq.domain.expiry import sweep
from sessionq.domain.gc import collect_revisions


async def expire_idle_sessions(context: JobContext, timestamp: int) -> dict[str, int]:
    d = deps(context)
    result = await sweep(d.store, d.executor, d.url, d.settings.sessions.idle_ttl, worker_name(), sandboxes=True)
    return {
        "leader": int(result.leader),
        "admitted": result.admitted,
        "expired": result.expired,
        "failed": result.failed,
    }


async def collect_runtime_revisions(context: JobContext, timestamp: int) -> dict[str, int]:
    d = deps(context)
    result = await collect_revisions(d.store, d.runtime, d.url, worker_name())
    return {"leader": int(result.leader), "collected": result.collected, "failed": result.failed}


async def fail_stalled_turns(context: JobContext, timestamp: int) -> dict[str, int]:
    d = deps(context)
    return {"failed": await fail_stalled(d.store, d.settings.sessions.stalled_turn_timeout)}


def register(app: App, *, expiry: bool) -> None:
    if expiry:  # the sweep itself skips idle Sessions when sessions.idleTtl is 0s (Sandboxes still expire)
        app.periodic(cron="* * * * *", periodic_id="expiry")(
            app.task(name="expire_idle_sessions", queue="periodic", pass_context=True)(expire_idle_sessions)
        )
    app.periodic(cron="* * * * *", periodic_id="revision_gc")(
        app.task(name="collect_runtime_revisions", queue="periodic", pass_context=True)(collect_runtime_revisions)
    )
    app.periodic(cron="* * * * *", periodic_id="stalled_turns")(
        app.task(name="fail_stalled_turns", queue="periodic", pass_context=True)(fail_stalled_turns)
    )
