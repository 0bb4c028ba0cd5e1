"""SimulatedSubstrate.invoke: the simulated agent runs a turn inside a RUNNING Actor and reports it
through a TaskStoreService. The task store here is a small in-memory servicer written in this file
(a real grpc.aio server on 127.0.0.1); the simulator uses the real test database."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from a2a.types import a2a_pb2
from google.protobuf import json_format
from google.protobuf.message import Message as ProtoMessage

from sessionq._pb.kagent.api.v1alpha1 import task_store_pb2, task_store_pb2_grpc
from sessionq.runtime.base import ActorState, Code, InvokeRequest, SubstrateError
from sessionq.runtime.simulator import WORKLOAD_TOKEN_ENV, SimulatedSubstrate
from sessionq.runtime.taskstore_client import TaskStoreClient, TaskStoreError
from tests.ports import watched_port

NS = "kagent"
TEMPLATE = f"{NS}/rev-1"
TOKEN = "workload-token-1"


# ---------------------------------------------------------------------------------------------
# an in-memory TaskStoreService


def _payload(request: ProtoMessage) -> bytes:
    return request.SerializeToString(deterministic=True)


class FakeTaskStore(task_store_pb2_grpc.TaskStoreServiceServicer):
    """Records every authenticated call; per-task versions 1, 2, 3, ...; a retried CreateTask or
    UpdateTask with the same payload returns the committed version (as the real server does)."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.calls: list[tuple[str, Any]] = []
        self.tasks: dict[str, tuple[a2a_pb2.Task, int]] = {}
        self.created: dict[str, tuple[bytes, int]] = {}
        self.updated: dict[tuple[str, int], tuple[bytes, int]] = {}
        self.settled: dict[str, int] = {}
        self.lose_update_responses = 0  # the next N UpdateTask calls take effect, then fail UNAVAILABLE

    async def _auth(self, context: grpc.aio.ServicerContext) -> None:
        metadata = dict(context.invocation_metadata() or ())
        if metadata.get("authorization") != f"Bearer {self.token}":
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "not this session's workload")

    def methods(self) -> list[str]:
        return [m for m, _ in self.calls]

    def requests(self, method: str) -> list[Any]:
        return [r for m, r in self.calls if m == method]

    async def CreateTask(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self._auth(context)
        self.calls.append(("CreateTask", request))
        task_id = request.task.id
        if task_id in self.created:
            payload, version = self.created[task_id]
            if payload != _payload(request):
                await context.abort(grpc.StatusCode.ALREADY_EXISTS, "task exists with another payload")
            return task_store_pb2.TaskStoreServiceCreateTaskResponse(version=version)
        self.tasks[task_id] = (request.task, 1)
        self.created[task_id] = (_payload(request), 1)
        return task_store_pb2.TaskStoreServiceCreateTaskResponse(version=1)

    async def GetTask(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self._auth(context)
        self.calls.append(("GetTask", request))
        if request.task_id not in self.tasks:
            await context.abort(grpc.StatusCode.NOT_FOUND, "no such task")
        task, version = self.tasks[request.task_id]
        return task_store_pb2.TaskStoreServiceGetTaskResponse(
            stored=task_store_pb2.StoredTask(task=task, version=version)
        )

    async def UpdateTask(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self._auth(context)
        self.calls.append(("UpdateTask", request))
        task_id = request.task.id
        if task_id not in self.tasks:
            await context.abort(grpc.StatusCode.NOT_FOUND, "no such task")
        key = (task_id, request.expected_version)
        if key in self.updated and self.updated[key][0] == _payload(request):
            return task_store_pb2.TaskStoreServiceUpdateTaskResponse(version=self.updated[key][1])
        _, current = self.tasks[task_id]
        if request.expected_version != current:
            await context.abort(grpc.StatusCode.ABORTED, "stale version")
        version = current + 1
        self.tasks[task_id] = (request.task, version)
        self.updated[key] = (_payload(request), version)
        if self.lose_update_responses > 0:
            self.lose_update_responses -= 1
            await context.abort(grpc.StatusCode.UNAVAILABLE, "response lost")
        return task_store_pb2.TaskStoreServiceUpdateTaskResponse(version=version)

    async def SettleTask(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self._auth(context)
        self.calls.append(("SettleTask", request))
        if request.task_id not in self.tasks:
            await context.abort(grpc.StatusCode.NOT_FOUND, "no such task")
        if self.tasks[request.task_id][1] != request.version:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "not the current version")
        self.settled[request.task_id] = request.version
        return task_store_pb2.TaskStoreServiceSettleTaskResponse()


@pytest.fixture
async def store() -> AsyncIterator[tuple[FakeTaskStore, str]]:
    servicer = FakeTaskStore(TOKEN)
    server = grpc.aio.server()
    task_store_pb2_grpc.add_TaskStoreServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield servicer, f"127.0.0.1:{port}"
    await server.stop(0)


@pytest.fixture
async def runtime(sim: SimulatedSubstrate, store: tuple[FakeTaskStore, str]) -> SimulatedSubstrate:
    await sim.create_actor_template(NS, "rev-1", "registry.local/agent:1")
    sim.taskstore_address = store[1]
    return sim


async def _running(sim: SimulatedSubstrate, name: str, *, token: str | None = TOKEN,
                   from_tag: str | None = None) -> str:
    env = {WORKLOAD_TOKEN_ENV: token} if token is not None else {}
    actor = await sim.create_actor(NS, name, TEMPLATE, env=env, from_tag=from_tag)
    await sim.resume_actor(NS, name, actor.uid)
    return actor.uid


def _request(text: str, *, session_id: str = "sess-1", task_id: str | None = None,
             message_id: str | None = None, dispatch_id: str | None = None) -> InvokeRequest:
    message = a2a_pb2.Message(role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text=text)])
    if message_id is not None:
        message.message_id = message_id
    return InvokeRequest(
        session_id=session_id,
        dispatch_id=dispatch_id or f"dispatch-{uuid.uuid4()}",
        message=json_format.MessageToDict(message),
        task_id=task_id,
    )


async def _turn(sim: SimulatedSubstrate, store: FakeTaskStore, name: str, uid: str, text: str,
                **kwargs: Any) -> a2a_pb2.Task:
    """Run a turn; the final task as the store holds it (and check it was settled at that version)."""
    before = len(store.calls)
    await sim.invoke(NS, name, uid, _request(text, **kwargs))
    settle = store.calls[-1]
    assert settle[0] == "SettleTask" and len(store.calls) > before
    task, version = store.tasks[settle[1].task_id]
    assert settle[1].version == version
    return task


def _answer(task: a2a_pb2.Task) -> str:
    return task.status.message.parts[0].text


# ---------------------------------------------------------------------------------------------
# preconditions and faults


async def test_invoke_preconditions(runtime: SimulatedSubstrate, store: tuple[FakeTaskStore, str]) -> None:
    servicer, address = store
    with pytest.raises(SubstrateError) as exc:
        await runtime.invoke(NS, "missing", "uid", _request("hi"))
    assert exc.value.code == Code.NOT_FOUND

    actor = await runtime.create_actor(NS, "s1", TEMPLATE, env={WORKLOAD_TOKEN_ENV: TOKEN})
    with pytest.raises(SubstrateError) as exc:
        await runtime.invoke(NS, "s1", actor.uid, _request("hi"))  # SUSPENDED
    assert exc.value.code == Code.FAILED_PRECONDITION and "not running" in exc.value.message

    await runtime.resume_actor(NS, "s1", actor.uid)
    with pytest.raises(SubstrateError) as exc:
        await runtime.invoke(NS, "s1", "another-uid", _request("hi"))
    assert exc.value.code == Code.FAILED_PRECONDITION and "uid mismatch" in exc.value.message

    runtime.taskstore_address = None
    with pytest.raises(SubstrateError) as exc:
        await runtime.invoke(NS, "s1", actor.uid, _request("hi"))
    assert exc.value.code == Code.FAILED_PRECONDITION and "task store" in exc.value.message
    runtime.taskstore_address = address

    uid = await _running(runtime, "no-token", token=None)
    with pytest.raises(SubstrateError) as exc:
        await runtime.invoke(NS, "no-token", uid, _request("hi"))
    assert exc.value.code == Code.FAILED_PRECONDITION and WORKLOAD_TOKEN_ENV in exc.value.message

    assert servicer.calls == []
    assert await runtime.read_durable(NS, "s1") == {}


async def test_taskstore_address_in_constructor(database_url: str) -> None:
    async with SimulatedSubstrate(database_url, worker_pool_size=4, taskstore_address="127.0.0.1:1") as s:
        assert s.taskstore_address == "127.0.0.1:1"


async def test_invoke_goes_through_fault_injection(
    runtime: SimulatedSubstrate, store: tuple[FakeTaskStore, str]
) -> None:
    servicer, _ = store
    uid = await _running(runtime, "s1")
    await runtime.inject("invoke", "fail_before", actor="s1")
    with pytest.raises(SubstrateError) as exc:
        await runtime.invoke(NS, "s1", uid, _request("What is 2+2?"))
    assert exc.value.code == Code.UNAVAILABLE
    assert servicer.calls == []

    await runtime.inject("invoke", "lose_after", actor="s1")
    with pytest.raises(SubstrateError) as exc:
        await runtime.invoke(NS, "s1", uid, _request("What is 2+2?"))
    assert exc.value.code == Code.UNAVAILABLE
    assert servicer.methods() == ["CreateTask", "UpdateTask", "SettleTask"]  # the turn took effect


async def test_wrong_workload_token_is_not_retried(
    runtime: SimulatedSubstrate, store: tuple[FakeTaskStore, str]
) -> None:
    servicer, _ = store
    uid = await _running(runtime, "s1", token="someone-else")
    started = time.monotonic()
    with pytest.raises(SubstrateError) as exc:
        await runtime.invoke(NS, "s1", uid, _request("What is 2+2?"))
    assert exc.value.code == Code.INTERNAL and "UNAUTHENTICATED" in exc.value.message
    assert isinstance(exc.value.__cause__, TaskStoreError)
    assert time.monotonic() - started < 2
    assert servicer.calls == []
    assert "questions" not in await runtime.read_durable(NS, "s1")


# ---------------------------------------------------------------------------------------------
# turns


async def test_new_turn_call_sequence(runtime: SimulatedSubstrate, store: tuple[FakeTaskStore, str]) -> None:
    servicer, _ = store
    uid = await _running(runtime, "s1")
    request = _request("What is 2+2?", session_id="sess-1", message_id="m-1", dispatch_id="d-1")
    request.message["someUnknownField"] = 1  # ignored
    await runtime.invoke(NS, "s1", uid, request)

    assert servicer.methods() == ["CreateTask", "UpdateTask", "SettleTask"]
    create, update, settle = (r for _, r in servicer.calls)

    assert create.session_id == "sess-1" and create.HasField("dispatch_id") and create.dispatch_id == "d-1"
    task = create.task
    task_id = task.id
    assert uuid.UUID(task_id).version == 4
    assert task.context_id == "sess-1"
    assert task.status.state == a2a_pb2.TASK_STATE_WORKING and task.status.timestamp.seconds > 0
    assert len(task.history) == 1 and len(task.artifacts) == 0
    user = task.history[0]
    assert (user.message_id, user.role, user.context_id, user.task_id) == (
        "m-1", a2a_pb2.ROLE_USER, "sess-1", task_id,
    )
    assert user.parts[0].text == "What is 2+2?"

    assert update.session_id == "sess-1" and update.expected_version == 1 and update.dispatch_id == "d-1"
    final = update.task
    assert final.id == task_id and final.context_id == "sess-1"
    assert final.status.state == a2a_pb2.TASK_STATE_COMPLETED
    agent = final.status.message
    assert agent.role == a2a_pb2.ROLE_AGENT and agent.parts[0].text == "2+2 = 4"
    assert agent.task_id == task_id and agent.context_id == "sess-1" and agent.message_id not in ("", "m-1")
    assert list(final.history) == [user, agent]
    assert len(final.artifacts) == 1
    artifact = final.artifacts[0]
    assert artifact.name == "answer" and artifact.parts[0].text == "2+2 = 4" and artifact.artifact_id
    assert update.event.WhichOneof("payload") == "status_update"
    assert update.event.status_update.task_id == task_id
    assert update.event.status_update.context_id == "sess-1"
    assert update.event.status_update.status == final.status

    assert (settle.session_id, settle.task_id, settle.version) == ("sess-1", task_id, 2)
    assert servicer.settled == {task_id: 2}

    # a message without an ID gets one
    await runtime.invoke(NS, "s1", uid, _request("What is 3*3?"))
    second = servicer.requests("CreateTask")[-1].task
    assert second.id != task_id and second.history[0].message_id
    assert _answer(servicer.tasks[second.id][0]) == "3*3 = 9"


async def test_memory_persists_across_suspend_and_resume(
    runtime: SimulatedSubstrate, store: tuple[FakeTaskStore, str]
) -> None:
    servicer, _ = store
    uid = await _running(runtime, "s1")
    version_before = (await runtime.get_actor(NS, "s1")).version
    task = await _turn(runtime, servicer, "s1", uid, "What is 2+2?")
    assert _answer(task) == "2+2 = 4"
    memory = await runtime.read_durable(NS, "s1")
    assert memory["questions"] == ["What is 2+2?"]
    # the memory write is not a counted mutation and the turn does not change the Actor record
    assert (await runtime.get_actor(NS, "s1")).version == version_before
    assert await runtime.mutation_count(actor="s1", method="invoke") == 0

    await runtime.suspend_actor(NS, "s1", uid)
    await runtime.resume_actor(NS, "s1", uid)
    task = await _turn(runtime, servicer, "s1", uid, "Summarize this conversation so far.")
    assert _answer(task) == 'So far you asked me 1 question, in order: "What is 2+2?"'
    task = await _turn(runtime, servicer, "s1", uid, "What did I ask you first?")
    assert _answer(task) == 'You first asked: "What is 2+2?"'
    assert (await runtime.read_durable(NS, "s1"))["questions"] == [
        "What is 2+2?",
        "Summarize this conversation so far.",
        "What did I ask you first?",
    ]


async def test_fork_from_tag_diverges(runtime: SimulatedSubstrate, store: tuple[FakeTaskStore, str]) -> None:
    servicer, _ = store
    uid = await _running(runtime, "source")
    await _turn(runtime, servicer, "source", uid, "What is 2+2?")
    await _turn(runtime, servicer, "source", uid, "Summarize this conversation so far.")
    await runtime.suspend_actor(NS, "source", uid)
    await runtime.create_tag(NS, "checkpoint-1", "source", uid)

    fork_uid = await _running(runtime, "fork", from_tag="checkpoint-1")
    task = await _turn(runtime, servicer, "fork", fork_uid, "What did I ask you first?", session_id="fork")
    assert _answer(task) == 'You first asked: "What is 2+2?"' and task.context_id == "fork"

    await runtime.resume_actor(NS, "source", uid)
    task = await _turn(runtime, servicer, "source", uid, "Remember the number 7.")
    assert _answer(task) == "OK, I will remember the number 7."
    task = await _turn(runtime, servicer, "fork", fork_uid, "What number did I ask you to remember?")
    assert _answer(task) == "You have not asked me to remember a number."
    task = await _turn(runtime, servicer, "source", uid, "What number did I ask you to remember?")
    assert _answer(task) == "You asked me to remember the number 7."


async def test_input_required_continuation(
    runtime: SimulatedSubstrate, store: tuple[FakeTaskStore, str]
) -> None:
    servicer, _ = store
    uid = await _running(runtime, "s1")
    task = await _turn(runtime, servicer, "s1", uid, "Book a flight [input-required]", dispatch_id="d-1")
    assert task.status.state == a2a_pb2.TASK_STATE_INPUT_REQUIRED
    assert _answer(task).startswith('I need more information to answer "Book a flight"')
    assert len(task.artifacts) == 0 and len(task.history) == 2
    task_id = task.id
    assert servicer.settled == {task_id: 2}

    servicer.calls.clear()
    task = await _turn(runtime, servicer, "s1", uid, "to Paris", task_id=task_id, message_id="m-2",
                       dispatch_id="d-2")
    assert servicer.methods() == ["GetTask", "UpdateTask", "UpdateTask", "SettleTask"]
    get, working, final, settle = (r for _, r in servicer.calls)
    assert (get.session_id, get.task_id) == ("sess-1", task_id)
    assert working.expected_version == 2 and working.dispatch_id == "d-2"
    assert working.task.status.state == a2a_pb2.TASK_STATE_WORKING
    assert not working.task.status.HasField("message")
    assert len(working.task.history) == 3
    reply = working.task.history[2]
    assert (reply.message_id, reply.role, reply.task_id, reply.context_id) == (
        "m-2", a2a_pb2.ROLE_USER, task_id, "sess-1",
    )
    assert working.event.status_update.status.state == a2a_pb2.TASK_STATE_WORKING
    assert final.expected_version == 3 and final.dispatch_id == "d-2"
    assert final.task.status.state == a2a_pb2.TASK_STATE_COMPLETED
    assert _answer(final.task) == "Thanks, got: to Paris"
    assert len(final.task.history) == 4 and len(final.task.artifacts) == 1
    assert (settle.task_id, settle.version) == (task_id, 4)
    assert task == final.task


async def test_failed_and_auth_required_turns(
    runtime: SimulatedSubstrate, store: tuple[FakeTaskStore, str]
) -> None:
    servicer, _ = store
    uid = await _running(runtime, "s1")
    task = await _turn(runtime, servicer, "s1", uid, "[fail] Remember the number 3.")
    assert task.status.state == a2a_pb2.TASK_STATE_FAILED and len(task.artifacts) == 0
    task = await _turn(runtime, servicer, "s1", uid, "Read my mail [auth-required]")
    assert task.status.state == a2a_pb2.TASK_STATE_AUTH_REQUIRED
    task = await _turn(runtime, servicer, "s1", uid, "done", task_id=task.id)
    assert task.status.state == a2a_pb2.TASK_STATE_COMPLETED and _answer(task) == "Thanks, got: done"


async def test_slow_turn_keeps_the_actor_running(
    runtime: SimulatedSubstrate, store: tuple[FakeTaskStore, str]
) -> None:
    servicer, _ = store
    uid = await _running(runtime, "s1")
    started = time.monotonic()
    turn = asyncio.create_task(runtime.invoke(NS, "s1", uid, _request("[slow:0.5] What is 2+2?")))
    while "CreateTask" not in servicer.methods():
        assert not turn.done()
        await asyncio.sleep(0.01)
    page = await runtime.list_actors(NS, 0, "")
    (actor,) = [a for a in page.items if a.name == "s1"]
    assert actor.state == ActorState.RUNNING and actor.worker is not None and actor.worker_ip
    assert servicer.methods() == ["CreateTask"]
    await asyncio.sleep(0.2)
    assert not turn.done() and servicer.methods() == ["CreateTask"]
    assert (await runtime.get_actor(NS, "s1")).state == ActorState.RUNNING
    await turn
    assert time.monotonic() - started >= 0.5
    assert servicer.methods() == ["CreateTask", "UpdateTask", "SettleTask"]
    assert _answer(servicer.requests("UpdateTask")[-1].task) == "2+2 = 4"
    # suspending between turns is the quiescence worker's job, not the runtime's
    assert (await runtime.get_actor(NS, "s1")).state == ActorState.RUNNING


async def test_lost_update_response_is_retried_with_the_same_payload(
    runtime: SimulatedSubstrate, store: tuple[FakeTaskStore, str]
) -> None:
    servicer, _ = store
    uid = await _running(runtime, "s1")
    servicer.lose_update_responses = 1
    await runtime.invoke(NS, "s1", uid, _request("What is 2+2?", dispatch_id="d-1"))
    assert servicer.methods() == ["CreateTask", "UpdateTask", "UpdateTask", "SettleTask"]
    first, retry = servicer.requests("UpdateTask")
    assert _payload(first) == _payload(retry)
    task_id = first.task.id
    # the retry got the committed version back; no second version was created
    assert servicer.tasks[task_id][1] == 2
    assert servicer.requests("SettleTask")[0].version == 2
    assert servicer.settled == {task_id: 2}


# ---------------------------------------------------------------------------------------------
# the client on its own


async def test_client_gives_up_after_its_retry_budget() -> None:
    client = TaskStoreClient("127.0.0.1:1", TOKEN, retry_budget=0.4, attempt_timeout=0.2)
    started = time.monotonic()
    try:
        with pytest.raises(TaskStoreError) as exc:
            await client.settle_task("sess-1", "t-1", 1)
    finally:
        await client.close()
    assert exc.value.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    assert 0.1 <= time.monotonic() - started < 2


async def test_client_connects_when_it_is_made() -> None:
    """An Actor's first task store call comes once its server is up and a request came in: the
    client's connection is made from its creation on, not at that call."""
    async with watched_port() as (address, connected):
        client = TaskStoreClient(address, TOKEN)
        try:
            await asyncio.wait_for(connected.wait(), 10)
        finally:
            await client.close()


async def test_client_round_trip(store: tuple[FakeTaskStore, str]) -> None:
    servicer, address = store
    async with TaskStoreClient(address, TOKEN) as client:
        task = a2a_pb2.Task(id="t-1", context_id="sess-1")
        assert await client.create_task("sess-1", task, None) == 1
        assert await client.create_task("sess-1", task, None) == 1  # same payload: same version
        assert not servicer.requests("CreateTask")[0].HasField("dispatch_id")
        task.status.state = a2a_pb2.TASK_STATE_WORKING
        assert await client.update_task("sess-1", task, 1, None, "d-1") == 2
        assert not servicer.requests("UpdateTask")[0].HasField("event")
        stored, version = await client.get_task("sess-1", "t-1")
        assert stored == task and version == 2
        with pytest.raises(TaskStoreError) as exc:
            await client.update_task("sess-1", task, 1, None, "d-2")  # stale
        assert exc.value.code == grpc.StatusCode.ABORTED
        with pytest.raises(TaskStoreError) as exc:
            await client.get_task("sess-1", "nope")
        assert exc.value.code == grpc.StatusCode.NOT_FOUND
        await client.settle_task("sess-1", "t-1", 2)
    assert servicer.settled == {"t-1": 2}
