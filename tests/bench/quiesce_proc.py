"""The quiescence workers alone, in their own process (``python -m tests.bench.quiesce_proc URL``):
`sessionq.domain.quiescence.QuiescencePool` exactly as `sessionq worker` builds it (4 workers, LISTEN
sessionq_idle, the simulated runtime), without the procrastinate workers. The wake scenario uses
it because its turns are admitted through the store (admit_turn defers a dispatch job that a
procrastinate worker would run against an Actor the benchmark plays itself).

Stops on SIGTERM/SIGINT, when its parent goes away, or after --max-seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--pool-size", type=int, default=10)
    p.add_argument("--sim-workers", type=int, default=256)
    p.add_argument("--recovery-interval", type=float, default=60.0)
    p.add_argument("--max-seconds", type=float, default=1800.0)
    a = p.parse_args()
    logging.basicConfig(level=logging.WARNING)

    from sessionq.db.store import Store
    from sessionq.domain.quiescence import QuiescencePool
    from sessionq.runtime.simulator import SimulatedSubstrate

    store = await Store.open(a.url, pool_size=a.pool_size, listen=False)
    sim = SimulatedSubstrate(a.url, worker_pool_size=a.sim_workers)
    await sim.open()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    pool = QuiescencePool(store, sim, a.url, workers=a.workers, recovery_interval=a.recovery_interval)
    task = asyncio.create_task(pool.run(stop))
    parent = os.getppid()
    deadline = loop.time() + a.max_seconds
    try:
        while not stop.is_set():
            if os.getppid() != parent or loop.time() > deadline:
                stop.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=1.0)
        await task
    finally:
        await sim.close()
        await store.close()


if __name__ == "__main__":
    asyncio.run(main())
