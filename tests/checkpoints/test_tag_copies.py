"""A tag counts once its copy of the snapshot is COMPLETED (SNAP-1): a real Substrate answers
CreateTag while the tag's copy is still IN_PROGRESS (no URI yet). Turn pins and checkpoints wait
for the copy (looking at the tag again) and are never recorded PINNED or READY before it is done;
a copy that never completes leaves the turn not retained and its tag deleted.

The runtime here is the simulator (in process and over the ateapi adapter) whose tag copies take
`looks` answers to complete: each CreateTag and GetTag answer before that reports the tag
IN_PROGRESS with no URI, as a Substrate still copying would."""

import dataclasses
from typing import Any

import pytest
from conftest import apply_agent, make_settings, simulator
from test_turns import RETAINED, eventually, list_turns, new_session, runtime_tags, send

from sessionq._pb.kagent.api.v1alpha1 import checkpoints_pb2, checkpoints_pb2_grpc
from sessionq.domain import turn_snapshots
from sessionq.runtime.base import SnapshotStatus, Tag

KEEP = 3


class SlowTagCopies:
    """The simulator, its tags' copies completing only at the `looks`-th answer about them (never,
    with None). At each IN_PROGRESS answer it notes what sessionq has recorded for the tag."""

    def __init__(self, inner: Any, store: Any) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_store", store)
        object.__setattr__(self, "looks", 3)
        object.__setattr__(self, "answers", {})  # tag name -> answers given
        object.__setattr__(self, "recorded_while_copying", [])  # (tag, pin state, checkpoint state)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("looks",):
            object.__setattr__(self, name, value)
        else:
            setattr(self._inner, name, value)

    async def create_tag(self, atespace: str, name: str, actor: str, uid: str) -> Tag:
        return await self._copying(await self._inner.create_tag(atespace, name, actor, uid))

    async def get_tag(self, atespace: str, name: str) -> Tag:
        return await self._copying(await self._inner.get_tag(atespace, name))

    async def _copying(self, tag: Tag) -> Tag:
        n = self.answers.get(tag.name, 0) + 1
        self.answers[tag.name] = n
        if self.looks is not None and n >= self.looks:
            return tag
        async with self._store.pool.connection() as conn:
            pin = await (await conn.execute(
                "SELECT state FROM sessionq.turn_snapshots WHERE tag_name = %s", (tag.name,))).fetchone()
            cp = await (await conn.execute(
                "SELECT state FROM sessionq.checkpoints WHERE tag_name = %s", (tag.name,))).fetchone()
        self.recorded_while_copying.append((tag.name, pin and pin["state"], cp and cp["state"]))
        return dataclasses.replace(tag, status=SnapshotStatus.IN_PROGRESS, snapshot_uri="")


@pytest.fixture
def settings():
    return make_settings(**{"sessions.turnSnapshots": KEEP})


@pytest.fixture
async def sim(database_url, substrate_kind, store):
    async with simulator(database_url, wire=substrate_kind == "wire") as s:
        yield SlowTagCopies(s, store)


async def pin_rows(store, sid):
    async with store.pool.connection() as conn:
        return await (await conn.execute(
            "SELECT tag_name, actor_atespace, state, tag_snapshot_uri FROM sessionq.turn_snapshots"
            " WHERE session_id = %s", (sid,))).fetchall()


@pytest.mark.clause("SNAP-1")
@pytest.mark.clause("TT-2")
async def test_a_turn_pin_is_pinned_only_once_its_tag_copy_is_completed(api, store, sim):
    await apply_agent(store, sim)
    sid = await new_session(api)
    await send(api, "Remember the number 11.", sid)
    turns = await eventually(lambda: _retained(api, sid))
    assert turns, "the turn was not retained once its tag's copy completed"
    [pin] = await pin_rows(store, sid)
    assert pin["state"] == "PINNED" and sim.answers[pin["tag_name"]] == sim.looks  # it looked until COMPLETED
    copying = [r for r in sim.recorded_while_copying if r[0] == pin["tag_name"]]
    assert len(copying) == sim.looks - 1 and all(state == "PINNING" for _, state, _ in copying), copying
    tag = await sim._inner.get_tag(pin["actor_atespace"], pin["tag_name"])
    assert pin["tag_snapshot_uri"] == tag.snapshot_uri != ""  # the completed copy's URI, not the empty one


@pytest.mark.clause("SNAP-1")
async def test_a_checkpoint_is_ready_only_once_its_tag_copy_is_completed(api, store, sim):
    await apply_agent(store, sim)
    sid = await new_session(api)
    t = await send(api, "Remember the number 11.", sid)
    assert await eventually(lambda: _retained(api, sid))
    cp = (await checkpoints_pb2_grpc.CheckpointServiceStub(api.channel).CreateCheckpoint(
        checkpoints_pb2.CreateCheckpointRequest(session_id=sid, expected_head_task_id=t.id, request_id="cp-1"),
        metadata=api.md(), timeout=20)).checkpoint
    copying = [r for r in sim.recorded_while_copying if r[0].startswith("checkpoint-")]
    assert len(copying) == sim.looks - 1 and all(state == "CREATING" for _, _, state in copying), copying
    async with store.pool.connection() as conn:
        row = await (await conn.execute("SELECT state, tag_snapshot_uri FROM sessionq.checkpoints WHERE id = %s",
                                        (cp.id,))).fetchone()
    assert row["state"] == "READY" and row["tag_snapshot_uri"]


@pytest.mark.clause("SNAP-1")
@pytest.mark.clause("TT-2")
async def test_a_tag_copy_that_never_completes_leaves_the_turn_not_retained(api, store, sim, monkeypatch):
    monkeypatch.setattr(turn_snapshots, "PIN_BOUND", 0.5)
    sim.looks = None  # the copy never completes
    await apply_agent(store, sim)
    sid = await new_session(api)
    await send(api, "Remember the number 11.", sid)

    async def released():
        return not await pin_rows(store, sid) and not await runtime_tags(store) and sim.answers

    assert await eventually(released), "the pin of an incomplete copy was not released with its tag"
    assert all(state == "PINNING" for _, state, _ in sim.recorded_while_copying)
    [turn] = await list_turns(api, sid)
    assert turn.checkpointability != RETAINED


async def _retained(api, sid):
    ts = await list_turns(api, sid)
    return ts if ts and ts[-1].checkpointability == RETAINED else None
