"""Every A2A RPC with the a2a-sdk's own clients on gRPC, JSON-RPC and HTTP+JSON (A2A-1, A2A-2, A2A-3)."""

from __future__ import annotations

import asyncio

import pytest
from a2a.client.errors import A2AClientError
from a2a.types import a2a_pb2
from a2a.utils.errors import InvalidParamsError, TaskNotCancelableError, TaskNotFoundError
from conftest import apply_agent
from harness import TRANSPORTS, a2a_settings, answer, as_user, env, user_message  # noqa: F401 - fixtures

pytestmark = pytest.mark.timeout(180)


async def send(client, text, context_id="", task_id="", user="alice", **config) -> a2a_pb2.Task:
    request = a2a_pb2.SendMessageRequest(message=user_message(text, context_id, task_id))
    for key, value in config.items():
        setattr(request.configuration, key, value)
    last = None
    async for event in client.send_message(request, context=as_user(user)):
        last = event
    assert last is not None and last.HasField("task")
    return last.task


@pytest.mark.clause("A2A-1")
@pytest.mark.clause("A2A-2")
@pytest.mark.clause("A2A-3")
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_every_rpc(env, store, sim, transport):
    await apply_agent(store, sim)
    async with env.client(transport, streaming=False) as client:
        # SendMessage, blocking: a new conversation, then a continuation of its context
        t1 = await send(client, "What is 2+2?")
        assert t1.status.state == a2a_pb2.TASK_STATE_COMPLETED and "4" in answer(t1)
        t2 = await send(client, "What did I ask you first?", t1.context_id)
        assert "What is 2+2?" in answer(t2) and t2.context_id == t1.context_id

        # GetTask with history_length
        got = await client.get_task(a2a_pb2.GetTaskRequest(id=t1.id, history_length=1), context=as_user())
        assert got.id == t1.id and len(got.history) == 1 and got.status.state == a2a_pb2.TASK_STATE_COMPLETED

        # ListTasks: paged, filtered, only what the caller may see
        page = await client.list_tasks(a2a_pb2.ListTasksRequest(page_size=1), context=as_user())
        assert [t.id for t in page.tasks] == [t2.id] and page.total_size == 2 and page.next_page_token
        rest = await client.list_tasks(
            a2a_pb2.ListTasksRequest(page_size=1, page_token=page.next_page_token), context=as_user()
        )
        assert [t.id for t in rest.tasks] == [t1.id] and not rest.next_page_token
        assert (await client.list_tasks(a2a_pb2.ListTasksRequest(), context=as_user("bob"))).total_size == 0
        done = await client.list_tasks(
            a2a_pb2.ListTasksRequest(status=a2a_pb2.TASK_STATE_WORKING, context_id=t1.context_id), context=as_user()
        )
        assert done.total_size == 0

        # return_immediately: answered once the Actor created the task, still working
        quick = await send(client, "[slow:3] What is 3*3?", t1.context_id, return_immediately=True)
        assert quick.status.state in (a2a_pb2.TASK_STATE_SUBMITTED, a2a_pb2.TASK_STATE_WORKING)

        # CancelTask of the running task: the Actor is told, the task ends CANCELED; again: the same
        canceled = await client.cancel_task(a2a_pb2.CancelTaskRequest(id=quick.id), context=as_user())
        assert canceled.status.state == a2a_pb2.TASK_STATE_CANCELED
        for _ in range(100):  # the job ends the task, then tells the Actor
            calls = [c for c in await sim.calls() if c["method"] == "cancel_turn"]
            if calls:
                break
            await asyncio.sleep(0.05)
        assert [c["detail"]["task_id"] for c in calls] == [quick.id]
        again = await client.cancel_task(a2a_pb2.CancelTaskRequest(id=quick.id), context=as_user())
        assert again.status.state == a2a_pb2.TASK_STATE_CANCELED
        # ... and of a finished one: TaskNotCancelable
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(a2a_pb2.CancelTaskRequest(id=t1.id), context=as_user())
        # the Session takes a new turn after the cancel (the turn was ended)
        t4 = await send(client, "What is 5+5?", t1.context_id)
        assert "10" in answer(t4)

        # push notification configs: create, get, list, delete (token and credentials are never returned)
        config = a2a_pb2.TaskPushNotificationConfig(
            task_id=t4.id, id="hook", url="http://127.0.0.1:9/hook", token="tok",
            authentication=a2a_pb2.AuthenticationInfo(scheme="Bearer", credentials="s3cret"),
        )
        created = await client.create_task_push_notification_config(config, context=as_user())
        assert created.id == "hook" and created.url == config.url and not created.authentication.credentials
        fetched = await client.get_task_push_notification_config(
            a2a_pb2.GetTaskPushNotificationConfigRequest(task_id=t4.id, id="hook"), context=as_user()
        )
        assert fetched.authentication.scheme == "Bearer" and not fetched.token and not created.token  # write-only
        listed = await client.list_task_push_notification_configs(
            a2a_pb2.ListTaskPushNotificationConfigsRequest(task_id=t4.id), context=as_user()
        )
        assert [c.id for c in listed.configs] == ["hook"]
        await client.delete_task_push_notification_config(
            a2a_pb2.DeleteTaskPushNotificationConfigRequest(task_id=t4.id, id="hook"), context=as_user()
        )
        assert not (await client.list_task_push_notification_configs(
            a2a_pb2.ListTaskPushNotificationConfigsRequest(task_id=t4.id), context=as_user()
        )).configs

        # the extended card, for an authenticated caller
        card = await client.get_extended_agent_card(a2a_pb2.GetExtendedAgentCardRequest(), context=as_user())
        assert card.name == "my-first-agent" and "revision" in card.description

        # TaskNotFound: a missing task, another user's task and context, alike (A2A-1, A2A-2)
        for call in (
            client.get_task(a2a_pb2.GetTaskRequest(id="no-such-task"), context=as_user()),
            client.get_task(a2a_pb2.GetTaskRequest(id=t1.id), context=as_user("bob")),
            client.cancel_task(a2a_pb2.CancelTaskRequest(id=t1.id), context=as_user("bob")),
            client.get_task_push_notification_config(
                a2a_pb2.GetTaskPushNotificationConfigRequest(task_id=t1.id, id="hook"), context=as_user("bob")),
            send(client, "hi", t1.context_id, user="bob"),
            send(client, "hi", task_id=t1.id, user="bob"),
            send(client, "hi", "0198c3d7-4f2a-7b61-9c3e-5d8f7a2b4e10"),
        ):
            with pytest.raises(TaskNotFoundError):
                await call
        # bad input: a negative history length is InvalidParams, nothing sent to the agent
        with pytest.raises((InvalidParamsError, A2AClientError)):
            await client.get_task(a2a_pb2.GetTaskRequest(id=t1.id, history_length=-1), context=as_user())


@pytest.mark.clause("A2A-1")
@pytest.mark.parametrize("reason", ["user_requested", "idle_timeout"])
async def test_deleted_and_expired_session_tasks_are_task_not_found(env, store, sim, reason):
    from uuid import UUID

    from sessionq.models import DeletionReason, OperationKind, SessionState

    await apply_agent(store, sim)
    async with env.client("JSONRPC", streaming=False) as client, env.client("GRPC", streaming=True) as streamer:
        waiting = await send(client, "[input-required] Book a table")
        sid = UUID(waiting.context_id)
        from sessionq.errors import SessionqError

        for _ in range(200):  # the turn's quiescence may still be recording its snapshot
            try:
                await store.admit_operation(sid, "alice", None, OperationKind.DELETE, DeletionReason(reason))
                break
            except SessionqError:
                await asyncio.sleep(0.05)
        for _ in range(200):
            s = await store.session_by_id(sid)
            if s is None or s.state == SessionState.DELETED:  # an expired Session's row goes
                break
            await asyncio.sleep(0.05)
        assert s is None or s.state == SessionState.DELETED
        if reason == "idle_timeout":
            assert await store.get_task(waiting.id) is not None  # kept in PostgreSQL (IDLE-13), not visible
        for call in (
            client.get_task(a2a_pb2.GetTaskRequest(id=waiting.id), context=as_user()),
            client.cancel_task(a2a_pb2.CancelTaskRequest(id=waiting.id), context=as_user()),
            send(client, "for two", waiting.context_id, waiting.id),
            send(client, "hi", waiting.context_id),
        ):
            with pytest.raises(TaskNotFoundError):
                await call
        with pytest.raises(TaskNotFoundError):
            async for _ in streamer.subscribe(a2a_pb2.SubscribeToTaskRequest(id=waiting.id), context=as_user()):
                pass
        assert (await client.list_tasks(a2a_pb2.ListTasksRequest(), context=as_user())).total_size == 0
