"""Why did it fail? The failure of an operation's last attempt reaches the client's error message
over gRPC, end to end (the runtime's error, recorded by the worker, read back by the API)."""

import grpc
import pytest
from conftest import apply_agent

from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc
from sessionq.runtime.base import Code

pytestmark = pytest.mark.pooler  # also run through PgBouncer (make test-pooler)

AGENT = common_pb2.ResourceReference(namespace="kagent", name="my-first-agent")


async def test_the_last_attempts_failure_reaches_the_clients_message(api, store, sim):
    await apply_agent(store, sim)
    await sim.inject("create_actor", "fail_before", code=Code.RESOURCE_EXHAUSTED, times=None)
    stub = sessions_pb2_grpc.SessionServiceStub(api.channel)
    request = sessions_pb2.CreateSessionRequest(request_id="why-1", agent=AGENT)
    with pytest.raises(grpc.aio.AioRpcError) as first:
        await stub.CreateSession(request, metadata=api.md(), timeout=4)
    # the first call may end before the worker recorded its attempt; the same call again follows it
    details = first.value.details()
    for _ in range(5):
        if "its last attempt failed" in details:
            break
        with pytest.raises(grpc.aio.AioRpcError) as again:
            await stub.CreateSession(request, metadata=api.md(), timeout=4)
        assert again.value.code() == grpc.StatusCode.UNAVAILABLE, again.value.details()
        details = again.value.details()
    assert "its last attempt failed (RuntimeError: " in details and "RESOURCE_EXHAUSTED" in details, details
    assert "retry the same call" in details and len(details) < 600
    # the Session itself says the same to a reader
    listed = await stub.ListSessions(sessions_pb2.ListSessionsRequest(), metadata=api.md(), timeout=5)
    (session,) = listed.sessions
    assert session.failure.reason == "RuntimeError" and "RESOURCE_EXHAUSTED" in session.failure.message
    # once the runtime recovers, the same request id completes the creation
    await sim.clear_faults()
    done = None
    for _ in range(10):
        try:
            done = await stub.CreateSession(request, metadata=api.md(), timeout=8)
            break
        except grpc.aio.AioRpcError as e:
            assert e.code() == grpc.StatusCode.UNAVAILABLE, e.details()
    assert done is not None and done.session.id == session.id
