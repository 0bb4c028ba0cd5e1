"""sessionq.access is the one visibility rule of every Session read, evaluated for each row a read
touches. PostgreSQL runs a SQL function it cannot inline as a query of its own per row (before
PostgreSQL 18 planned again at every statement: about 4x a GetSession's database CPU), so access
must stay inlinable: no subquery of its own (share_permission holds it)."""

from __future__ import annotations

import psycopg
import pytest

QUERY = (
    "EXPLAIN (VERBOSE, COSTS OFF) SELECT s.id FROM sessionq.sessions s"
    " WHERE s.id = %s AND sessionq.access(s, 'alice', NULL, 'session') IS NOT NULL"
)


@pytest.mark.parametrize("function", ["access", "get_session_views"])
async def test_the_access_rule_is_inlined_into_the_reads(schema_url: str, function: str) -> None:
    async with await psycopg.AsyncConnection.connect(schema_url) as conn:
        if function == "access":
            rows = await (await conn.execute(QUERY, ("00000000-0000-0000-0000-000000000001",))).fetchall()
        else:
            rows = await (await conn.execute(
                "EXPLAIN (VERBOSE, COSTS OFF) SELECT * FROM sessionq.get_session_views("
                "ARRAY[%s::uuid], ARRAY['alice'], ARRAY[NULL::text], ARRAY['session'])",
                ("00000000-0000-0000-0000-000000000001",),
            )).fetchall()
    plan = "\n".join(r[0] for r in rows)
    assert "sessionq.access(" not in plan, plan  # called per row, not inlined
    assert "share_permission" in plan and "'owner'::text" in plan, plan
