"""The process runtime's own database: its schema (schema.sql and the stand-in core's functions,
``sessionq_process``), the install of its process slots, and its connection pool (the stand-in
core's `StandInDatabase`)."""

from __future__ import annotations

from sessionq.runtime.stand_in.database import Cursor, StandInDatabase, installing

__all__ = ["SCHEMA", "SERVER_LOCK_KEY", "Cursor", "ProcessDatabase", "install_schema", "worker_name"]

SCHEMA = "sessionq_process"
_FAIL_SQLSTATE = "PX001"  # sessionq_process.fail: the Code name in DETAIL
_INSTALL_LOCK_KEY = 0x5071526E74694D65  # pg_advisory_xact_lock: install_schema across processes
SERVER_LOCK_KEY = 0x5071526E74537276  # pg_try_advisory_lock: one runtime server per database


def worker_name(index: int) -> str:
    return f"process-slot-{index}"


async def install_schema(conninfo: str, *, slots: int) -> None:
    """Create the schema and the process slots that are missing. Idempotent, safe when several
    processes run it at once."""
    if slots < 1:
        raise ValueError("the process runtime needs at least one slot")
    async with installing(
        conninfo,
        package="sessionq.runtime.process",
        schema=SCHEMA,
        fail_sqlstate=_FAIL_SQLSTATE,
        lock_key=_INSTALL_LOCK_KEY,
    ) as conn:
        async with conn.cursor() as cur:
            await cur.executemany(
                "INSERT INTO sessionq_process.workers (name, idx, ip) VALUES (%s, %s, '127.0.0.1')"
                " ON CONFLICT DO NOTHING",
                [(worker_name(i), i) for i in range(slots)],
            )


class ProcessDatabase(StandInDatabase):
    """The process runtime's connection pool on ``sessionq_process``."""

    def __init__(self, conninfo: str, *, pool_size: int = 4) -> None:
        super().__init__(
            conninfo, schema=SCHEMA, label="process runtime", fail_sqlstate=_FAIL_SQLSTATE, pool_size=pool_size
        )
