"""The database side both stand-in runtimes share: what makes a runtime's schema (`StandInSchema`)
and its install (core.sql, then the runtime's schema.sql, then the missing worker rows), a small
connection pool of their own (they stand in for an external system, so their state lives outside the
control plane's transactions), one short transaction, one autocommit statement, and how PostgreSQL
errors become `SubstrateError`s."""

from __future__ import annotations

import contextlib
import importlib.resources
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import tzinfo
from typing import Any, NoReturn

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from sessionq.runtime.base import ActorState, Code, SubstrateError

__all__ = ["Cursor", "StandInDatabase", "StandInSchema", "WorkerRows", "install_schema"]

Cursor = psycopg.AsyncCursor[DictRow]

# the rollbacks of a conflict with another transaction, which a retry may not meet: SQLSTATE 40000,
# 40001 (serialization failure) and 40P01 (deadlock). psycopg files each under OperationalError as
# its own class (not a subclass of TransactionRollback), so they are named one by one, ahead of the
# lost connection that OperationalError otherwise means.
_CONFLICTS = (pg_errors.TransactionRollback, pg_errors.SerializationFailure, pg_errors.DeadlockDetected)
Configure = Callable[[psycopg.AsyncConnection[Any]], Awaitable[None]]
# the worker rows an install adds, given how many the schema holds: each a mapping column -> value
WorkerRows = Callable[[int], Sequence[Mapping[str, Any]]]


@dataclass(frozen=True)
class StandInSchema:
    """One stand-in runtime's schema: its name, the package whose schema.sql adds the runtime's own
    columns, tables and functions to core.sql's, the runtime's name in error messages (`label`), the
    SQLSTATE its ``fail`` raises (with the Code name in DETAIL), the advisory lock key serialising its
    installs across processes, and the Actor states in which an Actor holds a worker (the check of
    the actors table)."""

    name: str
    package: str
    label: str
    fail_sqlstate: str
    install_lock_key: int
    worker_states: tuple[ActorState, ...]

    def core_sql(self) -> sql.Composed:
        """core.sql for this schema: its placeholders the schema's identifier, the SQLSTATE of its
        ``fail`` and the list of worker-holding states."""
        text = importlib.resources.files("sessionq.runtime.stand_in").joinpath("core.sql").read_text("utf-8")
        return sql.SQL(text).format(
            schema=sql.Identifier(self.name),
            fail_sqlstate=sql.Literal(self.fail_sqlstate),
            worker_states=sql.SQL(", ").join(sql.Literal(state.value) for state in self.worker_states),
        )

    def schema_sql(self) -> bytes:
        """The runtime's own schema.sql, which runs after core.sql."""
        return importlib.resources.files(self.package).joinpath("schema.sql").read_text("utf-8").encode()


async def install_schema(conninfo: str, schema: StandInSchema, worker_rows: WorkerRows) -> None:
    """One install of a runtime's schema, in one transaction under a transaction-level advisory lock
    (so that several processes may install at once): core.sql, the runtime's schema.sql, then the
    worker rows `worker_rows` gives for the count the schema already holds (an existing name or index
    is kept). Idempotent as the files are."""
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (schema.install_lock_key,))
            await conn.execute(schema.core_sql())
            await conn.execute(schema.schema_sql())
            workers = sql.Identifier(schema.name, "workers")
            cur = await conn.execute(sql.SQL("SELECT count(*) FROM {}").format(workers))
            row = await cur.fetchone()
            rows = worker_rows(int(row[0]) if row else 0)
            if rows:
                columns = list(rows[0])
                insert = sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT DO NOTHING").format(
                    workers,
                    sql.SQL(", ").join(map(sql.Identifier, columns)),
                    sql.SQL(", ").join(sql.Placeholder() * len(columns)),
                )
                async with conn.cursor() as many:
                    await many.executemany(insert, [tuple(r[c] for c in columns) for r in rows])


class StandInDatabase:
    """The connection pool of one runtime instance on its schema, and its ways to run SQL: `tx` (one
    short transaction) and `execute` / `call` (one autocommit statement), with the schema's errors
    mapped (`_raise`); `configure` runs on each new pooled connection."""

    def __init__(
        self, conninfo: str, schema: StandInSchema, *, pool_size: int, configure: Configure | None = None
    ) -> None:
        self._conninfo = conninfo
        self._schema = schema
        self._pool_size = pool_size
        self._configure = configure
        self._pool: AsyncConnectionPool | None = None

    async def open(self) -> None:
        if self._pool is not None:
            return
        pool = AsyncConnectionPool(
            self._conninfo,
            min_size=1,
            max_size=self._pool_size,
            open=False,
            name=self._schema.name,
            kwargs={"autocommit": True, "application_name": self._schema.name},
            configure=self._configure,
        )
        await pool.open(wait=True, timeout=30.0)
        self._pool = pool

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    def _open_pool(self) -> AsyncConnectionPool:
        if self._pool is None:
            raise RuntimeError(f"the {self._schema.label} is not open")
        return self._pool

    def _raise(self, exc: psycopg.Error) -> NoReturn:
        """A PostgreSQL error as the runtime reports it: a transaction rolled back by a conflict
        (`_CONFLICTS`) ABORTED, any other OperationalError (a lost connection) UNAVAILABLE, the
        schema's fail its Code; anything else as it is."""
        if isinstance(exc, _CONFLICTS):
            raise SubstrateError(Code.ABORTED, f"{self._schema.label} transaction aborted: {exc}") from exc
        if isinstance(exc, psycopg.OperationalError):
            raise SubstrateError(Code.UNAVAILABLE, f"{self._schema.label} store unavailable: {exc}") from exc
        if exc.sqlstate == self._schema.fail_sqlstate:
            code = Code(exc.diag.message_detail or Code.INTERNAL)
            raise SubstrateError(code, exc.diag.message_primary or "") from None
        raise exc

    @contextlib.asynccontextmanager
    async def tx(self) -> AsyncIterator[Cursor]:
        """One short transaction on a pooled connection, rows as dicts."""
        pool = self._open_pool()
        try:
            async with pool.connection() as conn, conn.transaction():
                async with conn.cursor(row_factory=dict_row) as cur:
                    yield cur
        except psycopg.Error as exc:
            self._raise(exc)

    async def execute(self, statement: str, params: Any = None) -> tuple[Any, tzinfo]:
        """One statement on an autocommit pooled connection (its own transaction, one round trip):
        the first column of its first row (None without rows) and the session time zone."""
        pool = self._open_pool()
        try:
            async with pool.connection() as conn:
                cur = await conn.execute(statement, params)
                row = await cur.fetchone()
                tz = conn.info.timezone
        except psycopg.Error as exc:
            self._raise(exc)
        return (row[0] if row is not None else None), tz

    async def call(self, statement: str, params: Any = None) -> Any:
        """One statement in its own transaction: the first column of its first row (None without rows)."""
        return (await self.execute(statement, params))[0]
