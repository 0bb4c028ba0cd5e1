"""A test-only procrastinate app (queue ``optest``) whose tasks record what they do in a table, so
tests can tell exactly how often each job started, finished or was aborted. Built like
sessionq.jobs.app.build_app; also used by the subprocess worker (drain_worker.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from procrastinate import App, JobContext, PsycopgConnector, RetryStrategy

from sessionq.db.connection import conninfo

QUEUE = "optest"
SETUP_SQL = """
CREATE TABLE IF NOT EXISTS public.optest_runs (
  id     bigserial PRIMARY KEY,
  key    text NOT NULL,
  job_id bigint,
  event  text NOT NULL,
  at     timestamptz NOT NULL DEFAULT clock_timestamp()
)"""


async def setup(url: str) -> None:
    async with await psycopg.AsyncConnection.connect(conninfo(url), autocommit=True) as conn:
        await conn.execute(SETUP_SQL)


async def record(url: str, key: str, job_id: int | None, event: str) -> None:
    async with await psycopg.AsyncConnection.connect(conninfo(url), autocommit=True) as conn:
        await conn.execute("INSERT INTO public.optest_runs (key, job_id, event) VALUES (%s, %s, %s)",
                           (key, job_id, event))


async def runs(url: str) -> list[tuple[str, int, str]]:
    async with await psycopg.AsyncConnection.connect(conninfo(url), autocommit=True) as conn:
        cur = await conn.execute("SELECT key, job_id, event FROM public.optest_runs ORDER BY id")
        return [(r[0], r[1], r[2]) for r in await cur.fetchall()]


def build(url: str, *, pool_size: int = 4) -> App:
    app = App(connector=PsycopgConnector(conninfo=conninfo(url), min_size=1, max_size=pool_size))

    @app.task(name="optest_sleep", queue=QUEUE, pass_context=True, retry=RetryStrategy(max_attempts=5))
    async def sleep(context: JobContext, key: str, seconds: float) -> str:
        """Sleep `seconds` on the first attempt, 0.05 s on later ones."""
        job_id = context.job.id
        await record(url, key, job_id, "start")
        try:
            await asyncio.sleep(seconds if context.job.attempts == 0 else 0.05)
        except asyncio.CancelledError:
            await record(url, key, job_id, "aborted")
            raise
        await record(url, key, job_id, "done")
        return key

    @app.task(name="optest_collide", queue=QUEUE, pass_context=True, retry=RetryStrategy(max_attempts=5))
    async def collide(context: JobContext, key: str) -> str:
        """First run: queue a duplicate (same queueing lock, scheduled 30 s ahead so that it still
        waits) and fail, so procrastinate's retry collides with the waiting duplicate. Later runs
        succeed."""
        job_id = context.job.id
        await record(url, key, job_id, "start")
        starts = sum(1 for k, _, e in await runs(url) if k == key and e == "start")
        if starts == 1:
            await app.configure_task("optest_collide", queueing_lock=f"collide:{key}",
                                     schedule_in={"seconds": 30}).defer_async(key=key)
            raise RuntimeError("first attempt fails after a duplicate was queued")
        await record(url, key, job_id, "done")
        return key

    @app.task(name="optest_once", queue=QUEUE, pass_context=True, retry=False)
    async def once(context: JobContext, key: str) -> str:
        await record(url, key, context.job.id, "done")
        return key

    return app


def defer_sql(task: str, args: dict[str, Any], queueing_lock: str | None = None) -> tuple[str, tuple[Any, ...]]:
    from psycopg.types.json import Jsonb

    return ("SELECT sessionq.defer_job(%s, %s, %s, %s)", (QUEUE, task, Jsonb(args), queueing_lock))
