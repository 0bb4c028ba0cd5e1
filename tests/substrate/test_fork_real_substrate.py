"""Forks on a real Substrate (issue 17): a tag holds its own copy of the snapshot (TagStatus.snapshot,
owner TAG) under a URI of its own, not the Actor snapshot's. The checkpoint records the tag's URI
when it becomes READY, and a fork checks the tag against that; rows made before the column hold
the recorded Actor URI (backfilled), and keep forking.

The served simulator plays a real Substrate here (`extensions=False`): no sessionq headers or
trailers, and tags with their own snapshot URI."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any
from uuid import UUID

import grpc
import psycopg
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from conftest import apply_agent

from sessionq._pb.kagent.api.v1alpha1 import (
    checkpoints_pb2,
    checkpoints_pb2_grpc,
    common_pb2,
    runtime_pb2,
    sessions_pb2,
    sessions_pb2_grpc,
)
from sessionq.db.migrations.sqlfiles import upgrade_file

TENANT = "kagent/my-first-agent"


pytestmark = pytest.mark.real_substrate  # the sim fixture: the adapter to a served simulator playing a real Substrate


async def send(api: Any, text: str, context_id: str) -> a2a_pb2.Task:
    msg = a2a_pb2.Message(message_id=f"m-{uuid.uuid4()}", role=a2a_pb2.ROLE_USER, context_id=context_id,
                          parts=[a2a_pb2.Part(text=text)])
    task = (await a2a_pb2_grpc.A2AServiceStub(api.channel).SendMessage(
        a2a_pb2.SendMessageRequest(tenant=TENANT, message=msg), metadata=api.md(), timeout=60)).task
    assert task.status.state == a2a_pb2.TASK_STATE_COMPLETED, task.status
    return task


def answer(task: a2a_pb2.Task) -> str:
    return " ".join(p.text for p in task.status.message.parts)


async def checkpoint(api: Any, sid: str, head: str, rid: str) -> checkpoints_pb2.Checkpoint:
    stub = checkpoints_pb2_grpc.CheckpointServiceStub(api.channel)
    deadline = time.monotonic() + 90
    while True:  # the snapshot may still be pending: retry the same request, as documented
        try:
            cp = (await stub.CreateCheckpoint(checkpoints_pb2.CreateCheckpointRequest(
                session_id=sid, expected_head_task_id=head, request_id=rid), metadata=api.md(), timeout=30)).checkpoint
            break
        except grpc.aio.AioRpcError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
    while cp.state == checkpoints_pb2.CHECKPOINT_STATE_CREATING:
        assert time.monotonic() < deadline, "the checkpoint never became ready"
        await asyncio.sleep(0.2)
        cp = (await stub.GetCheckpoint(checkpoints_pb2.GetCheckpointRequest(checkpoint_id=cp.id),
                                       metadata=api.md(), timeout=10)).checkpoint
    assert cp.state == checkpoints_pb2.CHECKPOINT_STATE_READY, cp
    return cp


async def fork(api: Any, cp_id: str, rid: str) -> Any:
    stub = checkpoints_pb2_grpc.CheckpointServiceStub(api.channel)
    return (await stub.ForkSession(checkpoints_pb2.ForkSessionRequest(checkpoint_id=cp_id, request_id=rid),
                                   metadata=api.md(), timeout=60)).session


async def conversation(api: Any, store: Any, sim: Any) -> tuple[str, a2a_pb2.Task]:
    await apply_agent(store, sim)
    r = await sessions_pb2_grpc.SessionServiceStub(api.channel).CreateSession(
        sessions_pb2.CreateSessionRequest(request_id=f"s-{uuid.uuid4()}", agent=common_pb2.ResourceReference(
            namespace="kagent", name="my-first-agent")), metadata=api.md(), timeout=30)
    sid = str(r.session.id)
    await send(api, "What is 2+2?", sid)
    t2 = await send(api, "Summarize this conversation so far.", sid)
    return sid, t2


@pytest.mark.clause("FORK-1")
@pytest.mark.clause("FORK-4")
async def test_a_fork_checks_the_tags_own_snapshot_copy(api: Any, store: Any, sim: Any) -> None:
    sid, t2 = await conversation(api, store, sim)
    cp = await checkpoint(api, sid, t2.id, "cp-real")
    row = await store.checkpoint_by_id(UUID(cp.id))
    tag = await sim.get_tag(row.actor_atespace, row.tag_name)  # through the adapter
    # the tag holds its own copy: another URI than the Actor's snapshot, recorded as the tag's
    assert tag.snapshot_generation == row.snapshot_generation
    assert tag.snapshot_uri != row.snapshot_uri
    assert row.tag_snapshot_uri == tag.snapshot_uri
    f = await fork(api, cp.id, "fork-real")
    assert f.state == runtime_pb2.RUNTIME_STATE_READY, f
    # the fork answers from the pinned turns
    first = await send(api, "What did I ask you first?", f.id)
    assert "What is 2+2?" in answer(first)


async def test_an_old_row_without_the_tags_uri_is_backfilled_and_forks(
    api: Any, store: Any, sim: Any, database_url: str
) -> None:
    """A checkpoint made before the column (tag_snapshot_uri NULL): migration 0003 backfills it with
    the recorded URI, and the row reads as before: a tag whose copy has another URI is refused as
    a mismatch (FAILED_PRECONDITION), never forked from."""
    sid, t2 = await conversation(api, store, sim)
    cp = await checkpoint(api, sid, t2.id, "cp-old")
    async with store.pool.connection() as conn:
        await conn.execute("UPDATE sessionq.checkpoints SET tag_snapshot_uri = NULL WHERE id = %s", (UUID(cp.id),))
    # the upgrade file, applied again as 0003 applies it to a database made before it
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(upgrade_file("0003_checkpoint_tag_snapshot"))
    row = await store.checkpoint_by_id(UUID(cp.id))
    assert row.tag_snapshot_uri == row.snapshot_uri  # backfilled: the recorded URI
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await fork(api, cp.id, "fork-old")  # the real tag's copy has its own URI
    assert exc.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "holds another snapshot copy" in (exc.value.details() or "")
    assert await sim.mutation_count(method="create_actor") == 1, "nothing forked from a mismatching tag"
