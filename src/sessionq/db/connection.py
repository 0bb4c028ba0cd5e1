"""Connections: the pool every sessionq process uses, and a LISTEN helper."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from sessionq.db import notify

log = logging.getLogger(__name__)

T = TypeVar("T")

# how long a new connection may take (unless the URL sets connect_timeout): a server that does not
# answer is reported within this time instead of psycopg's default of over two minutes
CONNECT_TIMEOUT = 5
# how long a caller waits for a pooled connection once the database is known to refuse connections
FAIL_FAST = 0.5


def conninfo(url: str) -> str:
    """Accept postgresql:// URLs as well as SQLAlchemy-style postgresql+psycopg:// ones."""
    for prefix in ("postgresql+psycopg://", "postgres+psycopg://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix) :]
    return url


def pooled(url: str, direct_url: str | None) -> bool:
    """Whether `url` is taken to be a pooler in transaction mode: a direct URL is configured and
    differs from it. Connections to such a URL carry single transactions only: no prepared
    statements (each transaction may run on another server connection), no session state (SET,
    LISTEN, session advisory locks), which go to the direct URL instead."""
    return bool(direct_url) and conninfo(direct_url or "") != conninfo(url)


def pooler_kwargs(url: str, direct_url: str | None) -> dict[str, Any]:
    """Connection options for `url` given the direct URL: behind a transaction pooler, psycopg never
    prepares a statement (`prepare_threshold=None`), since the next execution of a prepared
    statement may reach another server connection, where it does not exist."""
    return {"prepare_threshold": None} if pooled(url, direct_url) else {}


def connect_kwargs(url: str) -> dict[str, Any]:
    """Connection options every sessionq connection adds to its URL: a bounded connect time."""
    try:
        given = conninfo_to_dict(conninfo(url))
    except psycopg.ProgrammingError:
        given = {}
    return {} if "connect_timeout" in given else {"connect_timeout": CONNECT_TIMEOUT}


class DatabaseHealth:
    """Whether the database accepts connections, as this process last saw it.

    A failed connection attempt (a pool's or a listener's) marks it down, a successful one up
    again. While it is down, a caller waiting for a pooled connection (`bounded`) gives up after
    FAIL_FAST seconds (PoolTimeout, which the API answers with UNAVAILABLE "retry the same
    call") instead of the pool's full timeout; callers already waiting when it goes down are
    given the same FAIL_FAST from that moment. A pool that is merely busy (the database
    accepts connections) keeps its normal timeout.
    """

    def __init__(self, fail_fast: float = FAIL_FAST) -> None:
        self.fail_fast = fail_fast
        self.down_since: float | None = None  # time.monotonic() of the first failed attempt
        self.reason = ""
        self._waiting: set[asyncio.Timeout] = set()

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def connected(self) -> None:
        if self.down_since is not None:
            log.info("the database accepts connections again (down for %.1f s)", time.monotonic() - self.down_since)
        self.down_since = None
        self.reason = ""

    def failed(self, error: BaseException) -> None:
        """A connection attempt failed: fail the callers waiting for a connection soon."""
        self.reason = _first_line(error)
        if self.down_since is not None:
            return
        self.down_since = time.monotonic()
        log.warning("the database refuses connections (%s); calls waiting for one fail in %.1f s", self.reason,
                    self.fail_fast)
        with contextlib.suppress(RuntimeError):  # no running loop: nobody can be waiting
            when = asyncio.get_running_loop().time() + self.fail_fast
            for timeout in list(self._waiting):
                self._shorten(timeout, when)

    @staticmethod
    def _shorten(timeout: asyncio.Timeout, when: float) -> None:
        if timeout.expired():
            return
        current = timeout.when()
        if current is None or current > when:
            with contextlib.suppress(RuntimeError):  # expiring right now
                timeout.reschedule(when)

    async def bounded(self, getconn: Awaitable[T]) -> T:
        """Await a pool's `getconn()`, giving up (PoolTimeout) FAIL_FAST seconds after the
        database is seen down (at once if it already is)."""
        try:
            async with asyncio.timeout(None) as timeout:
                if self.down_since is not None:
                    self._shorten(timeout, asyncio.get_running_loop().time() + self.fail_fast)
                self._waiting.add(timeout)
                try:
                    return await getconn
                finally:
                    self._waiting.discard(timeout)
        except TimeoutError:
            raise PoolTimeout(f"the database refuses connections ({self.reason})") from None


def _tracking_connection_class(health: DatabaseHealth) -> type[psycopg.AsyncConnection[Any]]:
    """A connection class whose connection attempts report to `health`."""

    class TrackedConnection(psycopg.AsyncConnection[Any]):
        @classmethod
        async def connect(cls, *args: Any, **kwargs: Any) -> Any:
            try:
                conn = await super().connect(*args, **kwargs)
            except psycopg.OperationalError as e:
                health.failed(e)
                raise
            health.connected()
            return conn

    return TrackedConnection


class FailFastPool(AsyncConnectionPool):
    """An AsyncConnectionPool whose connection attempts report to a DatabaseHealth (`health`)
    and whose callers fail fast while it says the database refuses connections: `getconn()` (and
    so `connection()`) raises PoolTimeout FAIL_FAST seconds after the database is seen down
    instead of waiting out the pool's timeout. A merely busy pool keeps its normal timeout.

    Callers beyond max_size queue on a semaphore before the pool (`_gate`), so that the pool
    itself always has a connection for the caller it serves, or room to open one: psycopg_pool's
    own queue costs a Condition and an `asyncio.wait_for` (a Task) per waiting caller, which
    under load (more concurrent calls than connections) was a large part of a read's Python
    time. The order stays first come, first served; the waits keep the pool's timeout."""

    def __init__(self, conninfo: str = "", *, health: DatabaseHealth | None = None, **kwargs: Any) -> None:
        self.health = health if health is not None else DatabaseHealth()
        kwargs.setdefault("connection_class", _tracking_connection_class(self.health))
        super().__init__(conninfo, **kwargs)
        self._gate = asyncio.Semaphore(self.max_size)

    async def getconn(self, timeout: float | None = None) -> Any:
        return await self.health.bounded(self._gated_getconn(self.timeout if timeout is None else timeout))

    async def _gated_getconn(self, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        if self._gate.locked():
            try:
                async with asyncio.timeout(timeout):
                    await self._gate.acquire()
            except TimeoutError:
                raise PoolTimeout(f"couldn't get a connection after {timeout:.2f} sec") from None
        else:
            await self._gate.acquire()  # a free permit: no wait
        try:
            return await super().getconn(max(deadline - time.monotonic(), 0.0))
        except BaseException:
            self._gate.release()
            raise

    async def putconn(self, conn: Any) -> None:
        try:
            await super().putconn(conn)
        finally:
            self._gate.release()


async def _configure(conn: psycopg.AsyncConnection) -> None:
    await conn.set_autocommit(True)


def make_pool(
    url: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    name: str = "sessionq",
    health: DatabaseHealth | None = None,
    direct_url: str | None = None,
) -> FailFastPool:
    """An unopened pool of autocommit connections; open it with `await pool.open()`.

    Autocommit: every procedure call is its own transaction unless a caller opens one with
    ``conn.transaction()``. Callers fail fast while the database refuses connections (see
    FailFastPool; `health`, if given, is shared with e.g. a Listener on the same server).
    With a `direct_url` other than `url`, `url` is a transaction pooler: no prepared statements.
    """
    return FailFastPool(
        conninfo(url),
        health=health,
        min_size=min_size,
        max_size=max_size,
        open=False,
        name=name,
        configure=_configure,
        kwargs={
            "row_factory": dict_row,
            "application_name": name,
            **connect_kwargs(url),
            **pooler_kwargs(url, direct_url),
        },
        reconnect_timeout=60.0,
    )


class Listener:
    """One LISTEN connection that fans notifications out to local subscribers.

    Subscribers get a callback with the payload; they must not block. When the connection is
    lost every subscriber is called with payload None at once (a waiter re-reads what it waits
    for, which fails fast if the database is gone), the connection is re-established in the
    background, and every subscriber is called with None again once it is (notifications may
    have been missed while disconnected). With `health`, connection attempts report to it.

    On a *keyed* channel each payload names a key (`notify.key_of`: e.g. the Session id of a
    ``sessionq_session`` notification): `subscribe_key` calls back only for that key, and
    `recent` returns the last payload seen for a key (the most recent `remember` keys are kept),
    so that a caller who subscribes just after its own commit also learns of a notification that
    arrived in between.
    """

    def __init__(
        self,
        url: str,
        channels: list[str],
        *,
        keyed: tuple[str, ...] = (),
        remember: int = 10_000,
        health: DatabaseHealth | None = None,
        application_name: str = "sessionq-listen",
    ) -> None:
        self.url = conninfo(url)
        self.application_name = application_name  # how operators (and the failover harness) see it
        self.health = health
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
                try:
                    key = notify.key_of(channel, payload)
                except notify.PayloadError as e:
                    log.warning("ignored a notification: %s", e)
                    return
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

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, application_name=self.application_name, **connect_kwargs(self.url)
            )
        except psycopg.OperationalError as e:
            if self.health is not None:
                self.health.failed(e)
            raise
        if self.health is not None:
            self.health.connected()
        return conn

    async def _run(self) -> None:
        delay = 0.1
        while True:
            try:
                async with await self._connect() as conn:
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
                lost = self.connected
                self.connected = False
                if lost:
                    log.warning("LISTEN connection lost (%s); reconnecting", _first_line(e))
                    for channel in self.channels:  # waiters re-read now rather than at their next poll
                        self._fanout(channel, None)
                else:
                    log.debug("LISTEN connection failed (%s); retrying in %.1f s", _first_line(e), delay)
                self._ready.set()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
