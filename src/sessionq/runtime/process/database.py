"""The process runtime's own database: its schema ``sessionq_process`` (the stand-in core's core.sql,
then schema.sql: what the runtime keeps of processes and archives), the install of its process slots,
and its connection pool (the stand-in core's `StandInDatabase`)."""

from __future__ import annotations

from sessionq.runtime.base import ActorState
from sessionq.runtime.stand_in import database as stand_in
from sessionq.runtime.stand_in.database import Cursor, StandInDatabase, StandInSchema

__all__ = ["SCHEMA", "SERVER_LOCK_KEY", "Cursor", "ProcessDatabase", "install_schema", "worker_name"]

SCHEMA = StandInSchema(
    name="sessionq_process",
    package="sessionq.runtime.process",
    label="process runtime",
    fail_sqlstate="PX001",  # sessionq_process.fail: the Code name in DETAIL
    install_lock_key=0x5071526E74694D65,
    # the states of an Actor with a process: it holds a process slot
    worker_states=(ActorState.RESUMING, ActorState.RUNNING, ActorState.PAUSED, ActorState.SUSPENDING),
)
SERVER_LOCK_KEY = 0x5071526E74537276  # pg_try_advisory_lock: one runtime server per database


def worker_name(index: int) -> str:
    return f"process-slot-{index}"


async def install_schema(conninfo: str, *, slots: int) -> None:
    """Create the schema and the process slots that are missing. Idempotent, safe when several
    processes run it at once."""
    if slots < 1:
        raise ValueError("the process runtime needs at least one slot")
    await stand_in.install_schema(
        conninfo,
        SCHEMA,
        lambda existing: [{"name": worker_name(i), "idx": i, "ip": "127.0.0.1"} for i in range(existing, slots)],
    )


class ProcessDatabase(StandInDatabase):
    """The process runtime's connection pool on ``sessionq_process``."""

    def __init__(self, conninfo: str, *, pool_size: int = 4) -> None:
        super().__init__(conninfo, SCHEMA, pool_size=pool_size)
