"""`sessionq up`: everything in one process group on this machine - PostgreSQL (embedded unless
given), migrations, the API on loopback, the workers, the runtime and the web console - with the
client config written and the data directory locked."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import getpass
import logging
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

import yaml

from sessionq.app.runtimes import ServedProcess, ServedSimulator, start_served_process, start_served_simulator
from sessionq.app.services import prepare_database, run_services
from sessionq.app.shutdown import EXIT_FORCED, Shutdown
from sessionq.app.startup import StartupError
from sessionq.config import Settings
from sessionq.db import embedded
from sessionq.db.reachable import check_async
from sessionq.jobs.drain import DrainRequest

log = logging.getLogger("sessionq")

CLIENT_CONFIG = "client.yaml"
LOCK_FILE = "up.lock"  # held by the running `sessionq up` of a data directory
UP_CONSOLE = "127.0.0.1:8085"  # where `up` serves the web console unless server.consoleAddress says
FIRST_AGENT = Path("examples") / "my-first-agent.yaml"


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


@dataclass
class _Started:
    """What `up` started, stopped when it ends (before what each uses)."""

    postgres: embedded.EmbeddedPostgres | None = None
    served: ServedSimulator | ServedProcess | None = None
    beside: asyncio.Task[int] | None = None  # the other API processes' supervisor


async def _up(
    shutdown: Shutdown, settings: Settings, data_dir: Path, database_url: str | None, echo: Callable[[str], None],
    api_processes: int = 1, others: Callable[[Settings, dict[str, str]], OtherApiProcesses] | None = None,
) -> int:
    started = _Started()
    status = 0
    try:
        url, psql = await _open_database(started, shutdown, data_dir, database_url)
        user = settings.auth.anonymous_user or getpass.getuser()
        settings = _local_settings(settings, user)
        host = settings.server.address.rpartition(":")[0]
        await prepare_database(url)
        settings = await _start_runtime(started, shutdown, settings, url, data_dir)

        def ready(port: int | None) -> None:
            endpoint = f"{host}:{port}"
            served = started.served
            if served is not None and not settings.runtime.simulator.task_store_address:
                served.report_to(endpoint)  # the Actors report to the task store here
            _write_client_configs(data_dir, {"server": endpoint, "user": user, "databaseUrl": url, "psql": psql},
                                  served)
            _tell_up(echo, settings, user, endpoint, psql, served)
            if api_processes > 1 and others is not None:
                _start_others(started, shutdown, settings.with_overrides(**{"database.url": url,
                                                                            "server.address": endpoint}),
                              others, echo, api_processes)

        if not shutdown.stop.is_set():  # a Ctrl-C while starting: nothing to run
            await run_services(
                settings, url, api=True, workers=True, stop=shutdown.stop, on_ready=ready, shutdown=shutdown,
                exit_on_drain=False, on_worker_drained=_tell_drained(echo), console_local_user=user,
                api_index=0 if api_processes > 1 else None,
            )
    except asyncio.CancelledError:
        if shutdown.forced is None:
            raise
        return EXIT_FORCED
    finally:
        status = await _stop_started(started, shutdown)
    echo("sessionq stopped")
    return status


async def _open_database(started: _Started, shutdown: Shutdown, data_dir: Path,
                         database_url: str | None) -> tuple[str, str]:
    """The database `up` runs on: `database_url` when given (it must answer), else the embedded
    PostgreSQL in `data_dir`, started. Returns its URL and the psql command that opens it."""
    if database_url:
        await check_async(database_url)
        return database_url, f'psql "{database_url}"'

    def start_embedded() -> embedded.EmbeddedPostgres:
        postgres = embedded.start(data_dir)
        shutdown.on_force("the embedded PostgreSQL told to stop", postgres.stop_now)
        return postgres

    try:
        started.postgres = postgres = await asyncio.to_thread(start_embedded)
    except PermissionError as e:
        raise StartupError(
            f"cannot start the embedded PostgreSQL in {data_dir}: permission denied"
            f"{f' on {e.filename}' if e.filename else ''}; choose another --data-dir, or make this one"
            " writable by you") from None
    return postgres.url, postgres.psql_command()


def _local_settings(settings: Settings, user: str) -> Settings:
    """`up`'s settings: calls without a token are `user`'s, webhooks may go to loopback, the web
    console on UP_CONSOLE unless configured; the API must listen on loopback (it serves unauthenticated local calls)."""
    # a local development setup: webhooks may go to a receiver on this machine
    overrides: dict[str, Any] = {"auth.anonymousUser": user, "webhooks.allowLoopback": True}
    if not settings.server.console_address:
        overrides["server.consoleAddress"] = UP_CONSOLE
    settings = settings.with_overrides(**overrides)
    host, _, _ = settings.server.address.rpartition(":")
    if host not in ("127.0.0.1", "localhost", "::1", "[::1]"):
        raise SystemExit(
            f"sessionq up serves unauthenticated local calls and listens on loopback only, not {host}"
        )
    return settings


async def _start_runtime(started: _Started, shutdown: Shutdown, settings: Settings, url: str,
                         data_dir: Path) -> Settings:
    """Serve the process runtime (or the simulator, when served) as a real Substrate: ateapi.Control
    on loopback (ports of its own), reached through the gRPC adapter. Returns the settings that
    point the API and the workers at it."""
    if settings.runtime.kind == "process" and not settings.runtime.process.root:
        # the Actors' directories and snapshots live with up's other data
        settings = settings.with_overrides(**{"runtime.process.root": process_root(data_dir)})
    if settings.runtime.kind == "process":
        # it owns the Actors' processes
        process = await start_served_process(settings, url, address="127.0.0.1:0", actor_address="127.0.0.1:0")
        started.served = process
        shutdown.on_force("the agents' processes killed", process.runtime.kill_children)
    elif settings.runtime.kind == "simulator" and settings.runtime.simulator.served:
        # the embedded default exercises the real client path
        started.served = await start_served_simulator(settings, url, address="127.0.0.1:0",
                                                      actor_address="127.0.0.1:0")
    if started.served is None:
        return settings
    return settings.with_overrides(**{
        "runtime.kind": "substrate",
        "runtime.substrate.address": started.served.address,
        "runtime.substrate.uidPreflight": False,
        "runtime.substrate.actorAddressPattern": started.served.endpoints.pattern,
    })


def _write_client_configs(data_dir: Path, client: dict[str, Any], served: ServedSimulator | ServedProcess | None,
                          ) -> None:
    """The client config (where the API, the database and the runtime are), in the data directory
    and as the user's; a location that cannot be written is skipped."""
    if served is not None:
        client["runtimeAddress"] = served.address
        client["runtimeKind"] = served.kind
    for path in (data_dir.resolve() / CLIENT_CONFIG, user_client_config()):
        with contextlib.suppress(OSError):
            write_client_config(path, client)


def _tell_up(echo: Callable[[str], None], settings: Settings, user: str, endpoint: str, psql: str,
             served: ServedSimulator | ServedProcess | None) -> None:
    """The lines `up` prints once it serves: where everything is, and the next commands."""
    sq = command_name()
    echo(f"sessionq is up (user {user})")
    echo(f"  API endpoint  : {endpoint}  (one port: native gRPC with reflection and health, gRPC-Web, A2A"
         f" at http://{endpoint}/api/a2a/..., MCP at http://{endpoint}/mcp; calls without a token are {user}'s)")
    echo(f"  web console   : http://{settings.server.console_address}/  (an operator's listener of its own, not on the"
         " API port; no login needed here)")
    echo(f"  psql          : {psql}")
    if isinstance(served, ServedProcess):
        level = served.runtime.isolation.value
        what = ("Actors are local OS processes, NOT isolated" if level == "none"
                else "each Actor in its own sandbox, egress enforced")
        echo(f"  runtime       : the process runtime, isolation {level} ({what}),"
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


def _start_others(started: _Started, shutdown: Shutdown, shared: Settings,
                  others: Callable[[Settings, dict[str, str]], OtherApiProcesses], echo: Callable[[str], None],
                  api_processes: int) -> None:
    """Start the supervisor of API processes 1..N-1 with `shared` (up's database and API address)."""
    env = shared.as_env(*UP_SHARED_KEYS)
    env["SESSIONQ_LOGGING__FORMAT"] = "text"  # as up's own lines
    supervisor = others(shared, env)
    shutdown.on_force("the other API processes killed", supervisor.kill)
    started.beside = asyncio.get_running_loop().create_task(supervisor.run_beside(shutdown.stop))
    echo(f"  API processes : {api_processes} on {shared.server.address} (SO_REUSEPORT; database connections:"
         f" up to {api_processes * (shared.database.pool_size + 1)} for the API)")


def _tell_drained(echo: Callable[[str], None]) -> Callable[[DrainRequest], None]:
    """What `up` says when its worker was drained (the rest keeps running)."""

    def drained(request: DrainRequest) -> None:
        who = f"drain {request.drain_id} requested by {request.requested_by}" if request.drain_id else "a drain"
        echo(f"sessionq's worker drained ({who}): no jobs run now; the API, the web console and PostgreSQL"
             " keep running. Restart `sessionq up` to run jobs again (Ctrl-C stops everything).")

    return drained


async def _stop_started(started: _Started, shutdown: Shutdown) -> int:
    """Stop, after a graceful stop, what `up` started: the other API processes first (their exit
    status is returned, 0 without them), then the served runtime, then the embedded PostgreSQL.
    After a forced stop nothing is waited for."""
    status = 0
    if started.beside is not None and shutdown.forced is None:
        # the other API processes stop (gracefully, since the stop began) before what they use
        shutdown.stop.set()
        with contextlib.suppress(Exception):
            status = await started.beside
    if started.served is not None and shutdown.forced is None:
        with contextlib.suppress(Exception):
            await started.served.stop()
    if started.postgres is not None and shutdown.forced is None:
        await asyncio.to_thread(started.postgres.stop)
    return status
