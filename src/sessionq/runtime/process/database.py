"""The process runtime's own database: its schema (schema.sql, ``sessionq_process``), a small
connection pool and the two ways it runs SQL (one function call, or one short transaction)."""

from __future__ import annotations

import contextlib
import importlib.resources
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from sessionq.runtime.base import Code, SubstrateError

SCHEMA = "sessionq_process"
_FAIL_SQLSTATE = "PX001"
_INSTALL_LOCK_KEY = 0x5071526E74694D65  # pg_advisory_xact_lock: install_schema across processes
SERVER_LOCK_KEY = 0x5071526E74537276  # pg_try_advisory_lock: one runtime server per database

Cursor = psycopg.AsyncCursor[DictRow]


def _schema_sql() -> str:
    return importlib.resources.files("sessionq.runtime.process").joinpath("schema.sql").read_text("utf-8")


def worker_name(index: int) -> str:
    return f"process-slot-{index}"


async def install_schema(conninfo: str, *, slots: int) -> None:
    """Create the schema and the process slots that are missing. Idempotent, safe when several
    processes run it at once."""
    if slots < 1:
        raise ValueError("the process runtime needs at least one slot")
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_INSTALL_LOCK_KEY,))
            await conn.execute(_schema_sql().encode())
            async with conn.cursor() as cur:
                await cur.executemany(
                    "INSERT INTO sessionq_process.workers (name, idx, ip) VALUES (%s, %s, '127.0.0.1')"
                    " ON CONFLICT DO NOTHING",
                    [(worker_name(i), i) for i in range(slots)],
                )


class ProcessDatabase:
    def __init__(self, conninfo: str, *, pool_size: int = 4) -> None:
        self._conninfo = conninfo
        self._pool_size = pool_size
        self._pool: AsyncConnectionPool | None = None

    async def open(self) -> None:
        if self._pool is not None:
            return
        pool = AsyncConnectionPool(
            self._conninfo,
            min_size=1,
            max_size=self._pool_size,
            open=False,
            name="sessionq_process",
            kwargs={"autocommit": True, "application_name": "sessionq_process"},
        )
        await pool.open(wait=True, timeout=30.0)
        self._pool = pool

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    @contextlib.asynccontextmanager
    async def tx(self) -> AsyncIterator[Cursor]:
        """One short transaction on a pooled connection."""
        if self._pool is None:
            raise RuntimeError("the process runtime is not open")
        try:
            async with self._pool.connection() as conn, conn.transaction():
                async with conn.cursor(row_factory=dict_row) as cur:
                    yield cur
        except pg_errors.TransactionRollback as exc:
            raise SubstrateError(Code.ABORTED, f"process runtime transaction aborted: {exc}") from exc
        except psycopg.OperationalError as exc:
            raise SubstrateError(Code.UNAVAILABLE, f"process runtime store unavailable: {exc}") from exc
        except psycopg.Error as exc:
            if exc.sqlstate == _FAIL_SQLSTATE:
                raise SubstrateError(
                    Code(exc.diag.message_detail or Code.INTERNAL), exc.diag.message_primary or ""
                ) from None
            raise

    async def call(self, sql: str, params: Any = None) -> Any:
        """One statement in its own transaction: the first column of its first row (None without rows)."""
        async with self.tx() as cur:
            await cur.execute(sql, params)
            row = await cur.fetchone()
        return None if row is None else next(iter(row.values()))
