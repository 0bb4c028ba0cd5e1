"""Deletion, tombstones, explicit suspend and resume (DEL-*, SUS-*)."""

import pytest
from lifecycle import AGENT, count, raw_session, ready_session

from sessionq.domain.operations import OperationExecutor
from sessionq.errors import SessionqError


@pytest.mark.clause("DEL-1")
async def test_admitted_deletion_enters_deleting(store, sim):
    s = await ready_session(store, sim)
    adm = await store.admit_operation(s.id, "alice", None, "DELETE")
    assert adm.session.state == "DELETING" and adm.session.deletion_reason == "user_requested"
    assert (await raw_session(store, s.id)).state == "DELETING"


@pytest.mark.clause("DEL-2")
async def test_failed_delete_preparation_stays_deleting_until_retry(store, sim):
    s = await ready_session(store, sim)
    first = await store.admit_operation(s.id, "alice", None, "DELETE")
    await sim.inject("get_actor", "fail_before", times=3)  # every read-only inspection fails
    out = await OperationExecutor(store, sim, 30).run(s.id)
    assert out.status == "failed_preparation"
    row = await raw_session(store, s.id)
    assert (row.state, row.operation, row.operation_id) == ("DELETING", "DELETE", None)
    assert row.failed_operation_id == first.generation
    # admission stays closed for everything but a delete retry
    for kind in ("SUSPEND", "RESUME"):
        with pytest.raises(SessionqError) as e:
            await store.admit_operation(s.id, "alice", None, kind)
        assert e.value.sqlstate == "SQ409"
    retry = await store.admit_operation(s.id, "alice", None, "DELETE")
    assert retry.outcome == "admitted" and retry.generation != first.generation
    assert (await OperationExecutor(store, sim, 30).run(s.id)).session.state == "DELETED"


@pytest.mark.clause("DEL-3")
async def test_delete_stops_then_deletes_actor_then_tombstones(store, sim):
    s = await ready_session(store, sim)
    actor = await sim.get_actor("kagent", s.actor_name)
    await sim.resume_actor("kagent", s.actor_name, actor.uid)  # a turn left it running
    await store.admit_operation(s.id, "alice", None, "DELETE")
    out = await OperationExecutor(store, sim, 30).run(s.id)
    methods = [c["method"] for c in await sim.calls(actor=s.actor_name)]
    assert methods[-2:] == ["suspend_actor", "delete_actor"]
    assert out.session.state == "DELETED"
    with pytest.raises(Exception):
        await sim.get_actor("kagent", s.actor_name)


@pytest.mark.clause("DEL-4")
@pytest.mark.clause("DEL-5")
async def test_tombstone_keeps_identity_and_releases_everything(store, sim):
    s = await ready_session(store, sim, "keep-me")
    await store.create_share(s.id, "alice", "READ_ONLY", 3600, "hash-1")
    adm = await store.admit_operation(s.id, "alice", None, "DELETE")
    await OperationExecutor(store, sim, 30).run(s.id)
    row = await raw_session(store, s.id)
    assert (row.state, row.creator, row.request_id, row.operation_id) == ("DELETED", "alice", "keep-me", adm.generation)
    assert row.revision_id is None and row.actor_uid is None and row.operation == "NONE"
    assert await count(store, "SELECT count(*) FROM sessionq.session_shares") == 0


@pytest.mark.clause("DEL-5")
async def test_tombstone_constraint_forbids_half_released_rows(store, sim):
    s = await ready_session(store, sim)
    with pytest.raises(Exception, match=r"deleted_is_released|deleting_iff_delete"):
        async with store.pool.connection() as conn:
            await conn.execute("UPDATE sessionq.sessions SET state = 'DELETED' WHERE id = %s", (s.id,))


@pytest.mark.clause("DEL-7")
async def test_ordinary_access_excludes_deleted(store, sim):
    s = await ready_session(store, sim)
    await store.admit_operation(s.id, "alice", None, "DELETE")
    await OperationExecutor(store, sim, 30).run(s.id)
    calls = [
        store.get_session(s.id, "alice"),
        store.rename_session(s.id, "alice", None, "x"),
        store.create_share(s.id, "alice", "READ_ONLY", 60, "h"),
        store.list_shares(s.id, "alice", None, 10),
        store.admit_operation(s.id, "alice", None, "SUSPEND"),
    ]
    for call in calls:
        with pytest.raises(SessionqError) as e:
            await call
        assert e.value.sqlstate == "SQ404"
    assert await store.list_sessions("alice", False, None, None, None, 10) == []


@pytest.mark.clause("DEL-8")
async def test_deleted_request_id_cannot_recreate(store, sim):
    s = await ready_session(store, sim, "once")
    await store.admit_operation(s.id, "alice", None, "DELETE")
    await OperationExecutor(store, sim, 30).run(s.id)
    with pytest.raises(SessionqError) as e:
        await store.admit_create("alice", "once", "kagent", AGENT, "")
    assert e.value.sqlstate == "SQ412" and "deleted" in e.value.message
    assert await sim.mutation_count(method="create_actor") == 1


@pytest.mark.clause("DEL-9")
async def test_fresh_delete_of_deleted_is_not_found_but_joined_caller_sees_tombstone(store, sim):
    s = await ready_session(store, sim)
    adm = await store.admit_operation(s.id, "alice", None, "DELETE")
    await OperationExecutor(store, sim, 30).run(s.id)
    obs = await store.observe(s.id, adm.generation)
    assert obs.status == "done" and obs.session.state == "DELETED"
    with pytest.raises(SessionqError) as e:
        await store.admit_operation(s.id, "alice", None, "DELETE")
    assert e.value.sqlstate == "SQ404"


@pytest.mark.clause("SUS-1")
async def test_explicit_suspend_and_resume_use_operations(store, sim):
    s = await ready_session(store, sim)
    actor = await sim.get_actor("kagent", s.actor_name)
    await sim.resume_actor("kagent", s.actor_name, actor.uid)
    sus = await store.admit_operation(s.id, "alice", None, "SUSPEND")
    assert sus.session.operation == "SUSPEND" and sus.session.state == "READY"
    out = await OperationExecutor(store, sim, 30).run(s.id)
    assert out.session.state == "SUSPENDED" and out.session.operation_id == sus.generation
    assert out.session.snapshot_generation is not None and out.session.snapshot_uri
    actor = await sim.get_actor("kagent", s.actor_name)
    assert actor.state.value == "ACTOR_STATE_SUSPENDED" and actor.worker is None
    res = await store.admit_operation(s.id, "alice", None, "RESUME")
    out = await OperationExecutor(store, sim, 30).run(s.id)
    assert out.session.state == "READY" and out.session.operation_id == res.generation
    assert await sim.mutation_count(method="suspend_actor") == 1
    assert await sim.mutation_count(method="resume_actor") == 2


async def test_only_owner_may_run_lifecycle(store, sim):
    s = await ready_session(store, sim)
    await store.create_share(s.id, "alice", "READ_WRITE", 60, "rw-hash")
    with pytest.raises(SessionqError) as e:
        await store.admit_operation(s.id, "bob", None, "DELETE")
    assert e.value.sqlstate == "SQ404"
    with pytest.raises(SessionqError) as e:
        await store.admit_operation(s.id, "bob", "rw-hash", "DELETE")
    assert e.value.sqlstate == "SQ403"
    assert (await raw_session(store, s.id)).state == "READY"


@pytest.mark.clause("SUS-2")
async def test_suspend_while_a_turn_runs_is_aborted_and_issues_nothing(store, sim):
    s = await ready_session(store, sim)
    await store.admit_turn(s.id, "alice", None, {"parts": [{"text": "long"}]}, None, 600)
    mutations = await sim.mutation_count()
    with pytest.raises(SessionqError) as e:
        await store.admit_operation(s.id, "alice", None, "SUSPEND")
    assert e.value.sqlstate == "SQ409" and "turn is running" in e.value.message
    row = await raw_session(store, s.id)
    assert row.operation == "NONE" and row.state == "READY"
    assert await sim.mutation_count() == mutations
