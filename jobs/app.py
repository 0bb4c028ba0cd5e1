"""The procrastinate app of sessionq: every task, with its queue and retry policy.

SQL defers these tasks by name: a procedure queues one with `sessionq.defer(task, subject, args)`
(schema/06_jobs.sql, which declares each task's queue and lock in `sessionq.job_kinds`), itself
through the bridge's `sessionq.defer_job` (schema/05_procrastinate.sql); the names here are the contract.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from procrastinate import App, RetryStrategy
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from sessionq.jobs import (
    a2a,
    agents,
    bridge,
    bulk,
    checkpoints,
    dispatch,
    events,
    operations,
    periodic,
    purge,
    quiescence,
    reaper,
)

from sessionq.db.connection import FailFastPool, connect_kwargs, conninfo, pooler_kwargs

QUEUES = ("operations", "dispatch", "agents", "periodic", "a2a", "push")
# push notification deliveries wait on receivers outside sessionq's control: their own queue, of
# which a worker runs a bounded number at a time (run_worker: a2a.push.concurrency)
PUSH_QUEUE = "push"

# Lifecycle work must eventually finish even when no client retries: retry for a few minutes
# with growing waits (0, 1, 2, ... s); after that a client retry (or `sessionq jobs retry`) re-queues it.
OPERATION_RETRY = RetryStrategy(max_attempts=25, linear_wait=1)


async def _autocommit(conn: AsyncConnection[Any]) -> None:
    await conn.set_autocommit(True)


def _pool(**options: Any) -> AsyncConnectionPool:
    """procrastinate's pool, lighter: autocommit connections (each of its queries is one function
    call) and no liveness probe on every checkout (a broken connection fails one query, is
    discarded, and the supervised worker carries on). Like sessionq's own pools it fails fast
    while the database refuses connections (FailFastPool), so that a worker whose PostgreSQL is
    gone still stops within workers.shutdownTimeout."""
    options.pop("check", None)
    options.setdefault("kwargs", connect_kwargs(str(options.get("conninfo", ""))))
    return FailFastPool(**options, configure=_autocommit)


def build_app(
    url: str,
    *,
    pool_size: int = 4,
    expiry: bool = True,
    direct_url: str | None = None,
    queue_limits: Mapping[str, int] | None = None,
) -> App:
    """The app; its pool connects to `url` (which may be a transaction pooler: each of procrastinate's
    queries is one statement, and behind a pooler no statement is prepared), its listener to
    `direct_url` (default: `url`). `queue_limits`: queue -> how many of its jobs one worker of
    the app runs at most at a time (the rest of its concurrency stays for the other queues)."""
    kwargs = {**connect_kwargs(url), **pooler_kwargs(url, direct_url)}
    connector = bridge.SessionConnector(
        direct_url=conninfo(direct_url or url),
        conninfo=conninfo(url),
        min_size=1,
        max_size=pool_size,
        pool_factory=_pool,
        kwargs=kwargs,
    )
    app = App(connector=connector)
    manager = bridge.install_job_manager(app, connector)
    manager.limit_queues(queue_limits or {}, QUEUES)
    app.task(name="execute_operation", queue="operations", pass_context=True, retry=OPERATION_RETRY)(
        operations.execute_operation
    )
    app.task(name="prepare_revision", queue="agents", pass_context=True, retry=OPERATION_RETRY)(agents.prepare_revision)
    for fn in (checkpoints.create_checkpoint, checkpoints.delete_checkpoint, checkpoints.release_turn_snapshot):
        app.task(name=fn.__name__, queue="operations", pass_context=True, retry=OPERATION_RETRY)(fn)
    app.task(
        name="refresh_snapshot", queue="operations", pass_context=True, retry=RetryStrategy(max_attempts=60, wait=1)
    )(checkpoints.refresh_snapshot)
    app.task(
        name="retry_quiescence",
        queue="operations",
        pass_context=True,
        retry=RetryStrategy(max_attempts=5, linear_wait=2),
    )(quiescence.retry_quiescence)
    # a failed dispatch is ended (its task abandoned) rather than retried: the user sends again
    app.task(name="dispatch_turn", queue="dispatch", pass_context=True, retry=False)(dispatch.dispatch_turn)
    # A2A: a cancel retries until the Actor was told; a push notification retries with exponential
    # backoff (1, 2, 4, ... s) while its receiver fails, a2a.push.maxAttempts times in all
    app.task(name="cancel_task", queue="a2a", pass_context=True, retry=OPERATION_RETRY)(a2a.cancel_task)
    app.task(
        name="deliver_push",
        queue=PUSH_QUEUE,
        pass_context=True,
        retry=RetryStrategy(max_attempts=100, exponential_wait=1),
    )(a2a.deliver_push)
    # a bulk action: its pages admit ordinary operations; a failed page is retried from the last done
    app.task(name="run_bulk_action", queue="operations", pass_context=True, retry=OPERATION_RETRY)(bulk.run_bulk_action)
    periodic.register(app, expiry=expiry)
    reaper.register(app)
    purge.register(app)
    events.register(app)
    return app
