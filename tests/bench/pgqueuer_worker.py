"""A PgQueuer worker with one no-op entrypoint, the other queue baseline of `burst` and `wake` (run
as a child process: ``python -m tests.bench.pgqueuer_worker URL --batch 10``).

PgQueuer (Python, asyncpg, batch dequeue with LISTEN/NOTIFY) is the fastest PostgreSQL queue of the
Python field we measured; its items are no-ops where sessionq's are real work, so the ratios against
it say how far the quiescence path is from a queue's floor, not parity. Stops on SIGTERM/SIGINT or
when its parent goes away.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from datetime import timedelta

ENTRYPOINT = "bench_noop"


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--batch", type=int, default=10, help="PgQueuer's dequeue batch size")
    p.add_argument("--max-seconds", type=float, default=1800.0, help="stop by itself after this long")
    a = p.parse_args()
    logging.basicConfig(level=logging.WARNING)

    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries, QueueManager
    from pgqueuer.models import Job

    conn = await asyncpg.connect(a.url)
    qm = QueueManager(Queries(AsyncpgDriver(conn)))

    @qm.entrypoint(ENTRYPOINT)
    async def noop(job: Job) -> None:
        return None

    loop = asyncio.get_running_loop()
    worker = asyncio.create_task(qm.run(batch_size=a.batch, dequeue_timeout=timedelta(seconds=5)))
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.cancel)
    parent = os.getppid()
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
    await conn.close()


if __name__ == "__main__":
    asyncio.run(main())
