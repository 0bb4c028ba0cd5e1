"""A retried checkpoint on a real Substrate (issue 17): GetTag names no source Actor UID there, so an
existing tag is adopted only when it is provably this checkpoint's (same source Actor name, the
template of the recorded Actor, COMPLETED, the recorded generation, the Actor still suspended on
that snapshot); otherwise it is deleted and created again (the wire facts' retry rule: DeleteTag,
then CreateTag). The served simulator plays a real Substrate here (no x-sessionq-* trailers)."""

from __future__ import annotations

import asyncio
import time
from typing import Any
from uuid import UUID

import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from conftest import apply_agent, make_settings

from sessionq._pb.kagent.api.v1alpha1 import checkpoints_pb2, checkpoints_pb2_grpc
from sessionq.domain.checkpoints import tag_snapshot as _tag
from sessionq.runtime.base import ActorState, Code, SubstrateError, Tag

NS = "team-c"


@pytest.fixture
def settings():
    """No turn pins (sessions.turnSnapshots 0): the checkpoint's tag is the only one these tests count."""
    return make_settings(**{"sessions.turnSnapshots": 0})


pytestmark = pytest.mark.real_substrate  # the sim fixture: the adapter to a served simulator playing a real Substrate


async def _suspended(sim: Any, name: str, template: str = f"{NS}/rev-1") -> tuple[str, int]:
    actor = await sim.create_actor(NS, name, template)
    await sim.resume_actor(NS, name, actor.uid)
    actor = await sim.suspend_actor(NS, name, actor.uid)
    assert actor.state == ActorState.SUSPENDED
    return actor.uid, max(s.generation for s in actor.snapshots)


async def test_the_plain_server_names_no_uid_but_the_template(sim: Any) -> None:
    await sim.create_actor_template(NS, "rev-1", "registry.local/agent:1")
    uid, _ = await _suspended(sim, "a")
    await sim._local.create_tag(NS, "t0", "a", uid)
    got = await sim.get_tag(NS, "t0")  # through the wire: the adapter
    template = await sim.get_actor_template(NS, "rev-1")
    assert got.actor_uid == "" and got.actor_name == "a" and got.template_uid == template.uid


async def test_a_lost_create_tag_answer_is_adopted_when_provably_ours(sim: Any) -> None:
    await sim.create_actor_template(NS, "rev-1", "registry.local/agent:1")
    uid, generation = await _suspended(sim, "a")
    await sim.inject("create_tag", "lose_after", actor="a")
    with pytest.raises(SubstrateError) as exc:
        await _tag(sim, NS, "t1", "a", uid, generation)
    assert exc.value.code == Code.UNAVAILABLE  # the tag was made, the answer lost
    assert isinstance(await _tag(sim, NS, "t1", "a", uid, generation), Tag)
    assert await sim.mutation_count(method="create_tag") == 1, "adopted, not made twice"
    assert await sim.mutation_count(method="delete_tag") == 0
    tag = await sim._local.get_tag(NS, "t1")
    assert tag.actor_uid == uid and tag.snapshot_generation == generation


async def test_a_tag_not_provably_ours_is_deleted_and_made_again(sim: Any) -> None:
    await sim.create_actor_template(NS, "rev-1", "registry.local/agent:1")
    await sim.create_actor_template(NS, "rev-2", "registry.local/agent:2")
    uid, generation = await _suspended(sim, "a")
    other, _ = await _suspended(sim, "b")
    # another Actor's tag of that name
    await sim._local.create_tag(NS, "t2", "b", other)
    assert isinstance(await _tag(sim, NS, "t2", "a", uid, generation), Tag)
    tag = await sim._local.get_tag(NS, "t2")
    assert tag.actor_name == "a" and tag.actor_uid == uid and tag.snapshot_generation == generation
    assert await sim.mutation_count(method="delete_tag") == 1
    # a tag of this Actor's name taken under another template (a same-name Actor of another revision)
    await sim._local.create_tag(NS, "t3", "a", uid)
    template = await sim.get_actor_template(NS, "rev-2")
    async with sim._local.tx() as cur:
        await cur.execute("UPDATE substrate_sim.tags SET template_uid = %s WHERE name = 't3'", (template.uid,))
    assert isinstance(await _tag(sim, NS, "t3", "a", uid, generation), Tag)
    assert (await sim._local.get_tag(NS, "t3")).template_uid != template.uid
    assert await sim.mutation_count(method="delete_tag") == 2
    # a tag of another generation of this Actor (its snapshot moved on since): made again from the
    # current snapshot, which is not the recorded one: the checkpoint fails, and no tag is kept
    await sim._local.create_tag(NS, "t4", "a", uid)
    await sim.resume_actor(NS, "a", uid)
    await sim.suspend_actor(NS, "a", uid)
    failure = await _tag(sim, NS, "t4", "a", uid, generation)
    assert isinstance(failure, str) and "create a new checkpoint" in failure
    with pytest.raises(SubstrateError) as exc:
        await sim._local.get_tag(NS, "t4")
    assert exc.value.code == Code.NOT_FOUND


async def test_a_checkpoint_whose_create_tag_answer_is_lost_becomes_ready(
    api: Any, store: Any, sim: Any
) -> None:
    """Through the API, the worker's checkpoint job and the adapter: the job retries after the
    lost answer and adopts the tag it made."""
    from test_workload_credential import TENANT, _message, new_session

    await apply_agent(store, sim)
    sid = await new_session(api)
    a2a = a2a_pb2_grpc.A2AServiceStub(api.channel)
    for text in ("What is 2+2?", "Summarize this conversation so far."):
        t2 = (await a2a.SendMessage(a2a_pb2.SendMessageRequest(tenant=TENANT, message=_message(text, sid)),
                                    metadata=api.md(), timeout=60)).task
        assert t2.status.state == a2a_pb2.TASK_STATE_COMPLETED
    session = await store.session_by_id(UUID(sid))
    await sim.inject("create_tag", "lose_after", actor=session.actor_name)
    stub = checkpoints_pb2_grpc.CheckpointServiceStub(api.channel)
    deadline = time.monotonic() + 90
    while True:  # the snapshot may still be pending: retry the same request, as documented
        try:
            cp = (await stub.CreateCheckpoint(checkpoints_pb2.CreateCheckpointRequest(
                session_id=sid, expected_head_task_id=t2.id, request_id="cp-lost"), metadata=api.md(),
                timeout=30)).checkpoint
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
    while cp.state != checkpoints_pb2.CHECKPOINT_STATE_READY:
        assert cp.state == checkpoints_pb2.CHECKPOINT_STATE_CREATING, cp
        assert time.monotonic() < deadline, "the checkpoint never became ready"
        await asyncio.sleep(0.2)
        cp = (await stub.GetCheckpoint(checkpoints_pb2.GetCheckpointRequest(checkpoint_id=cp.id),
                                       metadata=api.md(), timeout=10)).checkpoint
    assert await sim.mutation_count(method="create_tag") == 1, "the lost attempt's tag was adopted"
    assert await sim.mutation_count(method="delete_tag") == 0
    tag = await sim._local.get_tag(session.actor_atespace, f"checkpoint-{cp.id}")
    assert tag.actor_uid == session.actor_uid
