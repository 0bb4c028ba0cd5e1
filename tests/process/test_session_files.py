"""A Session's files on the process runtime, through the real API and worker: a virtual environment
the agent makes in its durable directory runs again after suspend and resume and in a fork; a
snapshot that cannot be restored fails the turn with why, and the Session shows it until a resume
succeeds."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from uuid import UUID

import grpc
import pytest
from a2a.types import a2a_pb2

from sessionq._pb.kagent.api.v1alpha1 import checkpoints_pb2, checkpoints_pb2_grpc, sessions_pb2, sessions_pb2_grpc
from sessionq.runtime.process.sandbox import Isolation
from tests.process.test_archive import _crafted, _tar
from tests.process.test_first_agent import ProcessApi, actor_of, answer, new_session, papi, send, suspended

__all__ = ["papi"]  # the fixture, shared with test_first_agent.py


def _data_dir(api: ProcessApi, uid: str) -> Path:
    """The durable directory as the Actor sees it: /data in a sandbox, else its path."""
    if api.runtime.isolation != Isolation.NONE:
        return Path("/data")
    return api.runtime.data_dir(uid)


async def _checkpoint(api: ProcessApi, sid: str, head: str) -> str:
    stub = checkpoints_pb2_grpc.CheckpointServiceStub(api.channel)
    deadline = time.monotonic() + 30
    while True:
        try:
            return (await stub.CreateCheckpoint(
                checkpoints_pb2.CreateCheckpointRequest(session_id=sid, expected_head_task_id=head, request_id="cp-v"),
                metadata=api.md(), timeout=30)).checkpoint.id
        except grpc.aio.AioRpcError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


@pytest.mark.timeout(240)
async def test_a_venv_the_agent_makes_runs_after_suspend_resume_and_in_a_fork(papi: ProcessApi) -> None:
    sid = await new_session(papi, "venv-1", agent="venv")
    first = await send(papi, "make a venv", sid, timeout=120, agent="venv")
    actor = await actor_of(papi, sid)
    assert answer(first) == f"prefix {_data_dir(papi, actor.uid) / 'venv'}", answer(first)
    await suspended(papi, sid)
    again = await send(papi, "still there?", sid, timeout=120, agent="venv")
    assert answer(again) == answer(first), "the venv's interpreter runs after its snapshot was restored"
    await suspended(papi, sid)

    checkpoint = await _checkpoint(papi, sid, again.id)
    fork = (await checkpoints_pb2_grpc.CheckpointServiceStub(papi.channel).ForkSession(
        checkpoints_pb2.ForkSessionRequest(checkpoint_id=checkpoint, request_id="f-v"),
        metadata=papi.md(), timeout=30)).session
    forked = await send(papi, "and in the fork?", fork.id, timeout=120, agent="venv")
    fork_actor = await actor_of(papi, fork.id)
    assert fork_actor.uid != actor.uid
    assert answer(forked) == f"prefix {_data_dir(papi, fork_actor.uid) / 'venv'}", answer(forked)


@pytest.mark.timeout(240)
async def test_a_snapshot_that_cannot_be_restored_fails_the_turn_and_the_session_shows_why(
    papi: ProcessApi, tmp_path: Path
) -> None:
    sid = await new_session(papi, "restore-1", agent="echo")
    await send(papi, "one", sid, agent="echo")
    actor = await suspended(papi, sid)
    snapshot = Path(actor.snapshots[-1].uri.removeprefix("file://"))
    good = snapshot.read_bytes()  # noqa: ASYNC240
    outside = tmp_path / "outside"
    outside.mkdir()
    snapshot.write_bytes(_tar(_crafted(outside)["through a link out"]))  # noqa: ASYNC240

    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await send(papi, "two", sid, agent="echo")
    details = failed.value.details() or ""
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "the snapshot could not be restored: the member 'lnk/pwned' is below 'lnk'" in details, details
    stub = sessions_pb2_grpc.SessionServiceStub(papi.channel)
    session = (await stub.GetSession(sessions_pb2.GetSessionRequest(session_id=sid), metadata=papi.md(), timeout=10)).session
    assert session.failure.reason == "RestoreFailed", session
    assert session.failure.message.startswith("the snapshot could not be restored: the member 'lnk/pwned'")
    assert str(papi.runtime.root) not in session.failure.message and str(outside) not in session.failure.message
    assert list(outside.iterdir()) == [], "nothing was written through the link"
    listed = await stub.ListSessions(sessions_pb2.ListSessionsRequest(), metadata=papi.md(), timeout=10)
    assert [s.failure.reason for s in listed.sessions if s.id == sid] == ["RestoreFailed"]

    # once the snapshot can be restored again, the next turn runs and the Session no longer shows it
    snapshot.write_bytes(good)  # noqa: ASYNC240
    done = await send(papi, "three", sid, agent="echo")
    assert answer(done) == "noted 2", answer(done)
    session = (await stub.GetSession(sessions_pb2.GetSessionRequest(session_id=sid), metadata=papi.md(), timeout=10)).session
    assert not session.HasField("failure"), session.failure
    row = await papi.store.session_by_id(UUID(sid))
    assert row is not None and row.failure_reason is None


@pytest.mark.clause("RT-5")
@pytest.mark.timeout(240)
async def test_my_first_agent_runs_a_command_whose_files_survive_a_suspend_and_are_in_a_fork(papi: ProcessApi) -> None:
    """The tutorial's `run:` turns: a command's output file in the workspace after a suspend, and in
    a checkpoint's fork; the process it left running is not (RT-8)."""
    sid = await new_session(papi, "run-1")
    wrote = await send(papi, "run: echo 'made by a command' > note.txt; sleep 600 & cat note.txt", sid, timeout=120)
    assert answer(wrote) == "made by a command\n", answer(wrote)
    await suspended(papi, sid)
    again = await send(papi, "run: cat note.txt", sid, timeout=120)
    assert answer(again) == "made by a command\n", answer(again)
    await suspended(papi, sid)
    checkpoint = await _checkpoint(papi, sid, again.id)
    fork = (await checkpoints_pb2_grpc.CheckpointServiceStub(papi.channel).ForkSession(
        checkpoints_pb2.ForkSessionRequest(checkpoint_id=checkpoint, request_id="f-run"),
        metadata=papi.md(), timeout=30)).session
    forked = await send(papi, "run: cat note.txt; pwd", fork.id, timeout=120)
    workspace = _data_dir(papi, (await actor_of(papi, fork.id)).uid) / "workspace"
    assert answer(forked) == f"made by a command\n{workspace}\n", answer(forked)
    refused = await send(papi, "run:", fork.id, timeout=120)
    assert refused.status.state == a2a_pb2.TASK_STATE_FAILED and "cannot run that" in answer(refused), refused
