"""Time travel on the process runtime with a real agent process whose memory is a file in its
durable directory (echo_agent.py notes every message): a fork at a past turn starts from that
turn's files, a checkpoint at a past turn outlives its source, and the runtime's tags are exactly
the pins the database holds (TT-*)."""

from __future__ import annotations

import asyncio
import time

import pytest

from sessionq._pb.kagent.api.v1alpha1 import checkpoints_pb2, checkpoints_pb2_grpc, sessions_pb2, sessions_pb2_grpc
from sessionq._pb.sessionq.v1 import turns_pb2, turns_pb2_grpc
from tests.process.test_first_agent import ProcessApi, actor_of, answer, new_session, papi, send

__all__ = ["papi"]  # the fixture, shared with test_first_agent.py


async def _pinned(api: ProcessApi, sid: str, task_id: str) -> None:
    stub = turns_pb2_grpc.TurnServiceStub(api.channel)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        listed = (await stub.ListTurns(turns_pb2.ListTurnsRequest(session_id=sid), metadata=api.md(), timeout=10)).turns
        if any(t.task_id == task_id and t.checkpointable for t in listed):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"turn {task_id} was not pinned")


async def _tags(api: ProcessApi) -> set[str]:
    async with api.store.pool.connection() as conn:
        rows = await (await conn.execute("SELECT name FROM sessionq_process.tags")).fetchall()
    return {r["name"] for r in rows}


async def _held(api: ProcessApi) -> set[str]:
    """The tags the database says are held: turn pins (any state but gone) and checkpoints."""
    async with api.store.pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT tag_name FROM sessionq.turn_snapshots UNION SELECT tag_name FROM sessionq.checkpoints")).fetchall()
    return {r["tag_name"] for r in rows}


@pytest.mark.clause("TT-4")
@pytest.mark.clause("TT-3")
@pytest.mark.timeout(240)
async def test_a_fork_at_turn_one_answers_from_turn_ones_files(papi: ProcessApi) -> None:
    sid = await new_session(papi, "tt-1", agent="echo")
    tasks = []
    for n, text in enumerate(("one", "two", "three"), start=1):
        task = await send(papi, text, sid, agent="echo")
        assert answer(task) == f"noted {n}"
        tasks.append(task)
        await _pinned(papi, sid, task.id)
    assert {t for t in await _tags(papi) if t.startswith("turn-")} == await _held(papi)

    turns = turns_pb2_grpc.TurnServiceStub(papi.channel)
    fork = (await turns.ForkAtTurn(turns_pb2.ForkAtTurnRequest(session_id=sid, task_id=tasks[0].id, request_id="f1"),
                                   metadata=papi.md(), timeout=60)).session
    # the fork's agent process reads turn 1's notes (one line), not turn 2's or 3's
    assert answer(await send(papi, "after one", fork.id, agent="echo")) == "noted 2"
    fork_actor = await actor_of(papi, fork.id)
    notes = papi.runtime.data_dir(fork_actor.uid) / "notes.txt"
    assert notes.read_text().splitlines() == ["one", "after one"]
    assert answer(await send(papi, "four", sid, agent="echo")) == "noted 4"  # the source goes on

    # a checkpoint at turn 2 outlives the source's deletion, and forks later from turn 2's files
    cp = (await turns.CreateTurnCheckpoint(
        turns_pb2.CreateTurnCheckpointRequest(session_id=sid, task_id=tasks[1].id, request_id="cp2"),
        metadata=papi.md(), timeout=30)).checkpoint
    assert cp.state == checkpoints_pb2.CHECKPOINT_STATE_READY
    await sessions_pb2_grpc.SessionServiceStub(papi.channel).DeleteSession(
        sessions_pb2.DeleteSessionRequest(session_id=sid), metadata=papi.md(), timeout=60)
    deadline = time.monotonic() + 30
    while await _tags(papi) != await _held(papi) or any(t.startswith("turn-") for t in await _turn_rows(papi, sid)):
        assert time.monotonic() < deadline, (await _tags(papi), await _held(papi))
        await asyncio.sleep(0.1)
    later = (await checkpoints_pb2_grpc.CheckpointServiceStub(papi.channel).ForkSession(
        checkpoints_pb2.ForkSessionRequest(checkpoint_id=cp.id, request_id="f2"), metadata=papi.md(), timeout=60)).session
    assert answer(await send(papi, "after two", later.id, agent="echo")) == "noted 3"


async def _turn_rows(api: ProcessApi, sid: str) -> list[str]:
    async with api.store.pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT tag_name FROM sessionq.turn_snapshots WHERE session_id = %s", (sid,))).fetchall()
    return [r["tag_name"] for r in rows]
