"""sessionq.list_sessions reads a range of an index for any page, also from a cached generic plan
(issue 23: a ListSessions page over 1,000,000 Sessions of one creator costs what it costs over
10,000). A generic plan knows no parameter value: a condition such as `(p_after IS NULL OR id >
p_after)` cannot bound an index scan there, and a deep page would then read every row before it.

The test clones many Sessions of one creator and others interleaved with them, forces generic
plans (plan_cache_mode), and counts the buffers a page deep into the listing reads (EXPLAIN
(ANALYZE, BUFFERS) of the call counts what the function's statements read)."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import psycopg.sql
import pytest
from lifecycle import ready_session

from sessionq.db.store import Store

ROWS = 30_000


async def _clone(aconn: psycopg.AsyncConnection[Any], template: Any, n: int, creator: str, prefix: str) -> None:
    await aconn.execute(
        """
        INSERT INTO sessionq.sessions (id, creator, request_kind, request_id, request_fingerprint, agent_namespace,
                                       agent_name, revision_id, name, state, operation, operation_id, actor_atespace,
                                       actor_name, actor_template, actor_uid, created_at, updated_at)
        SELECT g.id, %(creator)s, 'create', %(prefix)s || g.i, t.request_fingerprint, t.agent_namespace, t.agent_name,
               t.revision_id, '', 'READY', 'NONE', t.operation_id, t.actor_atespace, 'session-' || g.id,
               t.actor_template, gen_random_uuid()::text, clock_timestamp(), clock_timestamp()
          FROM (SELECT i, sessionq.uuid_v7() AS id FROM generate_series(1, %(n)s) AS i) g
         CROSS JOIN sessionq.sessions t WHERE t.id = %(tpl)s
        """, {"creator": creator, "prefix": prefix, "n": n, "tpl": template})


def _buffers(plan: list[str]) -> int:
    m = re.search(r"Buffers: shared hit=(\d+)(?: read=(\d+))?", plan[0] + "\n" + "\n".join(plan))
    assert m, plan
    return int(m.group(1)) + int(m.group(2) or 0)


@pytest.mark.slow
async def test_a_deep_page_reads_an_index_range_from_a_generic_plan(store: Store, sim: Any,
                                                                  aconn: psycopg.AsyncConnection[Any]) -> None:
    tpl = (await ready_session(store, sim, "tpl", user="alice")).id
    # alice's Sessions interleaved in id order with bob's: a scan of the primary key filtered by
    # creator reads bob's rows too
    for i in range(6):
        await _clone(aconn, tpl, ROWS // 6, "alice", f"a{i}-")
        await _clone(aconn, tpl, ROWS // 2, "bob", f"b{i}-")
    await aconn.execute("ANALYZE sessionq.sessions")
    cur = await aconn.execute(
        "SELECT id FROM sessionq.sessions WHERE creator = 'alice' ORDER BY id OFFSET %s LIMIT 1", (ROWS - 200,))
    row = await cur.fetchone()
    assert row is not None
    deep = row[0]
    # as the store's statement runs once psycopg has prepared it: a named statement, whose plan the
    # server caches; force_generic_plan makes the cache use the plan that knows no value
    await aconn.execute("SET plan_cache_mode = force_generic_plan")
    await aconn.execute("PREPARE page(text, boolean, uuid) AS"
                        " SELECT s FROM sessionq.list_sessions($1, $2, NULL, NULL, $3, 51) s")
    reads = {}
    for label, after in (("first", None), ("deep", deep)):
        for _ in range(2):  # the second time: the function's own statements are planned and cached
            cur = await aconn.execute(
                psycopg.sql.SQL("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE page('alice', false, {})").format(
                    psycopg.sql.Literal(after)))
            plan = [r[0] for r in await cur.fetchall()]
        reads[label] = _buffers(plan)
        cur = await aconn.execute("SELECT count(*) FROM sessionq.list_sessions('alice', false, NULL, NULL, %s, 51)",
                                  (after,))
        assert (await cur.fetchone())[0] == 51  # type: ignore[index]
    # a page of 51 rows: a few index pages and the heap pages of its rows (about 51), never the
    # thousands of pages behind a deep position
    assert reads["deep"] < 200, (reads, plan)
    assert reads["first"] < 200, reads

    # everyone's listing (an administrator's) reads a primary-key range the same way
    cur = await aconn.execute(
        "SELECT id FROM sessionq.sessions ORDER BY id OFFSET %s LIMIT 1", (ROWS * 3,))
    row = await cur.fetchone()
    assert row is not None
    for _ in range(2):
        cur = await aconn.execute(psycopg.sql.SQL("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE page('x', true, {})")
                                  .format(psycopg.sql.Literal(row[0])))
        plan = [r[0] for r in await cur.fetchall()]
    assert _buffers(plan) < 200, plan


async def test_pages_still_follow_one_another(store: Store, sim: Any, aconn: psycopg.AsyncConnection[Any]) -> None:
    tpl = (await ready_session(store, sim, "tpl", user="alice")).id
    await _clone(aconn, tpl, 120, "alice", "a-")
    await _clone(aconn, tpl, 50, "bob", "b-")
    await aconn.execute("UPDATE sessionq.sessions SET state = 'DELETED', operation = 'NONE', revision_id = NULL, actor_uid = NULL WHERE request_id = 'a-7'")
    seen: list[Any] = []
    after = None
    while True:
        page = await store.list_sessions("alice", False, None, None, after, 51)
        seen += [s.id for s in page[:50]]
        if len(page) <= 50:
            break
        after = page[49].id
    assert len(seen) == 120 and seen == sorted(seen)  # 121 of alice's, one deleted
    every = await store.list_sessions("bob", True, None, None, None, 100)
    assert len(every) == 100
    assert len(await store.list_sessions("alice", False, "kagent", "no-such-agent", None, 10)) == 0
