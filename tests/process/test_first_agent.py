"""my-first-agent (examples/agents/first_agent.py, an a2a-sdk agent run by sessionq.agentkit) on
the process runtime, through the real API and worker: turns on real processes, memory in a file of
the durable directory across suspend and resume, a checkpoint's fork answering from its files, a
process killed with SIGKILL mid-turn, the tutorial's states (TUT-2, TUT-3, TUT-5)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import tarfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import grpc
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc

from sessionq._pb.kagent.api.v1alpha1 import (
    checkpoints_pb2,
    checkpoints_pb2_grpc,
    common_pb2,
    runtime_pb2,
    sessions_pb2,
    sessions_pb2_grpc,
)
from sessionq.db.store import Store
from sessionq.domain.agents import compile_egress, parse_spec, prepare_revision
from sessionq.runtime.base import ActorState
from sessionq.runtime.process import ProcessConfig, ProcessSubstrate
from tests.conftest import running_worker
from tests.process.conftest import alive, processes_with, wait_for

REPO = Path(__file__).resolve().parents[2]
FIRST_AGENT = REPO / "examples" / "agents" / "first_agent.py"
ECHO_AGENT = Path(__file__).with_name("echo_agent.py")
SLOW_AGENT = Path(__file__).with_name("slow_agent.py")
VENV_AGENT = Path(__file__).with_name("venv_agent.py")
NS = "kagent"


@dataclass
class ProcessApi:
    channel: grpc.aio.Channel
    runtime: ProcessSubstrate
    store: Store

    def md(self, user: str = "alice") -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {user}-token")]


@pytest.fixture
async def papi(settings: Any, store: Store, database_url: str, tmp_path: Path) -> AsyncIterator[ProcessApi]:
    from sessionq.api.server import ApiServer

    runtime = ProcessSubstrate(database_url, ProcessConfig(root=tmp_path / "runtime", slots=8, stop_grace=3.0))
    await runtime.open()
    try:
        async with running_worker(settings, database_url, store, runtime):
            server = ApiServer(settings, store, address="127.0.0.1:0", runtime=runtime)
            await server.start()
            runtime.taskstore_address = f"127.0.0.1:{server.port}"
            channel = grpc.aio.insecure_channel(runtime.taskstore_address)
            for raw in (
                {"name": "my-first-agent", "command": [sys.executable, str(FIRST_AGENT)]},
                {"name": "echo", "command": [sys.executable], "args": [str(ECHO_AGENT)]},
                {"name": "echo-message", "command": [sys.executable], "args": [str(ECHO_AGENT), "message"]},
                {"name": "slow", "command": [sys.executable, str(SLOW_AGENT)]},
                {"name": "venv", "command": [sys.executable, str(VENV_AGENT)]},
            ):
                spec = parse_spec(raw)
                await store.apply_agent(
                    NS, spec.name, spec.to_json(), spec.spec_hash(), spec.image, compile_egress(spec), "alice"
                )
                await prepare_revision(store, runtime, (await store.get_agent(NS, spec.name)).desired_revision_id)
            try:
                yield ProcessApi(channel, runtime, store)
            finally:
                await channel.close()
                await server.stop(0)
    finally:
        await runtime.close()
    assert processes_with(str(tmp_path / "runtime")) == [], "no agent process outlives the runtime"


async def new_session(api: ProcessApi, request_id: str = "s-1", agent: str = "my-first-agent") -> str:
    r = await sessions_pb2_grpc.SessionServiceStub(api.channel).CreateSession(
        sessions_pb2.CreateSessionRequest(
            request_id=request_id, agent=common_pb2.ResourceReference(namespace=NS, name=agent)
        ),
        metadata=api.md(),
        timeout=30,
    )
    return r.session.id


async def send(
    api: ProcessApi, text: str, context_id: str, timeout: float = 60, agent: str = "my-first-agent"
) -> a2a_pb2.Task:
    msg = a2a_pb2.Message(
        message_id=f"m-{time.monotonic_ns()}",
        role=a2a_pb2.ROLE_USER,
        context_id=context_id,
        parts=[a2a_pb2.Part(text=text)],
    )
    r = await a2a_pb2_grpc.A2AServiceStub(api.channel).SendMessage(
        a2a_pb2.SendMessageRequest(tenant=f"kagent/{agent}", message=msg), metadata=api.md(), timeout=timeout
    )
    return r.task


def answer(task: a2a_pb2.Task) -> str:
    return " ".join(p.text for p in task.status.message.parts)


async def actor_of(api: ProcessApi, sid: str) -> Any:
    session = await api.store.session_by_id(UUID(sid))
    assert session is not None
    return await api.runtime.get_actor(session.actor_atespace, session.actor_name)


async def suspended(api: ProcessApi, sid: str) -> Any:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        actor = await actor_of(api, sid)
        if actor.state == ActorState.SUSPENDED:
            return actor
        await asyncio.sleep(0.05)
    raise AssertionError(f"the actor stayed {actor.state}")


async def reply(api: ProcessApi, task: a2a_pb2.Task, text: str) -> a2a_pb2.Task:
    """The user's answer to `task`, which waits for input (a message naming its task id)."""
    msg = a2a_pb2.Message(message_id=f"answer-{time.monotonic_ns()}", role=a2a_pb2.ROLE_USER,
                          context_id=task.context_id, task_id=task.id, parts=[a2a_pb2.Part(text=text)])
    r = await a2a_pb2_grpc.A2AServiceStub(api.channel).SendMessage(
        a2a_pb2.SendMessageRequest(tenant=f"{NS}/my-first-agent", message=msg), metadata=api.md(), timeout=60)
    return r.task


def answered_once(task: a2a_pb2.Task, text: str) -> bool:
    return [m.parts[0].text for m in task.history if m.role == a2a_pb2.ROLE_USER].count(text) == 1


def memory_in(actor: Any) -> str:
    path = Path(actor.snapshots[-1].uri.removeprefix("file://"))
    with tarfile.open(path) as tar:
        member = tar.extractfile("memory.json")
        assert member is not None
        return member.read().decode()


@pytest.mark.clause("TUT-2")
@pytest.mark.clause("TUT-3")
@pytest.mark.clause("TUT-5")
async def test_turns_on_real_processes_memory_in_files_and_a_fork_from_the_checkpoints_files(papi: ProcessApi) -> None:
    sid = await new_session(papi)
    t1 = await send(papi, "What is 2+2?", sid)
    assert t1.status.state == a2a_pb2.TASK_STATE_COMPLETED and answer(t1) == "2+2 = 4"
    first = await suspended(papi, sid)
    assert first.worker is None and papi.runtime.pid_of(first.uid) is None, "between turns: no process"
    assert '"What is 2+2?"' in memory_in(first), "the agent's memory is a file of its snapshot"

    t2 = await send(papi, "Remember the number 7.", sid)
    assert "remember the number 7" in answer(t2)
    second = await suspended(papi, sid)
    assert second.uid == first.uid and second.version > first.version
    recall = await send(papi, "What number did I ask you to remember?", sid)
    assert "7" in answer(recall), "the memory survived suspend and resume through the snapshot"
    session = await papi.store.session_by_id(UUID(sid))
    assert session is not None and session.state.value == "READY"
    await suspended(papi, sid)

    stub = checkpoints_pb2_grpc.CheckpointServiceStub(papi.channel)
    deadline = time.monotonic() + 30
    while True:
        try:
            cp = (
                await stub.CreateCheckpoint(
                    checkpoints_pb2.CreateCheckpointRequest(
                        session_id=sid, expected_head_task_id=recall.id, request_id="cp-1"
                    ),
                    metadata=papi.md(),
                    timeout=30,
                )
            ).checkpoint
            break
        except grpc.aio.AioRpcError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)
    # the source learns something new after the checkpoint
    await send(papi, "Remember the number 9.", sid)
    fork = (
        await stub.ForkSession(
            checkpoints_pb2.ForkSessionRequest(checkpoint_id=cp.id, request_id="f-1"), metadata=papi.md(), timeout=30
        )
    ).session
    assert fork.state == runtime_pb2.RUNTIME_STATE_READY
    asked = await send(papi, "What did I ask you first?", fork.id)
    assert "What is 2+2?" in answer(asked), answer(asked)
    recalled = await send(papi, "What number did I ask you to remember?", fork.id)
    assert "7" in answer(recalled) and "9" not in answer(recalled), "the fork answers from the checkpoint's files"
    fork_actor = await suspended(papi, fork.id)
    assert fork_actor.uid != first.uid


async def test_a_process_killed_mid_turn_fails_the_turn_and_the_actor_recovers(papi: ProcessApi) -> None:
    sid = await new_session(papi)
    await send(papi, "Remember the number 5.", sid)
    await suspended(papi, sid)
    slow = asyncio.create_task(send(papi, "[slow:30] What is 3+3?", sid))
    pid = None
    deadline = time.monotonic() + 30
    while pid is None and time.monotonic() < deadline:
        actor = await actor_of(papi, sid)
        if actor.state == ActorState.RUNNING:
            pid = papi.runtime.pid_of(actor.uid)
        await asyncio.sleep(0.05)
    assert pid is not None

    async def tasks() -> list[Any]:
        async with papi.store.pool.connection() as conn:
            return await (
                await conn.execute("SELECT task FROM sessionq.tasks WHERE session_id = %s ORDER BY seq", (sid,))
            ).fetchall()

    deadline = time.monotonic() + 30
    while len(await tasks()) < 2:  # the agent has stored the turn's task: it is under way (sleeping in it)
        assert time.monotonic() < deadline, "the agent never stored the turn's task"
        await asyncio.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    failed = await slow
    assert failed.status.state == a2a_pb2.TASK_STATE_FAILED
    assert "the agent failed while running the turn" in answer(failed)
    # the operator's view of the Actor says what happened to its process
    actor = await actor_of(papi, sid)
    assert actor.state == ActorState.CRASHED and actor.crash_exit_status == -signal.SIGKILL, actor
    assert (actor.crash_message or "").startswith("the process was killed by SIGKILL"), actor.crash_message
    stored = (await tasks())[-1]["task"]
    assert stored["id"] == failed.id and stored["status"]["state"] == "TASK_STATE_FAILED"
    await wait_for(lambda: not alive(pid), what="the process to be gone")
    actor = await actor_of(papi, sid)
    assert actor.state in (ActorState.CRASHED, ActorState.SUSPENDED)
    again = await send(papi, "What number did I ask you to remember?", sid)
    assert again.status.state == a2a_pb2.TASK_STATE_COMPLETED and "5" in answer(again), answer(again)


async def running_pid(api: ProcessApi, sid: str) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        actor = await actor_of(api, sid)
        if actor.state == ActorState.RUNNING and (pid := api.runtime.pid_of(actor.uid)) is not None:
            return pid
        await asyncio.sleep(0.05)
    raise AssertionError("the actor never ran")


async def stored_tasks(api: ProcessApi, sid: str) -> list[Any]:
    async with api.store.pool.connection() as conn:
        cur = await conn.execute("SELECT id, state FROM sessionq.tasks WHERE session_id = %s ORDER BY seq", (sid,))
        return list(await cur.fetchall())


async def test_a2a_cancel_task_stops_the_agents_turn_mid_way(papi: ProcessApi) -> None:
    """A real mid-turn cancel: the gateway's A2A CancelTask while the agent's process is in its
    turn (a minute's work). The task ends CANCELED at once, and the process is told: A2A
    CancelTask to its endpoint, where the SDK calls the executor's `cancel` and cancels its
    `execute` (the agent notes both in its durable directory, so the snapshot shows them). The
    process is not killed for it (the Actor is suspended, not crashed), and the next turn runs."""
    sid = await new_session(papi, "s-slow", "slow")
    slow = asyncio.create_task(send(papi, "work", sid, timeout=120, agent="slow"))
    pid = await running_pid(papi, sid)
    deadline = time.monotonic() + 30
    while not (rows := await stored_tasks(papi, sid)):  # the agent has created the turn's task
        assert time.monotonic() < deadline, "the agent never stored the turn's task"
        await asyncio.sleep(0.05)
    task_id = rows[-1]["id"]
    started = time.monotonic()
    cancelled = await a2a_pb2_grpc.A2AServiceStub(papi.channel).CancelTask(
        a2a_pb2.CancelTaskRequest(tenant=f"{NS}/slow", id=task_id), metadata=papi.md(), timeout=30
    )
    assert cancelled.status.state == a2a_pb2.TASK_STATE_CANCELED, cancelled.status
    ended = await asyncio.wait_for(slow, 45)
    assert time.monotonic() - started < 30, "the turn ran on to its end instead of being cancelled"
    assert ended.id == task_id and ended.status.state == a2a_pb2.TASK_STATE_CANCELED, ended.status
    assert (await stored_tasks(papi, sid))[-1]["state"] == "TASK_STATE_CANCELED"
    actor = await suspended(papi, sid)
    assert actor.crash_message is None and not alive(pid)
    with tarfile.open(Path(actor.snapshots[-1].uri.removeprefix("file://"))) as tar:
        names = set(tar.getnames())
        told = {n: tar.extractfile(n).read().decode().split() for n in names if n.endswith(".txt")}  # type: ignore[union-attr]
    assert told.get("cancelled.txt") == [task_id], told  # the SDK called the executor's cancel
    assert told.get("interrupted.txt") == [task_id], told  # and cancelled its execute
    assert "finished.txt" not in told, told
    again = asyncio.create_task(send(papi, "work", sid, timeout=120, agent="slow"))
    await running_pid(papi, sid)  # the next turn starts a process again
    again.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await again


@pytest.mark.parametrize("agent", ["echo", "echo-message"])
async def test_the_docs_agent_runs_and_a_bare_message_answer_becomes_a_completed_task(
    papi: ProcessApi, agent: str
) -> None:
    sid = await new_session(papi, f"s-{agent}", agent)
    first = await send(papi, "hello", sid, agent=agent)
    assert first.status.state == a2a_pb2.TASK_STATE_COMPLETED and answer(first) == "noted 1"
    await suspended(papi, sid)
    second = await send(papi, "again", sid, agent=agent)
    assert answer(second) == "noted 2", "the notes file survived suspend and resume"
    assert second.id != first.id and second.history[0].role == a2a_pb2.ROLE_USER


async def test_an_answer_after_the_suspend_completes_in_a_new_process(papi: ProcessApi) -> None:
    """A task waiting for input, answered once its Actor was suspended: the resumed process (a new
    a2a-sdk handler, which reads the task from sessionq) continues it to COMPLETED."""
    sid = await new_session(papi)
    asked = await send(papi, "Book a flight [input-required]", sid)
    assert asked.status.state == a2a_pb2.TASK_STATE_INPUT_REQUIRED
    before = await suspended(papi, sid)
    done = await reply(papi, asked, "to Paris")
    assert done.status.state == a2a_pb2.TASK_STATE_COMPLETED, done.status
    assert answer(done) == "Thanks, got: to Paris" and answered_once(done, "to Paris")
    after = await suspended(papi, sid)
    assert len(after.snapshots) == len(before.snapshots) + 1
