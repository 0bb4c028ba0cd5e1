"""Leader election (db/leader.py): a session-level advisory lock on a connection of its own."""

from __future__ import annotations

import psycopg

from sessionq.db.leader import leadership


async def test_a_leadership_given_up_is_at_once_another_holders(database_url: str) -> None:
    """The holder that leaves the block releases the lock before its connection closes: a closed
    connection's backend lets its locks go only once it has exited, a moment after the close, and
    the next holder asking at once (a replica's next tick, a restarted collector) found the lock
    still taken now and then. Right after each block no session holds it any more."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as watcher:
        key = (await (await watcher.execute("SELECT sessionq.leader_lock_key('test_role')")).fetchone())[0]
        held_after = 0
        for i in range(100):
            async with leadership(database_url, "test_role", f"a{i}") as held:
                assert held
                async with leadership(database_url, "test_role", f"other{i}") as contender:
                    assert not contender, "one holder at a time"
            row = await (await watcher.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
                " AND ((classid::bigint << 32) | objid::bigint) = %s", (key,))).fetchone()
            held_after += int(row[0])
        assert held_after == 0, f"the lock was still held after its holder left, {held_after} times in 100"
        async with leadership(database_url, "test_role", "b") as next_holder:
            assert next_holder
