import grpc
import pytest
from conftest import apply_agent

from sessionq._pb.kagent.api.v1alpha1 import common_pb2, runtime_pb2, sessions_pb2, sessions_pb2_grpc

pytestmark = pytest.mark.pooler  # also run through PgBouncer (make test-pooler)


async def test_create_suspend_resume_delete_over_grpc(api, store, sim):
    await apply_agent(store, sim)
    stub = sessions_pb2_grpc.SessionServiceStub(api.channel)
    agent = common_pb2.ResourceReference(namespace="kagent", name="my-first-agent")
    r = await stub.CreateSession(sessions_pb2.CreateSessionRequest(request_id="a", agent=agent), metadata=api.md(), timeout=10)
    assert r.session.state == runtime_pb2.RUNTIME_STATE_READY
    sid = r.session.id
    r = await stub.SuspendSession(sessions_pb2.SuspendSessionRequest(session_id=sid), metadata=api.md(), timeout=10)
    assert r.session.state == runtime_pb2.RUNTIME_STATE_SUSPENDED
    r = await stub.ResumeSession(sessions_pb2.ResumeSessionRequest(session_id=sid), metadata=api.md(), timeout=10)
    assert r.session.state == runtime_pb2.RUNTIME_STATE_READY
    r = await stub.DeleteSession(sessions_pb2.DeleteSessionRequest(session_id=sid), metadata=api.md(), timeout=10)
    assert r.session.state == runtime_pb2.RUNTIME_STATE_DELETED
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.GetSession(sessions_pb2.GetSessionRequest(session_id=sid), metadata=api.md(), timeout=10)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
