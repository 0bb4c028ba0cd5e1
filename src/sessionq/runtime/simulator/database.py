"""The simulator's own database: its schema ``substrate_sim`` (the stand-in core's core.sql, then
schema.sql: fault injection and what the simulator keeps of an Actor), its worker pool rows, and its
connection pool (the stand-in core's `StandInDatabase`, committing asynchronously)."""

from __future__ import annotations

import hashlib
import os
from typing import Any, Self

import psycopg

from sessionq.runtime.base import ActorState
from sessionq.runtime.stand_in import database as stand_in
from sessionq.runtime.stand_in.database import StandInDatabase, StandInSchema

POLL_INTERVAL = 0.01  # seconds between polls of the faults table while blocked or waiting

WORKER_ATESPACE = "kagent"
WORKER_PREFIX = "kagent-default-7c9f8b6d54-"
WORKER_STATE = "WORKER_STATE_READY"
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the alphabet of Kubernetes' generated name suffixes

SCHEMA = StandInSchema(
    name="substrate_sim",
    package="sessionq.runtime.simulator",
    label="simulated runtime",
    fail_sqlstate="SX001",  # substrate_sim.fail: the Code name in DETAIL
    install_lock_key=0x5375627374725353,  # "SubstrSm"
    worker_states=(ActorState.RUNNING, ActorState.PAUSED),
)


# --------------------------------------------------------------------------------------------
# schema installation


def worker_identity(index: int, taken: set[str] | None = None) -> tuple[str, str]:
    """The (name, ip) of the worker with this pool index: deterministic from the index.

    `taken` holds names already given to lower indices; a (very unlikely) suffix collision is
    resolved deterministically by hashing again."""
    attempt = 0
    while True:
        digest = hashlib.sha256(f"substrate-sim-worker:{index}:{attempt}".encode()).digest()
        suffix = "".join(_SUFFIX_ALPHABET[b % len(_SUFFIX_ALPHABET)] for b in digest[:5])
        name = WORKER_PREFIX + suffix
        if taken is None or name not in taken:
            return name, f"10.244.{index // 250}.{index % 250 + 2}"
        attempt += 1


def _worker_rows(count: int) -> list[dict[str, object]]:
    taken: set[str] = set()
    rows: list[dict[str, object]] = []
    for i in range(count):
        name, ip = worker_identity(i, taken)
        taken.add(name)
        rows.append({"name": name, "idx": i, "atespace": WORKER_ATESPACE, "ip": ip, "state": WORKER_STATE})
    return rows


async def install_schema(conninfo: str, *, worker_pool_size: int = 256) -> None:
    """Create the simulator schema and the worker pool rows that are missing. Idempotent and safe
    when several processes run it at once (transaction-level advisory lock)."""
    if worker_pool_size < 0:
        raise ValueError("worker_pool_size must be >= 0")
    await stand_in.install_schema(conninfo, SCHEMA, lambda existing: _worker_rows(worker_pool_size)[existing:])


# The simulator's commits do not wait for their WAL flush (asynchronous commit). It stands in for
# a runtime that keeps its own state: its durability is not the control plane's promise, and a
# crash of the server may forget its last changes, as a runtime may lose work. That loss is one
# the control plane already handles: every control-plane commit is synchronous and flushes all
# earlier WAL, so a simulator change survives once anything the control plane recorded after it
# survives (the Actor UID after create_actor, the completion after the egress policy, and so on).
# What can be lost is only a change the control plane never recorded, which is a lost response
# (OP-14): a retry inspects the Actor and continues from what exists. Saves a WAL flush on each
# runtime call (two per creation). Set on each new connection of the simulator's pool, so that
# options in the database URL stay as they are.
#
# A failover breaks that argument: an asynchronous commit not yet on the standby is gone after the
# promotion, while the control plane's record of it (retried after the reconnect) is committed on
# the new primary, so the record outlives the effect (e.g. a suspension recorded for an Actor the
# simulator then shows RUNNING). A real runtime keeps its state elsewhere; the simulator, sharing the
# failed-over server, commits synchronously when SESSIONQ_SIMULATOR_SYNCHRONOUS_COMMIT is 1 (the
# failover harness sets it: tests/soak/formation.py).
SYNCHRONOUS_COMMIT_ENV = "SESSIONQ_SIMULATOR_SYNCHRONOUS_COMMIT"


async def _commit_asynchronously(conn: psycopg.AsyncConnection[Any]) -> None:
    if os.environ.get(SYNCHRONOUS_COMMIT_ENV, "").lower() in ("1", "true", "yes", "on"):
        return
    await conn.execute("SET synchronous_commit = off")


class SimulatorDatabase(StandInDatabase):
    """The connection pool of one simulator instance (the stand-in core's `StandInDatabase` on
    ``substrate_sim``, committing asynchronously). `worker_pool_size` bounds the workers this
    instance allocates and lists (the pool rows are created by `install_schema`; `open` adds missing
    ones)."""

    def __init__(
        self,
        conninfo: str,
        *,
        worker_pool_size: int = 256,
        taskstore_address: str | None = None,
        pool_size: int = 8,
    ) -> None:
        if worker_pool_size < 0:
            raise ValueError("worker_pool_size must be >= 0")
        super().__init__(conninfo, SCHEMA, pool_size=pool_size, configure=_commit_asynchronously)
        self.worker_pool_size = worker_pool_size
        # "host:port" of the TaskStoreService the simulated agents report to; may be set later
        self.taskstore_address = taskstore_address

    # lifecycle ------------------------------------------------------------------------------

    async def open(self) -> None:
        if self._pool is not None:
            return
        await super().open()
        try:
            await self._ensure_installed()
        except BaseException:
            await self.close()
            raise

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _ensure_installed(self) -> None:
        """Install the schema when it is missing, lacks its functions or indexes (a database
        installed before they existed) or holds fewer workers than this instance's pool."""
        async with self.tx() as cur:
            await cur.execute(
                "SELECT to_regclass('substrate_sim.workers') IS NOT NULL AS present,"
                " to_regprocedure('substrate_sim.release_worker(text)') IS NOT NULL"
                " AND to_regclass('substrate_sim.workers_free_idx') IS NOT NULL AS current"
            )
            row = await cur.fetchone()
            present = bool(row and row["present"])
            current = bool(row and row["current"])
            count = 0
            if present:
                await cur.execute("SELECT count(*) AS n FROM substrate_sim.workers")
                row = await cur.fetchone()
                count = int(row["n"]) if row else 0
        if not present or not current or count < self.worker_pool_size:
            await install_schema(self._conninfo, worker_pool_size=self.worker_pool_size)
