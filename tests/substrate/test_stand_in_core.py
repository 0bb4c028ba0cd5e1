"""The stand-in core (sessionq.runtime.stand_in) as both stand-in runtimes use it: the functions of
core.sql are one text in both schemas, and the shared database layer turns each schema's `fail`,
a transaction rollback and other errors into what the runtime reports."""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import pytest

from sessionq.runtime.base import Code, SubstrateError
from sessionq.runtime.process.database import ProcessDatabase
from sessionq.runtime.process.database import install_schema as install_process_schema
from sessionq.runtime.simulator.database import SimulatorDatabase
from sessionq.runtime.stand_in.database import StandInDatabase

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
                " WHERE n.nspname = %s AND p.proname IN ('fail', 'lock_actor') ORDER BY p.proname",
                (schema,),
            )
            found[schema] = [
                (name, text.replace(schema, "<schema>").replace(sqlstate, "<sqlstate>"), comment)
                for name, text, comment in await cur.fetchall()
            ]
    assert [row[0] for row in found["substrate_sim"]] == ["fail", "lock_actor"]
    assert all(row[2] for row in found["substrate_sim"]), "every core function has its COMMENT"
    assert found["substrate_sim"] == found["sessionq_process"]


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
