"""A message to a Session whose turn still runs: the busy policy (message metadata busyPolicy, else
the Agent's spec busyPolicy, else reject). reject refuses with kagent's reason and retry hint on every
binding; enqueue queues the message as a SUBMITTED task run after the turns before it, in arrival
order, one at a time; interrupt cancels the running turn and runs next. Many senders race on real
connections; nothing is lost, nothing runs twice or at once."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from typing import Any

import grpc
import psycopg
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from conftest import apply_agent
from google.rpc import error_details_pb2, status_pb2
from harness import TENANT, a2a_env, a2a_settings, env, settings_for_a2a  # noqa: F401 - fixtures

from sessionq.api.server import ApiServer
from sessionq.db.store import Store
from sessionq.domain.agents import compile_egress, parse_spec, prepare_revision
from sessionq.models import OperationKind

pytestmark = pytest.mark.timeout(240)
AUTH = [("authorization", "Bearer alice-token")]
HTTP_AUTH = {"Authorization": "Bearer alice-token", "A2A-Version": "1.0"}
FINAL = {a2a_pb2.TASK_STATE_COMPLETED, a2a_pb2.TASK_STATE_FAILED, a2a_pb2.TASK_STATE_CANCELED}


def message(text: str, context_id: str = "", policy: str | None = None) -> a2a_pb2.SendMessageRequest:
    msg = a2a_pb2.Message(message_id=str(uuid.uuid4()), role=a2a_pb2.ROLE_USER, context_id=context_id,
                          parts=[a2a_pb2.Part(text=text)])
    if policy is not None:
        msg.metadata.update({"busyPolicy": policy})
    request = a2a_pb2.SendMessageRequest(tenant=TENANT, message=msg)
    request.configuration.return_immediately = True
    return request


async def send(address: str, request: a2a_pb2.SendMessageRequest) -> a2a_pb2.Task:
    """One SendMessage on its own connection."""
    async with grpc.aio.insecure_channel(address) as channel:
        response = await a2a_pb2_grpc.A2AServiceStub(channel).SendMessage(request, metadata=AUTH, timeout=30)
        return response.task


async def start_slow_turn(address: str, seconds: float = 3.0) -> a2a_pb2.Task:
    return await send(address, message(f"[slow:{seconds}] What is 6*7?"))


async def until_final(store: Store, task_ids: list[str], timeout: float = 120.0) -> dict[str, str]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        states = {}
        for tid in task_ids:
            task = await store.get_task(tid)
            assert task is not None
            states[tid] = task.state
        if all(s in ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED") for s in states.values()):
            return states
        assert asyncio.get_running_loop().time() < deadline, states
        await asyncio.sleep(0.1)


async def run_intervals(url: str, session_id: str) -> list[tuple[int, int, str]]:
    """(first WORKING event, last event, task) of every task that ran, from the Session's history."""
    async with await psycopg.AsyncConnection.connect(url) as conn:
        rows = await (await conn.execute(
            "SELECT seq, task_id, coalesce(payload #>> '{status,state}', payload #>> '{statusUpdate,status,state}') AS state"
            " FROM sessionq.events WHERE session_id = %s ORDER BY seq", (session_id,))).fetchall()
    spans: dict[str, list[int]] = {}
    for seq, task_id, state in rows:
        if state == "TASK_STATE_WORKING":
            spans.setdefault(task_id, [seq, seq])
        if task_id in spans:
            spans[task_id][1] = seq
    return sorted((a, b, t) for t, (a, b) in spans.items())


async def questions(sim: Any, session: Any) -> list[str]:
    memory = await sim.read_durable(session.actor_atespace, session.actor_name)
    return list(memory.get("questions") or [])


async def test_reject_answers_kagent_reason_and_retry_hint_on_every_binding(env, store, sim):
    await apply_agent(store, sim)
    first = await start_slow_turn(env.grpc_address, 5)
    before = await store.queued_turns(uuid.UUID(first.context_id))
    for policy in (None, "reject"):
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await send(env.grpc_address, message("again", first.context_id, policy))
        assert e.value.code() == grpc.StatusCode.ABORTED and "already running" in (e.value.details() or "")
        status = status_pb2.Status.FromString(dict(e.value.trailing_metadata() or ())["grpc-status-details-bin"])
        info = error_details_pb2.ErrorInfo()
        status.details[0].Unpack(info)
        assert (info.reason, info.domain, dict(info.metadata)) == (
            "KAGENT_SEND_NOT_ACCEPTED", "kagent.dev", {"retryAfterMs": "100"})
    # JSON-RPC: the reason and the hint in the error's data (an ErrorInfo's metadata)
    r = await env.http.post(f"{env.base}/api/a2a/kagent/my-first-agent/jsonrpc", headers=HTTP_AUTH, json={
        "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
            "messageId": str(uuid.uuid4()), "role": "ROLE_USER", "contextId": first.context_id,
            "parts": [{"text": "again"}]}}})
    error = r.json()["error"]
    assert "already running" in error["message"]
    metadata = error["data"][0]["metadata"]
    assert metadata["reason"] == "KAGENT_SEND_NOT_ACCEPTED" and metadata["retryAfterMs"] == "100"
    # HTTP+JSON answers the same details
    r = await env.http.post(f"{env.base}/api/a2a/kagent/my-first-agent/rest/message:send", headers=HTTP_AUTH, json={
        "message": {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "contextId": first.context_id,
                    "parts": [{"text": "again"}]}})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["details"][0]["metadata"]["retryAfterMs"] == "100"
    assert await store.queued_turns(uuid.UUID(first.context_id)) == before == []


async def test_enqueue_many_concurrent_senders_keep_order_and_never_overlap(env, store, sim, database_url):
    await apply_agent(store, sim)
    first = await start_slow_turn(env.grpc_address, 2)
    sid = first.context_id
    racers = 12
    answers = await asyncio.gather(*(send(env.grpc_address, message(f"Remember the number {i}.", sid, "enqueue"))
                                     for i in range(racers)))
    assert all(t.status.state == a2a_pb2.TASK_STATE_SUBMITTED for t in answers)
    assert len({t.id for t in answers}) == racers
    order = await store.queued_turns(uuid.UUID(sid))  # arrival order, as admitted under the row lock
    assert sorted(order) == sorted(t.id for t in answers)
    states = await until_final(store, [first.id, *order])
    assert set(states.values()) == {"TASK_STATE_COMPLETED"}
    session = await store.session_by_id(uuid.UUID(sid))
    assert session is not None
    ran = await questions(sim, session)
    # every message ran once, in the order it was queued
    numbers = [int(q.split()[-1].rstrip(".")) for q in ran[1:]]
    by_task = {t.id: int(t.history[0].parts[0].text.split()[-1].rstrip(".")) for t in answers}
    assert numbers == [by_task[tid] for tid in order]
    # never two turns at once: the runs' spans in the Session's history do not overlap
    spans = await run_intervals(database_url, sid)
    assert [t for _, _, t in spans] == [first.id, *order]
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))
    assert await store.queued_turns(uuid.UUID(sid)) == []


async def test_interrupt_cancels_the_running_turn_and_runs_next(env, store, sim):
    await apply_agent(store, sim)
    first = await start_slow_turn(env.grpc_address, 30)
    waiting = await send(env.grpc_address, message("What is 1+1?", first.context_id, "enqueue"))
    interrupting = await send(env.grpc_address, message("What is 2+2?", first.context_id, "interrupt"))
    assert interrupting.status.state == a2a_pb2.TASK_STATE_SUBMITTED
    # the interrupting turn goes ahead of the waiting one (either may already have left the queue: the
    # cancel of the running turn can end it, and a quick turn after it, before this read; the order
    # the agent was asked in is checked below)
    assert await store.queued_turns(uuid.UUID(first.context_id)) in ([interrupting.id, waiting.id], [waiting.id], [])
    states = await until_final(store, [first.id, interrupting.id, waiting.id], timeout=25)
    assert states == {first.id: "TASK_STATE_CANCELED", interrupting.id: "TASK_STATE_COMPLETED",
                      waiting.id: "TASK_STATE_COMPLETED"}
    session = await store.session_by_id(uuid.UUID(first.context_id))
    assert session is not None
    assert await questions(sim, session) == ["What is 2+2?", "What is 1+1?"]  # the canceled turn saved nothing


async def test_a_queued_turn_is_cancellable_and_never_runs(env, store, sim):
    await apply_agent(store, sim)
    first = await start_slow_turn(env.grpc_address, 2)
    queued = await send(env.grpc_address, message("What is 3+3?", first.context_id, "enqueue"))
    kept = await send(env.grpc_address, message("What is 4+4?", first.context_id, "enqueue"))
    async with grpc.aio.insecure_channel(env.grpc_address) as channel:
        canceled = await a2a_pb2_grpc.A2AServiceStub(channel).CancelTask(
            a2a_pb2.CancelTaskRequest(tenant=TENANT, id=queued.id), metadata=AUTH, timeout=30)
    assert canceled.status.state == a2a_pb2.TASK_STATE_CANCELED
    states = await until_final(store, [first.id, kept.id])
    assert states[kept.id] == "TASK_STATE_COMPLETED"
    session = await store.session_by_id(uuid.UUID(first.context_id))
    assert session is not None
    assert "What is 3+3?" not in await questions(sim, session)


async def test_a_blocking_send_of_a_queued_turn_waits_for_its_answer(env, store, sim):
    await apply_agent(store, sim)
    first = await start_slow_turn(env.grpc_address, 1)
    request = message("What is 5+5?", first.context_id, "enqueue")
    request.configuration.return_immediately = False
    task = await send(env.grpc_address, request)
    assert task.status.state == a2a_pb2.TASK_STATE_COMPLETED and "10" in task.status.message.parts[0].text


async def test_bad_policy_and_a_full_queue_write_nothing(database_url, store, sim):
    settings = settings_for_a2a(**{"sessions.maxQueuedTurns": 2})
    await apply_agent(store, sim)
    async with a2a_env(settings, database_url, store, sim) as e:
        # an unknown name: INVALID_ARGUMENT before anything is written (no new conversation either)
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            before = (await (await conn.execute("SELECT count(*) FROM sessionq.sessions")).fetchone())
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await send(e.grpc_address, message("hello", "", "later"))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "busyPolicy" in (err.value.details() or "")
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            assert (await (await conn.execute("SELECT count(*) FROM sessionq.sessions")).fetchone()) == before
        first = await start_slow_turn(e.grpc_address, 5)
        sid = uuid.UUID(first.context_id)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await send(e.grpc_address, message("hello", first.context_id, "later"))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        for i in range(2):
            await send(e.grpc_address, message(f"q{i}", first.context_id, "enqueue"))
        tasks_before = await store.count_tasks(sid, None)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await send(e.grpc_address, message("one too many", first.context_id, "enqueue"))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "maxQueuedTurns" in (err.value.details() or "")
        assert await store.count_tasks(sid, None) == tasks_before
        assert len(await store.queued_turns(sid)) == 2


async def test_agent_busy_policy_is_the_default_and_is_validated(env, store, sim):
    spec = parse_spec({"name": "my-first-agent", "busyPolicy": "enqueue"})
    assert spec.to_json()["busyPolicy"] == "enqueue"
    for bad in ("later", 3, ""):
        with pytest.raises(Exception) as err:
            parse_spec({"name": "x", "busyPolicy": bad})
        assert "busyPolicy must be one of reject, enqueue, interrupt" in str(err.value)
    await store.apply_agent(spec.namespace, spec.name, spec.to_json(), spec.spec_hash(), spec.image,
                            compile_egress(spec), "alice")
    agent = await store.get_agent(spec.namespace, spec.name)
    await prepare_revision(store, sim, agent.desired_revision_id)
    first = await start_slow_turn(env.grpc_address, 2)
    queued = await send(env.grpc_address, message("What is 7+7?", first.context_id))  # the Agent's enqueue
    assert queued.status.state == a2a_pb2.TASK_STATE_SUBMITTED
    with pytest.raises(grpc.aio.AioRpcError) as err:  # the message's own choice wins
        await send(env.grpc_address, message("What is 8+8?", first.context_id, "reject"))
    assert err.value.code() == grpc.StatusCode.ABORTED
    assert (await until_final(store, [queued.id]))[queued.id] == "TASK_STATE_COMPLETED"


async def test_deleting_the_session_fails_its_queued_turns(env, store, sim):
    await apply_agent(store, sim)
    first = await start_slow_turn(env.grpc_address, 30)
    queued = [await send(env.grpc_address, message(f"q{i}", first.context_id, "enqueue")) for i in range(3)]
    sid = uuid.UUID(first.context_id)
    adm = await store.admit_operation(sid, "alice", None, OperationKind.DELETE)
    assert adm is not None
    states = await until_final(store, [t.id for t in queued], timeout=60)
    assert set(states.values()) == {"TASK_STATE_FAILED"}
    for t in queued:
        task = await store.get_task(t.id)
        assert task is not None and task.phase == "abandoned" and "never ran" in str(task.task)
    assert await store.queued_turns(sid) == []


async def test_enqueue_across_two_api_servers(database_url, pooled_url, store, sim):
    """Senders spread over two API servers, each with its own pool and LISTEN connection (as two
    processes have): every message is queued once and runs once, in the order it was admitted."""
    settings = settings_for_a2a()
    await apply_agent(store, sim)
    second_store = await Store.open(pooled_url, pool_size=8, direct_url=database_url)
    async with a2a_env(settings, database_url, store, sim) as e:
        other = ApiServer(settings, second_store, address="127.0.0.1:0", runtime=sim)
        await other.start()
        try:
            addresses = [e.grpc_address, f"127.0.0.1:{other.port}"]
            first = await start_slow_turn(addresses[0], 2)
            sid = first.context_id
            answers = await asyncio.gather(*(
                send(addresses[i % 2], message(f"Remember the number {i}.", sid, "enqueue")) for i in range(10)))
            order = await store.queued_turns(uuid.UUID(sid))
            assert sorted(order) == sorted(t.id for t in answers)
            states = await until_final(store, [first.id, *order], timeout=120)
        finally:
            await other.stop(0)
            await second_store.close()
    assert set(states.values()) == {"TASK_STATE_COMPLETED"}
    session = await store.session_by_id(uuid.UUID(sid))
    assert session is not None
    by_task = {t.id: t.history[0].parts[0].text for t in answers}
    assert (await questions(sim, session))[1:] == [by_task[tid] for tid in order]
