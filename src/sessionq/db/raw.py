"""Read statements executed through libpq directly (psycopg's `pgconn`), for the hottest reads.

GetSession's statement runs for most requests an API serves, and psycopg's cursor spends more
Python per execution than the rest of the read: a cursor and its adapters, the query's conversion,
each parameter's dumper (a list's element by element), the prepared-statement bookkeeping, the
result's loaders. `RawStatement` sends the statement with its parameters already in PostgreSQL's
text form, waits with the connection's own `wait` (psycopg's non-blocking generators), and gives
the rows as text for its caller to decode.

Decoding is by column name: `RawStatement.plan` maps the result's column names (libpq's fname) to
their positions once per statement and makes, from that map, the function that reads one row
(`record_reader` makes one for a NamedTuple from its fields' annotations). The statement's text may
list its columns in any order; a column the record needs and the result lacks is an error at once.

Prepared by name once per connection when the connection may prepare (its `prepare_threshold` is
set); through a transaction pooler (`prepare_threshold=None`: db/connection.py) it is sent unnamed
each time, which PgBouncer's transaction pooling supports. A statement the server no longer knows
(SQLSTATE 26000) is prepared again and retried once. The connection stays usable by psycopg: the
statement runs in autocommit, and leaves it idle (or, on a broken connection, as psycopg would:
the pool discards it).
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable
from types import NoneType, UnionType
from typing import Any, NamedTuple, TypeVar, Union, get_args, get_origin, get_type_hints

import psycopg
from psycopg import errors as pg_errors
from psycopg import generators, pq

Row = tuple[bytes | None, ...]
GetValue = Callable[[int, int], bytes | None]  # a result's get_value(row, column)
Columns = dict[str, int]  # a result's column names and their positions
P = TypeVar("P")
NT = TypeVar("NT", bound=NamedTuple)


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


def _text_decoder(annotation: Any) -> Callable[[bytes], Any]:
    """How a field of this type is read from its column's text form."""
    if annotation is str:
        return bytes.decode
    if annotation is int:
        return int
    if annotation is bool:
        return b"t".__eq__
    if get_origin(annotation) is dict or annotation is Any:
        return json.loads  # json or jsonb
    raise TypeError(f"no text decoding for {annotation!r}")


def _nullable(decode: Callable[[bytes], Any]) -> Callable[[bytes | None], Any]:
    return lambda v: None if v is None else decode(v)


def record_reader(cls: type[NT]) -> Callable[[Columns], Callable[[GetValue, int], NT]]:
    """For a NamedTuple, the plan maker `RawStatement.plan` takes: each field read from the column of
    its name, by its annotation (str, int, bool, a JSON dict; `X | None` for a NULL)."""
    steps: list[tuple[str, Callable[[Any], Any]]] = []
    for name, annotation in get_type_hints(cls).items():
        if get_origin(annotation) in (Union, UnionType):
            inner = [a for a in get_args(annotation) if a is not NoneType]
            if len(inner) != 1:
                raise TypeError(f"{cls.__name__}.{name}: one type or None, not {annotation!r}")
            steps.append((name, _nullable(_text_decoder(inner[0]))))
        else:
            steps.append((name, _text_decoder(annotation)))
    new = tuple.__new__

    def plan(columns: Columns) -> Callable[[GetValue, int], NT]:
        missing = [name for name, _ in steps if name not in columns]
        if missing:
            raise psycopg.InterfaceError(f"the statement answers no column {', '.join(missing)} of {cls.__name__}")
        located = tuple((columns[name], decode) for name, decode in steps)

        def read(get: GetValue, r: int) -> NT:
            return new(cls, [decode(get(r, c)) for c, decode in located])

        return read

    return plan


class RawStatement:
    """One statement with $n placeholders, its parameters and results in text form."""

    def __init__(self, name: str, sql: str) -> None:
        self.name = name.encode()
        self.sql = sql.encode()
        self._prepared: weakref.WeakSet[Any] = weakref.WeakSet()  # the connections it is prepared on
        self._plans: dict[Callable[[Columns], Any], tuple[int, Any]] = {}

    def prepared_on(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        return conn in self._prepared

    def mark_prepared(self, conn: psycopg.AsyncConnection[Any], prepared: bool = True) -> None:
        """Record that the statement is (or, after SQLSTATE 26000, no longer is) prepared on `conn`."""
        if prepared:
            self._prepared.add(conn)
        else:
            self._prepared.discard(conn)

    def plan(self, result: Any, make: Callable[[Columns], P]) -> P:
        """`make`'s plan for reading this statement's results, made from the result's column names
        the first time (and again should a result come with another number of columns: a function
        whose columns change is dropped and created again by a migration)."""
        known = self._plans.get(make)
        width = result.nfields
        if known is None or known[0] != width:
            columns = {result.fname(c).decode(): c for c in range(width)}
            known = self._plans[make] = (width, make(columns))
        plan: P = known[1]
        return plan

    async def run(self, conn: psycopg.AsyncConnection[Any], params: list[bytes | None]) -> list[Row]:
        """The statement's rows on `conn` (which the caller holds alone), each value as the bytes
        of its text form or None. A database error raises psycopg's exception for its SQLSTATE."""
        result = await self.result(conn, params)
        get = result.get_value
        width = range(result.nfields)
        return [tuple(get(r, c) for c in width) for r in range(result.ntuples)]

    async def records(
        self, conn: psycopg.AsyncConnection[Any], params: list[bytes | None],
        make: Callable[[Columns], Callable[[GetValue, int], P]],
    ) -> list[P]:
        """The statement's rows on `conn` read as records by column name (`make`: see `plan`)."""
        result = await self.result(conn, params)
        read = self.plan(result, make)
        get = result.get_value
        return [read(get, r) for r in range(result.ntuples)]

    async def result(self, conn: psycopg.AsyncConnection[Any], params: list[bytes | None]) -> Any:
        """The statement's result on `conn` (libpq's, checked: an error raises)."""
        try:
            return await self._run(conn, params)
        except pg_errors.InvalidSqlStatementName:  # prepared on a session the server since lost
            self._prepared.discard(conn)
            return await self._run(conn, params)

    async def _run(self, conn: psycopg.AsyncConnection[Any], params: list[bytes | None]) -> Any:
        pgconn = conn.pgconn
        if conn.prepare_threshold is None:
            pgconn.send_query_params(self.sql, params)
        else:
            if conn not in self._prepared:
                pgconn.send_prepare(self.name, self.sql)
                self._check(conn, await conn.wait(generators.execute(pgconn)))
                self._prepared.add(conn)
            pgconn.send_query_prepared(self.name, params)
        return self._check(conn, await conn.wait(generators.execute(pgconn)))

    @staticmethod
    def _check(conn: psycopg.AsyncConnection[Any], results: list[Any]) -> Any:
        result = results[-1]
        if result.status == pq.ExecStatus.FATAL_ERROR:
            raise pg_errors.error_from_result(result, encoding=conn.info.encoding)
        if result.status not in (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK):
            raise psycopg.InterfaceError(f"unexpected result status {pq.ExecStatus(result.status).name}")
        return result
