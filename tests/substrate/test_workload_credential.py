"""The workload credential travels with each turn, not in CreateActor (issue 17): the gateway's A2A
call to the Actor's private endpoint carries it as the header x-sessionq-workload-token, so an Actor
of a real Substrate (whose environment is its template's) reports its turn through the task store.

Here the served simulator plays a real Substrate (`extensions=False`: it ignores x-sessionq-*
request headers, the Actor's environment among them, and sends no sessionq trailers); the agent kit
is tested in-process against the real task store. A wrong credential is refused, and the credential
never appears in a log line or an error."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import Any
from uuid import UUID

import httpx
import pytest
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import a2a_pb2, a2a_pb2_grpc
from conftest import apply_agent
from google.protobuf import json_format

from sessionq import agentkit
from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc
from sessionq.agentkit.server import build_app, default_card
from sessionq.domain import workload
from sessionq.runtime.base import (
    INVOKE_DISPATCH_KEY,
    INVOKE_SESSION_KEY,
    WORKLOAD_TOKEN_HEADER,
    ActorState,
    Code,
    InvokeRequest,
    SubstrateError,
)
from sessionq.runtime.taskstore_client import TaskStoreClient

TENANT = "kagent/my-first-agent"


pytestmark = pytest.mark.real_substrate  # the sim fixture: the adapter to a served simulator playing a real Substrate


async def new_session(api: Any) -> str:
    r = await sessions_pb2_grpc.SessionServiceStub(api.channel).CreateSession(
        sessions_pb2.CreateSessionRequest(request_id=f"s-{uuid.uuid4()}", agent=common_pb2.ResourceReference(
            namespace="kagent", name="my-first-agent")), metadata=api.md(), timeout=30)
    return str(r.session.id)


def _message(text: str, context_id: str = "") -> a2a_pb2.Message:
    return a2a_pb2.Message(message_id=f"m-{uuid.uuid4()}", role=a2a_pb2.ROLE_USER, context_id=context_id,
                           parts=[a2a_pb2.Part(text=text)])


async def first_turn(api: Any, store: Any, sim: Any) -> tuple[str, a2a_pb2.Task]:
    """The Agent applied, a new Session, and its first turn ("What is 2+2?") COMPLETED."""
    await apply_agent(store, sim)
    sid = await new_session(api)
    stub = a2a_pb2_grpc.A2AServiceStub(api.channel)
    task = (await stub.SendMessage(a2a_pb2.SendMessageRequest(tenant=TENANT, message=_message("What is 2+2?", sid)),
                                   metadata=api.md(), timeout=60)).task
    assert task.status.state == a2a_pb2.TASK_STATE_COMPLETED, task.status
    return sid, task


def _secret_parts(token: str) -> list[str]:
    return [token, token.rsplit(".", 1)[1]]


async def test_an_actor_created_without_its_env_reports_its_turn(
    api: Any, store: Any, sim: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    sid, task = await first_turn(api, store, sim)
    assert "4" in " ".join(p.text for p in task.status.message.parts)
    session = await store.session_by_id(UUID(sid))
    # the runtime never saw an environment (nor the credential): the turn brought it
    assert await sim.read_env(session.actor_atespace, session.actor_name) == {}
    token = workload.token_for(await store.secret("workload"), UUID(sid))
    for secret in _secret_parts(token):
        assert secret not in caplog.text


async def test_a_wrong_or_missing_credential_is_refused_and_never_echoed(
    api: Any, store: Any, sim: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    await apply_agent(store, sim)
    sid = await new_session(api)
    session = await store.session_by_id(UUID(sid))
    atespace, name = session.actor_atespace, session.actor_name
    actor = await sim.get_actor(atespace, name)
    actor, _ = await sim.resume_actor(atespace, name, actor.uid)
    assert actor.state == ActorState.RUNNING
    message = json_format.MessageToDict(_message("What is 2+2?"))
    other = str(uuid.uuid4())
    wrong = [
        f"sqw.{sid}.{'0' * 64}",  # a forged MAC
        workload.token_for(await store.secret("workload"), UUID(other)),  # another Session's credential
    ]
    for bad in wrong:
        with pytest.raises(SubstrateError) as exc:
            await sim.invoke(atespace, name, actor.uid, InvokeRequest(sid, str(uuid.uuid4()), message,
                                                                      credential=bad))
        assert "UNAUTHENTICATED" in exc.value.message or "PERMISSION_DENIED" in exc.value.message, exc.value
        for secret in _secret_parts(bad):
            assert secret not in exc.value.message and secret not in caplog.text
    with pytest.raises(SubstrateError) as exc:
        await sim.invoke(atespace, name, actor.uid, InvokeRequest(sid, str(uuid.uuid4()), message))
    assert exc.value.code == Code.FAILED_PRECONDITION and "no workload credential" in exc.value.message
    async with store.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM sessionq.tasks WHERE session_id = %s", (UUID(sid),))
        assert (await cur.fetchone())["n"] == 0, "a refused credential writes nothing"


class _Recorder(AgentExecutor):
    """Completes every turn; records the request headers the agent's code sees."""

    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        state = context.call_context.state if context.call_context is not None else {}
        self.headers.append(dict(state.get("headers") or {}))
        updater = await agentkit.start_turn(context, event_queue)
        await updater.complete(updater.new_agent_message([a2a_pb2.Part(text="done")]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


def _queue_loops() -> list[asyncio.Task[Any]]:
    """The a2a-sdk's event queue loops running in this process (two per task the SDK holds)."""
    return [t for t in asyncio.all_tasks() if getattr(t.get_coro(), "__qualname__", "") == "EventQueueSource._dispatch_loop"]


async def test_the_agent_kit_takes_the_credential_from_the_request(
    api: Any, store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """No SESSIONQ_WORKLOAD_TOKEN: the kit uses the request's header, which the agent's code never
    sees; a wrong one is refused by the task store, a missing one fails the turn, neither is echoed."""
    caplog.set_level(logging.DEBUG)
    sid = str(uuid.uuid4())
    secret = await store.secret("workload")
    recorder = _Recorder()
    client = TaskStoreClient(api.address, None)
    app = build_app(recorder, default_card("http://actor/"), client)
    forged = f"sqw.{sid}.{'1' * 64}"
    foreign = workload.token_for(secret, uuid.uuid4())
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://actor") as http:

            async def send(headers: dict[str, str]) -> dict[str, Any]:
                send = a2a_pb2.SendMessageRequest(message=_message("hi", sid))
                send.metadata.update({INVOKE_SESSION_KEY: sid, INVOKE_DISPATCH_KEY: str(uuid.uuid4())})
                body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                        "params": json_format.MessageToDict(send)}
                r = await http.post("/", json=body, headers={"A2A-Version": "1.0", **headers})
                return dict(r.json())

            for token in (forged, foreign):
                answer = await send({WORKLOAD_TOKEN_HEADER: token})
                assert "error" in answer, answer
                for part in _secret_parts(token):
                    assert part not in json.dumps(answer) and part not in caplog.text
            answer = await send({})
            assert "error" in answer, answer
            assert not recorder.headers, "a refused credential: the task store was never written, the agent never ran"
            # the right credential (of a Session that has no turn reserved): the agent runs, its task is
            # refused by the task store's own rules, not for the credential
            token = workload.token_for(secret, UUID(sid))
            answer = await send({WORKLOAD_TOKEN_HEADER: token})
            assert "error" in answer and "UNAUTHENTICATED" not in json.dumps(answer), answer
            for part in _secret_parts(token):
                assert part not in json.dumps(answer) and part not in caplog.text
        # nothing of a refused request stays behind in the Actor (the SDK's event queues of a task
        # whose start failed)
        for _ in range(50):  # their closing runs beside the answer
            if not _queue_loops():
                break
            await asyncio.sleep(0.1)
        assert not _queue_loops(), "a refused request left its task's event queues running"
    finally:
        await app.state.request_handler.aclose()
        await client.close()
    assert recorder.headers, "the agent ran"
    assert all(WORKLOAD_TOKEN_HEADER not in h for h in recorder.headers), "the agent's code never sees the credential"
    async with store.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM sessionq.tasks WHERE session_id = %s", (UUID(sid),))
        assert (await cur.fetchone())["n"] == 0


class _ReadingClient(TaskStoreClient):
    """The task store client of an Actor's agent kit, noting which tasks it read (and with a
    credential or not)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reads: list[tuple[str, bool]] = []

    async def get_task(self, session_id: str, task_id: str, *, token: str | None = None) -> Any:
        self.reads.append((task_id, token is not None))
        return await super().get_task(session_id, task_id, token=token)


async def test_a_cancel_carries_the_credential_to_an_actor_that_never_had_a_turn(
    api: Any, store: Any, sim: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The gateway's CancelTask carries the Session's workload credential (as a turn does): an agent
    kit freshly started (no turn in its process yet, no credential in its environment) reads the
    task with it and answers from what it finds (here: a turn that already ended, nothing to stop);
    without it, the kit can only answer "task not found" without looking."""
    from sessionq.domain.turns import workload_credential
    from sessionq.runtime.ateapi.invoke import A2AInvoker

    caplog.set_level(logging.DEBUG)
    sid, task = await first_turn(api, store, sim)
    session = await store.session_by_id(UUID(sid))
    token = await workload_credential(store, UUID(sid))
    client = _ReadingClient(api.address, None)
    app = build_app(_Recorder(), default_card("http://actor/"), client)  # a fresh Actor process
    invoker = A2AInvoker("http://actor/", transport=httpx.ASGITransport(app=app))
    await invoker.open()
    try:
        await invoker.cancel(session.actor_atespace, session.actor_name, session.actor_uid, sid, task.id)
        assert client.reads == [], "without a credential the kit never reads the task"
        await invoker.cancel(session.actor_atespace, session.actor_name, session.actor_uid, sid, task.id,
                             credential=token)
        assert client.reads and set(client.reads) == {(task.id, True)}, "with it, the kit reads the task"
    finally:
        await invoker.close()
        await app.state.request_handler.aclose()
        await client.close()
    for secret in _secret_parts(token):
        assert secret not in caplog.text


async def test_the_cancel_job_sends_the_sessions_credential(api: Any, store: Any, sim: Any) -> None:
    """Through the API, the worker's cancel job and the adapter: the CancelTask reaching the Actor's
    endpoint carries the Session's credential (the served simulator notes that one came)."""
    import asyncio

    await apply_agent(store, sim)
    sid = await new_session(api)
    stub = a2a_pb2_grpc.A2AServiceStub(api.channel)
    slow = asyncio.ensure_future(stub.SendMessage(
        a2a_pb2.SendMessageRequest(tenant=TENANT, message=_message("What is 5+5? [slow:3.0]", sid)),
        metadata=api.md(), timeout=60))
    task_id = None
    for _ in range(200):
        async with store.pool.connection() as conn:
            cur = await conn.execute("SELECT id FROM sessionq.tasks WHERE session_id = %s", (UUID(sid),))
            row = await cur.fetchone()
        if row is not None:
            task_id = row["id"]
            break
        await asyncio.sleep(0.05)
    assert task_id is not None, "the turn's task was never stored"
    cancelled = await stub.CancelTask(a2a_pb2.CancelTaskRequest(tenant=TENANT, id=task_id), metadata=api.md(),
                                      timeout=30)
    assert cancelled.status.state == a2a_pb2.TASK_STATE_CANCELED
    await slow
    details: list[Any] = []
    for _ in range(200):
        async with store.pool.connection() as conn:
            cur = await conn.execute("SELECT detail FROM substrate_sim.calls WHERE method = 'cancel_turn'")
            details = [r["detail"] for r in await cur.fetchall()]
        if details:
            break
        await asyncio.sleep(0.05)
    assert details and all(d["task_id"] == task_id and d["credential"] is True for d in details), details


def test_a_credential_with_any_text_is_refused_not_raised() -> None:
    """A presented credential is compared as bytes: text that is not ASCII is an invalid credential
    (None), never a TypeError out of the comparison."""
    sid = UUID("0190f3c6-0000-7000-8000-000000000001")
    good = workload.token_for("s3cret", sid)
    assert workload.verify("s3cret", good) == sid
    assert workload.verify("s3cret", good[:-1] + "\u00e9") is None
    assert workload.verify("s3cret", f"{workload.PREFIX}{sid}.\u2603") is None
