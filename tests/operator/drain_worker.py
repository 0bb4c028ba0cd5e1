"""A worker process for the drain tests: `python drain_worker.py URL NAME [TIMEOUT]`.

Runs the test app's worker through sessionq.jobs.drain.run_drainable_worker, as sessionq's worker
process does, with SIGTERM/SIGINT setting the stop event. Exits 0 after a drain or a signal."""

from __future__ import annotations

import asyncio
import signal
import sys

import optest_app
from sessionq.jobs.drain import run_drainable_worker


async def main(url: str, name: str, timeout: float) -> int:
    app = optest_app.build(url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with app.open_async():
        outcome = await run_drainable_worker(
            app, url=url, stop=stop, check_interval=0.5, name=name, queues=[optest_app.QUEUE], concurrency=2,
            fetch_job_polling_interval=0.2, shutdown_graceful_timeout=timeout, delete_jobs="never",
        )
    print(f"outcome {outcome}", flush=True)
    return 0 if outcome in ("drained", "stopped") else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 30.0)))
