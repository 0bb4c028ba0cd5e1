"""The worker process: procrastinate workers that execute sessionq's jobs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, cast

from sessionq import telemetry
from sessionq.config import Settings
from sessionq.db.store import Store
from sessionq.domain.operations import OperationExecutor
from sessionq.domain.quiescence import QuiescencePool
from sessionq.jobs.app import PUSH_QUEUE, build_app
from sessionq.jobs.bridge import WorkerJobManager
from sessionq.jobs.deps import Deps
from sessionq.jobs.drain import DrainRequest, default_worker_name, run_drainable_worker, unless_stopped
from sessionq.metrics import REVISION_GC
from sessionq.runtime.base import Substrate
from sessionq.runtime.traced import TracedSubstrate

log = logging.getLogger(__name__)


def push_slots(settings: Settings) -> int:
    """How many push deliveries a worker runs at most at a time: a2a.push.concurrency, but never
    every slot of workers.concurrency (one stays for the other queues), unless there is only one."""
    return max(1, min(settings.a2a.push.concurrency, settings.workers.concurrency - 1))


async def run_worker(
    settings: Settings,
    url: str,
    store: Store,
    runtime: Substrate,
    *,
    stop: asyncio.Event,
    name: str | None = None,
    queues: list[str] | None = None,
    exit_on_drain: bool = True,
    on_drained: Callable[[DrainRequest], None] | None = None,
    direct_url: str | None = None,
) -> str:
    """Run the job workers until `stop` is set, then drain: stop fetching, let running jobs
    finish (up to workers.shutdownTimeout) and return "stopped". A drain request (`sessionq
    workers drain`) drains them the same way and returns "drained"; it also sets `stop` (the
    process exits) unless `exit_on_drain` is false (`sessionq up`: its API and PostgreSQL keep
    running), and calls `on_drained`. procrastinate's queries go to `url` (may be a transaction
    pooler); the listeners (procrastinate's, quiescence, drains) and the leadership locks to
    `direct_url` (default: `url`)."""
    keep_jobs = settings.jobs.retention > 0
    direct = direct_url or url
    if telemetry.tracing():  # each runtime call a span of the job's (or suspend's) trace
        runtime = cast(Substrate, TracedSubstrate(runtime))
    executor = OperationExecutor(store, runtime, settings.sessions.claim_lifetime, keep_jobs=keep_jobs)
    # Sandboxes expire even when sessions.idleTtl is 0s
    app = build_app(url, expiry=True, direct_url=direct, queue_limits={PUSH_QUEUE: push_slots(settings)})
    if isinstance(app.job_manager, WorkerJobManager):  # an operation begins with its job's fetch
        app.job_manager.begin_operations_at_fetch(settings.sessions.claim_lifetime)
    quiescence = QuiescencePool(
        store,
        runtime,
        direct,
        workers=settings.sessions.quiescence_workers,
        batch=settings.sessions.quiescence_batch,
        recovery_interval=settings.sessions.quiescence_recovery_interval,
        attempt_timeout=settings.sessions.quiescence_attempt_timeout,
        retry_max=settings.sessions.quiescence_retry_max,
        drain_timeout=settings.workers.shutdown_timeout,
        turn_snapshots=settings.sessions.turn_snapshots,
        keep_warm=settings.sessions.keep_warm,
        paused_ttl=settings.sessions.paused_runtime_ttl,
    )
    quiescence_stop = asyncio.Event()
    quiescence_task = asyncio.create_task(quiescence.run(quiescence_stop), name="quiescence")
    try:
        return await _run_procrastinate(app, settings, direct, store, runtime, executor, stop=stop, name=name,
                                        queues=queues, exit_on_drain=exit_on_drain, on_drained=on_drained)
    finally:
        quiescence_stop.set()
        await quiescence_task
        REVISION_GC.stop()  # no pending gauge once GC stops


async def _run_procrastinate(
    app: Any,
    settings: Settings,
    direct_url: str,
    store: Store,
    runtime: Substrate,
    executor: OperationExecutor,
    *,
    stop: asyncio.Event,
    name: str | None,
    queues: list[str] | None,
    exit_on_drain: bool = True,
    on_drained: Callable[[DrainRequest], None] | None = None,
) -> str:
    """Run procrastinate's worker until `stop` (SIGTERM, Ctrl-C) or a drain request, then stop it
    gracefully: no new fetches, running jobs finish (up to workers.shutdownTimeout). If it stops on
    its own - procrastinate gives up when the database is unreachable - restart it with backoff
    instead of letting the process die."""

    async def open_app() -> None:
        await app.open_async()

    delay = 1.0
    while not stop.is_set():
        try:
            try:
                if not await unless_stopped(open_app(), stop):  # stopped while the database is slow or gone
                    return "stopped"
                outcome = await run_drainable_worker(
                    app,
                    url=direct_url,  # the drain listener and its small pool
                    stop=stop,
                    check_interval=settings.workers.poll_interval,
                    exit_on_drain=exit_on_drain,
                    on_drained=on_drained,
                    keep_warm=settings.sessions.keep_warm,  # shown to operators (quiescence_backlog)
                    name=name or default_worker_name(),
                    queues=queues,
                    concurrency=settings.workers.concurrency,
                    fetch_job_polling_interval=settings.workers.poll_interval,
                    shutdown_graceful_timeout=settings.workers.shutdown_timeout,
                    stalled_worker_timeout=settings.workers.stall_timeout,
                    additional_context={"deps": Deps(settings, store, runtime, executor, direct_url)},
                    # succeeded jobs are kept as history for jobs.retention (purged by jobs/purge.py)
                    delete_jobs="never" if settings.jobs.retention > 0 else "successful",
                )
            finally:
                # also after a failed opening: procrastinate keeps the pool that timed out (closed)
                # and would reuse it on the next attempt unless it is closed here
                with contextlib.suppress(Exception):
                    await app.close_async()
            if outcome != "exited":  # "stopped" (stop was set) or "drained" (a drain request)
                return outcome
            log.error("the procrastinate worker stopped (a side task failed); restarting in %.0f s", delay)
        except Exception as e:  # e.g. the database is unreachable
            log.error("the procrastinate worker failed (%s); restarting in %.0f s", e, delay)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=delay)
        delay = min(delay * 2, 30.0)
    return "stopped"
