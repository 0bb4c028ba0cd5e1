"""Test helpers for a conversation over A2A's gRPC binding: a Session of the tutorial's Agent, a
user message, a blocking SendMessage and the text of its answer (tests of several domains use them)."""

import grpc
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc

from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc

TENANT = "kagent/my-first-agent"


async def new_session(api, user="alice"):
    r = await sessions_pb2_grpc.SessionServiceStub(api.channel).CreateSession(
        sessions_pb2.CreateSessionRequest(request_id=f"s-{user}", agent=common_pb2.ResourceReference(
            namespace="kagent", name="my-first-agent")), metadata=api.md(user), timeout=10)
    return r.session.id


def message(text, context_id="", task_id=""):
    return a2a_pb2.Message(message_id=f"m-{abs(hash((text, context_id, task_id)))}", role=a2a_pb2.ROLE_USER,
                           context_id=context_id, task_id=task_id, parts=[a2a_pb2.Part(text=text)])


async def send(api, text, context_id="", task_id="", user="alice", tenant=TENANT, timeout=15):
    stub = a2a_pb2_grpc.A2AServiceStub(api.channel)
    r = await stub.SendMessage(a2a_pb2.SendMessageRequest(tenant=tenant, message=message(text, context_id, task_id)),
                               metadata=api.md(user), timeout=timeout)
    return r.task


def answer(task):
    return " ".join(p.text for p in task.status.message.parts)


async def code_of(call):
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await call
    return e.value.code(), e.value.details()
