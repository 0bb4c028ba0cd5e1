"""A Session's own idle TTL: the sweep expires it at its own time, not at sessions.idleTtl's, under
expire_session's row lock and rules."""

import pytest
from lifecycle import raw_session, ready_session

from sessionq.domain.expiry import sweep
from sessionq.domain.operations import OperationExecutor

TTL = 3600.0


async def age(store, session_id, seconds):
    async with store.pool.connection() as conn:
        await conn.execute(
            "UPDATE sessionq.sessions SET created_at = created_at - make_interval(secs => %s),"
            " last_event_at = last_event_at - make_interval(secs => %s) WHERE id = %s", (seconds, seconds, session_id))


async def state_of(store, sid):
    s = await store.session_by_id(sid)
    return s.state if s else "GONE"


@pytest.mark.clause("FLEET-3")
async def test_an_own_ttl_expires_at_its_own_time_not_the_global_one(store, sim, database_url):
    short = await ready_session(store, sim, "short")  # own TTL 60 s, 120 s idle: expires
    long_ = await ready_session(store, sim, "long")  # own TTL 2 h, 90 min idle: past the global hour, stays
    never = await ready_session(store, sim, "never")  # own TTL 0: never
    default = await ready_session(store, sim, "default")  # no own TTL, 30 min idle: stays
    default_old = await ready_session(store, sim, "default-old")  # no own TTL, 2 h idle: expires
    await store.set_session_idle_ttl(short.id, "alice", None, 60)
    await store.set_session_idle_ttl(long_.id, "alice", None, 7200)
    await store.set_session_idle_ttl(never.id, "alice", None, 0)
    for s, idle in ((short, 120), (long_, 5400), (never, 10**7), (default, 1800), (default_old, 7200)):
        await age(store, s.id, idle)
    result = await sweep(store, OperationExecutor(store, sim, 30), database_url, TTL, "w")
    assert result.admitted == 2 and result.expired == 2, result
    assert await state_of(store, short.id) == "GONE" and await state_of(store, default_old.id) == "GONE"
    for s in (long_, never, default):
        assert await state_of(store, s.id) == "READY"
    # past its own two hours it goes too
    await age(store, long_.id, 3600)
    result = await sweep(store, OperationExecutor(store, sim, 30), database_url, TTL, "w")
    assert result.admitted == 1 and await state_of(store, long_.id) == "GONE"
    assert (await raw_session(store, never.id)).idle_ttl == 0


@pytest.mark.clause("FLEET-3")
async def test_the_recheck_under_the_row_lock_reads_the_own_ttl(store, sim):
    """expire_session rechecks against the Session's TTL as it is under the lock: a TTL lengthened
    after the candidate page was read prevents the expiry; active work still blocks it (IDLE-5)."""
    s = await ready_session(store, sim, "s")
    await store.set_session_idle_ttl(s.id, "alice", None, 60)
    await age(store, s.id, 120)
    assert [c[0] for c in await store.own_ttl_candidates(None, 10)] == [s.id]
    await store.set_session_idle_ttl(s.id, "alice", None, 600)  # after the scan, before the lock
    assert (await store.expire_session(s.id, TTL)).outcome == "active"
    await store.set_session_idle_ttl(s.id, "alice", None, 60)
    from lifecycle import turn_by_store

    await turn_by_store(store, sim, s, settle=False)  # a running turn blocks it
    await age(store, s.id, 120)
    assert (await store.expire_session(s.id, TTL)).outcome == "busy"
