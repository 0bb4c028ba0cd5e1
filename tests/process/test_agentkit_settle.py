"""The agent kit ends a turn with one write: the update that reaches a final or waiting state also
settles the task (the task store's UpdateTask with the settle header, sessionq.task_finish), with no
SettleTask after it. Driven in process (the agent kit's A2A app over ASGI) against the real task
store of an API server; the turn is admitted through the store, and no worker runs beside it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import UUID

import grpc
import httpx
import pytest
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.types import a2a_pb2
from google.protobuf import json_format
from lifecycle import raw_session, ready_session, task_json

from sessionq._pb.kagent.api.v1alpha1 import task_store_pb2, task_store_pb2_grpc
from sessionq.agentkit.first_agent import FirstAgent
from sessionq.agentkit.server import build_app, default_card
from sessionq.api.server import ApiServer
from sessionq.domain import workload
from sessionq.runtime.base import INVOKE_DISPATCH_KEY, INVOKE_SESSION_KEY, SETTLE_HEADER, WORKLOAD_TOKEN_HEADER
from sessionq.runtime.taskstore_client import TaskStoreClient

MSG = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}


class _Counting(TaskStoreClient):
    """The agent kit's task store client, noting each call (UpdateTask with its settle flag)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[str] = []

    async def get_task(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("GetTask")
        return await super().get_task(*args, **kwargs)

    async def create_task(self, *args: Any, **kwargs: Any) -> int:
        self.calls.append("CreateTask")
        return await super().create_task(*args, **kwargs)

    async def update_task(self, *args: Any, **kwargs: Any) -> int:
        self.calls.append("UpdateTask")
        return await super().update_task(*args, **kwargs)

    async def finish_task(self, *args: Any, **kwargs: Any) -> tuple[int, bool]:
        self.calls.append("UpdateTask+settle")
        version, settled = await super().finish_task(*args, **kwargs)
        assert settled, "the task store says it settled the task"
        return version, settled

    async def settle_task(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append("SettleTask")
        await super().settle_task(*args, **kwargs)


class _BareMessage(AgentExecutor):
    """Answers with a bare Message (the agent kit keeps it as a COMPLETED task)."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        await event_queue.enqueue_event(a2a_pb2.Message(
            message_id=str(uuid.uuid4()), role=a2a_pb2.ROLE_AGENT, parts=[a2a_pb2.Part(text="hello")]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None


class _Failing(AgentExecutor):
    """Starts its turn, then raises: the SDK records the task FAILED."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        from sessionq.agentkit.server import start_turn

        await start_turn(context, event_queue)
        raise RuntimeError("the agent broke")

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None


@pytest.fixture
async def api_server(settings: Any, store: Any, sim: Any) -> AsyncIterator[ApiServer]:
    server = ApiServer(settings, store, address="127.0.0.1:0", runtime=sim)
    await server.start()
    yield server
    await server.stop(0)


async def _turn(store: Any, server: ApiServer, executor: AgentExecutor, sid: UUID, text: str,
                task_id: str | None = None, client_class: type[_Counting] = _Counting) -> tuple[dict[str, Any], list[str]]:
    """Admit a turn (its dispatch reservation) and play it through the agent kit: (its answer, the
    task store calls the kit made)."""
    message = dict(MSG, parts=[{"text": text}], messageId=str(uuid.uuid4()))
    adm = await store.admit_turn(sid, "alice", None, message, task_id, 600)
    client = client_class(f"127.0.0.1:{server.port}", None)
    app = build_app(executor, default_card("http://actor/"), client)
    token = workload.token_for(await store.secret("workload"), sid)
    send = a2a_pb2.SendMessageRequest(message=a2a_pb2.Message(
        message_id=message["messageId"], role=a2a_pb2.ROLE_USER, context_id=str(sid), task_id=task_id or "",
        parts=[a2a_pb2.Part(text=text)]))
    send.metadata.update({INVOKE_SESSION_KEY: str(sid), INVOKE_DISPATCH_KEY: str(adm.dispatch_id)})
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://actor") as http:
            body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": json_format.MessageToDict(send)}
            r = await http.post("/", json=body, headers={"A2A-Version": "1.0", WORKLOAD_TOKEN_HEADER: token})
    finally:
        # the SDK's tasks of the turn outlive the answer (a task waiting for input keeps them for its
        # answer): this app serves no other request, so they are ended here, not left to the garbage
        await app.state.request_handler.aclose()
        await client.close()
    return dict(r.json()), client.calls


async def _ended(store: Any, sid: UUID, task_id: str, state: str) -> None:
    """The task is published in `state` and settled; the turn is over and its idle boundary marked."""
    task = await store.get_task(task_id)
    assert task is not None and task.state == state and task.phase == "settled", task
    assert task.staged_task is None and task.published_version == task.version
    row = await raw_session(store, sid)
    assert row.dispatch_id is None and row.active_task_id is None and row.unsettled_task_id is None
    assert row.idle_boundary_id is not None


async def test_a_turn_ends_with_one_write_that_settles_it(store: Any, sim: Any, api_server: ApiServer,
                                                          tmp_path: Path) -> None:
    s = await ready_session(store, sim)
    agent = FirstAgent(tmp_path)
    answer, calls = await _turn(store, api_server, agent, s.id, "What is 2+2?")
    task = answer["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", answer
    # the new task's one read, its creation WORKING, the artifact, then the final status settling it
    assert calls == ["GetTask", "CreateTask", "UpdateTask", "UpdateTask+settle"]
    await _ended(store, s.id, task["id"], "TASK_STATE_COMPLETED")

    # a turn waiting for input is settled by its write too, and its answer continues the task
    answer, calls = await _turn(store, api_server, agent, s.id, "Which one? [input-required]")
    waiting = answer["result"]["task"]
    assert waiting["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", answer
    assert calls[-1] == "UpdateTask+settle" and "SettleTask" not in calls
    await _ended(store, s.id, waiting["id"], "TASK_STATE_INPUT_REQUIRED")
    answer, calls = await _turn(store, api_server, agent, s.id, "the first", task_id=waiting["id"])
    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answer
    assert calls[-1] == "UpdateTask+settle" and "SettleTask" not in calls
    await _ended(store, s.id, waiting["id"], "TASK_STATE_COMPLETED")


async def test_a_bare_message_answer_and_a_failed_turn_are_settled_by_their_last_write(
    store: Any, sim: Any, api_server: ApiServer
) -> None:
    s = await ready_session(store, sim)
    answer, calls = await _turn(store, api_server, _BareMessage(), s.id, "hello?")
    assert "result" in answer, answer
    assert calls == ["GetTask", "CreateTask", "UpdateTask+settle"]
    async with store.pool.connection() as conn:
        cur = await conn.execute("SELECT id FROM sessionq.tasks WHERE session_id = %s", (s.id,))
        (task_id,) = [r["id"] for r in await cur.fetchall()]
    await _ended(store, s.id, task_id, "TASK_STATE_COMPLETED")

    answer, calls = await _turn(store, api_server, _Failing(), s.id, "break")
    assert calls[-1] == "UpdateTask+settle" and "SettleTask" not in calls, calls
    async with store.pool.connection() as conn:
        cur = await conn.execute("SELECT id FROM sessionq.tasks WHERE session_id = %s AND id <> %s", (s.id, task_id))
        (failed_id,) = [r["id"] for r in await cur.fetchall()]
    await _ended(store, s.id, failed_id, "TASK_STATE_FAILED")


async def test_the_settle_header_takes_only_1_and_settles_only_a_final_state(
    store: Any, sim: Any, api_server: ApiServer
) -> None:
    """Bad input over the real channel: another value of the header, or the header on an update that
    does not end the turn, is INVALID_ARGUMENT and writes nothing."""
    s = await ready_session(store, sim)
    adm = await store.admit_turn(s.id, "alice", None, MSG, None, 600)
    await store.task_create(s.id, "t1", task_json("t1", s.id, "TASK_STATE_WORKING"), adm.dispatch_id)
    token = workload.token_for(await store.secret("workload"), s.id)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{api_server.port}") as channel:
        stub = task_store_pb2_grpc.TaskStoreServiceStub(channel)

        def update(state: str) -> task_store_pb2.TaskStoreServiceUpdateTaskRequest:
            task = json_format.ParseDict(task_json("t1", s.id, state, "4"), a2a_pb2.Task())
            return task_store_pb2.TaskStoreServiceUpdateTaskRequest(
                session_id=str(s.id), task=task, expected_version=1, dispatch_id=str(adm.dispatch_id))

        auth = ("authorization", f"Bearer {token}")
        for state, value in (("TASK_STATE_COMPLETED", "yes"), ("TASK_STATE_COMPLETED", "x" * 5000),
                             ("TASK_STATE_WORKING", "1")):
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await stub.UpdateTask(update(state), metadata=(auth, (SETTLE_HEADER, value)), timeout=10)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value
            assert "x" * 100 not in (e.value.details() or "")
            assert (await store.get_task("t1")).version == 1  # nothing written
        r = await stub.UpdateTask(update("TASK_STATE_COMPLETED"), metadata=(auth, (SETTLE_HEADER, "1")), timeout=10)
        assert r.version == 2
    await _ended(store, s.id, "t1", "TASK_STATE_COMPLETED")


class _OlderStore(_Counting):
    """A task store that does not know the settle header: the update is only staged, and its answer
    has no x-sessionq-settled trailer."""

    async def finish_task(self, session_id: str, task: Any, expected_version: int, event: Any,
                          dispatch_id: str | None, *, token: str | None = None) -> tuple[int, bool]:
        self.calls.append("UpdateTask+settle")
        return await TaskStoreClient.update_task(self, session_id, task, expected_version, event, dispatch_id,
                                                 token=token), False


async def test_without_the_task_stores_word_the_kit_settles_the_turn_itself(
    store: Any, sim: Any, api_server: ApiServer, tmp_path: Path
) -> None:
    s = await ready_session(store, sim)
    answer, calls = await _turn(store, api_server, FirstAgent(tmp_path), s.id, "What is 3+3?", client_class=_OlderStore)
    task = answer["result"]["task"]
    assert calls == ["GetTask", "CreateTask", "UpdateTask", "UpdateTask+settle", "SettleTask"]
    await _ended(store, s.id, task["id"], "TASK_STATE_COMPLETED")
