"""A read statement executed through libpq directly (psycopg's `pgconn`), for the hottest read.

GetSession's statement (sessionq.get_session_views) runs for most requests an API serves, and
psycopg's cursor spends more Python per execution than the rest of the read (issue 23): a cursor
and its adapters, the query's conversion, each parameter's dumper (a list's element by element),
the prepared-statement bookkeeping, the result's loaders. `RawStatement` sends the statement with
its parameters already in PostgreSQL's text form, waits with the connection's own `wait`
(psycopg's non-blocking generators), and gives the rows as text for its caller to decode.

Prepared by name once per connection when the connection may prepare (its `prepare_threshold` is
set); through a transaction pooler (`prepare_threshold=None`: db/connection.py) it is sent unnamed
each time, which PgBouncer's transaction pooling supports. A statement the server no longer knows
(SQLSTATE 26000) is prepared again and retried once. The connection stays usable by psycopg: the
statement runs in autocommit, and leaves it idle (or, on a broken connection, as psycopg would:
the pool discards it).
"""

from __future__ import annotations

import weakref
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import generators, pq

Row = tuple[bytes | None, ...]


def text_array(values: list[str | None]) -> bytes:
    """A PostgreSQL array literal of text values (NULL for None), each quoted and escaped."""
    parts = []
    for v in values:
        if v is None:
            parts.append("NULL")
            continue
        if "\x00" in v:
            raise psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes")
        parts.append('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return ("{" + ",".join(parts) + "}").encode()


def text_param(value: str | None) -> bytes | None:
    if value is None:
        return None
    if "\x00" in value:
        raise psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes")
    return value.encode()


class RawStatement:
    """One statement with $n placeholders, its parameters and results in text form."""

    def __init__(self, name: str, sql: str) -> None:
        self.name = name.encode()
        self.sql = sql.encode()
        self._prepared: weakref.WeakSet[Any] = weakref.WeakSet()  # the connections it is prepared on

    def prepared_on(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        return conn in self._prepared

    def mark_prepared(self, conn: psycopg.AsyncConnection[Any], prepared: bool = True) -> None:
        """Record that the statement is (or, after SQLSTATE 26000, no longer is) prepared on `conn`."""
        if prepared:
            self._prepared.add(conn)
        else:
            self._prepared.discard(conn)

    async def run(self, conn: psycopg.AsyncConnection[Any], params: list[bytes | None]) -> list[Row]:
        """The statement's rows on `conn` (which the caller holds alone), each value as the bytes
        of its text form or None. A database error raises psycopg's exception for its SQLSTATE."""
        try:
            return await self._run(conn, params)
        except pg_errors.InvalidSqlStatementName:  # prepared on a session the server since lost
            self._prepared.discard(conn)
            return await self._run(conn, params)

    async def _run(self, conn: psycopg.AsyncConnection[Any], params: list[bytes | None]) -> list[Row]:
        pgconn = conn.pgconn
        if conn.prepare_threshold is None:
            pgconn.send_query_params(self.sql, params)
        else:
            if conn not in self._prepared:
                pgconn.send_prepare(self.name, self.sql)
                self._check(conn, await conn.wait(generators.execute(pgconn)))
                self._prepared.add(conn)
            pgconn.send_query_prepared(self.name, params)
        result = self._check(conn, await conn.wait(generators.execute(pgconn)))
        get = result.get_value
        width = range(result.nfields)
        return [tuple(get(r, c) for c in width) for r in range(result.ntuples)]

    @staticmethod
    def _check(conn: psycopg.AsyncConnection[Any], results: list[Any]) -> Any:
        result = results[-1]
        if result.status == pq.ExecStatus.FATAL_ERROR:
            raise pg_errors.error_from_result(result, encoding=conn.info.encoding)
        if result.status not in (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK):
            raise psycopg.InterfaceError(f"unexpected result status {pq.ExecStatus(result.status).name}")
        return result
