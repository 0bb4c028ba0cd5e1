"""Coalesced point reads on one kept connection, driven by the event loop's callbacks.

Most requests an API serves are GetSessions, each one point read of a Session; the workers read
whole Sessions the same way (Store.get_session). A kind of point read (`PointRead`) is a pair of
statements whose rows carry an `ord` column, the 1-based position of the read in its batch: one for
a read alone and one for a batch. One `KeptReads` serves every kind of a store:

- A read that finds the connection idle is sent at once, alone (its kind's `single` statement);
  reads that arrive while a statement is in flight queue, and when it ends the queue's first read
  and the queued reads of its kind (up to `max_batch`) go as one `batch` statement. So one
  statement is in flight at a time and none waits for a timer.
- The statements run through libpq directly (`RawStatement`: text parameters and results, prepared
  once per connection, unnamed through a transaction pooler), on a connection taken from the pool
  for the first read and given back `keep` seconds after the last. Rows are read by column name
  (the plan `RawStatement.plan` makes once per statement).
- While the connection is kept, the event loop watches its socket with one reader callback, which
  takes a statement's result, answers its reads' futures and sends the next batch. A read costs a
  future, nothing else: no task, no coroutine per statement, no reader registered and removed per
  statement, no timer per statement (psycopg's wait, a pool checkout and a drain task cost as much
  Python as the rest of a GetSession).

Failures: a statement's error (psycopg's exception of its SQLSTATE) reaches every read of its batch
and only those; a statement the server no longer knows (SQLSTATE 26000) is prepared again and sent
once more; a connection that breaks fails the reads in flight with OperationalError and goes back
to the pool (which discards it), and the reads queued behind them go on a new connection. A read
whose caller gave up (its future cancelled) drops out of its batch's answer; when every read of the
statement in flight has given up (`get` cancelled), the statement is cancelled on the server (a
libpq cancel request) so that the reads queued behind it do not wait for its end; the next
statement goes once the cancel request is through, so that it can only reach the statement it was
meant for. Reads of a closing store fail with OperationalError. A statement still in flight at two
ticks in a row (the kept connection's timer, every `keep` seconds) has its reader armed again and
what arrived read: uvloop can drop a watched descriptor from epoll while it keeps the reader, and
without this one lost reader stopped every read of the process for good.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq

from sessionq.db.raw import Columns, GetValue, RawStatement

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True, eq=False)
class PointRead(Generic[K, V]):
    """A kind of point read keyed by K and answered with a V: its two statements (both answer an
    `ord` column, 1 for `single`), their parameters, and `record`, which makes from the result's
    column names the function that reads a row's answer."""

    single: RawStatement
    batch: RawStatement
    single_params: Callable[[K], list[bytes | None]]
    batch_params: Callable[[list[K]], list[bytes | None]]
    record: Callable[[Columns], Callable[[GetValue, int], V]]

    def plan(self, columns: Columns) -> tuple[int, Callable[[GetValue, int], V]]:
        """The position of the `ord` column and the reader of a row's answer."""
        if "ord" not in columns:
            raise psycopg.InterfaceError("a point read's statement must answer an ord column")
        return columns["ord"], self.record(columns)


class _Waiter:
    __slots__ = ("fut", "key", "kind")

    def __init__(self, kind: PointRead[Any, Any], key: Any, fut: asyncio.Future[Any]) -> None:
        self.kind, self.key, self.fut = kind, key, fut


class KeptReads:
    """Point reads of any kind (`PointRead`), each answered with its row's record, or None when the
    statement gave no row for it."""

    def __init__(self, pool: Any, *, keep: float = 0.5, max_batch: int = 64) -> None:
        self.pool = pool
        self.keep = keep
        self.max_batch = max_batch
        self.conn: psycopg.AsyncConnection[Any] | None = None
        self.queue: list[_Waiter] = []
        self.inflight: list[_Waiter] | None = None  # the reads of the statement in flight
        self.batches = 0  # batch statements sent, and the largest batch (tests, profiling)
        self.largest = 0
        self.cancels = 0  # statements cancelled because every read of theirs gave up (tests)
        self.rearmed = 0  # readers armed again for a statement in flight a whole tick (tests)
        self._sent = 0  # statements sent on this store, and that count at the last tick
        self._sent_at_tick = -1
        self._fd = -1
        self._kind: PointRead[Any, Any] | None = None
        self._statement: RawStatement | None = None
        self._params: list[bytes | None] = []
        self._preparing = False  # the statement in flight is the PREPARE of self._statement
        self._result: Any = None  # the statement's last result so far
        self._retried = False
        self._writing = False
        self._connecting: asyncio.Task[None] | None = None
        self._cancelling: asyncio.Task[None] | None = None  # the cancel request of the statement in flight
        self._timer: asyncio.TimerHandle | None = None
        self._last_used = 0.0
        self._returning: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def busy(self) -> bool:
        """Whether a statement is in flight, being cancelled, or a connection is being taken for one."""
        return self.inflight is not None or self._connecting is not None or self._cancelling is not None

    def read(self, kind: PointRead[K, V], key: K) -> asyncio.Future[V | None]:
        """The future of `key`'s answer (None: no row). Await it; cancelling it drops the read."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[V | None] = loop.create_future()
        if self._closed:
            fut.set_exception(psycopg.OperationalError("the store is closing"))
            return fut
        self.queue.append(_Waiter(kind, key, fut))
        if not self.busy:
            self._next()
        return fut

    async def get(self, kind: PointRead[K, V], key: K) -> V | None:
        """`read`'s answer; a caller cancelled here also cancels its statement on the server when
        no other read waits for that statement."""
        fut = self.read(kind, key)
        try:
            return await fut
        except asyncio.CancelledError:
            self._gave_up()
            raise

    # -- sending ----------------------------------------------------------------------------------

    def _next(self) -> None:
        """Send the queue's next batch (called with nothing in flight): the first live read and the
        queued reads of its kind, up to max_batch; the others keep their places."""
        batch: list[_Waiter] = []
        rest: list[_Waiter] = []
        kind = None
        for w in self.queue:
            if w.fut.done():
                continue
            if kind is None:
                kind = w.kind
            if w.kind is kind and len(batch) < self.max_batch:
                batch.append(w)
            else:
                rest.append(w)
        if kind is None:
            self.queue.clear()
            self._idle_from_now()
            return
        if self.conn is None:
            self.queue = batch + rest  # they go first once the connection is there
            self._connecting = asyncio.get_running_loop().create_task(self._connect())
            return
        self.queue = rest
        self.inflight = batch
        self._retried = False
        self._kind = kind
        if len(batch) == 1:
            self._statement, self._params = kind.single, kind.single_params(batch[0].key)
        else:
            self.batches += 1
            self.largest = max(self.largest, len(batch))
            self._statement, self._params = kind.batch, kind.batch_params([w.key for w in batch])
        self._send()

    def _send(self) -> None:
        conn, statement = self.conn, self._statement
        assert conn is not None and statement is not None
        self._sent += 1
        pgconn = conn.pgconn
        try:
            if conn.prepare_threshold is None:  # through a transaction pooler: unnamed, each time
                self._preparing = False
                pgconn.send_query_params(statement.sql, self._params)
            elif not statement.prepared_on(conn):
                self._preparing = True
                pgconn.send_prepare(statement.name, statement.sql)
            else:
                self._preparing = False
                pgconn.send_query_prepared(statement.name, self._params)
            if pgconn.flush() == 1 and not self._writing:  # the rest when the socket takes it
                self._writing = True
                asyncio.get_running_loop().add_writer(self._fd, self._writable)
        except psycopg.Error as e:
            self._broken(e)

    def _writable(self) -> None:
        conn = self.conn
        if conn is None:
            return
        try:
            done = conn.pgconn.flush() == 0
        except psycopg.Error as e:
            self._broken(e)
            return
        if done:
            self._writing = False
            asyncio.get_running_loop().remove_writer(self._fd)

    # -- receiving --------------------------------------------------------------------------------

    def _readable(self) -> None:
        conn = self.conn
        if conn is None:
            return
        pgconn = conn.pgconn
        try:
            pgconn.consume_input()
            if self.inflight is None:
                return  # a notice or a parameter status between statements
            while not pgconn.is_busy():
                r = pgconn.get_result()
                if r is None:
                    break  # the statement is over
                self._result = r  # (an error's result may come a packet before the statement's end)
            else:
                return  # more of it to come
        except psycopg.Error as e:
            self._broken(e)
            return
        result, self._result = self._result, None
        if result is None:
            self._broken(psycopg.InterfaceError("the server ended a statement without a result"))
            return
        self._done(conn, result)

    def _done(self, conn: psycopg.AsyncConnection[Any], result: Any) -> None:
        statement, kind, batch = self._statement, self._kind, self.inflight
        assert statement is not None and kind is not None and batch is not None
        if result.status == pq.ExecStatus.FATAL_ERROR:
            error = pg_errors.error_from_result(result, encoding=conn.info.encoding)
            if isinstance(error, pg_errors.InvalidSqlStatementName) and not self._retried:
                # prepared on a session the server since lost (a restart behind the same address)
                self._retried = True
                statement.mark_prepared(conn, False)
                self._send()
                return
            self._answer(batch, error)
        elif self._preparing:
            if result.status != pq.ExecStatus.COMMAND_OK:
                self._answer(batch, psycopg.InterfaceError(f"PREPARE ended with {pq.ExecStatus(result.status).name}"))
            else:
                statement.mark_prepared(conn)
                if not all(w.fut.done() for w in batch):
                    self._send()
                    return
        elif result.status != pq.ExecStatus.TUPLES_OK:
            self._answer(batch, psycopg.InterfaceError(f"unexpected result status {pq.ExecStatus(result.status).name}"))
        else:
            try:
                ordinal, record = statement.plan(result, kind.plan)
                get = result.get_value
                rows = {int(get(r, ordinal)): r for r in range(result.ntuples)}
                for i, w in enumerate(batch, start=1):
                    if not w.fut.done():
                        r = rows.get(i)
                        w.fut.set_result(None if r is None else record(get, r))
            except (psycopg.Error, ValueError, TypeError) as e:  # a result the kind cannot read
                self._answer(batch, e if isinstance(e, psycopg.Error) else psycopg.InterfaceError(str(e)))
        self.inflight = None
        if self._cancelling is None:
            self._next()

    @staticmethod
    def _answer(batch: list[_Waiter], error: Exception) -> None:
        for w in batch:
            if not w.fut.done():
                w.fut.set_exception(error)

    # -- giving a statement up --------------------------------------------------------------------

    def _gave_up(self) -> None:
        """A caller gave up: when no read of the statement in flight is waited for any longer, ask
        the server to cancel it (the reads queued behind it would otherwise wait for its end)."""
        batch, conn = self.inflight, self.conn
        if batch is None or conn is None or self._cancelling is not None or not all(w.fut.done() for w in batch):
            return
        self.cancels += 1
        self._cancelling = asyncio.get_running_loop().create_task(self._cancel(conn))

    async def _cancel(self, conn: psycopg.AsyncConnection[Any]) -> None:
        # psycopg's cancel request (libpq's non-blocking one); a failed request only means the
        # statement runs to its end. The next statement goes after it, never before: a cancel
        # request reaches whatever statement the server runs when it arrives.
        try:
            with contextlib.suppress(psycopg.Error):
                await conn.cancel_safe(timeout=5.0)
        finally:
            self._cancelling = None
            if not self._closed and self.inflight is None and self._connecting is None:
                self._next()

    # -- the connection ---------------------------------------------------------------------------

    async def _connect(self) -> None:
        try:
            conn = await self.pool.getconn()
        except Exception as e:  # the pool's fail-fast or timeout: every queued read gets it
            self._connecting = None
            queued, self.queue = self.queue, []
            self._answer(queued, e)
            return
        except BaseException:  # cancelled (close)
            self._connecting = None
            raise
        self._connecting = None
        if self._closed:
            await self.pool.putconn(conn)
            return
        self.conn = conn
        loop = asyncio.get_running_loop()
        try:
            self._fd = conn.pgconn.socket
            loop.add_reader(self._fd, self._readable)
        except (psycopg.Error, OSError, RuntimeError, ValueError) as e:  # a connection that cannot be watched
            self._release()
            queued, self.queue = self.queue, []
            self._answer(queued, psycopg.OperationalError(f"the connection's socket cannot be watched: {e}"))
            return
        if self._timer is None:  # ticks while the connection is kept (_tick)
            self._timer = loop.call_at(loop.time() + self.keep, self._tick)
        self._next()

    def _broken(self, error: Exception) -> None:
        """The connection failed: the reads in flight fail, the connection goes back to the pool
        (which discards a broken one), queued reads go on a new one."""
        batch, self.inflight = self.inflight, None
        self._result = None
        self._release()
        if batch:
            failure = error if isinstance(error, psycopg.OperationalError) else psycopg.OperationalError(str(error))
            self._answer(batch, failure)
        if not self._closed:
            self._next()

    def _release(self) -> None:
        """Stop watching the connection and give it back to the pool (in a task)."""
        conn, self.conn = self.conn, None
        if conn is None:
            return
        loop = asyncio.get_running_loop()
        if self._fd >= 0:
            with contextlib.suppress(OSError, RuntimeError, ValueError):  # nothing more to stop
                loop.remove_reader(self._fd)
                if self._writing:
                    loop.remove_writer(self._fd)
        self._writing = False
        self._fd = -1
        task = loop.create_task(self.pool.putconn(conn))
        self._returning.add(task)
        task.add_done_callback(self._returning.discard)

    def _idle_from_now(self) -> None:
        loop = asyncio.get_running_loop()
        self._last_used = loop.time()
        if self._timer is None and self.conn is not None:
            self._timer = loop.call_at(self._last_used + self.keep, self._tick)

    def _tick(self) -> None:
        """Every `keep` seconds while a connection is kept: an idle one goes back to the pool `keep`
        seconds after its last use; a statement still in flight since the last tick has its reader
        armed again (`_rearm`)."""
        self._timer = None
        if self.conn is None:
            return
        loop = asyncio.get_running_loop()
        if self.busy:
            if self.inflight is not None and self._sent == self._sent_at_tick:
                self._rearm()
            self._sent_at_tick = self._sent
            if self.conn is not None:
                self._timer = loop.call_at(loop.time() + self.keep, self._tick)
            return
        due = self._last_used + self.keep
        if loop.time() < due:
            self._timer = loop.call_at(due, self._tick)
            return
        self._release()

    def _rearm(self) -> None:
        """Watch the socket anew and read what already arrived. uvloop (libuv) can drop a
        descriptor from epoll right after adding it while the reader stays in uvloop's books
        (docs/performance.md, "A kept read that never ended"); psycopg's own waits arm theirs again
        every 0.1 s, and a reader kept for many statements is armed again here, so a lost one
        costs a tick, not the store."""
        loop = asyncio.get_running_loop()
        self.rearmed += 1
        try:
            loop.remove_reader(self._fd)
            loop.add_reader(self._fd, self._readable)
        except (OSError, RuntimeError, ValueError) as e:  # it cannot be watched: the reads go on another
            self._broken(psycopg.OperationalError(f"the connection's socket cannot be watched: {e}"))
            return
        self._readable()

    async def close(self) -> None:
        """Fail what is queued or in flight, give the connection back now (before the pool closes)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for task in (self._connecting, self._cancelling):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        closing = psycopg.OperationalError("the store is closing")
        waiting, self.queue = [*(self.inflight or []), *self.queue], []
        self.inflight = None
        self._answer(waiting, closing)
        self._release()
        if self._returning:
            await asyncio.gather(*self._returning, return_exceptions=True)
