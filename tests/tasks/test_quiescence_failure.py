"""The quiescence failure record: kagent's Session.last_quiescence_failure (issue 20).

A quiescence whose suspend fails for good records why (SuspendFailed, RuntimeUnavailable) against
the turn it followed; the idle claim stays (Q-10). A later quiescence that records a snapshot
clears the record."""

from __future__ import annotations

import pytest
from lifecycle import raw_session, ready_session, turn_by_store

from sessionq.api.sessions import session_to_proto
from sessionq.domain.quiescence import QuiescencePool, claim_and_quiesce, retry_claimed
from sessionq.errors import SessionqError


async def test_a_failed_suspend_is_recorded_for_its_turn_and_cleared_by_a_snapshot(store, sim, database_url):
    s = await ready_session(store, sim)
    tid = await turn_by_store(store, sim, s)
    await sim.inject("suspend_actor", "fail_before", times=None)
    pool = QuiescencePool(store, sim, database_url, listen=False)
    assert await claim_and_quiesce(pool) == s.id
    row = await raw_session(store, s.id)
    assert row.idle_executor is not None  # the claim stays
    assert row.quiescence_failure is not None
    assert (row.quiescence_failure["task_id"], row.quiescence_failure["reason"]) == (tid, "SuspendFailed")
    assert "UNAVAILABLE" in row.quiescence_failure["message"]
    wire = session_to_proto(row).last_quiescence_failure
    assert (wire.task_id, wire.reason) == (tid, "SuspendFailed") and wire.message
    assert wire.failed_at.seconds > 0 and not session_to_proto(row).HasField("volume_source")
    # the client reads it through GetSession's store call too
    assert (await store.get_session(s.id, "alice")).quiescence_failure == row.quiescence_failure

    await sim.clear_faults()
    assert await retry_claimed(pool, s.id) == "recorded"
    row = await raw_session(store, s.id)
    assert row.quiescence_failure is None and row.snapshot_generation is not None
    assert not session_to_proto(row).HasField("last_quiescence_failure")


async def test_a_vanished_actor_is_runtime_unavailable(store, sim, database_url):
    s = await ready_session(store, sim)
    tid = await turn_by_store(store, sim, s)
    actor = await sim.get_actor(s.actor_atespace, s.actor_name)
    await sim.delete_actor(s.actor_atespace, s.actor_name, actor.uid, any_state=True)
    pool = QuiescencePool(store, sim, database_url, listen=False)
    assert await claim_and_quiesce(pool) == s.id
    failure = (await raw_session(store, s.id)).quiescence_failure
    assert failure is not None and (failure["task_id"], failure["reason"]) == (tid, "RuntimeUnavailable")


async def test_only_the_claim_holder_records_and_only_known_reasons(store, sim, database_url):
    import uuid

    s = await ready_session(store, sim)
    await turn_by_store(store, sim, s)
    claimed = await store.claim_idle(uuid.uuid4())
    assert claimed is not None and claimed.idle_boundary_id is not None
    with pytest.raises(SessionqError) as e:
        await store.record_quiescence_failure(s.id, claimed.idle_boundary_id, uuid.uuid4(), "SuspendFailed", "x")
    assert e.value.code.name == "ABORTED"
    with pytest.raises(SessionqError) as e:
        await store.record_quiescence_failure(s.id, claimed.idle_boundary_id, claimed.idle_executor, "Bogus", "x")
    assert e.value.code.name == "INVALID_ARGUMENT"
    assert (await raw_session(store, s.id)).quiescence_failure is None
