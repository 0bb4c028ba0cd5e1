"""The database side both stand-in runtimes share: a small connection pool of their own (they stand
in for an external system, so their state lives outside the control plane's transactions), one
short transaction, one autocommit statement, and how PostgreSQL errors become `SubstrateError`s;
and the install of the functions of core.sql into a runtime's schema."""

from __future__ import annotations

import contextlib
import importlib.resources
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import tzinfo
from typing import Any, NoReturn

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from sessionq.runtime.base import Code, SubstrateError

__all__ = ["Cursor", "StandInDatabase", "core_functions_sql", "installing"]

Cursor = psycopg.AsyncCursor[DictRow]

# the rollbacks of a conflict with another transaction, which a retry may not meet: SQLSTATE 40000,
# 40001 (serialization failure) and 40P01 (deadlock). psycopg files each under OperationalError as
# its own class (not a subclass of TransactionRollback), so they are named one by one, ahead of the
# lost connection that OperationalError otherwise means.
_CONFLICTS = (pg_errors.TransactionRollback, pg_errors.SerializationFailure, pg_errors.DeadlockDetected)
Configure = Callable[[psycopg.AsyncConnection[Any]], Awaitable[None]]


def core_functions_sql(schema: str, fail_sqlstate: str) -> sql.Composed:
    """core.sql for one runtime's schema: its ``{schema}`` placeholders the schema's identifier, its
    ``{fail_sqlstate}`` the SQLSTATE that schema's ``fail`` raises. Runs after the schema's tables
    exist (``lock_actor`` returns an actors row)."""
    text = importlib.resources.files("sessionq.runtime.stand_in").joinpath("core.sql").read_text("utf-8")
    return sql.SQL(text).format(schema=sql.Identifier(schema), fail_sqlstate=sql.Literal(fail_sqlstate))


@contextlib.asynccontextmanager
async def installing(
    conninfo: str, *, package: str, schema: str, fail_sqlstate: str, lock_key: int
) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """One install of a runtime's schema, in one transaction under a transaction-level advisory lock
    (`lock_key`, so that several processes may install at once): the schema.sql of `package`, then
    core.sql's functions; the caller adds its own rows (workers, slots) on the yielded connection
    before the transaction commits. Idempotent as the files are."""
    schema_sql = importlib.resources.files(package).joinpath("schema.sql").read_text("utf-8")
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key,))
            await conn.execute(schema_sql.encode())
            await conn.execute(core_functions_sql(schema, fail_sqlstate))
            yield conn


class StandInDatabase:
    """The connection pool of one runtime instance on its schema, and its ways to run SQL: `tx` (one
    short transaction) and `execute` / `call` (one autocommit statement). `label` names the runtime
    in error messages; `fail_sqlstate` is what its schema's ``fail`` raises, with the Code name in
    DETAIL; `configure` runs on each new pooled connection."""

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str,
        label: str,
        fail_sqlstate: str,
        pool_size: int,
        configure: Configure | None = None,
    ) -> None:
        self._conninfo = conninfo
        self._schema = schema
        self._label = label
        self._fail_sqlstate = fail_sqlstate
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
            name=self._schema,
            kwargs={"autocommit": True, "application_name": self._schema},
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
            raise RuntimeError(f"the {self._label} is not open")
        return self._pool

    def _raise(self, exc: psycopg.Error) -> NoReturn:
        """A PostgreSQL error as the runtime reports it: a transaction rolled back by a conflict
        (`_CONFLICTS`) ABORTED, any other OperationalError (a lost connection) UNAVAILABLE, the
        schema's fail its Code; anything else as it is."""
        if isinstance(exc, _CONFLICTS):
            raise SubstrateError(Code.ABORTED, f"{self._label} transaction aborted: {exc}") from exc
        if isinstance(exc, psycopg.OperationalError):
            raise SubstrateError(Code.UNAVAILABLE, f"{self._label} store unavailable: {exc}") from exc
        if exc.sqlstate == self._fail_sqlstate:
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
