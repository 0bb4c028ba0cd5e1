"""Process entry points: `up` (everything in one process group), `serve` (API) and `worker`."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml

from sessionq import metrics
from sessionq.api.agentcard import AgentCardServer
from sessionq.api.server import ApiServer
from sessionq.app.worker import open_runtime, run_worker
from sessionq.config import Settings
from sessionq.db import embedded, migrate
from sessionq.db.store import Store
from sessionq.runtime.simulator import install_schema

log = logging.getLogger("sessionq")

CLIENT_CONFIG = "client.yaml"


def install_stop_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)


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
) -> None:
    """Run the API and/or the workers on one database until `stop` is set, then stop cleanly:
    the API first (no new admissions), then the workers drain."""
    store = await Store.open(url, pool_size=settings.database.pool_size, listen=api)
    gauges = None
    if settings.metrics.enabled:
        metrics.serve(settings.metrics.address)
        gauges = asyncio.create_task(metrics.refresh_queue_gauges(store, stop))
    try:
        async with open_runtime(settings, url) as runtime:
            server = None
            if api:
                server = ApiServer(settings, store, runtime=runtime)
                await server.start()
                cards = AgentCardServer(store, server.auth, f"grpc://{settings.server.address}")
                await cards.start(settings.server.http_address)
                if hasattr(runtime, "taskstore_address") and not settings.runtime.simulator.task_store_address:
                    host = settings.server.address.rpartition(":")[0]
                    runtime.taskstore_address = f"{host}:{server.port}"  # simulated Actors report here
            worker_task = None
            if workers:
                worker_task = asyncio.create_task(run_worker(settings, url, store, runtime, stop=stop))
            if on_ready is not None:
                r = on_ready(server.port if server else None)
                if r is not None:
                    await r
            if worker_task is not None:
                waiter = asyncio.create_task(stop.wait())
                await asyncio.wait({worker_task, waiter}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                if worker_task.done() and not stop.is_set():
                    worker_task.result()  # run_worker restarts procrastinate itself; this is a bug
                    raise RuntimeError("the worker pool stopped unexpectedly")
            else:
                await stop.wait()
            if server is not None:
                await cards.stop()
                await server.stop(grace=5)
            if worker_task is not None:
                stop.set()
                await worker_task
    finally:
        if gauges is not None:
            gauges.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await gauges
        await store.close()


def write_client_config(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def user_client_config() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "sessionq" / CLIENT_CONFIG


async def up(settings: Settings, data_dir: Path, database_url: str | None, echo: Callable[[str], None]) -> None:
    """The embedded default: PostgreSQL (embedded unless database_url), migrations, API on
    loopback, workers and the simulator, until Ctrl-C."""
    server = None
    psql = None
    if database_url:
        url = database_url
        psql = f'psql "{url}"'
    else:
        server = await asyncio.to_thread(embedded.start, data_dir)
        url = server.url
        psql = server.psql_command()
    user = settings.auth.anonymous_user or getpass.getuser()
    settings = settings.with_overrides(**{"auth.anonymousUser": user})
    host, _, _ = settings.server.address.rpartition(":")
    if host not in ("127.0.0.1", "localhost", "::1", "[::1]"):
        raise SystemExit(f"sessionq up serves unauthenticated local calls and listens on loopback only, not {host}")
    await _prepare_database(url)
    stop = asyncio.Event()
    install_stop_signals(stop)

    def ready(port: int | None) -> None:
        endpoint = f"{host}:{port}"
        client = {"server": endpoint, "user": user, "databaseUrl": url, "psql": psql}
        for path in (data_dir.resolve() / CLIENT_CONFIG, user_client_config()):
            with contextlib.suppress(OSError):
                write_client_config(path, client)
        echo(f"sessionq is up (user {user})")
        echo(f"  gRPC endpoint : {endpoint}  (reflection and health on; calls without a token are {user}'s)")
        echo(f"  psql          : {psql}")
        echo(f"  client config : {user_client_config()}")
        echo("  Ctrl-C stops everything.")

    try:
        await run_services(settings, url, api=True, workers=True, stop=stop, on_ready=ready)
    finally:
        if server is not None:
            await asyncio.to_thread(server.stop)
    echo("sessionq stopped")


async def serve(settings: Settings, *, api: bool, workers: bool) -> None:
    url = settings.database.url
    if not url:
        raise SystemExit("database.url is required (set it in the config file or SESSIONQ_DATABASE__URL)")
    if api and not settings.auth.tokens:
        log.warning("no auth.tokens configured: every call will be UNAUTHENTICATED")
    stop = asyncio.Event()
    install_stop_signals(stop)
    await run_services(settings, url, api=api, workers=workers, stop=stop)
