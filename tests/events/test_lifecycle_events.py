"""Lifecycle events (schema/45_events.sql): every transition of a Session writes exactly one event,
in the transition's own transaction; readers page by position and see only what they may."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest
from lifecycle import ready_checkpoint, ready_session, turn_by_store

from sessionq.db.store import Store
from sessionq.db.stores.events import Position
from sessionq.domain.operations import OperationExecutor
from sessionq.domain.quiescence import QuiescencePool, claim_and_quiesce
from sessionq.errors import SessionqError
from sessionq.models import DeletionReason, EventKind, OperationKind, SharePermission

# events are readable once no older transaction runs on the server (schema/45_events.sql)
pytestmark = pytest.mark.quiet_horizon

ADMIN = ("root", None, True)


async def kinds(store: Store, session_id: uuid.UUID) -> list[str]:
    events = await store.event_page(*ADMIN, session_id=session_id, limit=1000)
    return [e.kind.value for e in events]


async def operate(store: Store, sim: Any, session_id: uuid.UUID, kind: OperationKind,
                  reason: DeletionReason = DeletionReason.USER_REQUESTED) -> None:
    await store.admit_operation(session_id, "alice", None, kind, reason)
    out = await OperationExecutor(store, sim, 30).run(session_id)
    assert out.status == "completed", out


async def quiesce(store: Store, sim: Any) -> None:
    pool = QuiescencePool(store, sim, "", listen=False)
    while await claim_and_quiesce(pool):
        pass


async def test_create_suspend_resume_delete_each_write_one_event(store, sim):
    s = await ready_session(store, sim)
    assert await kinds(store, s.id) == ["created", "ready"]
    await operate(store, sim, s.id, OperationKind.SUSPEND)
    await operate(store, sim, s.id, OperationKind.RESUME)
    await operate(store, sim, s.id, OperationKind.DELETE)
    events = await store.event_page(*ADMIN, session_id=s.id)
    assert [e.kind for e in events] == [
        EventKind.CREATED, EventKind.READY, EventKind.SUSPENDED, EventKind.RESUMED, EventKind.DELETING, EventKind.DELETED]
    created, ready, suspended, resumed, deleting, deleted = events
    assert created.payload == {"request_kind": "create"} and created.owner == "alice"
    assert (created.agent_namespace, created.agent_name) == ("kagent", "my-first-agent")
    assert created.operation_id == ready.operation_id is not None
    assert suspended.payload["mode"] == "explicit"  # with the snapshot when the suspend recorded one
    assert resumed.operation_id != suspended.operation_id
    assert deleting.payload == {"reason": "user_requested"} == deleted.payload
    # positions are strictly ordered, and each id parses back to its position
    positions = [(e.xid, e.seq) for e in events]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    assert all(Position.parse(e.id) == Position(e.xid, e.seq) for e in events)


async def test_quiescence_writes_an_automatic_suspension_and_failures_their_reason(store, sim, database_url):
    s = await ready_session(store, sim)
    await turn_by_store(store, sim, s)
    await quiesce(store, sim)
    auto = (await store.event_page(*ADMIN, session_id=s.id, kinds=[EventKind.SUSPENDED]))
    assert len(auto) == 1 and auto[0].payload["mode"] == "automatic" and auto[0].payload["snapshot"]["generation"]
    # a suspend that fails for good: quiescence_failed with its reason, once
    await turn_by_store(store, sim, s)
    await sim.inject("suspend_actor", "fail_before", times=None)
    pool = QuiescencePool(store, sim, database_url, listen=False)
    assert await claim_and_quiesce(pool) == s.id
    failed = await store.event_page(*ADMIN, session_id=s.id, kinds=[EventKind.QUIESCENCE_FAILED])
    assert len(failed) == 1 and failed[0].payload == {"reason": "SuspendFailed", "during": "quiescence"}
    assert failed[0].task_id and "message" not in failed[0].payload


async def test_a_vanished_actor_is_runtime_lost(store, sim, database_url):
    s = await ready_session(store, sim)
    await turn_by_store(store, sim, s)
    actor = await sim.get_actor(s.actor_atespace, s.actor_name)
    await sim.delete_actor(s.actor_atespace, s.actor_name, actor.uid, any_state=True)
    pool = QuiescencePool(store, sim, database_url, listen=False)
    assert await claim_and_quiesce(pool) == s.id
    assert (await kinds(store, s.id))[-1] == "runtime_lost"


async def test_checkpoint_and_fork_write_checkpointed_created_with_source_and_forked(store, sim):
    cp = await ready_checkpoint(store, sim)
    source_kinds = await kinds(store, cp.session_id)
    assert source_kinds.count("checkpointed") == 1 and source_kinds[-1] == "checkpointed"
    fork = await store.admit_fork(cp.id, "alice", "fork-1")
    created = await store.event_page(*ADMIN, session_id=fork.session.id)
    assert [e.kind for e in created] == [EventKind.CREATED]
    assert created[0].payload == {"request_kind": "fork", "source_checkpoint_id": str(cp.id),
                                  "source_session_id": str(cp.session_id)}
    forked = await store.event_page(*ADMIN, session_id=cp.session_id, kinds=[EventKind.FORKED])
    assert len(forked) == 1 and forked[0].payload == {"checkpoint_id": str(cp.id), "fork_session_id": str(fork.session.id)}


async def test_idle_expiry_writes_expiring_soon_once_then_expired_and_deleted(store, sim, database_url):
    from sessionq.domain.expiry import sweep

    s = await ready_session(store, sim)
    ttl, lead = 3600.0, 300.0
    assert await store.announce_expiring(ttl, lead) == 0  # not within the lead yet
    async with store.pool.connection() as conn:
        await conn.execute("UPDATE sessionq.sessions SET created_at = created_at - interval '3400 seconds' WHERE id = %s",
                           (s.id,))
    assert await store.announce_expiring(ttl, lead) == 1
    assert await store.announce_expiring(ttl, lead) == 0  # once per idle period
    assert await store.announce_expiring(ttl, 0) == 0  # a lead of 0 announces nothing
    soon = (await store.event_page(*ADMIN, session_id=s.id))[-1]
    assert soon.kind == EventKind.EXPIRING_SOON and soon.payload["lead_seconds"] == lead
    async with store.pool.connection() as conn:
        await conn.execute("UPDATE sessionq.sessions SET created_at = created_at - interval '1000 seconds' WHERE id = %s",
                           (s.id,))
    await sweep(store, OperationExecutor(store, sim, 30), database_url, ttl, "test")
    assert await kinds(store, s.id) == ["created", "ready", "expiring_soon", "expired", "deleted"]
    assert (await store.event_page(*ADMIN, session_id=s.id))[-1].payload == {"reason": "idle_timeout"}


async def test_a_rolled_back_transition_leaves_no_event(store, sim, database_url):
    s = await ready_session(store, sim)
    before = await kinds(store, s.id)
    with psycopg.connect(database_url) as conn:  # one transaction, rolled back at the end
        conn.execute("SELECT * FROM sessionq.admit_operation(%s, 'alice', NULL, 'DELETE', 'user_requested', 'session')",
                     (s.id,))
        inside = conn.execute("SELECT kind FROM sessionq.lifecycle_events WHERE session_id = %s ORDER BY seq",
                              (s.id,)).fetchall()
        assert [k for (k,) in inside] == [*before, "deleting"]  # written in the transition's transaction
        conn.rollback()
    assert await kinds(store, s.id) == before
    # an admission refused by its procedure writes nothing either
    await store.admit_operation(s.id, "alice", None, OperationKind.SUSPEND)
    with pytest.raises(SessionqError):
        await store.admit_operation(s.id, "alice", None, OperationKind.RESUME)
    assert await kinds(store, s.id) == before


async def test_ownership_and_shares_filter_the_events(store, sim):
    from sessionq.api.auth import hash_token

    a = await ready_session(store, sim, "a")
    b = await ready_session(store, sim, "b", user="bob")
    mine = await store.event_page("alice", None, False)
    assert {e.session_id for e in mine} == {a.id}
    assert await store.event_page("bob", None, False, session_id=a.id) == []  # another's Session: nothing
    await store.create_share(a.id, "alice", SharePermission.READ_ONLY, None, hash_token("tok"))
    shared = await store.event_page("carol", hash_token("tok"), False, session_id=a.id)
    assert [e.kind for e in shared] == [EventKind.CREATED, EventKind.READY]
    assert await store.event_page("carol", hash_token("other"), False, session_id=a.id) == []
    assert {e.session_id for e in await store.event_page(*ADMIN)} == {a.id, b.id}


async def test_a_cursor_resumes_exactly_after_even_when_transactions_commit_out_of_order(store, sim, database_url):
    """An event of a transaction that commits late is never placed before a position a reader has
    passed: the reader waits for it instead, and then reads it exactly once."""
    a = await ready_session(store, sim, "a")
    b = await ready_session(store, sim, "b")
    seen = await store.event_page(*ADMIN)
    cursor = Position.parse(seen[-1].id)
    slow = psycopg.connect(database_url)
    try:
        # the slow transaction takes its xid (and writes its event) first, the fast one commits first
        slow.execute("SELECT * FROM sessionq.admit_operation(%s, 'alice', NULL, 'DELETE', 'user_requested', 'session')",
                     (a.id,))
        await store.admit_operation(b.id, "alice", None, OperationKind.DELETE)
        assert await store.event_page(*ADMIN, after=cursor) == []  # b's event waits behind a's open transaction
        slow.commit()
    finally:
        slow.close()
    after = await store.event_page(*ADMIN, after=cursor)
    assert [(e.session_id, e.kind) for e in after] == [(a.id, EventKind.DELETING), (b.id, EventKind.DELETING)]
    assert await store.event_page(*ADMIN, after=Position.parse(after[-1].id)) == []


async def test_concurrent_transitions_are_read_once_each_by_a_following_reader(store, sim):
    """Many racers suspend and resume Sessions while a reader follows with a cursor: it reads every
    event exactly once, none lost, none repeated."""
    sessions = [await ready_session(store, sim, f"r{i}") for i in range(8)]
    start = await store.event_page(*ADMIN)
    cursor: Position | None = Position.parse(start[-1].id)
    read: list[int] = []
    done = asyncio.Event()

    async def follow() -> None:
        nonlocal cursor
        while True:
            finished = done.is_set()
            page = await store.event_page(*ADMIN, after=cursor, limit=7)
            read.extend(e.seq for e in page)
            if page:
                cursor = Position.parse(page[-1].id)
            elif finished:
                return
            await asyncio.sleep(0.005)

    async def racer(s: Any) -> None:
        for kind in (OperationKind.SUSPEND, OperationKind.RESUME) * 2:
            await operate(store, sim, s.id, kind)

    reader = asyncio.create_task(follow())
    await asyncio.gather(*(racer(s) for s in sessions))
    done.set()
    await reader
    expected = [e.seq for e in await store.event_page(*ADMIN, after=Position.parse(start[-1].id), limit=1000)]
    assert len(expected) == 8 * 4
    assert sorted(read) == sorted(expected) and len(read) == len(set(read))


async def test_positions_that_never_existed_are_told_apart(store, sim):
    s = await ready_session(store, sim)
    last = (await store.event_page(*ADMIN, session_id=s.id))[-1]
    assert await store.event_position_known(Position.parse(last.id))
    assert not await store.event_position_known(Position(last.xid, last.seq + 1000))
    assert not await store.event_position_known(Position(last.xid + 1, last.seq))
    for bad in ("", "abc", "1-", "-1", "1-2-3", "9" * 30 + "-1", "1-" + "9" * 25):
        with pytest.raises(SessionqError) as e:
            Position.parse(bad)
        assert e.value.code.name == "INVALID_ARGUMENT" and len(str(e.value)) < 200


async def test_retention_purges_old_events_in_batches(store, sim):
    s = await ready_session(store, sim)
    await operate(store, sim, s.id, OperationKind.SUSPEND)
    async with store.pool.connection() as conn:
        await conn.execute("UPDATE sessionq.lifecycle_events SET created_at = created_at - interval '2 days'"
                           " WHERE kind IN ('created', 'ready')")
    assert await store.purge_lifecycle_events(86400, 1) == 1
    assert await store.purge_lifecycle_events(86400, 10) == 1
    assert await store.purge_lifecycle_events(86400, 10) == 0
    assert await kinds(store, s.id) == ["suspended"]
    # a position purged since is still known: a reader resumes from the oldest kept
    assert await store.event_position_known(Position(1, 1))


async def test_no_event_carries_a_message_body(store, sim):
    s = await ready_session(store, sim)
    await turn_by_store(store, sim, s)
    await quiesce(store, sim)
    for e in await store.event_page(*ADMIN, session_id=s.id):
        assert "done" not in str(e.payload) and "hi" not in str(e.payload).split("'")


async def test_the_periodic_tick_announces_and_purges(store, sim):
    from sessionq.jobs.events import tick

    s = await ready_session(store, sim)
    async with store.pool.connection() as conn:
        await conn.execute("UPDATE sessionq.sessions SET created_at = created_at - interval '3500 seconds' WHERE id = %s",
                           (s.id,))
        await conn.execute("UPDATE sessionq.lifecycle_events SET created_at = created_at - interval '8 days'")
    assert await tick(store, 3600, 300, 7 * 86400, batch=1) == (1, 2, 0)
    assert await kinds(store, s.id) == ["expiring_soon"]
    assert await tick(store, 3600, 300, 7 * 86400) == (0, 0, 0)
