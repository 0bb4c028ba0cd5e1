"""The stand-in core (sessionq.runtime.stand_in) as both stand-in runtimes use it: the tables and
functions of core.sql are one definition in both schemas, and the shared database layer turns each schema's `fail`,
a transaction rollback and other errors into what the runtime reports."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import psycopg
import pytest

from sessionq.runtime.base import ActorState, Code, SubstrateError
from sessionq.runtime.process.database import ProcessDatabase
from sessionq.runtime.process.database import install_schema as install_process_schema
from sessionq.runtime.simulator.database import SimulatorDatabase
from sessionq.runtime.stand_in.database import StandInDatabase, StandInSchema

SCHEMAS = {"substrate_sim": "SX001", "sessionq_process": "PX001"}


@pytest.fixture(params=sorted(SCHEMAS))
async def runtime_db(request: pytest.FixtureRequest, database_url: str) -> AsyncIterator[tuple[str, StandInDatabase]]:
    schema = request.param
    db: StandInDatabase
    if schema == "sessionq_process":
        await install_process_schema(database_url, slots=1)
        db = ProcessDatabase(database_url)
    else:
        db = SimulatorDatabase(database_url, worker_pool_size=1)
    await db.open()
    try:
        yield schema, db
    finally:
        await db.close()


async def test_the_core_functions_are_one_text_in_both_schemas(database_url: str) -> None:
    await install_process_schema(database_url, slots=1)
    async with SimulatorDatabase(database_url, worker_pool_size=1):  # installs its schema if missing
        pass
    found = {}
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        for schema, sqlstate in SCHEMAS.items():
            cur = await conn.execute(
                "SELECT p.proname, pg_get_functiondef(p.oid), obj_description(p.oid, 'pg_proc')"
                " FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
                " WHERE n.nspname = %s AND p.proname IN ('fail', 'lock_actor', 'release_worker')"
                " ORDER BY p.proname",
                (schema,),
            )
            found[schema] = [
                (name, text.replace(schema, "<schema>").replace(sqlstate, "<sqlstate>"), comment)
                for name, text, comment in await cur.fetchall()
            ]
    assert [row[0] for row in found["substrate_sim"]] == ["fail", "lock_actor", "release_worker"]
    assert all(row[2] for row in found["substrate_sim"]), "every core function has its COMMENT"
    assert found["substrate_sim"] == found["sessionq_process"]


_COLUMNS = (
    "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,"
    " replace(pg_get_expr(d.adbin, d.adrelid), %(schema)s || '.', ''), a.attcollation"
    " FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
    " LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
    " WHERE n.nspname = %(schema)s AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped"
)


async def test_each_runtime_schema_is_the_core_tables_and_its_own_columns(database_url: str) -> None:
    """core.sql alone, in a scratch schema, makes the core columns; each runtime's tables hold every
    one of them as the core defines it, and add only columns of their own."""
    probe = StandInSchema(
        name="stand_in_probe", package="sessionq.runtime.stand_in", label="probe", fail_sqlstate="ZX001",
        install_lock_key=0, worker_states=(ActorState.RUNNING,),
    )
    await install_process_schema(database_url, slots=1)
    async with SimulatorDatabase(database_url, worker_pool_size=1):
        pass
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute(probe.core_sql())

        async def columns(schema: str) -> dict[tuple[str, str], tuple[object, ...]]:
            cur = await conn.execute(_COLUMNS, {"schema": schema})
            return {(row[0], row[1]): row[2:] for row in await cur.fetchall()}

        core = await columns("stand_in_probe")
        assert {table for table, _ in core} == {
            "templates", "workers", "actors", "snapshots", "tags", "egress_policies"
        }
        for schema in SCHEMAS:
            own = await columns(schema)
            assert {key: own[key] for key in core if key in own} == core, schema
            added = {key for key in own if key[0] in {t for t, _ in core}} - set(core)
            assert added, f"{schema} adds its own columns to the core tables"


async def test_fail_in_a_transaction_is_the_runtime_code(runtime_db: tuple[str, StandInDatabase]) -> None:
    schema, db = runtime_db
    with pytest.raises(SubstrateError) as caught:
        async with db.tx() as cur:
            await cur.execute(f"SELECT {schema}.lock_actor('ns', 'missing', NULL)")
    assert caught.value.code == Code.NOT_FOUND
    assert caught.value.message == "actor ns/missing not found"


async def test_fail_in_one_statement_is_the_runtime_code(runtime_db: tuple[str, StandInDatabase]) -> None:
    schema, db = runtime_db
    with pytest.raises(SubstrateError) as caught:
        await db.call(f"SELECT {schema}.fail('RESOURCE_EXHAUSTED', 'no room')")
    assert (caught.value.code, caught.value.message) == (Code.RESOURCE_EXHAUSTED, "no room")


async def test_a_rollback_is_aborted_and_other_errors_pass(
    runtime_db: tuple[str, StandInDatabase],
) -> None:
    _, db = runtime_db
    with pytest.raises(SubstrateError) as caught:
        async with db.tx() as cur:
            await cur.execute("DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40000'; END $$")
    assert caught.value.code == Code.ABORTED
    with pytest.raises(psycopg.errors.DivisionByZero):
        await db.call("SELECT 1 / 0")


async def _two_writers(db: StandInDatabase, schema: str, *, repeatable_read: bool) -> list[BaseException | None]:
    """Two transactions of the runtime's pool on real connections writing the rows 1 and 2 of a
    scratch table, in an order that makes PostgreSQL refuse one of them: with `repeatable_read`, the
    first reads row 1, the second changes and commits it, then the first changes it (40001, a
    serialization failure); otherwise each changes one row, then the other's (40P01, a deadlock).
    Returns what each raised (None: it committed)."""
    table = f"{schema}.conflict_probe"
    async with db.tx() as cur:
        await cur.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v int NOT NULL)")
        await cur.execute(f"INSERT INTO {table} VALUES (1, 0), (2, 0)")
    first_holds, second_holds = asyncio.Event(), asyncio.Event()

    async def first() -> None:
        async with db.tx() as cur:
            if repeatable_read:
                await cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                await cur.execute(f"SELECT v FROM {table} WHERE id = 1")  # takes the snapshot
                first_holds.set()
                await second_holds.wait()  # the second committed its change of row 1
                await cur.execute(f"UPDATE {table} SET v = 1 WHERE id = 1")
            else:
                await cur.execute(f"UPDATE {table} SET v = 1 WHERE id = 1")
                first_holds.set()
                await second_holds.wait()
                await cur.execute(f"UPDATE {table} SET v = 1 WHERE id = 2")

    async def second() -> None:
        await first_holds.wait()
        if repeatable_read:
            async with db.tx() as cur:
                await cur.execute(f"UPDATE {table} SET v = 2 WHERE id = 1")
            second_holds.set()
            return
        async with db.tx() as cur:
            await cur.execute(f"UPDATE {table} SET v = 2 WHERE id = 2")
            # the first now waits on row 2 (PostgreSQL checks for a deadlock after deadlock_timeout)
            second_holds.set()
            await cur.execute(f"UPDATE {table} SET v = 2 WHERE id = 1")

    outcomes = await asyncio.wait_for(asyncio.gather(first(), second(), return_exceptions=True), 60)
    return [o if isinstance(o, BaseException) else None for o in outcomes]


@pytest.mark.parametrize("conflict", ["serialization failure", "deadlock"])
async def test_a_serialization_failure_or_deadlock_is_aborted(
    runtime_db: tuple[str, StandInDatabase], conflict: str
) -> None:
    """SQLSTATE 40001 and 40P01 (psycopg files both under OperationalError, not TransactionRollback)
    are a retryable conflict: ABORTED, never UNAVAILABLE."""
    schema, db = runtime_db
    outcomes = await _two_writers(db, schema, repeatable_read=conflict == "serialization failure")
    failed = [o for o in outcomes if o is not None]
    assert len(failed) == 1, f"exactly one transaction loses: {outcomes!r}"
    error = failed[0]
    assert isinstance(error, SubstrateError), repr(error)
    assert error.code == Code.ABORTED, f"{error.code.value}: {error.message}"
    sqlstate = "40001" if conflict == "serialization failure" else "40P01"
    assert isinstance(error.__cause__, psycopg.Error) and error.__cause__.sqlstate == sqlstate
