"""Draining a worker process: stop fetching, let running jobs finish, abort the rest, exit.

A drain is requested with `sessionq workers drain NAME|--all` (sessionq.request_drain): a durable
row in sessionq.worker_drains plus NOTIFY sessionq_drain, so it reaches the worker at once, on any
machine, and still reaches it after a lost notification (the worker checks the table at start and
every few seconds). SIGTERM / Ctrl-C (the process's `stop` event) drain the same way, with the
worker's own workers.shutdownTimeout.

`run_drainable_worker` runs one procrastinate worker so that it can be drained:

1. it starts procrastinate's worker (through the bridge, jobs/bridge.py: RunningWorker) and,
   once procrastinate registered it, records the process in sessionq.worker_info (name, host,
   pid, queues, concurrency) so operators can see and name it;
2. `watch_drains` waits for a drain request that applies to it;
3. on a request (or `stop`) it marks itself draining, stops fetching (RunningWorker.stop: the graceful
   path, never a second cancellation), waits for running jobs up to the drain timeout, then
   procrastinate aborts the rest cooperatively (their asyncio tasks are cancelled; a task with a
   retry strategy goes back to todo, so nothing is lost), unregisters, and returns;
4. after a drain request it sets `stop`, so the whole process exits cleanly (exit status 0) -
   unless the process has more to do than run this worker (`sessionq up`: exit_on_drain False),
   which is then told (`on_drained`) and keeps its API and PostgreSQL running.

No job runs twice because of a drain: a job is either finished by this worker or aborted and
retried once, by whichever worker fetches it next.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from procrastinate import App
from sessionq.jobs.bridge import RunningWorker

from sessionq import errors
from sessionq.db import notify
from sessionq.db.connection import Listener, make_pool
from sessionq.db.notify import Channel
from sessionq.db.operator_store import OperatorStore

log = logging.getLogger(__name__)

CHECK_INTERVAL = 5.0  # seconds between checks of the drain table (NOTIFY wakes sooner)


@dataclass(frozen=True)
class DrainRequest:
    """A drain this worker acts on. timeout None: the worker's own shutdown timeout."""

    drain_id: int | None
    timeout: float | None
    requested_by: str


async def unless_stopped(step: Awaitable[Any], stop: asyncio.Event) -> bool:
    """Await a start-up step (opening a pool, say) unless `stop` is set first, in which case the
    step is cancelled: a stop requested while PostgreSQL is unreachable does not wait out the
    step's own timeout. Returns whether the step completed."""
    task = asyncio.ensure_future(step)
    if not task.done():
        stop_wait = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({task, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop_wait.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        return False
    task.result()
    return True


def default_worker_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


async def watch_drains(
    ops: OperatorStore,
    url: str,
    worker_id: int,
    worker_name: str,
    on_drain: Callable[[DrainRequest], None],
    stop: asyncio.Event,
    *,
    interval: float = CHECK_INTERVAL,
) -> DrainRequest | None:
    """Wait until a drain request applies to this worker (procrastinate id `worker_id`, name
    `worker_name`): LISTEN sessionq_drain, plus a check at start and every `interval` seconds.
    Calls `on_drain` once and returns the request; returns None when `stop` is set first."""
    wake = asyncio.Event()
    wake.set()  # check at start: a request may have been made before this worker listened

    def notified(payload: str | None) -> None:
        if payload is None or notify.key_of(Channel.DRAIN, payload) in (notify.ALL_WORKERS, worker_name):
            wake.set()

    listener = Listener(url, [Channel.DRAIN], application_name="sessionq-listen-drain")
    listener.subscribe(Channel.DRAIN, notified)
    await listener.start()
    stop_wait = asyncio.create_task(stop.wait())
    try:
        while not stop.is_set():
            if not wake.is_set():
                wake_wait = asyncio.create_task(wake.wait())
                await asyncio.wait({wake_wait, stop_wait}, timeout=interval, return_when=asyncio.FIRST_COMPLETED)
                wake_wait.cancel()
                if stop.is_set():
                    break
            wake.clear()
            try:
                row = await ops.take_drain(worker_id)
            except (psycopg.Error, errors.SessionqError) as e:
                log.warning("cannot check for drain requests (%s); retrying in %.0fs", e, interval)
                continue
            if row is not None:
                request = DrainRequest(int(row["drain_id"]), row["timeout"], str(row["requested_by"]))
                on_drain(request)
                return request
        return None
    finally:
        stop_wait.cancel()
        await listener.stop()


@dataclass
class _Run:
    """One drainable run of a procrastinate worker: what its steps share, and what the clean-up
    must undo."""

    worker: RunningWorker
    name: str
    ops: OperatorStore
    run_task: asyncio.Task[Any]
    worker_id: int | None = None
    watcher: asyncio.Task[DrainRequest | None] | None = None
    watch_stop: asyncio.Event = field(default_factory=asyncio.Event)
    outcome: str = "exited"
    drained: DrainRequest | None = None
    keep_warm: float | None = None


async def run_drainable_worker(
    app: App,
    *,
    url: str,
    stop: asyncio.Event,
    check_interval: float = CHECK_INTERVAL,
    exit_on_drain: bool = True,
    on_drained: Callable[[DrainRequest], None] | None = None,
    keep_warm: float | None = None,
    **worker_options: Any,
) -> str:
    """Run one procrastinate worker of `app` (open) until `stop` is set or a drain request names
    it, then drain it. `worker_options` are procrastinate's (name, queues, concurrency,
    fetch_job_polling_interval, shutdown_graceful_timeout, additional_context, delete_jobs, ...);
    signal handlers are never installed (the process owns its signals). `keep_warm` (its quiescence
    workers' sessions.keepWarm) is recorded with the worker for operators.

    Returns "drained" (a drain request; `stop` is then set so the process exits, unless
    `exit_on_drain` is false; `on_drained` is called with the request), "stopped"
    (`stop` was set: SIGTERM) or "exited" (procrastinate's worker ended by itself, e.g. a failed
    side task: the caller decides whether to restart it). An exception that ended procrastinate's
    worker is raised."""
    worker = RunningWorker(app, default_name=default_worker_name(), **worker_options)
    pool = make_pool(url, min_size=1, max_size=2, name="sessionq-drain")
    if not await unless_stopped(pool.open(wait=True, timeout=30), stop):
        await pool.close(timeout=0)
        return "stopped"
    run = _Run(worker, worker.name, OperatorStore.from_pool(pool), worker.start(), keep_warm=keep_warm)
    try:
        return await _run_until_drained(run, url, stop, check_interval)
    except asyncio.CancelledError:
        # cancelled from outside: still drain gracefully, once
        if run.worker_id is not None and not run.run_task.done():
            await _drain(worker, run.run_task, DrainRequest(None, None, "cancelled"), run.name)
        raise
    finally:
        await _clean_up(run)
        await pool.close()
        if run.outcome == "drained":
            if on_drained is not None and run.drained is not None:
                on_drained(run.drained)
            if exit_on_drain:
                stop.set()  # the process exits cleanly


async def _run_until_drained(run: _Run, url: str, stop: asyncio.Event, check_interval: float) -> str:
    """Register the worker, wait for a drain request or `stop`, and drain; returns the outcome."""
    worker_id = await _register(run, stop)
    if worker_id is None:
        return run.outcome
    run.watcher = asyncio.create_task(
        watch_drains(run.ops, url, worker_id, run.name, lambda _r: None, run.watch_stop, interval=check_interval),
        name=f"drain-watcher {run.name}",
    )
    request = await _wait_for_request(run, stop)
    if run.run_task.done():
        run.run_task.result()  # raises what stopped it, if anything
        log.error("procrastinate worker %s stopped by itself (a side task failed)", run.name)
        return run.outcome
    if request is not None:
        run.outcome = "drained"
        run.drained = request
    else:
        run.outcome = "stopped"
        request = DrainRequest(None, None, "signal")
        with contextlib.suppress(psycopg.Error, errors.SessionqError):
            await run.ops.mark_draining(worker_id, None)
    await _drain(run.worker, run.run_task, request, run.name)
    return run.outcome


async def _register(run: _Run, stop: asyncio.Event) -> int | None:
    """Wait for procrastinate to register the worker, then record it in sessionq.worker_info so
    operators can see and name it. Returns its procrastinate id; None when it never registered
    (`stop` came first, or it failed at start: what made it fail is raised)."""
    # procrastinate registers the worker first thing; stop() before that is lost
    run.worker_id = await run.worker.registered(stop)
    if run.worker_id is None and stop.is_set() and not run.run_task.done():
        run.outcome = "stopped"  # not registered yet (the database is slow or gone): nothing to drain
        return None  # the clean-up cancels run_task
    if run.worker_id is None:
        run.run_task.result()  # raises what made it fail at start
        return None
    try:
        await run.ops.register_worker(run.worker_id, run.name, socket.gethostname(), os.getpid(),
                                      run.worker.queues, run.worker.concurrency, run.keep_warm)
    except psycopg.Error as e:  # the worker still works; it is just not visible by name
        log.warning("cannot record worker %s in sessionq.worker_info (%s)", run.name, e)
    log.info("worker %s started (procrastinate worker %s)", run.name, run.worker_id)
    return run.worker_id


async def _wait_for_request(run: _Run, stop: asyncio.Event) -> DrainRequest | None:
    """Wait until a drain request applies (returned), `stop` is set or procrastinate's worker ends
    (None). A failed drain watcher is logged and the worker keeps working until `stop`."""
    assert run.watcher is not None
    watcher = run.watcher
    request: DrainRequest | None = None
    waiting: set[asyncio.Future[Any]] = {run.run_task, watcher}
    while request is None and not stop.is_set() and not run.run_task.done():
        stop_wait = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({*waiting, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop_wait.cancel()
        if watcher in waiting and watcher.done():
            waiting.discard(watcher)
            if not watcher.cancelled() and watcher.exception() is None:
                request = watcher.result()
            else:  # a signal still drains it
                log.error("the drain watcher of %s failed; only a signal drains it now", run.name,
                          exc_info=None if watcher.cancelled() else watcher.exception())
    return request


async def _clean_up(run: _Run) -> None:
    """Stop the drain watcher, cancel procrastinate's worker if start-up failed half-way, and
    take the worker out of sessionq.worker_info."""
    run.watch_stop.set()
    if run.watcher is not None:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await run.watcher
    if not run.run_task.done():  # only when start-up failed half-way
        run.run_task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await run.run_task
    if run.worker_id is not None:
        with contextlib.suppress(psycopg.Error, errors.SessionqError):
            await run.ops.unregister_worker(run.worker_id)


async def _drain(worker: RunningWorker, run_task: asyncio.Task[Any], request: DrainRequest, name: str) -> None:
    if request.timeout is not None:
        worker.graceful_timeout = request.timeout
    running = worker.running_jobs
    timeout = worker.graceful_timeout
    log.info("worker %s draining (%s): %d running job(s), waiting up to %s before aborting them",
             name, f"drain {request.drain_id} by {request.requested_by}" if request.drain_id else request.requested_by,
             running, "forever" if timeout is None else f"{timeout:g}s")
    worker.stop()
    await asyncio.shield(run_task)
    log.info("worker %s drained", name)
