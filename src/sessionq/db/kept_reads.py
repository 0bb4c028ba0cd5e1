"""Coalesced point reads on one kept connection, driven by the event loop's callbacks (issue 23).

GetSession reads one Session per call, and most requests an API serves are GetSessions. Each such
read is one row of a statement whose first column is `ord`, the 1-based position of the read in
its batch (sessionq.get_session_views). `KeptReads` answers them this way:

- A read that finds the connection idle is sent at once, alone (the `single` statement); reads
  that arrive while a statement is in flight queue, and when it ends the queue (up to `max_batch`)
  goes as one `batch` statement. So one statement is in flight at a time and none waits for a timer.
- The statements run through libpq directly (`RawStatement`: text parameters and results, prepared
  once per connection, unnamed through a transaction pooler), on a connection taken from the pool
  for the first read and given back `keep` seconds after the last.
- While the connection is kept, the event loop watches its socket with one reader callback, which
  takes a statement's result, answers its reads' futures and sends the next batch. A read costs a
  future, nothing else: no task, no coroutine per statement, no reader registered and removed per
  statement, no timer per statement (psycopg's wait, a pool checkout and a drain task cost as much
  Python as the rest of a GetSession).

Failures: a statement's error (psycopg's exception of its SQLSTATE) reaches every read of its batch
and only those; a statement the server no longer knows (SQLSTATE 26000) is prepared again and sent
once more; a connection that breaks fails the reads in flight with OperationalError and goes back
to the pool (which discards it), and the reads queued behind them go on a new connection. A read
whose caller gave up (its future cancelled) only drops out of its batch's answer. Reads of a
closing store fail with OperationalError.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq

from sessionq.db.raw import RawStatement, Row

K = TypeVar("K")

_Waiter = tuple[Any, "asyncio.Future[Row | None]"]


class KeptReads(Generic[K]):
    """Point reads keyed by K, each answered with its row (ord first, values as text bytes) or None
    when the statement gave no row for it. `single(key)` and `batch(keys)` make the parameters of
    the two statements; both statements answer rows whose first column is ord (1 for `single`)."""

    def __init__(
        self,
        pool: Any,
        single: RawStatement,
        batch: RawStatement,
        single_params: Callable[[K], list[bytes | None]],
        batch_params: Callable[[list[K]], list[bytes | None]],
        *,
        keep: float = 0.5,
        max_batch: int = 64,
    ) -> None:
        self.pool = pool
        self.single, self.batch = single, batch
        self.single_params, self.batch_params = single_params, batch_params
        self.keep = keep
        self.max_batch = max_batch
        self.conn: psycopg.AsyncConnection[Any] | None = None
        self.queue: list[_Waiter] = []
        self.inflight: list[_Waiter] | None = None  # the reads of the statement in flight
        self.batches = 0  # batch statements sent, and the largest batch (tests, profiling)
        self.largest = 0
        self._fd = -1
        self._statement: RawStatement | None = None
        self._params: list[bytes | None] = []
        self._preparing = False  # the statement in flight is the PREPARE of self._statement
        self._result: Any = None  # the statement's last result so far
        self._retried = False
        self._writing = False
        self._connecting: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._last_used = 0.0
        self._returning: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def busy(self) -> bool:
        """Whether a statement is in flight or a connection is being taken for one."""
        return self.inflight is not None or self._connecting is not None

    def read(self, key: K) -> asyncio.Future[Row | None]:
        """The future of `key`'s row (None: no row). Await it; cancelling it drops the read."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Row | None] = loop.create_future()
        if self._closed:
            fut.set_exception(psycopg.OperationalError("the store is closing"))
            return fut
        self.queue.append((key, fut))
        if self.inflight is None and self._connecting is None:
            self._next()
        return fut

    # -- sending ----------------------------------------------------------------------------------

    def _next(self) -> None:
        """Send the queue's next batch (called with nothing in flight)."""
        while self.queue:
            batch = [w for w in self.queue[: self.max_batch] if not w[1].done()]
            del self.queue[: self.max_batch]
            if batch:
                break
        else:
            self._idle_from_now()
            return
        if self.conn is None:
            self.queue[:0] = batch  # they go first once the connection is there
            self._connecting = asyncio.get_running_loop().create_task(self._connect())
            return
        self.inflight = batch
        self._retried = False
        if len(batch) == 1:
            self._statement, self._params = self.single, self.single_params(batch[0][0])
        else:
            self.batches += 1
            self.largest = max(self.largest, len(batch))
            self._statement, self._params = self.batch, self.batch_params([k for k, _ in batch])
        self._send()

    def _send(self) -> None:
        conn, statement = self.conn, self._statement
        assert conn is not None and statement is not None
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
        statement, batch = self._statement, self.inflight
        assert statement is not None and batch is not None
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
                self._send()
                return
        elif result.status != pq.ExecStatus.TUPLES_OK:
            self._answer(batch, psycopg.InterfaceError(f"unexpected result status {pq.ExecStatus(result.status).name}"))
        else:
            get = result.get_value
            width = range(result.nfields)
            rows = {int(get(r, 0)): tuple(get(r, c) for c in width) for r in range(result.ntuples)}
            for i, (_, fut) in enumerate(batch, start=1):
                if not fut.done():
                    fut.set_result(rows.get(i))
        self.inflight = None
        self._next()

    @staticmethod
    def _answer(batch: list[_Waiter], error: Exception) -> None:
        for _, fut in batch:
            if not fut.done():
                fut.set_exception(error)

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
        self._fd = conn.pgconn.socket
        asyncio.get_running_loop().add_reader(self._fd, self._readable)
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
            self._timer = loop.call_at(self._last_used + self.keep, self._give_back_if_idle)

    def _give_back_if_idle(self) -> None:
        self._timer = None
        if self.conn is None or self.busy:
            return  # in use: the statement's end starts the clock again
        loop = asyncio.get_running_loop()
        due = self._last_used + self.keep
        if loop.time() < due:
            self._timer = loop.call_at(due, self._give_back_if_idle)
            return
        self._release()

    async def close(self) -> None:
        """Fail what is queued or in flight, give the connection back now (before the pool closes)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._connecting is not None:
            self._connecting.cancel()
            await asyncio.gather(self._connecting, return_exceptions=True)
        closing = psycopg.OperationalError("the store is closing")
        waiting, self.queue = [*(self.inflight or []), *self.queue], []
        self.inflight = None
        self._answer(waiting, closing)
        self._release()
        if self._returning:
            await asyncio.gather(*self._returning, return_exceptions=True)
