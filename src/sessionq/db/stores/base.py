"""What every part of the store shares: its pool, LISTEN connection and point reads, and the
plumbing of one statement per method."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from uuid import UUID

from psycopg.rows import dict_row, tuple_row
from psycopg_pool import AsyncConnectionPool

from sessionq import errors, telemetry
from sessionq.db.connection import DatabaseHealth, Listener
from sessionq.db.kept_reads import KeptReads
from sessionq.db.raw import Columns, GetValue, RawStatement
from sessionq.models import (
    Admission,
    AdmissionOutcome,
    Session,
)

_R = TypeVar("_R")

TRACEPARENT_SQL = "SELECT set_config('sessionq.traceparent', %s, true)"


class StoreBase:
    """The attributes `Store` sets up, and the plumbing each part calls."""

    pool: AsyncConnectionPool
    listener: Listener | None
    health: DatabaseHealth
    reads: KeptReads | None

    # Every store method is one statement on a pooled autocommit connection: taken with getconn and
    # given back with putconn, without pool.connection()'s context (its commit of a transaction that
    # autocommit never leaves open, and two context managers, on every call of the hottest reads).
    # putconn still rolls back and discards a connection left in a bad state.

    async def _fetch(self, sql: str, params: Sequence[Any] | dict[str, Any], row_factory: Any) -> list[Any]:
        with errors.database_errors():
            conn = await self.pool.getconn()
            try:
                cur = conn.cursor(row_factory=row_factory)
                if (traceparent := telemetry.traceparent()) is None:  # one check while tracing is off
                    await cur.execute(sql, params)
                    return await cur.fetchall()
                # a traced call: the trace context goes with the jobs (sessionq.defer) and idle
                # notifications (sessionq.notify) the statement makes, as the transaction-local
                # setting sessionq.traceparent; one pipeline, one round trip, one transaction
                async with conn.pipeline():
                    await conn.execute(TRACEPARENT_SQL, (traceparent,))
                    await cur.execute(sql, params)
                    return await cur.fetchall()
            finally:
                await self.pool.putconn(conn)

    async def _rows(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        return await self._fetch(sql, params, dict_row)

    async def _one(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any]:
        rows = await self._rows(sql, params)
        assert len(rows) == 1, f"expected one row from {sql!r}"
        return rows[0]

    async def _value(self, sql: str, params: Sequence[Any] = ()) -> Any:
        rows = await self._fetch(sql, params, tuple_row)
        assert len(rows) == 1, f"expected one row from {sql!r}"
        return rows[0][0]


    async def _admit(self, sql: str, params: Sequence[Any]) -> Admission:
        """Run an admission procedure; the Admission carries the LISTEN epoch from before it was
        sent (see `wait_for_generation`)."""
        epoch = self._listen_epoch()
        row = await self._one(sql, params)
        return Admission(
            AdmissionOutcome(row["outcome"]), row["generation"], Session.from_json(row["session"]), epoch
        )

    def _listen_epoch(self) -> int | None:
        return self.listener.epoch if self.listener is not None and self.listener.connected else None

    async def _records(
        self, statement: RawStatement, params: list[bytes | None],
        record: Callable[[Columns], Callable[[GetValue, int], _R]],
    ) -> list[_R]:
        """A RawStatement's rows as records on a pooled connection, its errors mapped as _fetch maps them."""
        with errors.database_errors():
            conn = await self.pool.getconn()
            try:
                return await statement.records(conn, params, record)
            finally:
                await self.pool.putconn(conn)


    async def secret(self, name: str) -> str:
        return str(await self._value("SELECT value FROM sessionq.secrets WHERE name = %s", (name,)))

    async def session_by_id(self, session_id: UUID) -> Session | None:
        """Unfiltered read for executors and operators (never for client-facing calls)."""
        rows = await self._rows("SELECT to_jsonb(s) AS s FROM sessionq.sessions s WHERE id = %s", (session_id,))
        return Session.from_json(rows[0]["s"]) if rows else None


def payload_hash(task: dict[str, Any], event: dict[str, Any] | None, dispatch_id: UUID | None) -> str:
    """Identity of a task write: an identical retry has the same hash."""
    return hashlib.sha256(dumps([task, event, str(dispatch_id) if dispatch_id else None]).encode()).hexdigest()


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
