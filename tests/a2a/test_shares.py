"""Shares over A2A: a READ_ONLY share reads (GetTask, ListTasks, SubscribeToTask) but may not write
(SendMessage, CancelTask, push configs: PERMISSION_DENIED); a READ_WRITE share continues the
conversation; without the share the same tasks are TaskNotFound (A2A-2)."""

from __future__ import annotations

import grpc
import pytest
from a2a.client import ClientCallContext
from a2a.client.errors import A2AClientError
from a2a.types import a2a_pb2
from a2a.utils.errors import TaskNotFoundError
from conftest import apply_agent
from harness import a2a_settings, as_user, env, user_message  # noqa: F401 - fixtures

from sessionq._pb.kagent.api.v1alpha1 import sessions_pb2, sessions_pb2_grpc

pytestmark = pytest.mark.timeout(180)


def with_share(token: str, user: str = "bob") -> ClientCallContext:
    return ClientCallContext(service_parameters={"authorization": f"Bearer {user}-token",
                                                 "x-kagent-share-token": token}, timeout=30)


async def share(env, session_id: str, permission: int) -> str:
    async with grpc.aio.insecure_channel(env.grpc_address) as ch:
        r = await sessions_pb2_grpc.SessionServiceStub(ch).CreateSessionShare(
            sessions_pb2.CreateSessionShareRequest(session_id=session_id, permission=permission, ttl={"seconds": 600}),
            metadata=[("authorization", "Bearer alice-token")], timeout=10)
        return r.token


@pytest.mark.clause("A2A-2")
async def test_read_only_and_read_write_shares(env, store, sim):
    await apply_agent(store, sim)
    async with env.client("GRPC", streaming=False) as client:
        events = [e async for e in client.send_message(a2a_pb2.SendMessageRequest(
            message=user_message("[input-required] Book a table")), context=as_user())]
        waiting = events[-1].task
        assert waiting.status.state == a2a_pb2.TASK_STATE_INPUT_REQUIRED
        ro = with_share(await share(env, waiting.context_id, sessions_pb2.SESSION_SHARE_PERMISSION_READ_ONLY))

        # reads
        got = await client.get_task(a2a_pb2.GetTaskRequest(id=waiting.id), context=ro)
        assert got.id == waiting.id
        listed = await client.list_tasks(a2a_pb2.ListTasksRequest(), context=ro)
        assert [t.id for t in listed.tasks] == [waiting.id]
        async with env.client("GRPC", streaming=True) as streamer:
            subscribed = [e async for e in streamer.subscribe(a2a_pb2.SubscribeToTaskRequest(id=waiting.id), context=ro)]
        assert subscribed[0].task.status.state == a2a_pb2.TASK_STATE_INPUT_REQUIRED

        # writes: PERMISSION_DENIED, nothing changed
        for call in (
            client.cancel_task(a2a_pb2.CancelTaskRequest(id=waiting.id), context=ro),
            client.create_task_push_notification_config(a2a_pb2.TaskPushNotificationConfig(
                task_id=waiting.id, url="http://127.0.0.1:9/x"), context=ro),
        ):
            with pytest.raises(A2AClientError, match="PERMISSION_DENIED"):
                await call
        with pytest.raises(A2AClientError, match="PERMISSION_DENIED"):
            async for _ in client.send_message(a2a_pb2.SendMessageRequest(
                    message=user_message("for two", waiting.context_id, waiting.id)), context=ro):
                pass
        assert (await client.get_task(a2a_pb2.GetTaskRequest(id=waiting.id), context=as_user())).status.state == \
            a2a_pb2.TASK_STATE_INPUT_REQUIRED

        # without the share: TaskNotFound; with a READ_WRITE share: the conversation goes on
        with pytest.raises(TaskNotFoundError):
            await client.get_task(a2a_pb2.GetTaskRequest(id=waiting.id), context=as_user("bob"))
        rw = with_share(await share(env, waiting.context_id, sessions_pb2.SESSION_SHARE_PERMISSION_READ_WRITE))
        events = [e async for e in client.send_message(a2a_pb2.SendMessageRequest(
            message=user_message("for two", waiting.context_id, waiting.id)), context=rw)]
        assert events[-1].task.status.state == a2a_pb2.TASK_STATE_COMPLETED
