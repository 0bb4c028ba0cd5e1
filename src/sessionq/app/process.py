"""Process entry points: `up` (everything in one process group), `serve` (API) and `worker`.

Stopping (`Shutdown`): the first SIGINT or SIGTERM starts a graceful stop - the API stops
admitting (in-flight calls get up to 5 s), the workers drain (running jobs get
workers.shutdownTimeout) - and the process exits 0. A second signal, or a graceful stop still
running FORCE_AFTER seconds past workers.shutdownTimeout (e.g. because PostgreSQL is gone and
nothing can be recorded), forces it: one ERROR line says why and what is cut short, running jobs
and calls are cancelled, connections close without waiting, the embedded PostgreSQL of `up` is
told to stop, and the process exits with status 1 within FORCE_BUDGET seconds whatever is still
running. A third signal exits at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import getpass
import logging
import os
import shutil
import signal
import socket
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, Any, Protocol

import yaml
from grpc_health.v1 import health_pb2

from sessionq import metrics, webserve
from sessionq.api.agentcard import AgentCardServer
from sessionq.api.server import ApiServer
from sessionq.app.runtimes import (
    ServedProcess,
    ServedSimulator,
    open_runtime,
    start_served_process,
    start_served_simulator,
    substrate_options,
)
from sessionq.app.worker import run_worker
from sessionq.config import ConfigError, Settings, grpc_message_limit
from sessionq.console.server import ConsoleServer
from sessionq.db import embedded, migrate
from sessionq.db.reachable import check_async
from sessionq.db.store import Store
from sessionq.jobs.drain import DrainRequest
from sessionq.runtime.simulator import install_schema

log = logging.getLogger("sessionq")

CLIENT_CONFIG = "client.yaml"
LOCK_FILE = "up.lock"  # held by the running `sessionq up` of a data directory
UP_CONSOLE = "127.0.0.1:8085"  # where `up` serves the web console unless server.consoleAddress says
FIRST_AGENT = Path("examples") / "my-first-agent.yaml"


class StartupError(Exception):
    """A common failure at start (an address in use, a data directory that cannot be used, a
    second `up` in one directory), told in one line by the CLI instead of a traceback."""


def _in_use(address: str) -> bool:
    """Whether a listener holds HOST:PORT (gRPC's bind error does not say why it failed)."""
    host, _, port = address.rpartition(":")
    try:
        infos = socket.getaddrinfo(host.strip("[]") or None, int(port), type=socket.SOCK_STREAM)
    except (OSError, ValueError):
        return False
    for family, kind, proto, _name, sockaddr in infos:
        with socket.socket(family, kind, proto) as probe:
            try:
                probe.bind(sockaddr)
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    return True
    return False


def _why(e: BaseException, address: str | None = None) -> str:
    if (isinstance(e, OSError) and e.errno == errno.EADDRINUSE) or "address already in use" in str(e).lower():
        return "the address is in use"
    if address is not None and "failed to bind" in str(e).lower() and _in_use(address):
        return "the address is in use"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror.lower()
    return " ".join(str(e).split()) or type(e).__name__


def listen_error(what: str, key: str, address: str, e: BaseException) -> StartupError:
    why = _why(e, address)
    return StartupError(f"cannot listen on {address} for {what}: {why} (another sessionq, or another program,"
                        f" may use it; set {key} to another HOST:PORT)")

API_GRACE = 5.0  # how long in-flight calls may finish when the API stops (at most workers.shutdownTimeout)
FORCE_AFTER = 2.0  # a graceful stop still running this long past workers.shutdownTimeout is forced
FORCE_BUDGET = 2.0  # a forced stop ends the process within this many seconds, whatever still runs
EXIT_FORCED = 1


class Shutdown:
    """SIGINT/SIGTERM handling of a long-running command; `stop` is the graceful stop's event.

    See the module's docstring. `on_force` registers what a forced stop must do at once; such an
    action must not wait (it runs on the event loop, or from the last-resort exit's thread when the
    loop is stuck) and runs once.
    """

    def __init__(self, timeout: float) -> None:
        self.stop = asyncio.Event()
        self.timeout = timeout
        self.forced: str | None = None  # why, once forced
        self.signals = 0
        self._loop = asyncio.get_running_loop()
        self._main = asyncio.current_task()
        self._timer: asyncio.TimerHandle | None = None
        self._actions: list[tuple[str, Callable[[], None]]] = []
        self._lock = threading.Lock()

    @property
    def limit(self) -> float:
        """How long a graceful stop may run before it is forced."""
        return self.timeout + FORCE_AFTER

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                self._loop.add_signal_handler(sig, self.signalled, sig)

    def on_force(self, what: str, action: Callable[[], None]) -> None:
        """Have a forced stop do `action` (named `what` in its line); at once if the stop was
        forced already. Any thread may call it."""
        with self._lock:
            self._actions.append((what, action))
            now = self.forced is not None
        if now:
            self._run_actions()

    def signalled(self, sig: int) -> None:
        self.signals += 1
        name = signal.Signals(sig).name
        if self.signals == 1:
            log.warning("%s: stopping gracefully (at most %gs; %s again forces the stop)", name, self.limit, name)
            self.begin()
        elif self.forced is None:
            self.force(f"a second signal ({name}) during the graceful stop")
        else:
            log.error("%s: a third signal; exiting now", name)
            self.exit_now()

    def begin(self) -> None:
        """Start the graceful stop; it is forced if still running after `limit` seconds."""
        self.stop.set()
        if self._timer is None:
            why = f"the graceful stop was still running after {self.limit:g}s"
            self._timer = self._loop.call_later(self.limit, self.force, why)
            self._exit_later(self.limit + FORCE_BUDGET, why)  # even if the event loop is stuck

    def force(self, why: str) -> None:
        """Cut the stop short: one line, the actions, the main task cancelled, and an exit within
        FORCE_BUDGET seconds whatever is still running."""
        if not self._announce(why):
            return
        self.stop.set()
        self._run_actions()
        self._exit_later(FORCE_BUDGET, why)
        if self._main is not None and not self._main.done():
            self._main.cancel()

    def _announce(self, why: str) -> bool:
        with self._lock:
            if self.forced is not None:
                return False
            self.forced = why
        what = ["running jobs and calls cancelled", "database connections closed without waiting",
                *(w for w, _ in self._actions)]
        log.error("forced stop (%s): %s; exit status %d", why, ", ".join(what), EXIT_FORCED)
        return True

    def _run_actions(self) -> None:
        with self._lock:
            actions, self._actions = self._actions, []
        for what, action in actions:
            try:
                action()
            except Exception as e:  # the others must still run
                log.error("forced stop: %s failed: %s", what, e)

    def _exit_later(self, delay: float, why: str) -> None:
        timer = threading.Timer(delay, self.exit_now, kwargs={"why": why})
        timer.daemon = True
        timer.start()

    def hand_over(self) -> None:
        """The command is done and its event loop about to close: closing resets the loop's signal
        handlers to the default action, and a signal that arrives while the process then waits for
        its threads would kill it without a word. The handlers leave the loop now, and from here a
        signal forces the exit at once, with the forced stop's line."""

        def late(signum: int, _frame: object) -> None:
            self.exit_now(f"a {signal.Signals(signum).name} while exiting")

        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                self._loop.remove_signal_handler(sig)
                signal.signal(sig, late)

    def exit_now(self, why: str = "a third signal") -> None:
        """The last resort (any thread): the forced stop's actions if not done yet, then exit."""
        self._announce(why)
        self._run_actions()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(EXIT_FORCED)


RUNTIME_HEALTH_SERVICE = "sessionq.runtime"
RUNTIME_HEALTH_INTERVAL = 5.0
RUNTIME_HEALTH_TIMEOUT = 2.0


async def _set_health(server: ApiServer, service: str, status: int) -> None:
    result = server.health.set(service, status)
    if hasattr(result, "__await__"):
        await result


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


async def _prepare_database(url: str) -> None:
    await asyncio.to_thread(migrate.upgrade, url)
    await install_schema(url)


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

    def forced() -> bool:
        return shutdown is not None and shutdown.forced is not None

    grace = min(API_GRACE, settings.workers.shutdown_timeout)
    if api:
        webserve.raise_fd_limit()  # the listeners' connection caps are sized from it
    # database.url may be a transaction pooler; what needs a session of its own (LISTEN, leadership,
    # procrastinate's listener, the simulator's session settings) connects to database.directUrl
    direct_url = settings.database.direct_url or url
    store = await Store.open(url, pool_size=settings.database.pool_size, listen=api, direct_url=direct_url,
                             coalesce_reads=settings.database.coalesce_reads)
    gauges = None
    server = None
    console: ConsoleServer | None = None
    worker_task: asyncio.Task[str] | None = None
    runtime_watch: asyncio.Task[None] | None = None
    readiness = metrics.Readiness() if settings.metrics.enabled else None
    ready_watch: asyncio.Task[None] | None = None
    clean = False
    try:
        if settings.metrics.enabled:
            metrics_address = settings.metrics.address
            host, _, port = metrics_address.rpartition(":")
            if api_index and int(port):  # port 0 (any free port) stays 0
                metrics_address = f"{host}:{int(port) + api_index}"
            try:
                metrics.serve(metrics_address, readiness=readiness)
            except OSError as e:
                raise listen_error("metrics", "metrics.address", metrics_address, e) from None
            gauges = asyncio.create_task(metrics.refresh_gauges(store, stop))
        async with open_runtime(settings, direct_url) as runtime:
            if api:
                try:
                    server = ApiServer(settings, store, runtime=runtime, reuse_port=api_index is not None)
                except (OSError, RuntimeError) as e:
                    raise listen_error("the gRPC API", "server.address", settings.server.address, e) from None
                await server.start()
                cards = AgentCardServer(
                    store,
                    server.auth,
                    settings.a2a.public_grpc_address or settings.server.address,
                    handler=server.a2a,
                    base_url=settings.a2a.public_url,
                    max_body_bytes=grpc_message_limit(settings.a2a.max_message_bytes),
                    allowed_hosts=settings.server.allowed_hosts,
                    max_connections=settings.server.http_max_connections,
                    header_timeout=settings.server.http_header_timeout,
                )
                try:
                    await cards.start(settings.server.http_address, reuse_port=api_index is not None)
                except OSError as e:
                    raise listen_error("agent cards", "server.httpAddress", settings.server.http_address, e) from None
                if settings.server.console_address and not api_index:
                    console = ConsoleServer(settings, store.pool, local_user=console_local_user)
                    try:
                        await console.start(settings.server.console_address)
                    except OSError as e:
                        if console_local_user is None:
                            raise listen_error("the web console", "server.consoleAddress",
                                               settings.server.console_address, e) from None
                        log.warning("the web console is off: cannot listen on %s (%s); set server.consoleAddress",
                                    settings.server.console_address, _why(e))
                        console = None
                if hasattr(runtime, "taskstore_address") and not settings.runtime.simulator.task_store_address:
                    host = settings.server.address.rpartition(":")[0]
                    runtime.taskstore_address = f"{host}:{server.port}"  # simulated Actors report here
            if server is not None:
                runtime_watch = asyncio.create_task(watch_runtime(server, runtime, stop), name="runtime health")
            if readiness is not None:
                ready_watch = asyncio.create_task(watch_readiness(readiness, store, runtime, stop), name="readiness")
            if workers:
                worker_task = asyncio.create_task(run_worker(settings, url, store, runtime, stop=stop,
                                                             direct_url=direct_url, exit_on_drain=exit_on_drain,
                                                             on_drained=on_worker_drained))
            if on_ready is not None:
                r = on_ready(server.port if server else None)
                if r is not None:
                    await r
            if worker_task is not None:
                waiter = asyncio.create_task(stop.wait())
                await asyncio.wait({worker_task, waiter}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                if worker_task.done() and not stop.is_set():
                    # run_worker restarts procrastinate itself: only a drain ends it (`up` keeps running)
                    if worker_task.result() != "drained":
                        raise RuntimeError("the worker pool stopped unexpectedly")
                    await stop.wait()
            else:
                await stop.wait()
            if console is not None:
                await console.stop()
            if server is not None:
                await cards.stop()
                await _set_health(server, RUNTIME_HEALTH_SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)
                await server.stop(grace=grace)
            if worker_task is not None:
                stop.set()
                # not `await worker_task`: cancelling this task would then wait for the worker's drain
                await asyncio.wait({worker_task})
                worker_task.result()
            clean = True
    finally:
        for watch in (runtime_watch, ready_watch):
            if watch is not None:
                watch.cancel()
        if worker_task is not None and not worker_task.done():
            worker_task.cancel()  # a forced stop (or a failure): do not wait for its drain
        if server is not None and not clean:  # forced, or a failure half-way through the start
            with contextlib.suppress(Exception):
                await server.stop(grace=0)
        if console is not None and not clean:
            with contextlib.suppress(Exception):
                await console.stop()
        if gauges is not None:
            gauges.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await gauges
        await store.close(timeout=0 if forced() else 5.0)


def process_root(data_dir: Path) -> str:
    """Where `up` keeps the process runtime's directories, snapshots and logs (runtime.kind: process)."""
    return str(data_dir.resolve() / "process-runtime")


def write_client_config(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def user_client_config() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "sessionq" / CLIENT_CONFIG


def lock_data_dir(data_dir: Path) -> IO[str]:
    """Take the data directory for this `up` (an exclusive lock on up.lock, held until the process
    exits); StartupError when another `up` holds it or the directory cannot be used."""
    lock_path = data_dir / LOCK_FILE
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        handle = lock_path.open("a+")
    except OSError as e:
        raise StartupError(
            f"cannot use the data directory {data_dir}: {(e.strerror or str(e)).lower()}; choose another with"
            " --data-dir, or make this one writable by you") from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        pid = handle.read().strip() or "?"
        handle.close()
        raise StartupError(
            f"sessionq is already running here: {display_path(lock_path)} is held by pid {pid}; use that one (its"
            " client config works as is), stop it with Ctrl-C, or start another with --data-dir") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def display_path(path: Path) -> str:
    """`path` relative to the working directory when it is below it, else absolute."""
    resolved = path.resolve()
    with contextlib.suppress(ValueError):
        return str(resolved.relative_to(Path.cwd().resolve()))
    return str(resolved)


def command_name(argv0: str | None = None) -> str:
    """How to run this sessionq again from this directory: `sessionq` when the shell finds this
    very executable on its PATH, else its path (e.g. `.venv/bin/sessionq` after `make up`)."""
    argv0 = argv0 or sys.argv[0]
    exe = Path(argv0)
    if exe.name != "sessionq" or not exe.exists():
        return "sessionq"
    found = shutil.which("sessionq")
    if found and Path(found).resolve() == exe.resolve():
        return "sessionq"
    inside = not exe.is_absolute() or exe.resolve().is_relative_to(Path.cwd().resolve())
    return display_path(exe) if inside else str(exe)


class OtherApiProcesses(Protocol):
    """The API processes 1..N-1 that `up` runs beside its own (app/supervisor.py's Supervisor)."""

    async def run_beside(self, stop: asyncio.Event) -> int: ...
    def kill(self) -> None: ...


# what the other API processes of `up` are started with: the API's settings that `up` computes
UP_SHARED_KEYS = ("database.url", "database.directUrl", "auth.anonymousUser", "runtime.kind",
                  "runtime.substrate.address", "runtime.substrate.uidPreflight",
                  "runtime.substrate.actorAddressPattern")


def up_runtime(settings: Settings, runtime: str | None) -> str:
    """The runtime `up` runs: `runtime` when given (`--runtime process|simulator`), else the
    configured Substrate when runtime.kind is substrate, else the process runtime (the tutorial's
    agent then runs in real processes, its memory in real snapshots)."""
    if runtime is not None:
        return runtime
    return "substrate" if settings.runtime.kind == "substrate" else "process"


async def up(settings: Settings, data_dir: Path, database_url: str | None, echo: Callable[[str], None],
             runtime: str | None = None, api_processes: int = 1,
             others: Callable[[Settings, dict[str, str]], OtherApiProcesses] | None = None) -> int:
    """The embedded default: PostgreSQL (embedded unless database_url), migrations, API on
    loopback, workers, the runtime (`up_runtime`: the process runtime unless told otherwise) and
    the web console, until Ctrl-C. Returns the exit status. A drain request (`sessionq workers
    drain`) drains only the workers: the API, the console and PostgreSQL keep running.
    StartupError for the common failures at start.

    api_processes N > 1 (server.processes set to N): this process is API process 0 and `others`
    makes the supervisor of processes 1..N-1 (`sessionq serve --api-index I`, the same settings),
    started once this one serves, all on one port (SO_REUSEPORT); Ctrl-C or SIGTERM stops them
    gracefully, and they have stopped before PostgreSQL does."""
    lock = lock_data_dir(data_dir)
    shutdown = Shutdown(settings.workers.shutdown_timeout)
    shutdown.install()
    try:
        kind = up_runtime(settings, runtime)
        return await _up(shutdown, settings.with_overrides(**{"runtime.kind": kind}), data_dir, database_url, echo,
                         api_processes, others)
    finally:
        lock.close()
        shutdown.hand_over()


async def _up(
    shutdown: Shutdown, settings: Settings, data_dir: Path, database_url: str | None, echo: Callable[[str], None],
    api_processes: int = 1, others: Callable[[Settings, dict[str, str]], OtherApiProcesses] | None = None,
) -> int:
    server: embedded.EmbeddedPostgres | None = None
    served: ServedSimulator | ServedProcess | None = None
    beside: asyncio.Task[int] | None = None
    status = 0
    try:
        psql = None
        if database_url:
            url = database_url
            psql = f'psql "{url}"'
            await check_async(url)
        else:

            def start_embedded() -> embedded.EmbeddedPostgres:
                started = embedded.start(data_dir)
                shutdown.on_force("the embedded PostgreSQL told to stop", started.stop_now)
                return started

            try:
                server = await asyncio.to_thread(start_embedded)
            except PermissionError as e:
                raise StartupError(
                    f"cannot start the embedded PostgreSQL in {data_dir}: permission denied"
                    f"{f' on {e.filename}' if e.filename else ''}; choose another --data-dir, or make this one"
                    " writable by you") from None
            url = server.url
            psql = server.psql_command()
        user = settings.auth.anonymous_user or getpass.getuser()
        overrides: dict[str, Any] = {"auth.anonymousUser": user}
        if not settings.server.console_address:
            overrides["server.consoleAddress"] = UP_CONSOLE
        settings = settings.with_overrides(**overrides)
        host, _, _ = settings.server.address.rpartition(":")
        if host not in ("127.0.0.1", "localhost", "::1", "[::1]"):
            raise SystemExit(
                f"sessionq up serves unauthenticated local calls and listens on loopback only, not {host}"
            )
        await _prepare_database(url)
        sq = command_name()
        if settings.runtime.kind == "process" and not settings.runtime.process.root:
            # the Actors' directories and snapshots live with up's other data
            settings = settings.with_overrides(**{"runtime.process.root": process_root(data_dir)})
        if settings.runtime.kind == "process":
            # as a real Substrate: the process runtime served as ateapi.Control on loopback (ports of
            # its own), reached through the gRPC adapter; it owns the Actors' processes
            served = await start_served_process(settings, url, address="127.0.0.1:0", actor_address="127.0.0.1:0")
            shutdown.on_force("the agents' processes killed", served.runtime.kill_children)
        elif settings.runtime.kind == "simulator" and settings.runtime.simulator.served:
            # the embedded default exercises the real client path: the simulator as an ateapi.Control
            # server on loopback (ports of its own), reached through the gRPC adapter
            served = await start_served_simulator(settings, url, address="127.0.0.1:0", actor_address="127.0.0.1:0")
        if served is not None:
            settings = settings.with_overrides(**{
                "runtime.kind": "substrate",
                "runtime.substrate.address": served.address,
                "runtime.substrate.uidPreflight": False,
                "runtime.substrate.actorAddressPattern": served.endpoints.pattern,
            })

        def ready(port: int | None) -> None:
            endpoint = f"{host}:{port}"
            client = {"server": endpoint, "user": user, "databaseUrl": url, "psql": psql}
            if served is not None:
                if not settings.runtime.simulator.task_store_address:
                    served.report_to(endpoint)  # the Actors report to the task store here
                client["runtimeAddress"] = served.address
                client["runtimeKind"] = served.kind
            for path in (data_dir.resolve() / CLIENT_CONFIG, user_client_config()):
                with contextlib.suppress(OSError):
                    write_client_config(path, client)
            echo(f"sessionq is up (user {user})")
            echo(f"  gRPC endpoint : {endpoint}  (reflection and health on; calls without a token are {user}'s)")
            echo(f"  web console   : http://{settings.server.console_address}/  (no login needed here)")
            echo(f"  psql          : {psql}")
            if isinstance(served, ServedProcess):
                echo(f"  runtime       : the process runtime (Actors are local OS processes, NOT isolated),"
                     f" in {settings.runtime.process.root}; `--runtime simulator` runs the simulator instead")
            elif served is not None:
                echo(f"  runtime       : the simulator, served as ateapi.Control at {served.address}")
            echo(f"  client config : {user_client_config()}")
            echo("  Next, in another terminal in this directory:")
            if FIRST_AGENT.exists():
                echo(f"    {sq} agent apply -f {FIRST_AGENT}")
                echo(f"    {sq} agent session create --agent my-first-agent")
            echo(f"    {sq} status")
            echo("  Ctrl-C stops everything.")
            if api_processes > 1 and others is not None:
                start_others(endpoint)

        def start_others(endpoint: str) -> None:
            nonlocal beside
            assert others is not None
            shared = settings.with_overrides(**{"database.url": url, "server.address": endpoint})
            env = shared.as_env(*UP_SHARED_KEYS)
            env["SESSIONQ_LOGGING__FORMAT"] = "text"  # as up's own lines
            supervisor = others(shared, env)
            shutdown.on_force("the other API processes killed", supervisor.kill)
            beside = asyncio.get_running_loop().create_task(supervisor.run_beside(shutdown.stop))
            echo(f"  API processes : {api_processes} on {endpoint} (SO_REUSEPORT; database connections: up to"
                 f" {api_processes * (settings.database.pool_size + 1)} for the API)")

        def drained(request: DrainRequest) -> None:
            who = f"drain {request.drain_id} requested by {request.requested_by}" if request.drain_id else "a drain"
            echo(f"sessionq's worker drained ({who}): no jobs run now; the API, the web console and PostgreSQL"
                 " keep running. Restart `sessionq up` to run jobs again (Ctrl-C stops everything).")

        if not shutdown.stop.is_set():  # a Ctrl-C while starting: nothing to run
            await run_services(
                settings, url, api=True, workers=True, stop=shutdown.stop, on_ready=ready, shutdown=shutdown,
                exit_on_drain=False, on_worker_drained=drained, console_local_user=user,
                api_index=0 if api_processes > 1 else None,
            )
    except asyncio.CancelledError:
        if shutdown.forced is None:
            raise
        return EXIT_FORCED
    finally:
        if beside is not None and shutdown.forced is None:
            # the other API processes stop (gracefully, since the stop began) before what they use
            shutdown.stop.set()
            with contextlib.suppress(Exception):
                status = await beside
        if served is not None and shutdown.forced is None:
            with contextlib.suppress(Exception):
                await served.stop()
        if server is not None and shutdown.forced is None:
            await asyncio.to_thread(server.stop)
    echo("sessionq stopped")
    return status


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
