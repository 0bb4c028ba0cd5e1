"""Connections: the pool every sessionq process uses, and a LISTEN helper."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
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

    On a *keyed* channel the payload starts with a key (the text before its first space, e.g. a
    Session id): `subscribe_key` calls back only for that key, and `recent` returns the last payload
    seen for a key (the most recent `remember` keys are kept), so that a caller who subscribes just
    after its own commit also learns of a notification that arrived in between.
    """

    def __init__(self, url: str, channels: list[str], *, keyed: tuple[str, ...] = (), remember: int = 10_000) -> None:
        self.url = conninfo(url)
        self.channels = channels
        self._subscribers: dict[str, set[Callable[[str | None], None]]] = {c: set() for c in channels}
        self._keyed: dict[str, dict[str, set[Callable[[str | None], None]]]] = {c: {} for c in keyed}
        self._recent: dict[str, OrderedDict[str, str]] = {c: OrderedDict() for c in keyed}
        self._remember = remember
        self.epoch = 0  # +1 each time LISTEN is (re-)established
        self.connected = False
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()

    def subscribe(self, channel: str, callback: Callable[[str | None], None]) -> Callable[[], None]:
        self._subscribers[channel].add(callback)
        return lambda: self._subscribers[channel].discard(callback)

    def subscribe_key(self, channel: str, key: str, callback: Callable[[str | None], None]) -> Callable[[], None]:
        """Call back on the keyed channel's notifications for `key` (and with None after a reconnect)."""
        by_key = self._keyed[channel]
        by_key.setdefault(key, set()).add(callback)

        def unsubscribe() -> None:
            callbacks = by_key.get(key)
            if callbacks is not None:
                callbacks.discard(callback)
                if not callbacks:
                    del by_key[key]

        return unsubscribe

    def recent(self, channel: str, key: str) -> str | None:
        """The last payload seen on the keyed channel for `key`, if it is still remembered."""
        return self._recent[channel].get(key)

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
        callbacks = list(self._subscribers.get(channel, ()))
        by_key = self._keyed.get(channel)
        if by_key is not None:
            if payload is None:
                callbacks += [cb for cbs in by_key.values() for cb in cbs]
            else:
                key = payload.split(" ", 1)[0]
                recent = self._recent[channel]
                recent[key] = payload
                recent.move_to_end(key)
                if len(recent) > self._remember:
                    recent.popitem(last=False)
                callbacks += by_key.get(key, ())
        for cb in callbacks:
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
                    self.epoch += 1
                    self.connected = True
                    if self._ready.is_set():
                        for channel in self.channels:  # we may have missed notifications
                            self._fanout(channel, None)
                    self._ready.set()
                    delay = 0.1
                    async for note in conn.notifies():
                        self._fanout(note.channel, note.payload)
            except asyncio.CancelledError:
                self.connected = False
                raise
            except Exception as e:
                self.connected = False
                log.warning("LISTEN connection lost (%s); reconnecting", e)
                self._ready.set()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
