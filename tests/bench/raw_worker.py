"""A raw procrastinate worker with one no-op task, for the baselines (run as a child process:
``python -m tests.bench.raw_worker URL --concurrency 8 --poll 5 --queue bench_raw``).

Stops on SIGTERM/SIGINT (procrastinate's own signal handling) or when its parent goes away.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os


def build(url: str) -> object:
    from procrastinate import App, PsycopgConnector

    from sessionq.db.connection import conninfo

    app = App(connector=PsycopgConnector(conninfo=conninfo(url), min_size=1, max_size=4))

    @app.task(name="noop", queue="bench_raw")
    async def noop(i: int = 0) -> None:
        return None

    return app


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--poll", type=float, default=5.0)
    p.add_argument("--queue", default="bench_raw")
    p.add_argument("--max-seconds", type=float, default=1800.0, help="stop by itself after this long")
    a = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    app = build(a.url)
    parent = os.getppid()
    async with app.open_async():  # type: ignore[attr-defined]
        worker = asyncio.create_task(app.run_worker_async(  # type: ignore[attr-defined]
            queues=[a.queue], concurrency=a.concurrency, fetch_job_polling_interval=a.poll,
            install_signal_handlers=True, name="bench-raw"))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + a.max_seconds
        while not worker.done():
            if os.getppid() != parent or loop.time() > deadline:  # orphaned or overdue: stop
                worker.cancel()
                break
            await asyncio.wait({worker}, timeout=1.0)
        try:
            await worker
        except asyncio.CancelledError:
            pass


if __name__ == "__main__":
    asyncio.run(main())
