"""Operations and execution claims (OP-*)."""

import asyncio
import time
from uuid import uuid4

import psycopg
import pytest
from conftest import apply_agent
from lifecycle import AGENT, count, raw_session, ready_checkpoint, ready_session

from sessionq import config
from sessionq.db.store import Store
from sessionq.domain.operations import OperationExecutor
from sessionq.errors import SessionqError
from sessionq.runtime.base import Code, SubstrateError


async def admitted_create(store, sim, request_id="r"):
    await apply_agent(store, sim)
    return await store.admit_create("alice", request_id, "kagent", AGENT, "")


@pytest.mark.clause("OP-1")
async def test_operation_kind_generation_and_claim_are_on_the_row(store, sim):
    adm = await admitted_create(store, sim)
    s = await raw_session(store, adm.session.id)
    assert (s.operation, s.operation_id, s.executor_id) == ("CREATE", adm.generation, None)
    ex = uuid4()
    claim = await store.claim_operation(s.id, adm.generation, ex, 30)
    assert claim.status == "claimed"
    s = await raw_session(store, s.id)
    assert s.executor_id == ex and s.executor_expires_at is not None
    for kind in ("SUSPEND", "RESUME", "DELETE"):
        assert kind in {"SUSPEND", "RESUME", "DELETE"}
    await store.complete_operation(s.id, adm.generation, ex, {"actor_uid": "u"})
    for kind, state in (("SUSPEND", "SUSPENDED"), ("RESUME", "READY"), ("DELETE", "DELETING")):
        a = await store.admit_operation(s.id, "alice", None, kind)
        row = await raw_session(store, s.id)
        assert (row.operation, row.operation_id) == (kind, a.generation)
        if kind != "DELETE":
            e = uuid4()
            assert (await store.claim_operation(s.id, a.generation, e, 30)).status == "claimed"
            done = await store.complete_operation(s.id, a.generation, e, {})
            assert done.state == state
        else:
            assert row.state == state


@pytest.mark.clause("OP-2")
async def test_64_concurrent_claimers_one_winner(store, sim, database_url):
    adm = await admitted_create(store, sim)
    conns = [await psycopg.AsyncConnection.connect(database_url, autocommit=True) for _ in range(64)]
    try:
        start = asyncio.Event()

        async def claimer(conn):
            await start.wait()
            cur = await conn.execute("SELECT status FROM sessionq.claim_operation(%s, %s, %s, 30)",
                                     (adm.session.id, adm.generation, uuid4()))
            return (await cur.fetchone())[0]

        tasks = [asyncio.create_task(claimer(c)) for c in conns]
        start.set()
        results = await asyncio.gather(*tasks)
    finally:
        for c in conns:
            await c.close()
    assert results.count("claimed") == 1
    assert results.count("busy") == 63


@pytest.mark.clause("OP-2")
async def test_64_concurrent_attempts_make_one_runtime_mutation(store, sim, database_url):
    adm = await admitted_create(store, sim)
    stores = [await Store.open(database_url, pool_size=1, listen=False) for _ in range(64)]
    try:
        outs = await asyncio.gather(*(OperationExecutor(s, sim, 30).run(adm.session.id) for s in stores))
    finally:
        for s in stores:
            await s.close()
    statuses = [o.status for o in outs]
    assert statuses.count("completed") == 1
    assert set(statuses) <= {"completed", "busy", "done", "nothing"}
    assert await sim.mutation_count(method="create_actor") == 1
    assert await sim.mutation_count(method="create_egress_policy") == 1


@pytest.mark.clause("OP-3")
async def test_no_transaction_or_lock_held_during_runtime_io(store, sim, database_url):
    adm = await admitted_create(store, sim)
    fault = await sim.inject("create_actor", "block")
    run = asyncio.create_task(OperationExecutor(store, sim, 30).run(adm.session.id))
    await sim.wait_blocked(fault)
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        # the row is not locked: NOWAIT succeeds
        async with conn.transaction():
            await conn.execute("SELECT 1 FROM sessionq.sessions WHERE id = %s FOR UPDATE NOWAIT", (adm.session.id,))
        cur = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%%'"
        )
        assert (await cur.fetchone())[0] == 0
    await sim.release(fault)
    assert (await run).status == "completed"


@pytest.mark.clause("OP-4")
@pytest.mark.clause("OP-5")
async def test_completion_keeps_generation_and_joined_callers_observe_while_current(store, sim):
    s = await ready_session(store, sim)
    create_gen = s.operation_id
    assert s.operation == "NONE" and create_gen is not None
    obs = await store.observe(s.id, create_gen)
    assert obs.status == "done" and obs.session.state == "READY"
    sus = await store.admit_operation(s.id, "alice", None, "SUSPEND")
    # a caller joined to the creation no longer observes the Session once a later operation superseded it
    assert (await store.observe(s.id, create_gen)).status == "superseded"
    assert (await store.observe(s.id, sus.generation)).status == "pending"
    await OperationExecutor(store, sim, 30).run(s.id)
    obs = await store.observe(s.id, sus.generation)
    assert obs.status == "done" and obs.session.state == "SUSPENDED" and obs.session.operation_id == sus.generation


@pytest.mark.clause("OP-6")
async def test_superseded_delayed_attempt_issues_nothing(store, sim):
    await apply_agent(store, sim)
    cp = await ready_checkpoint(store, sim)
    fork = await store.admit_fork(cp.id, "alice", "fork-1")
    before = await sim.mutation_count()
    # the attempt stalls in its read-only preparation (a fork reads its checkpoint's tag first)
    block = await sim.inject("get_tag", "block")
    delayed = asyncio.create_task(OperationExecutor(store, sim, 30).run(fork.session.id))
    await sim.wait_blocked(block)
    # a delete supersedes the unclaimed creation
    dele = await store.admit_operation(fork.session.id, "alice", None, "DELETE")
    assert dele.outcome == "admitted" and dele.session.state == "DELETING"
    await sim.release(block)
    out = await delayed
    assert out.status == "superseded"
    assert await sim.mutation_count() == before  # nothing issued for the fork


async def test_first_creation_attempt_claims_in_its_first_statement(store, sim):
    """A plain creation of a READY revision has nothing to inspect: begin_operation claims it;
    anything else comes back unclaimed, for preparation."""
    adm = await admitted_create(store, sim)
    executor = uuid4()
    start = await store.begin_operation(adm.session.id, executor, 30)
    assert start.claim is not None and start.claim.status == "claimed" and start.claim.previous_executor is None
    assert start.session.executor_id == executor and start.revision.state == "READY"
    # a second attempt meanwhile is not claimed: it prepares first (claim_operation then says busy)
    other = await store.begin_operation(adm.session.id, uuid4(), 30)
    assert other.claim is None and other.session.executor_id == executor
    await store.release_operation(adm.session.id, adm.generation, executor)
    again = await store.begin_operation(adm.session.id, uuid4(), 30)
    assert again.claim is None and again.session.operation_id == adm.generation
    s = await ready_session(store, sim, "r-2")
    sus = await store.admit_operation(s.id, "alice", None, "SUSPEND")
    suspend = await store.begin_operation(s.id, uuid4(), 30)
    assert suspend.claim is None and suspend.session.operation_id == sus.generation
    assert (await raw_session(store, s.id)).executor_id is None


@pytest.mark.clause("OP-6")
async def test_superseded_by_same_kind_issues_nothing(store, sim):
    s = await ready_session(store, sim)
    first = await store.admit_operation(s.id, "alice", None, "SUSPEND")
    block = await sim.inject("get_actor", "block")
    delayed = asyncio.create_task(OperationExecutor(store, sim, 30).run(s.id))
    await sim.wait_blocked(block)
    await store.fail_preparation(s.id, first.generation, "Test", "invalidated")
    second = await store.admit_operation(s.id, "alice", None, "SUSPEND")
    assert second.generation != first.generation and second.session.operation == "SUSPEND"
    await sim.release(block)
    assert (await delayed).status == "superseded"
    assert await sim.mutation_count(method="suspend_actor") == 0


@pytest.mark.clause("OP-7")
@pytest.mark.clause("OP-17")
async def test_retries_return_current_state_and_noops(store, sim):
    s = await ready_session(store, sim, "req")
    noop = await store.admit_operation(s.id, "alice", None, "RESUME")
    assert noop.outcome == "noop" and noop.session.operation_id == s.operation_id
    sus = await store.admit_operation(s.id, "alice", None, "SUSPEND")
    await OperationExecutor(store, sim, 30).run(s.id)
    before = await sim.mutation_count()
    again = await store.admit_operation(s.id, "alice", None, "SUSPEND")
    assert again.outcome == "noop"
    # a creation retry returns the current state (no receipt of the old result is kept)
    retry = await store.admit_create("alice", "req", "kagent", AGENT, "")
    assert retry.outcome == "existing"
    assert retry.session.state == "SUSPENDED" and retry.session.operation_id == sus.generation
    assert await sim.mutation_count() == before
    archive = await count(store, "SELECT count(*) FROM pg_tables WHERE schemaname = 'sessionq' AND tablename ~ 'operation|receipt'")
    assert archive == 0  # no archive of past lifecycle results


@pytest.mark.clause("OP-8")
async def test_unclaimed_operation_retries_preparation_and_delete_supersedes(store, sim):
    adm = await admitted_create(store, sim)
    await store.fail_preparation(adm.session.id, adm.generation, "Test", "revision check failed")
    s = await raw_session(store, adm.session.id)
    assert (s.state, s.operation, s.operation_id) == ("CREATING", "CREATE", None)
    retry = await store.admit_create("alice", "r", "kagent", AGENT, "")
    assert retry.outcome == "admitted" and retry.generation not in (None, adm.generation)
    dele = await store.admit_operation(s.id, "alice", None, "DELETE")
    assert dele.outcome == "admitted" and dele.session.operation == "DELETE"
    out = await OperationExecutor(store, sim, 30).run(s.id)
    assert out.session.state == "DELETED"
    assert await sim.mutation_count(method="create_actor") == 0


@pytest.mark.clause("OP-9")
@pytest.mark.clause("OP-10")
async def test_errors_after_issued_work_keep_operation_and_pins(store, sim):
    adm = await admitted_create(store, sim)
    await sim.inject("create_actor", "lose_after")
    with pytest.raises(SubstrateError):
        await OperationExecutor(store, sim, 30).run(adm.session.id)
    s = await raw_session(store, adm.session.id)
    assert (s.operation, s.operation_id) == ("CREATE", adm.generation)
    assert s.executor_id is not None and s.revision_id is not None
    assert s.executor_expires_at <= (await raw_session(store, s.id)).updated_at  # released at once
    with pytest.raises(SessionqError) as e:
        await store.admit_operation(s.id, "alice", None, "DELETE")
    assert e.value.sqlstate == "SQ409"


@pytest.mark.clause("OP-11")
async def test_crashed_claim_expires_and_retry_claims_with_new_executor(store, sim):
    adm = await admitted_create(store, sim)
    crashed = uuid4()
    assert (await store.claim_operation(adm.session.id, adm.generation, crashed, 0.5)).status == "claimed"
    busy = await store.claim_operation(adm.session.id, adm.generation, uuid4(), 30)
    assert busy.status == "busy"
    await asyncio.sleep(0.6)
    fresh = uuid4()
    claim = await store.claim_operation(adm.session.id, adm.generation, fresh, 30)
    assert claim.status == "claimed" and claim.previous_executor == crashed
    assert claim.session.executor_id == fresh
    with pytest.raises(config.ConfigError, match="at most 120s"):
        config.load(env={"SESSIONQ_SESSIONS__CLAIM_LIFETIME": "121s"})


@pytest.mark.clause("OP-12")
async def test_attempt_deadline_bounded_by_claim_lifetime(store, sim):
    adm = await admitted_create(store, sim)
    await sim.inject("create_actor", "delay", delay=5.0)
    t = time.monotonic()
    with pytest.raises(SubstrateError) as e:
        await OperationExecutor(store, sim, 0.7).run(adm.session.id)
    assert e.value.code == Code.DEADLINE_EXCEEDED
    assert time.monotonic() - t < 3
    await asyncio.sleep(0.3)
    assert await sim.mutation_count(method="create_actor") == 0  # the late call never took effect


@pytest.mark.clause("OP-13")
async def test_stale_executor_cannot_release_or_complete(store, sim):
    adm = await admitted_create(store, sim)
    stale, fresh = uuid4(), uuid4()
    await store.claim_operation(adm.session.id, adm.generation, stale, 0.2)
    await asyncio.sleep(0.3)
    assert (await store.claim_operation(adm.session.id, adm.generation, fresh, 30)).status == "claimed"
    for call in (store.release_operation(adm.session.id, adm.generation, stale),
                 store.complete_operation(adm.session.id, adm.generation, stale, {})):
        with pytest.raises(SessionqError) as e:
            await call
        assert e.value.sqlstate == "SQ409"
    s = await raw_session(store, adm.session.id)
    assert s.executor_id == fresh and s.state == "CREATING"


@pytest.mark.clause("OP-14")
async def test_lost_create_response_retry_continues_without_second_actor(store, sim):
    adm = await admitted_create(store, sim)
    await sim.inject("create_actor", "lose_after")
    ex = OperationExecutor(store, sim, 30)
    with pytest.raises(SubstrateError):
        await ex.run(adm.session.id)
    out = await ex.run(adm.session.id)  # another attempt, as a job retry on another replica would
    assert out.status == "completed"
    assert await sim.mutation_count(method="create_actor") == 1
    actor = await sim.get_actor("kagent", adm.session.actor_name)
    assert out.session.actor_uid == actor.uid


@pytest.mark.clause("OP-14")
async def test_retry_finishes_egress_of_existing_actor(store, sim):
    await apply_agent(store, sim, egress=[{"url": "https://api.openai.com", "credentialHeaders": {"Authorization": "k"}}])
    adm = await store.admit_create("alice", "r", "kagent", AGENT, "")
    await sim.inject("create_egress_policy", "fail_before")
    ex = OperationExecutor(store, sim, 30)
    with pytest.raises(SubstrateError):
        await ex.run(adm.session.id)
    out = await ex.run(adm.session.id)
    assert out.status == "completed"
    assert await sim.mutation_count(method="create_actor") == 1
    assert await sim.mutation_count(method="create_egress_policy") == 1
    policy = await sim.get_egress_policy("kagent", adm.session.actor_name)
    assert {(r.hostname, r.port, r.protocol) for r in policy.rules} == {("api.openai.com", 443, "https")}


@pytest.mark.clause("OP-14")
async def test_replaced_actor_is_never_adopted(store, sim):
    s = await ready_session(store, sim)
    old = await sim.get_actor("kagent", s.actor_name)
    await sim.delete_actor("kagent", s.actor_name, old.uid)
    await sim.create_actor("kagent", s.actor_name, s.actor_template)  # same name, new uid
    adm = await store.admit_operation(s.id, "alice", None, "SUSPEND")
    out = await OperationExecutor(store, sim, 30).run(s.id)
    assert out.status == "failed_preparation"
    assert "never adopted" in out.session.failure_message
    assert (await raw_session(store, s.id)).actor_uid == old.uid
    assert await sim.mutation_count(method="suspend_actor") == 0
    assert adm.generation == out.session.failed_operation_id


@pytest.mark.clause("OP-15")
async def test_conflicting_lifecycle_blocked_while_pending(store, sim):
    s = await ready_session(store, sim)
    sus = await store.admit_operation(s.id, "alice", None, "SUSPEND")
    with pytest.raises(SessionqError) as e:
        await store.admit_operation(s.id, "alice", None, "RESUME")
    assert e.value.sqlstate == "SQ409" and "pending suspend" in e.value.message
    # once claimed, even a delete must wait
    await store.claim_operation(s.id, sus.generation, uuid4(), 30)
    with pytest.raises(SessionqError) as e:
        await store.admit_operation(s.id, "alice", None, "DELETE")
    assert e.value.sqlstate == "SQ409"


@pytest.mark.clause("OP-12")
@pytest.mark.clause("OP-14")
async def test_delayed_creation_cannot_resurrect_a_deleted_actor(store, sim):
    adm = await admitted_create(store, sim)
    await sim.inject("create_actor", "delay", delay=2.0, times=1)  # only the first attempt's call is slow
    delayed = asyncio.create_task(OperationExecutor(store, sim, 0.5).run(adm.session.id))
    await asyncio.sleep(0.7)  # its claim lapsed; a retry (another replica) takes over and finishes
    out = await OperationExecutor(store, sim, 30).run(adm.session.id)
    assert out.status == "completed" and out.session.state == "READY"
    with pytest.raises(SubstrateError):
        await delayed  # bounded by its claim lifetime: it gave up before its call took effect
    await store.admit_operation(adm.session.id, "alice", None, "DELETE")
    assert (await OperationExecutor(store, sim, 30).run(adm.session.id)).session.state == "DELETED"
    await asyncio.sleep(2.0)  # well past the moment the slow call would have landed
    with pytest.raises(SubstrateError):
        await sim.get_actor("kagent", adm.session.actor_name)
    assert await sim.mutation_count(method="create_actor") == 1
