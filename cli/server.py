"""Server-side commands: up, serve, worker, migrate."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import click
from sessionq.cli.client import CliError

from sessionq import config, logs
from sessionq.db.reachable import DatabaseUnreachable, check

T = TypeVar("T")


def load_settings(config_file: str | None) -> config.Settings:
    try:
        return config.load(config_file)
    except config.ConfigError as e:
        raise click.ClickException(f"invalid configuration: {e}") from None


def keep_secrets_from_actors(runtime_kind: str) -> None:
    """In a process that runs the process runtime (whose Actors run as its user), take the
    configuration's credentials out of its environment once the settings are loaded."""
    if runtime_kind == "process":
        from sessionq.app.runtimes import withhold_secrets  # here: client commands stay quick to start

        withhold_secrets()


def run(settings: config.Settings, main: Coroutine[Any, Any, T]) -> T:
    """Run a long-running command's coroutine on the configured event loop (server.eventLoop).
    The common failures at start (an unreachable database, an address in use, a data directory
    that cannot be used or is taken by another `up`) end it with one line, `error: ...`."""
    from sessionq.app.startup import StartupError  # here: client commands stay quick to start

    try:
        return _run(settings, main)
    except (StartupError, DatabaseUnreachable) as e:
        raise CliError(str(e)) from None


def _run(settings: config.Settings, main: Coroutine[Any, Any, T]) -> T:
    if settings.server.event_loop == "uvloop":
        try:
            import uvloop  # optional: not installed on Windows
        except ImportError:
            main.close()
            raise click.ClickException(
                "server.eventLoop is uvloop but the uvloop package is not installed"
                " (install it, or set server.eventLoop to asyncio)"
            ) from None
        return uvloop.run(main)
    return asyncio.run(main)


def finish(code: int) -> None:
    """End a long-running command with its exit status once everything it ran has stopped. The
    process exits here, skipping the interpreter's finalization: that resets the signal handlers
    to the default action, and a second Ctrl-C or SIGTERM arriving then would kill the process
    (status -15) instead of forcing a stop with one line (status 1)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


@click.command()
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="YAML configuration file.")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False),
    default=".sessionq",
    show_default=True,
    help="Where the embedded PostgreSQL keeps its data (reused by the next up).",
)
@click.option("--database-url", help="Use this PostgreSQL instead of the embedded one.")
@click.option(
    "--runtime",
    "runtime_kind",
    type=click.Choice(["process", "simulator"]),
    default=None,
    help="Where Actors run: `process` (the default: local OS processes, NOT isolated) or `simulator`"
         " (simulated Actors, with fault injection). runtime.kind substrate in the config is kept unless given.",
)
def up(config_file: str | None, data_dir: str, database_url: str | None, runtime_kind: str | None) -> None:
    """Run everything locally: embedded PostgreSQL, migrations, API on 127.0.0.1:8083, workers, process runtime."""
    from sessionq.app import supervisor  # here, not at the top: client commands stay quick to start
    from sessionq.app import up as up_app

    settings = load_settings(config_file)
    logs.setup("text", settings.logging.level)
    url = database_url or settings.database.url or None
    keep_secrets_from_actors(up_app.up_runtime(settings, runtime_kind))
    count = supervisor.up_process_count(settings)  # one unless server.processes says more
    finish(run(settings, up_app.up(settings, Path(data_dir), url, click.echo, runtime=runtime_kind,
                                   api_processes=count, others=supervisor.beside_up(count, config_file))))


@click.command()
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="YAML configuration file.")
@click.option("--processes", type=click.IntRange(0, 256), default=None,
              help="API processes on server.address (SO_REUSEPORT, supervised; default: server.processes;"
                   " 0: one per CPU).")
@click.option("--api-index", type=click.IntRange(0, 255), default=None, hidden=True,
              help="Internal: run as API process N of a supervised serve.")
@click.option("--ready-file", type=click.Path(dir_okay=False), default=None, hidden=True,
              help="Internal: a file to write once serving (for the supervisor).")
def serve(config_file: str | None, processes: int | None, api_index: int | None, ready_file: str | None) -> None:
    """Run the gRPC API only (for multi-process deployments)."""
    from sessionq.app import services, supervisor  # here, not at the top: client commands stay quick to start

    settings = load_settings(config_file)
    if processes is not None:
        settings = settings.with_overrides(**{"server.processes": processes})
    logs.setup(settings.logging.format, settings.logging.level)
    keep_secrets_from_actors(settings.runtime.kind)
    count = supervisor.process_count(settings)
    if api_index is None and count > 1:
        finish(run(settings, supervisor.supervise(settings, count, config_file)))
    finish(run(settings, services.serve(settings, api=True, workers=False, api_index=api_index, ready_file=ready_file)))


@click.command()
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="YAML configuration file.")
def worker(config_file: str | None) -> None:
    """Run the job workers only; SIGTERM drains them (running jobs finish) before exiting."""
    from sessionq.app import services  # here, not at the top: client commands stay quick to start

    settings = load_settings(config_file)
    logs.setup(settings.logging.format, settings.logging.level)
    keep_secrets_from_actors(settings.runtime.kind)
    finish(run(settings, services.serve(settings, api=False, workers=True)))


@click.group()
def runtime() -> None:
    """The runtime as a server (ateapi.Control)."""


@runtime.command("serve")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="YAML configuration file.")
@click.option("--simulator", is_flag=True, help="Serve the simulator (its state is in database.url).")
@click.option("--process", "process_runtime", is_flag=True,
              help="Serve the process runtime: Actors are this server's child processes (runtime.process.*; "
                   "not isolated).")
@click.option("--address", help="Listen address (default: runtime.simulator.serveAddress).")
@click.option("--actor-address", help="Actors' A2A endpoints (default: runtime.simulator.actorAddress).")
@click.option("--no-extensions", is_flag=True,
              help="With --simulator: behave like a real Substrate (ignore the x-sessionq-* request headers, "
                   "send no x-sessionq-* trailers, tags hold their own snapshot copy); point sessionq at it "
                   "with runtime.substrate.uidPreflight: true.")
def runtime_serve(config_file: str | None, simulator: bool, process_runtime: bool, address: str | None,
                  actor_address: str | None, no_extensions: bool) -> None:
    """Serve a runtime as ateapi.Control (reflection, health) with an A2A endpoint per Actor."""
    from sessionq.app import services  # here, not at the top: client commands stay quick to start

    if simulator == process_runtime:
        raise CliError("choose one runtime to serve: --simulator or --process")
    if no_extensions and not simulator:
        raise CliError("--no-extensions serves the simulator only: add --simulator")
    settings = load_settings(config_file)
    logs.setup(settings.logging.format, settings.logging.level)
    kind = "process" if process_runtime else "simulator"
    keep_secrets_from_actors(kind)
    finish(run(settings, services.serve_runtime(settings, address=address, actor_address=actor_address, kind=kind,
                                                extensions=not no_extensions)))


@click.command()
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="YAML configuration file.")
@click.option("--database-url", help="Database to migrate (default: database.directUrl, else database.url).")
def migrate(config_file: str | None, database_url: str | None) -> None:
    """Apply pending migrations (procrastinate's schema, then sessionq's). Idempotent."""
    from sessionq.db import migrate as m  # here: loads Alembic and SQLAlchemy only for this command
    from sessionq.runtime.simulator import install_schema  # here, as above

    settings = load_settings(config_file)
    # the migrations hold a session-level advisory lock: never through a transaction pooler
    url = database_url or settings.direct_url
    if not url:
        raise CliError("a database URL is required (--database-url, database.directUrl, database.url or"
                       " SESSIONQ_DATABASE__URL)")
    try:
        check(url)
    except DatabaseUnreachable as e:
        raise CliError(str(e)) from None
    before = m.current(url)
    m.upgrade(url)
    asyncio.run(install_schema(url))
    after = m.current(url)
    click.echo(f"database at {after}" + (" (already current)" if before == after else f" (was {before or 'empty'})"))
