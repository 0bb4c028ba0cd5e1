"""Sandboxes on the Sessions' machinery (schema/25_sandboxes.sql): generations and claims, the
executor, expiry at expires_at by the idle deletion workflow, and the wall between the two kinds."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from conftest import apply_agent
from lifecycle import AGENT, count, raw_session, ready_session

from sessionq import metrics
from sessionq.db.store import Store
from sessionq.domain.expiry import sweep
from sessionq.domain.operations import OperationExecutor
from sessionq.errors import SessionqError
from sessionq.models import Admission, RowKind, Session
from sessionq.runtime.base import Code, SubstrateError

RACERS = 64


async def admitted_sandbox(store: Store, sim: Any, request_id: str = "sb", ttl: float = 3600.0,
                           user: str = "alice") -> Admission:
    try:
        await store.get_agent("kagent", AGENT)
    except SessionqError:
        await apply_agent(store, sim)
    return await store.admit_sandbox(user, request_id, "kagent", AGENT, "scratch", ttl)


async def ready_sandbox(store: Store, sim: Any, request_id: str = "sb", ttl: float = 3600.0,
                        user: str = "alice") -> Session:
    adm = await admitted_sandbox(store, sim, request_id, ttl, user)
    out = await OperationExecutor(store, sim, 120).run(adm.session.id)
    assert out.status == "completed" and out.session is not None, out
    return out.session


async def expire_now(store: Store, sandbox_id: UUID) -> None:
    async with store.pool.connection() as conn:
        await conn.execute("UPDATE sessionq.sessions SET expires_at = clock_timestamp() - interval '1 second'"
                           " WHERE id = %s", (sandbox_id,))


@pytest.mark.clause("OP-1")
async def test_a_sandbox_is_a_row_with_generation_claim_and_deterministic_actor(store, sim):
    adm = await admitted_sandbox(store, sim, ttl=120)
    s = await raw_session(store, adm.session.id)
    assert (s.kind, s.request_kind, s.state, s.operation, s.operation_id) == (
        RowKind.SANDBOX, "sandbox", "CREATING", "CREATE", adm.generation)
    assert s.actor_name == f"sandbox-{s.id}"
    assert s.expires_at is not None and 110 < (s.expires_at - s.created_at).total_seconds() <= 120
    out = await OperationExecutor(store, sim, 120).run(s.id)
    assert out.status == "completed" and out.session is not None and out.session.state == "READY"
    actor = await sim.get_actor(s.actor_atespace, s.actor_name)
    assert actor.uid == out.session.actor_uid
    # a READY Sandbox runs: commands and files reach it (a Session's Actor waits suspended instead)
    assert actor.state.value == "ACTOR_STATE_RUNNING"


@pytest.mark.clause("OP-2")
async def test_64_concurrent_claimers_of_a_sandbox_generation_one_winner(store, sim, database_url):
    adm = await admitted_sandbox(store, sim)
    conns = [await psycopg.AsyncConnection.connect(database_url, autocommit=True) for _ in range(RACERS)]
    try:
        start = asyncio.Event()

        async def claimer(conn: psycopg.AsyncConnection[Any]) -> str:
            await start.wait()
            cur = await conn.execute("SELECT status FROM sessionq.claim_operation(%s, %s, %s, 30)",
                                     (adm.session.id, adm.generation, uuid4()))
            row = await cur.fetchone()
            assert row is not None
            return str(row[0])

        tasks = [asyncio.create_task(claimer(c)) for c in conns]
        start.set()
        results = await asyncio.gather(*tasks)
    finally:
        for c in conns:
            await c.close()
    assert results.count("claimed") == 1
    assert results.count("busy") == RACERS - 1


@pytest.mark.clause("OP-2")
async def test_64_concurrent_executors_make_one_runtime_mutation_per_generation(store, sim, database_url):
    adm = await admitted_sandbox(store, sim)
    name = adm.session.actor_name
    stores = [await Store.open(database_url, pool_size=1, listen=False) for _ in range(RACERS)]
    try:
        async def race() -> list[str]:
            outs = await asyncio.gather(*(OperationExecutor(s, sim, 30).run(adm.session.id) for s in stores))
            return [o.status for o in outs]

        statuses = await race()  # the creation
        assert statuses.count("completed") == 1 and set(statuses) <= {"completed", "busy", "done", "nothing"}
        assert await sim.mutation_count(actor=name, method="create_actor") == 1
        assert await sim.mutation_count(actor=name, method="create_egress_policy") == 1
        assert await sim.mutation_count(actor=name, method="resume_actor") == 1
        for kind, method in (("SUSPEND", "suspend_actor"), ("RESUME", "resume_actor"), ("DELETE", "delete_actor")):
            before = await sim.mutation_count(actor=name, method=method)
            await store.admit_operation(adm.session.id, "alice", None, kind, of=RowKind.SANDBOX)
            statuses = await race()
            assert statuses.count("completed") == 1, (kind, statuses)
            assert await sim.mutation_count(actor=name, method=method) == before + 1, kind
    finally:
        for s in stores:
            await s.close()
    assert (await raw_session(store, adm.session.id)).state == "DELETED"


@pytest.mark.clause("SUS-1")
async def test_suspend_and_resume_a_sandbox_through_the_operation_machinery(store, sim):
    sb = await ready_sandbox(store, sim)
    ex = OperationExecutor(store, sim, 120)
    adm = await store.admit_operation(sb.id, "alice", None, "SUSPEND", of=RowKind.SANDBOX)
    assert adm.outcome == "admitted" and adm.session.operation == "SUSPEND"
    done = (await ex.run(sb.id)).session
    assert done is not None and done.state == "SUSPENDED" and done.snapshot_generation is not None
    adm = await store.admit_operation(sb.id, "alice", None, "RESUME", of=RowKind.SANDBOX)
    done = (await ex.run(sb.id)).session
    assert done is not None and done.state == "READY"
    # a Sandbox takes no turns: a Resume is not followed by quiescence (a Session's would be)
    assert done.idle_boundary_id is None and (await raw_session(store, sb.id)).idle_boundary_id is None
    # activity never extends its life
    assert (await raw_session(store, sb.id)).expires_at == sb.expires_at


async def test_the_two_kinds_never_see_each_other(store, sim):
    session = await ready_session(store, sim)
    sb = await ready_sandbox(store, sim)
    with pytest.raises(SessionqError) as e:
        await store.get_session(sb.id, "alice")
    assert e.value.code.name == "NOT_FOUND" and "session" in e.value.message
    with pytest.raises(SessionqError) as e:
        await store.get_session(session.id, "alice", None, RowKind.SANDBOX)
    assert e.value.code.name == "NOT_FOUND" and "sandbox" in e.value.message
    for kind in ("SUSPEND", "DELETE"):
        with pytest.raises(SessionqError) as e:
            await store.admit_operation(sb.id, "alice", None, kind)
        assert e.value.code.name == "NOT_FOUND"
        with pytest.raises(SessionqError) as e:
            await store.admit_operation(session.id, "alice", None, kind, of=RowKind.SANDBOX)
        assert e.value.code.name == "NOT_FOUND"
    assert [s.id for s in await store.list_sessions("alice", False, None, None, None, 10)] == [session.id]
    assert [s.id for s in await store.list_sessions("alice", True, None, None, None, 10, RowKind.SANDBOX)] == [sb.id]
    # no turns, shares or checkpoints on a Sandbox
    with pytest.raises(SessionqError) as e:
        await store.admit_turn(sb.id, "alice", None, {"messageId": "m", "role": "ROLE_USER", "parts": []}, None, 60)
    assert e.value.code.name == "NOT_FOUND"
    with pytest.raises(SessionqError) as e:
        await store.create_share(sb.id, "alice", "READ_ONLY", None, "h" * 64)
    assert e.value.code.name == "NOT_FOUND"
    # the request ids of the two kinds are apart: the same id makes one of each
    other = await store.admit_sandbox("alice", "req-1", "kagent", AGENT, "", 60)
    assert other.outcome == "admitted" and other.session.id != session.id


async def test_another_users_sandbox_is_not_found(store, sim):
    sb = await ready_sandbox(store, sim)
    for call in (lambda: store.get_session(sb.id, "bob", None, RowKind.SANDBOX),
                 lambda: store.admit_operation(sb.id, "bob", None, "DELETE", of=RowKind.SANDBOX)):
        with pytest.raises(SessionqError) as e:
            await call()
        assert e.value.code.name == "NOT_FOUND" and e.value.message == f"sandbox {sb.id} not found"
    assert await store.list_sessions("bob", False, None, None, None, 10, RowKind.SANDBOX) == []
    assert (await raw_session(store, sb.id)).operation == "NONE"


@pytest.mark.clause("CRE-9")
@pytest.mark.clause("DEL-8")
async def test_sandbox_request_ids_are_idempotency_keys(store, sim):
    first = await admitted_sandbox(store, sim, "k", ttl=60)
    again = await store.admit_sandbox("alice", "k", "kagent", AGENT, "scratch", 60)
    assert (again.outcome, again.session.id, again.generation) == ("joined", first.session.id, first.generation)
    for name, ttl in (("other", 60.0), ("scratch", 61.0)):
        with pytest.raises(SessionqError) as e:
            await store.admit_sandbox("alice", "k", "kagent", AGENT, name, ttl)
        assert e.value.code.name == "ALREADY_EXISTS" and "sandbox" in e.value.message
    await OperationExecutor(store, sim, 120).run(first.session.id)
    await store.admit_operation(first.session.id, "alice", None, "DELETE", of=RowKind.SANDBOX)
    await OperationExecutor(store, sim, 120).run(first.session.id)
    with pytest.raises(SessionqError) as e:
        await store.admit_sandbox("alice", "k", "kagent", AGENT, "scratch", 60)
    assert e.value.code.name == "FAILED_PRECONDITION" and "deleted sandbox cannot be recreated" in e.value.message
    tomb = await raw_session(store, first.session.id)
    assert (tomb.state, tomb.revision_id, tomb.actor_uid) == ("DELETED", None, None)


@pytest.mark.clause("CRE-3")
async def test_sandbox_of_a_missing_or_unprepared_template_writes_nothing(store, sim):
    with pytest.raises(SessionqError) as e:
        await store.admit_sandbox("alice", "x", "kagent", "nope", "", 60)
    assert e.value.code.name == "NOT_FOUND"
    with pytest.raises(SessionqError) as e:
        await store.admit_sandbox("alice", "x", "kagent", AGENT, "", 0)  # below the ttl's 1s
    assert e.value.code.name == "INVALID_ARGUMENT"
    assert await count(store, "SELECT count(*) FROM sessionq.sessions") == 0


@pytest.mark.clause("IDLE-9")
@pytest.mark.clause("IDLE-12")
async def test_expired_sandboxes_are_deleted_by_the_bounded_sweep(store, sim, database_url):
    old = await ready_sandbox(store, sim, "old")
    young = await ready_sandbox(store, sim, "young")
    suspended = await ready_sandbox(store, sim, "suspended")
    await store.admit_operation(suspended.id, "alice", None, "SUSPEND", of=RowKind.SANDBOX)
    await OperationExecutor(store, sim, 120).run(suspended.id)
    await expire_now(store, old.id)
    await expire_now(store, suspended.id)
    # an ancient creation is not what expires a Sandbox (the idle clock is the Sessions')
    async with store.pool.connection() as conn:
        await conn.execute("UPDATE sessionq.sessions SET created_at = now() - interval '30 days' WHERE id = %s",
                           (young.id,))
    ex = OperationExecutor(store, sim, 120)
    sandboxes_before = metrics.SANDBOX_EXPIRED._value.get()
    sessions_before = metrics.SESSION_EXPIRED._value.get()
    result = await sweep(store, ex, database_url, 60, "w", sandboxes=True, page=1, in_flight=1)
    assert result.leader and result.admitted == 2 and result.expired == 2
    # counted as Sandboxes, not as idle Sessions
    assert metrics.SANDBOX_EXPIRED._value.get() == sandboxes_before + 2
    assert metrics.SESSION_EXPIRED._value.get() == sessions_before
    for gone in (old, suspended):
        assert await store.session_by_id(gone.id) is None  # no tombstone, as an idle Session
        with pytest.raises(SubstrateError) as e:
            await sim.get_actor(gone.actor_atespace, gone.actor_name)
        assert e.value.code == Code.NOT_FOUND
    assert (await raw_session(store, young.id)).state == "READY"
    # the request id is free again, as after an idle expiry
    again = await store.admit_sandbox("alice", "old", "kagent", AGENT, "scratch", 3600)
    assert again.outcome == "admitted" and again.session.id != old.id


@pytest.mark.clause("IDLE-5")
async def test_a_pending_operation_blocks_expiry_and_a_sweep_without_sandboxes_leaves_them(store, sim, database_url):
    sb = await ready_sandbox(store, sim)
    await expire_now(store, sb.id)
    ex = OperationExecutor(store, sim, 120)
    assert (await sweep(store, ex, database_url, 60, "w")).admitted == 0  # sandboxes off
    await store.admit_operation(sb.id, "alice", None, "SUSPEND", of=RowKind.SANDBOX)
    assert (await store.expire_session(sb.id, 60)).outcome == "busy"
    await ex.run(sb.id)
    # idle expiry of Sessions off (0s): Sandboxes still expire
    result = await sweep(store, ex, database_url, 0, "w", sandboxes=True)
    assert result.leader and result.expired == 1 and await store.session_by_id(sb.id) is None


@pytest.mark.clause("IDLE-11")
async def test_a_failed_sandbox_expiry_is_resumed_by_a_later_sweep(store, sim, database_url):
    sb = await ready_sandbox(store, sim)
    await expire_now(store, sb.id)
    await sim.inject("delete_actor", "fail_before", times=1)
    ex = OperationExecutor(store, sim, 120)
    first = await sweep(store, ex, database_url, 0, "w", sandboxes=True)
    assert first.admitted == 1 and first.failed == 1
    row = await raw_session(store, sb.id)
    assert (row.state, row.deletion_reason) == ("DELETING", "idle_timeout")
    second = await sweep(store, ex, database_url, 0, "w", sandboxes=True)
    assert second.expired == 1 and await store.session_by_id(sb.id) is None


@pytest.mark.clause("OP-6")
async def test_a_pending_sandbox_intent_is_replaced_once_its_attempt_ended(store, sim, database_url):
    sb = await ready_sandbox(store, sim)
    session = await ready_session(store, sim)
    actor = await sim.get_actor(session.actor_atespace, session.actor_name)
    await sim.resume_actor(session.actor_atespace, session.actor_name, actor.uid)  # as during a turn
    await sim.inject("suspend_actor", "fail_before", times=None)
    ex = OperationExecutor(store, sim, 120)
    for row in (sb, session):
        await store.admit_operation(row.id, "alice", None, "SUSPEND", of=row.kind)
        with pytest.raises(Exception):
            await ex.run(row.id)  # the attempt failed and released its claim: the intent stays
        assert (await raw_session(store, row.id)).operation == "SUSPEND"
    # a Session keeps its intent (OP-9): another kind is ABORTED
    with pytest.raises(SessionqError) as e:
        await store.admit_operation(session.id, "alice", None, "RESUME")
    assert e.value.code.name == "ABORTED"
    # a Sandbox's ended attempt no longer conflicts: the resume replaces the suspend
    old = (await raw_session(store, sb.id)).operation_id
    adm = await store.admit_operation(sb.id, "alice", None, "RESUME", of=RowKind.SANDBOX)
    assert adm.outcome == "admitted" and adm.generation != old and adm.session.operation == "RESUME"
    await sim.clear_faults()
    done = (await ex.run(sb.id)).session
    assert done is not None and (done.state, done.operation) == ("READY", "NONE")
    assert (await sim.get_actor(sb.actor_atespace, sb.actor_name)).state.value == "ACTOR_STATE_RUNNING"


async def test_a_sandbox_intent_whose_attempt_runs_is_aborted(store, sim):
    sb = await ready_sandbox(store, sim)
    adm = await store.admit_operation(sb.id, "alice", None, "SUSPEND", of=RowKind.SANDBOX)
    assert (await store.claim_operation(sb.id, adm.generation, uuid4(), 30)).status == "claimed"
    for kind in ("RESUME", "DELETE"):
        with pytest.raises(SessionqError) as e:
            await store.admit_operation(sb.id, "alice", None, kind, of=RowKind.SANDBOX)
        assert e.value.code.name == "ABORTED" and "pending suspend operation" in e.value.message


async def test_a_sandbox_gets_no_workload_credential(store, sim):
    """Guest work in a Sandbox cannot reach a Session: its Actor holds no task store credential."""
    sb = await ready_sandbox(store, sim)
    session = await ready_session(store, sim)
    sandbox_env = await sim.read_env(sb.actor_atespace, sb.actor_name)
    assert sandbox_env == {"SESSIONQ_SANDBOX_ID": str(sb.id)}
    assert "SESSIONQ_WORKLOAD_TOKEN" in await sim.read_env(session.actor_atespace, session.actor_name)


@pytest.mark.clause("IDLE-5")
async def test_a_sandbox_whose_creation_cannot_finish_still_expires(store, sim, database_url):
    """A Sandbox expires by itself: a pending creation blocks its expiry only while an attempt runs."""
    adm = await admitted_sandbox(store, sim, "stuck")
    await expire_now(store, adm.session.id)
    # an attempt holds the claim: busy
    assert (await store.claim_operation(adm.session.id, adm.generation, uuid4(), 30)).status == "claimed"
    assert (await store.expire_session(adm.session.id, 0)).outcome == "busy"
    # the attempt ended (its claim lapsed after issuing a failed creation): the expiry replaces the intent
    async with store.pool.connection() as conn:
        await conn.execute("UPDATE sessionq.sessions SET executor_expires_at = clock_timestamp() WHERE id = %s",
                           (adm.session.id,))
    await sim.inject("create_actor", "fail_before", times=None)
    ex = OperationExecutor(store, sim, 120)
    result = await sweep(store, ex, database_url, 0, "w", sandboxes=True)
    assert result.admitted == 1 and result.expired == 1 and await store.session_by_id(adm.session.id) is None
    assert await sim.mutation_count(method="create_actor") == 0
