"""Connections: the pool every sessionq process uses, and a LISTEN helper."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

log = logging.getLogger(__name__)


def conninfo(url: str) -> str:
    """Accept postgresql:// URLs as well as SQLAlchemy-style postgresql+psycopg:// ones."""
    for prefix in ("postgresql+psycopg://", "postgres+psycopg://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix) :]
    return url


async def _configure(conn: psycopg.AsyncConnection) -> None:
    await conn.set_autocommit(True)


def make_pool(url: str, *, min_size: int = 1, max_size: int = 10, name: str = "sessionq") -> AsyncConnectionPool:
    """An unopened pool of autocommit connections; open it with `await pool.open()`.

    Autocommit: every procedure call is its own transaction unless a caller opens one with
    ``conn.transaction()``.
    """
    return AsyncConnectionPool(
        conninfo(url),
        min_size=min_size,
        max_size=max_size,
        open=False,
        name=name,
        configure=_configure,
        kwargs={"row_factory": dict_row, "application_name": name},
        reconnect_timeout=60.0,
    )


class Listener:
    """One LISTEN connection that fans notifications out to local subscribers.

    Subscribers get a callback with the payload; they must not block. The connection is
    re-established after a failure, and every subscriber is called with payload None afterwards
    so it re-reads what it waits for (notifications may have been missed while disconnected).
    """

    def __init__(self, url: str, channels: list[str]) -> None:
        self.url = conninfo(url)
        self.channels = channels
        self._subscribers: dict[str, set[Callable[[str | None], None]]] = {c: set() for c in channels}
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()

    def subscribe(self, channel: str, callback: Callable[[str | None], None]) -> Callable[[], None]:
        self._subscribers[channel].add(callback)
        return lambda: self._subscribers[channel].discard(callback)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="sessionq-listener")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), timeout=10)

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    def _fanout(self, channel: str, payload: str | None) -> None:
        for cb in list(self._subscribers.get(channel, ())):
            try:
                cb(payload)
            except Exception:  # a subscriber's bug must not stop the listener
                log.exception("listener subscriber failed")

    async def _run(self) -> None:
        delay = 0.1
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
                    for channel in self.channels:
                        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                    if self._ready.is_set():
                        for channel in self.channels:  # we may have missed notifications
                            self._fanout(channel, None)
                    self._ready.set()
                    delay = 0.1
                    async for note in conn.notifies():
                        self._fanout(note.channel, note.payload)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("LISTEN connection lost (%s); reconnecting", e)
                self._ready.set()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
