"""db/raw.py: GetSession's statement executed through libpq directly. Real connections:
prepared once per connection (unnamed through a pooler), a statement the server lost prepared
again, parameters in text form that round-trip any text, and database errors as psycopg's."""

from __future__ import annotations

import psycopg
import pytest

from sessionq.db.raw import RawStatement, text_array, text_param

ECHO = "SELECT $1::text[] AS a, $2::text AS b, 1 / $3::int AS c"


async def _prepared(conn: psycopg.AsyncConnection, name: str) -> bool:
    cur = await conn.execute("SELECT count(*) FROM pg_prepared_statements WHERE name = %s", (name,))
    row = await cur.fetchone()
    return bool(row and row[0])


async def test_text_parameters_round_trip_and_the_statement_is_prepared_once(database_url: str) -> None:
    values = ['plain', 'a "quoted" one', "back\\slash", "{braces},comma", "NULL", "", None, "ünïcødé ✓", " spaced "]
    statement = RawStatement("sessionq_test_echo", ECHO)
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        for _ in range(3):
            rows = await statement.run(conn, [text_array(values), text_param("x\ny"), b"1"])
            assert len(rows) == 1
            a, b, c = rows[0]
            # the array PostgreSQL received is the list itself (read back through psycopg)
            back = await (await conn.execute("SELECT %s::text[]", (a.decode() if a else None,))).fetchone()
            assert back is not None and back[0] == values
            assert b == b"x\ny" and c == b"1"
        assert await _prepared(conn, "sessionq_test_echo")
        # a NULL parameter, and an error: psycopg's exception of its SQLSTATE, the connection usable after
        assert (await statement.run(conn, [text_array([]), None, b"1"]))[0][:2] == (b"{}", None)
        with pytest.raises(psycopg.errors.DivisionByZero):
            await statement.run(conn, [text_array([]), None, b"0"])
        assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
        # the server forgot it (DEALLOCATE, a new session behind the same connection): prepared again
        await conn.execute("DEALLOCATE sessionq_test_echo")
        assert (await statement.run(conn, [text_array(["x"]), None, b"1"]))[0][0] == b"{x}"
        assert await _prepared(conn, "sessionq_test_echo")


async def test_without_prepared_statements_it_is_sent_unnamed(database_url: str) -> None:
    """A connection to a transaction pooler has prepare_threshold None (db/connection.py)."""
    statement = RawStatement("sessionq_test_unnamed", ECHO)
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True, prepare_threshold=None) as conn:
        for _ in range(3):
            assert (await statement.run(conn, [text_array(["a"]), b"b", b"1"]))[0] == (b"{a}", b"b", b"1")
        assert not await _prepared(conn, "sessionq_test_unnamed")


def test_nul_is_refused_before_anything_is_sent() -> None:
    with pytest.raises(psycopg.DataError):
        text_array(["a\x00b"])
    with pytest.raises(psycopg.DataError):
        text_param("\x00")
