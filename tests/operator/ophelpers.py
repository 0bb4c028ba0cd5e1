"""Shared helpers of the operator tests: the CLI runner, database shortcuts, an in-process
drainable worker of the test app, and polling. Test modules import the fixtures `cli`, `db` and
`ops` as cli_fixture, db_fixture and ops_fixture."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import optest_app
import psycopg
import pytest
from click.testing import CliRunner, Result
from psycopg.rows import dict_row
from sessionq.cli.main import main
from sessionq.cli.operator import COMMANDS
from sessionq.jobs.drain import run_drainable_worker

from sessionq.db.operator_store import OperatorStore

T = TypeVar("T")

# the lead registers these in cli/main.py; until then (and idempotently after) the tests do
for _command in COMMANDS:
    if _command.name not in main.commands:
        main.add_command(_command)


async def eventually(check: Callable[[], Awaitable[T]], timeout: float = 10.0, interval: float = 0.05,
                     what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout}s (last: {value!r})")
        await asyncio.sleep(interval)


@pytest.fixture(name="ops")
async def ops_fixture(database_url: str) -> AsyncIterator[OperatorStore]:
    async with OperatorStore.connect(database_url) as o:
        yield o


@pytest.fixture(name="db")
async def db_fixture(database_url: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    await optest_app.setup(database_url)
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        yield conn


async def q(conn: psycopg.AsyncConnection[Any], sql: str, *params: Any) -> list[dict[str, Any]]:
    cur = await conn.execute(sql, params)
    return list(await cur.fetchall()) if cur.description else []


async def defer(conn: psycopg.AsyncConnection[Any], task: str, args: dict[str, Any],
                queueing_lock: str | None = None) -> int:
    sql, params = optest_app.defer_sql(task, args, queueing_lock)
    rows = await q(conn, sql, *params)
    return int(next(iter(rows[0].values())))


async def dead_worker(conn: psycopg.AsyncConnection[Any], silent_for: float = 300.0, name: str | None = None) -> int:
    """A procrastinate worker row whose heartbeat stopped `silent_for` seconds ago."""
    rows = await q(conn, "INSERT INTO procrastinate_workers (last_heartbeat)"
                         " VALUES (now() - make_interval(secs => %s)) RETURNING id", silent_for)
    wid = int(rows[0]["id"])
    if name:
        await q(conn, "SELECT sessionq.register_worker(%s, %s, 'deadhost', 1, NULL, 1)", wid, name)
        await q(conn, "UPDATE sessionq.worker_info SET started_at = now() - make_interval(secs => %s)"
                      " WHERE worker_id = %s", silent_for + 1, wid)
    return wid


async def live_worker(conn: psycopg.AsyncConnection[Any], name: str = "live-1") -> int:
    rows = await q(conn, "INSERT INTO procrastinate_workers DEFAULT VALUES RETURNING id")
    wid = int(rows[0]["id"])
    await q(conn, "SELECT sessionq.register_worker(%s, %s, 'livehost', 42, ARRAY['optest'], 3)", wid, name)
    return wid


async def make_doing(conn: psycopg.AsyncConnection[Any], job_id: int, worker_id: int | None) -> None:
    await q(conn, "UPDATE procrastinate_jobs SET status = 'doing', worker_id = %s WHERE id = %s", worker_id, job_id)


async def make_failed(conn: psycopg.AsyncConnection[Any], job_id: int) -> None:
    wid = await live_worker(conn, name=f"finisher-{job_id}")
    await make_doing(conn, job_id, wid)
    await q(conn, "SELECT procrastinate_finish_job_v1(%s, 'failed', false)", job_id)
    await q(conn, "DELETE FROM procrastinate_workers WHERE id = %s", wid)


async def job(conn: psycopg.AsyncConnection[Any], job_id: int) -> dict[str, Any]:
    rows = await q(conn, "SELECT * FROM procrastinate_jobs WHERE id = %s", job_id)
    assert rows, f"job {job_id} is gone"
    return rows[0]


class Cli:
    """`sessionq ...` in a thread (the test's event loop keeps running), with a private config home."""

    def __init__(self, database_url: str, home: Path) -> None:
        empty = home / "empty-client.yaml"
        empty.write_text("{}\n")
        self.env: dict[str, str | None] = {
            "XDG_CONFIG_HOME": str(home / "xdg"), "SESSIONQ_CLIENT_CONFIG": str(empty),
            "SESSIONQ_DATABASE_URL": database_url, "SESSIONQ_DATABASE__URL": None, "SESSIONQ_SERVER": None,
        }

    async def __call__(self, *args: str, env: dict[str, str | None] | None = None) -> Result:
        return await asyncio.to_thread(CliRunner().invoke, main, list(args), env={**self.env, **(env or {})})


@pytest.fixture(name="cli")
def cli_fixture(database_url: str, tmp_path: Path) -> Cli:
    return Cli(database_url, tmp_path)


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr, result.exception)
    return result


def one_line_error(result: Result, code: int = 1) -> str:
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr, result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@dataclass
class RunningWorker:
    name: str
    task: asyncio.Task[str]
    stop: asyncio.Event

    async def outcome(self, timeout: float = 20.0) -> str:
        return await asyncio.wait_for(asyncio.shield(self.task), timeout)


@contextlib.asynccontextmanager
async def drainable_worker(url: str, name: str, *, concurrency: int = 2, shutdown_timeout: float = 10.0,
                           app: Any = None, **options: Any) -> AsyncIterator[RunningWorker]:
    app = app or optest_app.build(url)
    stop = asyncio.Event()
    async with app.open_async():
        task = asyncio.create_task(run_drainable_worker(
            app, url=url, stop=stop, check_interval=0.2, name=name, concurrency=concurrency,
            fetch_job_polling_interval=0.2, shutdown_graceful_timeout=shutdown_timeout,
            **{"queues": [optest_app.QUEUE], "delete_jobs": "never", **options},
        ))
        async with OperatorStore.connect(url) as ops:
            async def registered() -> bool:
                if task.done():
                    task.result()
                return any(w["name"] == name for w in await ops.workers())
            await eventually(registered, what=f"worker {name} registered")
        running = RunningWorker(name, task, stop)
        try:
            yield running
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 30)
