"""Idle expiration (IDLE-*, CKPT-7 for idle deletion)."""

import asyncio
import logging
import uuid

import psycopg
import pytest
from lifecycle import count, raw_session, ready_session, task_json, turn_by_store

from sessionq import config, metrics
from sessionq.db.store import Store
from sessionq.domain.expiry import sweep
from sessionq.domain.operations import OperationExecutor
from sessionq.errors import SessionqError

TTL = 3600.0


async def age(store, session_id, seconds):
    """A controllable clock: move a Session's creation and events `seconds` into the past."""
    async with store.pool.connection() as conn:
        await conn.execute(
            "UPDATE sessionq.sessions SET created_at = created_at - make_interval(secs => %s),"
            " last_event_at = last_event_at - make_interval(secs => %s) WHERE id = %s", (seconds, seconds, session_id))
        await conn.execute("UPDATE sessionq.events SET created_at = created_at - make_interval(secs => %s)"
                           " WHERE session_id = %s", (seconds, session_id))


async def quiesce(store, sim):
    from sessionq.domain.quiescence import QuiescencePool, claim_and_quiesce

    pool = QuiescencePool(store, sim, "", listen=False)
    while await claim_and_quiesce(pool):
        pass


def ex(store, sim):
    return OperationExecutor(store, sim, 30)


@pytest.mark.clause("IDLE-1")
def test_idle_ttl_configuration():
    assert config.load(env={})["sessions.idleTtl"] == 604800
    assert config.load(env={"SESSIONQ_SESSIONS__IDLE_TTL": "2592000s"})["sessions.idleTtl"] == 2592000
    assert config.load(env={"SESSIONQ_SESSIONS__IDLE_TTL": "0s"})["sessions.idleTtl"] == 0
    for bad, words in (("-1s", "negative"), ("7d", "not a protobuf duration"), ("abc", "not a protobuf duration")):
        with pytest.raises(config.ConfigError) as e:
            config.load(env={"SESSIONQ_SESSIONS__IDLE_TTL": bad})
        assert str(e.value).startswith("sessions.idleTtl:") and words in str(e.value)
    from sessionq.jobs.app import build_app

    assert "expire_idle_sessions" not in build_app("postgresql://h/db", expiry=False).tasks  # 0s: no worker at all
    # no per-agent override (shares.maxTtl bounds share lifetimes, not idleness; a Session's own idle
    # TTL is bounded by sessions.maxIdleTtl and sessions.allowNoIdleTtl: FLEET-3; sessions.pausedRuntimeTtl
    # is how long a paused Actor waits for input)
    assert not any("ttl" in k.path.lower() for k in config.KEYS if k.path not in (
        "sessions.idleTtl", "shares.maxTtl", "sandboxes.defaultTtl", "sessions.maxIdleTtl", "sessions.allowNoIdleTtl",
        "sessions.pausedRuntimeTtl"))


@pytest.mark.clause("IDLE-1")
async def test_zero_ttl_sweeps_nothing(store, sim, database_url):
    s = await ready_session(store, sim)
    await age(store, s.id, 10**7)
    result = await sweep(store, ex(store, sim), database_url, 0, "w")
    assert not result.leader and (await raw_session(store, s.id)).state == "READY"


@pytest.mark.clause("IDLE-2")
async def test_idle_clock_is_later_of_creation_and_newest_event(store, sim, database_url):
    old_quiet = await ready_session(store, sim, "old-quiet")
    old_talking = await ready_session(store, sim, "old-talking")
    young = await ready_session(store, sim, "young")
    await age(store, old_quiet.id, 2 * TTL)
    await age(store, old_talking.id, 2 * TTL)
    await turn_by_store(store, sim, old_talking)  # a fresh event
    await quiesce(store, sim)
    async with store.pool.connection() as conn:  # an old event does not make a young Session idle
        await conn.execute("UPDATE sessionq.sessions SET last_event_at = now() - interval '10 days' WHERE id = %s", (young.id,))
    result = await sweep(store, ex(store, sim), database_url, TTL, "w")
    assert result.leader and result.expired == 1
    assert await store.session_by_id(old_quiet.id) is None
    assert (await raw_session(store, old_talking.id)).state == "READY"
    assert (await raw_session(store, young.id)).state == "READY"


@pytest.mark.clause("IDLE-3")
async def test_reads_renames_lifecycle_and_retries_do_not_extend_the_clock(store, sim):
    s = await ready_session(store, sim)
    tid = await turn_by_store(store, sim, s)
    await quiesce(store, sim)
    before = (await raw_session(store, s.id)).last_event_at
    await store.get_session(s.id, "alice")
    await store.list_sessions("alice", False, None, None, None, 10)
    await store.rename_session(s.id, "alice", None, "renamed")
    await store.admit_operation(s.id, "alice", None, "SUSPEND")
    await ex(store, sim).run(s.id)
    await store.admit_operation(s.id, "alice", None, "RESUME")
    await ex(store, sim).run(s.id)
    t = await store.get_task(tid)
    await store.task_settle(s.id, tid, t.published_version)  # a retried settlement
    assert (await raw_session(store, s.id)).last_event_at == before


@pytest.mark.clause("IDLE-4")
@pytest.mark.clause("IDLE-6")
@pytest.mark.clause("IDLE-7")
async def test_waiting_turns_expire_running_ones_never(store, sim, database_url):
    waiting = await ready_session(store, sim, "waiting")
    wid = await turn_by_store(store, sim, waiting, final="TASK_STATE_INPUT_REQUIRED")
    running = await ready_session(store, sim, "running")
    adm = await store.admit_turn(running.id, "alice", None, {"parts": [{"text": "q"}]}, None, 600)
    await store.task_create(running.id, "long", task_json("long", running.id, "TASK_STATE_WORKING"), adm.dispatch_id)
    await quiesce(store, sim)
    # both have been waiting or running since long before this "upgrade" configured the TTL
    for s in (waiting, running):
        await age(store, s.id, 10 * TTL)
    async with store.pool.connection() as conn:  # even an expired reservation does not free a running task
        await conn.execute("UPDATE sessionq.sessions SET dispatch_expires_at = now() - interval '1 hour' WHERE id = %s",
                           (running.id,))
    events = await count(store, "SELECT count(*) FROM sessionq.events")
    resumes = await sim.mutation_count(method="resume_actor")
    result = await sweep(store, ex(store, sim), database_url, TTL, "w")
    assert result.expired == 1
    assert await store.session_by_id(waiting.id) is None
    assert (await raw_session(store, running.id)).state == "READY"
    # ordinary deletion: no resume, no synthetic task timeout
    assert await sim.mutation_count(method="resume_actor") == resumes
    assert (await store.get_task(wid)).state == "TASK_STATE_INPUT_REQUIRED"
    assert await count(store, "SELECT count(*) FROM sessionq.events") == events


@pytest.mark.clause("IDLE-5")
async def test_active_work_blocks_expiry(store, sim):
    sessions = {k: await ready_session(store, sim, k) for k in ("op", "dispatch", "unsettled", "claimed", "free")}
    await store.admit_operation(sessions["op"].id, "alice", None, "SUSPEND")
    await store.admit_turn(sessions["dispatch"].id, "alice", None, {"parts": [{"text": "q"}]}, None, 600)
    await turn_by_store(store, sim, sessions["unsettled"], settle=False)
    await turn_by_store(store, sim, sessions["claimed"])
    claimed = await store.claim_idle(uuid.uuid4())
    assert claimed.id == sessions["claimed"].id
    for s in sessions.values():
        await age(store, s.id, 10 * TTL)
    outcomes = {k: (await store.expire_session(s.id, TTL)).outcome for k, s in sessions.items()}
    assert outcomes == {"op": "busy", "dispatch": "busy", "unsettled": "busy", "claimed": "busy", "free": "admitted"}


@pytest.mark.clause("IDLE-8")
async def test_one_leader_sweeps_at_a_time_in_bounded_pages(store, sim, database_url):
    ids = []
    for i in range(7):
        s = await ready_session(store, sim, f"p{i}")
        await age(store, s.id, 10 * TTL)
        ids.append(s.id)
    block = await sim.inject("delete_actor", "block")
    first = asyncio.create_task(sweep(store, ex(store, sim), database_url, TTL, "a", page=3, in_flight=2))
    await sim.wait_blocked(block)
    second = await sweep(store, ex(store, sim), database_url, TTL, "b", page=3, in_flight=2)
    assert not second.leader  # the first still holds the leadership
    await sim.release(block)
    result = await first
    assert result.leader and result.scanned == 7 and result.expired == 7
    assert await count(store, "SELECT count(*) FROM sessionq.sessions") == 0
    async with store.pool.connection() as conn:
        leader = await (await conn.execute("SELECT holder FROM sessionq.leaders WHERE role = 'expiry'")).fetchone()
    assert leader["holder"] == "a"


@pytest.mark.clause("IDLE-8")
async def test_deletions_in_flight_are_bounded(store, sim, database_url):
    for i in range(6):
        s = await ready_session(store, sim, f"f{i}")
        await age(store, s.id, 10 * TTL)
    inflight = peak = 0
    real_delete = sim.delete_actor

    async def counting_delete(*a, **kw):
        nonlocal inflight, peak
        inflight += 1
        peak = max(peak, inflight)
        await asyncio.sleep(0.1)
        try:
            return await real_delete(*a, **kw)
        finally:
            inflight -= 1

    sim.delete_actor = counting_delete
    try:
        result = await sweep(store, ex(store, sim), database_url, TTL, "w", in_flight=2)
    finally:
        sim.delete_actor = real_delete
    assert result.expired == 6 and peak == 2


@pytest.mark.clause("IDLE-9")
async def test_turn_admitted_after_scan_prevents_expiry(store, sim, database_url):
    s = await ready_session(store, sim)
    await age(store, s.id, 10 * TTL)
    candidates = await store.idle_candidates(TTL, None, 10)
    assert [c[0] for c in candidates] == [s.id]
    await store.admit_turn(s.id, "alice", None, {"parts": [{"text": "hi"}]}, None, 600)  # between scan and lock
    assert (await store.expire_session(s.id, TTL)).outcome == "busy"
    # the recheck waits for the task-admission row lock
    async with await psycopg.AsyncConnection.connect(database_url) as holder:
        await holder.execute("SELECT 1 FROM sessionq.sessions WHERE id = %s FOR UPDATE", (s.id,))
        pending = asyncio.create_task(store.expire_session(s.id, TTL))
        await asyncio.sleep(0.2)
        assert not pending.done()
    assert (await pending).outcome == "busy"


@pytest.mark.clause("IDLE-9")
@pytest.mark.clause("IDLE-10")
@pytest.mark.clause("IDLE-11")
async def test_admitted_expiry_fences_turns_and_resumes_after_failures(store, sim, database_url):
    s = await ready_session(store, sim)
    await age(store, s.id, 10 * TTL)
    await sim.inject("get_actor", "fail_before", times=3)  # the deletion's preparation fails
    result = await sweep(store, ex(store, sim), database_url, TTL, "w")
    assert result.admitted == 1 and result.failed == 1
    row = await raw_session(store, s.id)
    assert (row.state, row.deletion_reason, row.operation_id) == ("DELETING", "idle_timeout", None)
    with pytest.raises(SessionqError) as e:
        await store.admit_turn(s.id, "alice", None, {"parts": [{"text": "hi"}]}, None, 600)
    assert e.value.sqlstate == "SQ412"
    # the TTL grew meanwhile: an admitted deletion is not cancelled, the next sweep finishes it
    result = await sweep(store, ex(store, sim), database_url, 10**9, "another-leader")
    assert result.expired == 1 and await store.session_by_id(s.id) is None


@pytest.mark.clause("IDLE-11")
async def test_leader_killed_during_a_sweep_is_replaced(store, sim, database_url):
    s = await ready_session(store, sim)
    await age(store, s.id, 10 * TTL)
    block = await sim.inject("delete_actor", "block")
    dying = asyncio.create_task(sweep(store, ex(store, sim), database_url, TTL, "dying", in_flight=1))
    await sim.wait_blocked(block)
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                            " WHERE application_name = 'sessionq-leader-expiry' AND datname = current_database()")
    dying.cancel()  # the leader process is gone
    with pytest.raises(asyncio.CancelledError):
        await dying
    await sim.release(block)
    other = await Store.open(database_url, pool_size=2, listen=False)
    try:
        result = await sweep(other, OperationExecutor(other, sim, 30), database_url, TTL, "successor")
    finally:
        await other.close()
    assert result.leader and result.expired == 1 and await store.session_by_id(s.id) is None


@pytest.mark.clause("IDLE-12")
@pytest.mark.clause("IDLE-13")
@pytest.mark.clause("IDLE-14")
@pytest.mark.clause("CKPT-7")
async def test_completed_expiry_removes_session_but_keeps_history_and_checkpoints(store, sim, database_url, caplog):
    s = await ready_session(store, sim, "req-expire")
    tid = await turn_by_store(store, sim, s)
    await quiesce(store, sim)
    await store.create_share(s.id, "alice", "READ_ONLY", 3600, "share-hash")
    cp = await store.admit_checkpoint(s.id, "alice", "cp-1", tid)
    from sessionq.domain.checkpoints import run_checkpoint

    assert (await run_checkpoint(store, sim, cp.id, 30)).status == "ready"
    await age(store, s.id, 10 * TTL)
    before = metrics.SESSION_EXPIRED._value.get()
    with caplog.at_level(logging.DEBUG, logger="sessionq.expiry"):
        result = await sweep(store, ex(store, sim), database_url, TTL, "w")
    assert result.expired == 1 and metrics.SESSION_EXPIRED._value.get() == before + 1
    record = next(r for r in caplog.records if r.getMessage() == "expired idle session")
    assert record.levelno == logging.DEBUG and record.session_id == str(s.id) and record.idle_time >= 10 * TTL
    # no tombstone: the row, its shares and its creation receipt are gone
    assert await store.session_by_id(s.id) is None
    assert await count(store, "SELECT count(*) FROM sessionq.session_shares") == 0
    with pytest.raises(SessionqError) as e:
        await store.get_session(s.id, "alice")
    assert e.value.sqlstate == "SQ404"
    fresh = await store.admit_create("alice", "req-expire", "kagent", "my-first-agent", "")
    assert fresh.outcome == "admitted" and fresh.session.id != s.id
    # history and checkpoints stay; the checkpoint can still be forked
    assert await count(store, "SELECT count(*) FROM sessionq.tasks WHERE session_id = %s", s.id) == 1
    assert await count(store, "SELECT count(*) FROM sessionq.events WHERE session_id = %s", s.id) == 2
    fork = await store.admit_fork(cp.id, "alice", "fork-after-expiry")
    out = await ex(store, sim).run(fork.session.id)
    assert out.session.state == "READY" and out.session.source_checkpoint_id == cp.id
