"""The API and the workers on one database (`run_services`), as `sessionq serve` (the API) and
`sessionq worker` (the workers) run them and `sessionq up` composes them; the readiness watches;
`sessionq runtime serve` (a stand-in runtime served as ateapi.Control). Stopping: app/shutdown.py."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpc_health.v1 import health_pb2
from opentelemetry.sdk.trace import TracerProvider

from sessionq import metrics, telemetry, webserve
from sessionq.api.public import RUNTIME_HEALTH_SERVICE, PublicPort
from sessionq.api.server import ApiServer
from sessionq.app.runtimes import (
    ServedProcess,
    ServedSimulator,
    open_runtime,
    start_served_process,
    start_served_simulator,
    substrate_options,
)
from sessionq.app.shutdown import API_GRACE, EXIT_FORCED, Shutdown
from sessionq.app.startup import StartupError, check_tls_files, listen_error, why_failed
from sessionq.app.worker import run_worker
from sessionq.config import ConfigError, Settings
from sessionq.console.server import ConsoleServer
from sessionq.db import migrate
from sessionq.db.reachable import check_async
from sessionq.db.store import Store
from sessionq.jobs.drain import DrainRequest
from sessionq.runtime.simulator import install_schema

log = logging.getLogger("sessionq")


RUNTIME_HEALTH_INTERVAL = 5.0
RUNTIME_HEALTH_TIMEOUT = 2.0


async def _set_health(server: ApiServer, service: str, status: int) -> None:
    await server.set_health(service, status)


async def watch_runtime(server: ApiServer, runtime: Any, stop: asyncio.Event,
                        interval: float = RUNTIME_HEALTH_INTERVAL) -> None:
    """The readiness of the runtime, as the health service ``sessionq.runtime`` of the API (the
    Kubernetes readiness probe asks for it; liveness asks for "" and never depends on the
    runtime): SERVING while it answers, NOT_SERVING (with one log line per change) while not. The
    in-process simulator always answers."""
    check = getattr(runtime, "check_health", None)
    last: str | None = "unknown"
    while not stop.is_set():
        problem = await check() if check is not None else None
        if problem != last:
            status = health_pb2.HealthCheckResponse.SERVING if problem is None else (
                health_pb2.HealthCheckResponse.NOT_SERVING)
            await _set_health(server, RUNTIME_HEALTH_SERVICE, status)
            if problem is not None:
                log.warning("not ready: the runtime does not answer (%s); retrying", problem)
            elif last != "unknown":
                log.info("ready: the runtime answers again")
            last = problem
        if check is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)


READY_RECHECK = 1.0  # seconds between checks while not ready


async def watch_readiness(readiness: metrics.Readiness, store: Store, runtime: Any, stop: asyncio.Event,
                          interval: float = RUNTIME_HEALTH_INTERVAL) -> None:
    """The process's readiness, as its metrics server's ``/ready`` (the worker's readiness probe):
    ready while the database answers a query and the runtime its health check; checked every
    `interval` seconds while ready, every READY_RECHECK while not, with one log line per change."""
    check = getattr(runtime, "check_health", None)
    last: str | None = "starting"
    while not stop.is_set():
        problem: str | None = None
        try:
            async with asyncio.timeout(RUNTIME_HEALTH_TIMEOUT):
                async with store.pool.connection() as conn:
                    await conn.execute("SELECT 1")
        except Exception as e:  # any failure to answer is "not ready"
            problem = f"the database does not answer ({type(e).__name__})"
        if problem is None and check is not None:
            runtime_problem = await check()
            if runtime_problem is not None:
                problem = f"the runtime does not answer ({runtime_problem})"
        readiness.set(problem)
        if problem != last:
            if problem is not None:
                log.warning("not ready: %s; retrying", problem)
            elif last != "starting":
                log.info("ready again")
            last = problem
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval if problem is None else READY_RECHECK)
    readiness.set("stopping")  # draining: take no new traffic


async def prepare_database(url: str) -> None:
    await asyncio.to_thread(migrate.upgrade, url)
    await install_schema(url)


@dataclass
class _Running:
    """What run_services started: what its graceful stop stops and its clean-up undoes."""

    store: Store
    readiness: metrics.Readiness | None
    gauges: asyncio.Task[None] | None = None
    server: ApiServer | None = None  # the gRPC side of `public`
    public: PublicPort | None = None
    console: ConsoleServer | None = None
    worker_task: asyncio.Task[str] | None = None
    runtime_watch: asyncio.Task[None] | None = None
    ready_watch: asyncio.Task[None] | None = None
    telemetry: telemetry.Telemetry | None = None
    tracer: TracerProvider | None = None
    clean: bool = False  # stopped gracefully: nothing left to cut short


async def run_services(
    settings: Settings,
    url: str,
    *,
    api: bool,
    workers: bool,
    stop: asyncio.Event,
    on_ready: Callable[[int | None], Awaitable[None] | None] | None = None,
    shutdown: Shutdown | None = None,
    exit_on_drain: bool = True,
    on_worker_drained: Callable[[DrainRequest], None] | None = None,
    console_local_user: str | None = None,
    api_index: int | None = None,
) -> None:
    """Run the API and/or the workers on one database until `stop` is set, then stop cleanly:
    the API stops admitting (in-flight calls get up to API_GRACE seconds, at most
    workers.shutdownTimeout) while the workers drain. When `shutdown` forces the stop (this task
    is cancelled), the workers are cancelled, the API stops at once and the connections close
    without waiting. api_index: this is API process `api_index` of a supervised `serve`
    (app/supervisor.py): its ports are shared (SO_REUSEPORT), its metrics port is the configured
    one + api_index, and only process 0 serves the web console."""
    grace = min(API_GRACE, settings.workers.shutdown_timeout)
    if api:
        webserve.raise_fd_limit()  # the listeners' connection caps are sized from it
    # database.url may be a transaction pooler; what needs a session of its own (LISTEN, leadership,
    # procrastinate's listener, the simulator's session settings) connects to database.directUrl
    direct_url = settings.database.direct_url or url
    store = await Store.open(url, pool_size=settings.database.pool_size, listen=api, direct_url=direct_url,
                             coalesce_reads=settings.database.coalesce_reads)
    running = _Running(store, metrics.Readiness() if settings.metrics.enabled else None)
    try:
        if settings.metrics.enabled:
            _serve_metrics(settings, running.readiness, api_index)
            running.gauges = asyncio.create_task(metrics.refresh_gauges(store, stop))
        otlp = settings.telemetry.otlp
        running.telemetry = telemetry.start(otlp.endpoint, service="sessionq-api" if api else "sessionq-worker",
                                            interval=otlp.interval, insecure=otlp.insecure, protocol=otlp.protocol)
        running.tracer = telemetry.start_tracing(otlp.endpoint, service="sessionq-api" if api else "sessionq-worker",
                                                 ratio=settings.telemetry.tracing.sample_ratio, insecure=otlp.insecure,
                                                 protocol=otlp.protocol)
        async with open_runtime(settings, direct_url) as runtime:
            if api:
                await _start_api(running, settings, runtime, api_index, console_local_user)
            _watch_health(running, runtime, stop)
            if workers:
                running.worker_task = asyncio.create_task(run_worker(
                    settings, url, store, runtime, stop=stop, direct_url=direct_url, exit_on_drain=exit_on_drain,
                    on_drained=on_worker_drained))
            if on_ready is not None:
                r = on_ready(running.public.port if running.public else None)
                if r is not None:
                    await r
            await _wait_for_stop(running.worker_task, stop)
            await _stop_gracefully(running, stop, grace)
            running.clean = True
    finally:
        await _clean_up(running, shutdown)


def _serve_metrics(settings: Settings, readiness: metrics.Readiness | None, api_index: int | None) -> None:
    """The metrics server (and `/ready`) on metrics.address; API process N of a supervised
    `serve` on its port + N."""
    metrics_address = settings.metrics.address
    host, _, port = metrics_address.rpartition(":")
    if api_index and int(port):  # port 0 (any free port) stays 0
        metrics_address = f"{host}:{int(port) + api_index}"
    try:
        metrics.serve(metrics_address, readiness=readiness)
    except OSError as e:
        raise listen_error("metrics", "metrics.address", metrics_address, e) from None


async def _start_api(running: _Running, settings: Settings, runtime: Any, api_index: int | None,
                     console_local_user: str | None) -> None:
    """Start the public port (native gRPC, the A2A HTTP bindings and cards, health: api/public.py)
    and, unless this is another API process than the first, the web console; point simulated
    Actors at this API."""
    reuse_port = api_index is not None
    try:
        running.public = public = PublicPort(settings, running.store, runtime=runtime, reuse_port=reuse_port)
    except ConfigError as e:  # server.tls's files
        raise StartupError(f"invalid configuration: {e}") from None
    except (OSError, RuntimeError) as e:
        raise listen_error("the API", "server.address", settings.server.address, e) from None
    running.server = public.api
    try:
        await public.start()
    except OSError as e:
        raise listen_error("the API", "server.address", settings.server.address, e) from None
    if settings.server.console_address and not api_index:
        await _start_console(running, settings, console_local_user)
    if hasattr(runtime, "taskstore_address") and not settings.runtime.simulator.task_store_address:
        host = settings.server.address.rpartition(":")[0]
        # the stand-in runtime's Actors report here; on a TLS port (which they do not speak) they
        # report on the API's private socket instead, as this process's user (its directory's owner)
        runtime.taskstore_address = public.private.grpc_address if public.tls else f"{host}:{public.port}"


async def _start_console(running: _Running, settings: Settings, local_user: str | None) -> None:
    """The web console on server.consoleAddress. Under `up` (a local user) an address in use
    leaves the console off with a warning; otherwise it is a StartupError."""
    address = settings.server.console_address
    running.console = ConsoleServer(settings, running.store.pool, local_user=local_user)
    try:
        await running.console.start(address)
    except OSError as e:
        if local_user is None:
            raise listen_error("the web console", "server.consoleAddress", address, e) from None
        log.warning("the web console is off: cannot listen on %s (%s); set server.consoleAddress",
                    address, why_failed(e))
        running.console = None


def _watch_health(running: _Running, runtime: Any, stop: asyncio.Event) -> None:
    """The runtime's health on the API's health service, and the process's readiness."""
    if running.server is not None:
        running.runtime_watch = asyncio.create_task(watch_runtime(running.server, runtime, stop),
                                                    name="runtime health")
    if running.readiness is not None:
        running.ready_watch = asyncio.create_task(watch_readiness(running.readiness, running.store, runtime, stop),
                                                  name="readiness")


async def _wait_for_stop(worker_task: asyncio.Task[str] | None, stop: asyncio.Event) -> None:
    """Wait for `stop`. The worker pool ends early only when drained (`up` keeps running then);
    any other end of it is an error."""
    if worker_task is None:
        await stop.wait()
        return
    waiter = asyncio.create_task(stop.wait())
    await asyncio.wait({worker_task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    if worker_task.done() and not stop.is_set():
        # run_worker restarts procrastinate itself: only a drain ends it (`up` keeps running)
        if worker_task.result() != "drained":
            raise RuntimeError("the worker pool stopped unexpectedly")
        await stop.wait()


async def _stop_gracefully(running: _Running, stop: asyncio.Event, grace: float) -> None:
    """The console stops, the API stops admitting (in-flight calls get `grace` seconds) and says
    it no longer serves, and the workers drain."""
    if running.console is not None:
        await running.console.stop()
    if running.server is not None and running.public is not None:
        await _set_health(running.server, RUNTIME_HEALTH_SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)
        await running.public.stop(grace=grace)
    if running.worker_task is not None:
        stop.set()
        # not `await worker_task`: cancelling this task would then wait for the worker's drain
        await asyncio.wait({running.worker_task})
        running.worker_task.result()


async def _clean_up(running: _Running, shutdown: Shutdown | None) -> None:
    """After a graceful stop: close the store. After a forced stop or a failure (half-way through
    the start, say): cut short what still runs, without waiting for the workers' drain."""
    for watch in (running.runtime_watch, running.ready_watch):
        if watch is not None:
            watch.cancel()
    if running.worker_task is not None and not running.worker_task.done():
        running.worker_task.cancel()  # a forced stop (or a failure): do not wait for its drain
    if running.public is not None and not running.clean:  # forced, or a failure half-way through the start
        with contextlib.suppress(Exception):
            await running.public.stop(grace=0)
    if running.console is not None and not running.clean:
        with contextlib.suppress(Exception):
            await running.console.stop()
    if running.gauges is not None:
        running.gauges.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running.gauges
    forced = shutdown is not None and shutdown.forced is not None
    if running.telemetry is not None and not forced:
        await asyncio.to_thread(running.telemetry.shutdown)  # the last export
    if running.tracer is not None:
        await asyncio.to_thread(telemetry.stop_tracing, running.tracer)
    await running.store.close(timeout=0 if forced else 5.0)


async def serve(
    settings: Settings, *, api: bool, workers: bool, api_index: int | None = None, ready_file: str | None = None
) -> int:
    """`sessionq serve` (api) and `sessionq worker` (workers) until SIGINT/SIGTERM. Returns the
    exit status. api_index: one API process of a supervised `serve` (app/supervisor.py); it stops
    gracefully by itself when its supervisor disappears."""
    url = settings.database.url
    if not url:
        raise SystemExit("database.url is required (set it in the config file or SESSIONQ_DATABASE__URL)")
    if api and not settings.auth.tokens:
        log.warning("no auth.tokens configured: every call will be UNAUTHENTICATED")
    if settings.runtime.kind == "substrate":
        try:
            substrate_options(settings)  # the files and values must be usable: one line, not a traceback
        except ConfigError as e:
            raise StartupError(f"invalid configuration: {e}") from None
    if api:
        check_tls_files(settings)
    await check_async(url)  # DatabaseUnreachable: one line, not a traceback
    if settings.database.direct_url:
        await check_async(settings.database.direct_url)
    shutdown = Shutdown(settings.workers.shutdown_timeout)
    shutdown.install()
    orphan_watch = None
    if api_index is not None:
        # one API process of a supervised serve: the supervisor passes SIGINT/SIGTERM on (as SIGTERM);
        # a Ctrl-C in a terminal reaches the whole process group and would count twice here
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        orphan_watch = asyncio.create_task(_stop_when_orphaned(shutdown))
    try:
        def ready(_port: int | None) -> None:
            if ready_file:  # the supervisor's sign that this process served (app/supervisor.py)
                Path(ready_file).write_text(f"{os.getpid()}\n")

        await run_services(settings, url, api=api, workers=workers, stop=shutdown.stop, shutdown=shutdown,
                           api_index=api_index, on_ready=ready)
    except asyncio.CancelledError:
        if shutdown.forced is None:
            raise
        return EXIT_FORCED
    finally:
        if orphan_watch is not None:
            orphan_watch.cancel()
        shutdown.hand_over()
    return 0


async def _stop_when_orphaned(shutdown: Shutdown, interval: float = 1.0) -> None:
    """An API process of a supervised `serve` stops gracefully when its supervisor is gone."""
    parent = os.getppid()
    while not shutdown.stop.is_set():
        await asyncio.sleep(interval)
        if os.getppid() != parent:
            log.warning("the supervising `sessionq serve` (pid %d) is gone: stopping", parent)
            shutdown.begin()
            return


async def serve_runtime(settings: Settings, *, address: str | None = None, actor_address: str | None = None,
                        kind: str = "simulator", extensions: bool = True) -> int:
    """`sessionq runtime serve --simulator`: the simulator as an ateapi.Control server (its state
    in database.url's PostgreSQL, shared with every replica and with fault injection) until
    SIGINT/SIGTERM; `extensions=False` (`--no-extensions`): it behaves like a real Substrate
    (runtime/ateapi/server.py). With kind "process" (`--process`) the process runtime instead: one
    server per database, whose Actors are its child processes (all stopped when it stops). Returns
    the exit status."""
    # the simulator sets session state (asynchronous commit) on its connections: never a pooler
    url = settings.direct_url
    if not url:
        raise SystemExit("database.url is required (set it in the config file or SESSIONQ_DATABASE__URL)")
    await check_async(url)
    await install_schema(url)
    shutdown = Shutdown(settings.workers.shutdown_timeout)
    shutdown.install()
    try:
        served: ServedSimulator | ServedProcess
        try:
            if kind == "process":
                served = await start_served_process(settings, url, address=address, actor_address=actor_address)
            else:
                served = await start_served_simulator(settings, url, address=address, actor_address=actor_address,
                                                      extensions=extensions)
        except OSError as e:
            raise listen_error(f"the {kind} runtime", "runtime.simulator.serveAddress",
                               address or settings.runtime.simulator.serve_address, e) from None
        log.info("%s runtime serving ateapi.Control on port %d; Actors' A2A endpoints at %s%s",
                 kind, served.port, served.endpoints.pattern,
                 "" if extensions else " (no extensions: like a real Substrate)")
        try:
            await shutdown.stop.wait()
        finally:
            await served.stop()
    except asyncio.CancelledError:
        if shutdown.forced is None:
            raise
        return EXIT_FORCED
    finally:
        shutdown.hand_over()
    return 0
