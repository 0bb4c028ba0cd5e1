"""Recording outcomes through a flaky connection: retry the store call, never the work before it."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import psycopg

log = logging.getLogger(__name__)
T = TypeVar("T")


async def detached(coro: Awaitable[T]) -> T:
    """Run to completion even if the caller is cancelled: a known outcome is never discarded."""
    task = asyncio.ensure_future(coro)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await task
        raise


async def with_db_retry(call: Callable[[], Awaitable[T]], *, budget: float = 30.0) -> T:
    """Retry a store call on connection failures (100 ms doubling to 5 s), never the runtime call
    that preceded it."""
    delay, deadline = 0.1, time.monotonic() + budget
    while True:
        try:
            return await call()
        except (psycopg.OperationalError, psycopg.InterfaceError) as e:
            if time.monotonic() + delay > deadline:
                raise
            log.warning("database unavailable while recording an outcome (%s); retrying", e)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
