"""kagent's SandboxService over real gRPC: the lifecycle through the worker, idempotent creation,
ownership hiding, bad input (nothing written), and the wall between Sandboxes and Sessions."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from conftest import apply_agent
from google.protobuf.duration_pb2 import Duration

from sessionq._pb.kagent.api.v1alpha1 import (
    common_pb2,
    runtime_pb2,
    sandboxes_pb2,
    sandboxes_pb2_grpc,
    sessions_pb2,
    sessions_pb2_grpc,
)

pytestmark = pytest.mark.pooler  # also run through PgBouncer (make test-pooler)

TEMPLATE = common_pb2.ResourceReference(namespace="kagent", name="my-first-agent")
R = runtime_pb2


def stub(api: Any) -> sandboxes_pb2_grpc.SandboxServiceStub:
    return sandboxes_pb2_grpc.SandboxServiceStub(api.channel)


async def create(api: Any, request_id: str = "sb-1", user: str = "alice", **kw: Any) -> sandboxes_pb2.Sandbox:
    req = sandboxes_pb2.CreateSandboxRequest(sandbox_template=kw.pop("template", TEMPLATE), request_id=request_id, **kw)
    return (await stub(api).CreateSandbox(req, metadata=api.md(user), timeout=15)).sandbox


async def code_of(coro: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await coro
    return e.value.code(), e.value.details() or ""


async def rows(store: Any) -> int:
    async with store.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM sessionq.sessions")
        row = await cur.fetchone()
        return int(row["n"])


@pytest.mark.clause("OP-1")
@pytest.mark.clause("OP-7")
@pytest.mark.clause("SUS-1")
@pytest.mark.clause("DEL-4")
@pytest.mark.clause("DEL-9")
async def test_sandbox_lifecycle_create_get_list_suspend_resume_delete(api, store, sim):
    await apply_agent(store, sim)
    s = stub(api)
    md = api.md()
    sb = await create(api, name="scratch", ttl=Duration(seconds=600))
    assert (sb.state, sb.operation) == (R.RUNTIME_STATE_READY, R.RUNTIME_OPERATION_NONE)
    assert (sb.creator, sb.name, sb.sandbox_template) == ("alice", "scratch", TEMPLATE)
    agent = await store.get_agent("kagent", "my-first-agent")
    assert sb.prepared_revision == str(agent.latest_successful_revision_id)
    assert 599 <= sb.expires_at.seconds - sb.created_at.seconds <= 600
    # a retry with the same request id and input returns the same Sandbox (current state)
    assert (await create(api, name="scratch", ttl=Duration(seconds=600))).id == sb.id
    got = (await s.GetSandbox(sandboxes_pb2.GetSandboxRequest(sandbox_id=sb.id), metadata=md, timeout=5)).sandbox
    assert got == sb
    listed = await s.ListSandboxes(sandboxes_pb2.ListSandboxesRequest(), metadata=md, timeout=5)
    assert [x.id for x in listed.sandboxes] == [sb.id]
    other = common_pb2.ResourceReference(namespace="kagent", name="another")
    none = await s.ListSandboxes(sandboxes_pb2.ListSandboxesRequest(sandbox_template=other), metadata=md, timeout=5)
    assert list(none.sandboxes) == []

    sus = (await s.SuspendSandbox(sandboxes_pb2.SuspendSandboxRequest(sandbox_id=sb.id), metadata=md, timeout=15)).sandbox
    assert (sus.state, sus.operation) == (R.RUNTIME_STATE_SUSPENDED, R.RUNTIME_OPERATION_NONE)
    again = (await s.SuspendSandbox(sandboxes_pb2.SuspendSandboxRequest(sandbox_id=sb.id), metadata=md, timeout=15)).sandbox
    assert again.state == R.RUNTIME_STATE_SUSPENDED  # a no-op at the target state
    res = (await s.ResumeSandbox(sandboxes_pb2.ResumeSandboxRequest(sandbox_id=sb.id), metadata=md, timeout=15)).sandbox
    assert res.state == R.RUNTIME_STATE_READY and res.expires_at == sb.expires_at  # activity never extends it
    actor = await sim.get_actor("kagent", f"sandbox-{sb.id}")
    assert actor.state.value == "ACTOR_STATE_RUNNING"

    gone = (await s.DeleteSandbox(sandboxes_pb2.DeleteSandboxRequest(sandbox_id=sb.id), metadata=md, timeout=15)).sandbox
    assert (gone.state, gone.operation, gone.prepared_revision) == (R.RUNTIME_STATE_DELETED, R.RUNTIME_OPERATION_NONE, "")
    code, _ = await code_of(s.GetSandbox(sandboxes_pb2.GetSandboxRequest(sandbox_id=sb.id), metadata=md, timeout=5))
    assert code == grpc.StatusCode.NOT_FOUND
    code, _ = await code_of(s.DeleteSandbox(sandboxes_pb2.DeleteSandboxRequest(sandbox_id=sb.id), metadata=md, timeout=5))
    assert code == grpc.StatusCode.NOT_FOUND
    code, message = await code_of(create(api, name="scratch", ttl=Duration(seconds=600)))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "deleted sandbox cannot be recreated" in message
    with pytest.raises(Exception):
        await sim.get_actor("kagent", f"sandbox-{sb.id}")


async def test_an_omitted_ttl_takes_the_configured_default(api, store, sim, settings):
    await apply_agent(store, sim)
    sb = await create(api)
    assert sb.expires_at.seconds - sb.created_at.seconds == pytest.approx(settings.sandboxes.default_ttl, abs=1)


@pytest.mark.clause("CRE-9")
async def test_a_reused_request_id_with_other_input_is_already_exists(api, store, sim):
    await apply_agent(store, sim)
    await create(api, name="a")
    for kw in ({"name": "b"}, {"name": "a", "ttl": Duration(seconds=5)}):
        code, message = await code_of(create(api, **kw))
        assert code == grpc.StatusCode.ALREADY_EXISTS and "different parameters" in message


async def test_another_users_sandbox_answers_like_a_missing_one(api, store, sim):
    await apply_agent(store, sim)
    sb = await create(api)
    s = stub(api)
    bob = api.md("bob")
    for method, request in (
        ("GetSandbox", sandboxes_pb2.GetSandboxRequest(sandbox_id=sb.id)),
        ("SuspendSandbox", sandboxes_pb2.SuspendSandboxRequest(sandbox_id=sb.id)),
        ("ResumeSandbox", sandboxes_pb2.ResumeSandboxRequest(sandbox_id=sb.id)),
        ("DeleteSandbox", sandboxes_pb2.DeleteSandboxRequest(sandbox_id=sb.id)),
    ):
        code, message = await code_of(getattr(s, method)(request, metadata=bob, timeout=5))
        assert (code, message) == (grpc.StatusCode.NOT_FOUND, f"sandbox {sb.id} not found"), method
    assert list((await s.ListSandboxes(sandboxes_pb2.ListSandboxesRequest(), metadata=bob, timeout=5)).sandboxes) == []
    # bob's own request id "sb-1" is his: a Sandbox of his own, not alice's
    assert (await create(api, user="bob")).id != sb.id
    still = (await s.GetSandbox(sandboxes_pb2.GetSandboxRequest(sandbox_id=sb.id), metadata=api.md(), timeout=5)).sandbox
    assert still.state == R.RUNTIME_STATE_READY


async def test_sandboxes_and_sessions_are_apart(api, store, sim):
    await apply_agent(store, sim)
    sb = await create(api)
    sessions = sessions_pb2_grpc.SessionServiceStub(api.channel)
    md = api.md()
    session = (await sessions.CreateSession(sessions_pb2.CreateSessionRequest(request_id="sb-1", agent=TEMPLATE),
                                            metadata=md, timeout=15)).session
    assert session.id != sb.id
    code, _ = await code_of(sessions.GetSession(sessions_pb2.GetSessionRequest(session_id=sb.id), metadata=md, timeout=5))
    assert code == grpc.StatusCode.NOT_FOUND
    code, _ = await code_of(stub(api).GetSandbox(sandboxes_pb2.GetSandboxRequest(sandbox_id=session.id), metadata=md, timeout=5))
    assert code == grpc.StatusCode.NOT_FOUND
    listed = await sessions.ListSessions(sessions_pb2.ListSessionsRequest(), metadata=md, timeout=5)
    assert [s.id for s in listed.sessions] == [session.id]
    code, _ = await code_of(sessions.CreateSessionShare(
        sessions_pb2.CreateSessionShareRequest(session_id=sb.id, permission=sessions_pb2.SESSION_SHARE_PERMISSION_READ_ONLY),
        metadata=md, timeout=5))
    assert code == grpc.StatusCode.NOT_FOUND


@pytest.mark.clause("CRE-3")
@pytest.mark.clause("CRE-8")
@pytest.mark.parametrize(("kw", "code", "words"), [
    ({"template": common_pb2.ResourceReference(namespace="kagent", name="missing")}, grpc.StatusCode.NOT_FOUND,
     "agent kagent/missing not found"),
    ({"request_id": "a\x01b"}, grpc.StatusCode.INVALID_ARGUMENT, "control characters"),
    ({"request_id": ""}, grpc.StatusCode.INVALID_ARGUMENT, "request_id"),
    ({"request_id": "r" * 129}, grpc.StatusCode.INVALID_ARGUMENT, "request_id"),
    ({"name": "n" * 201}, grpc.StatusCode.INVALID_ARGUMENT, "name"),
    ({"ttl": Duration(seconds=0)}, grpc.StatusCode.INVALID_ARGUMENT, "ttl"),
    ({"ttl": Duration(seconds=86401)}, grpc.StatusCode.INVALID_ARGUMENT, "ttl"),
    ({"template": common_pb2.ResourceReference(namespace="Bad NS", name="x")}, grpc.StatusCode.INVALID_ARGUMENT,
     "sandbox_template.namespace"),
])
async def test_bad_create_input_is_refused_and_writes_nothing(api, store, sim, kw, code, words):
    await apply_agent(store, sim)
    kw = dict(kw)  # the parameter is shared by the runs of this case (inproc and wire)
    request_id = kw.pop("request_id", "bad")
    got, message = await code_of(create(api, request_id, **kw))
    assert got == code and words in message and "Traceback" not in message
    assert await rows(store) == 0


async def test_bad_ids_and_unknown_sandboxes(api, store, sim):
    s = stub(api)
    md = api.md()
    code, message = await code_of(s.GetSandbox(sandboxes_pb2.GetSandboxRequest(sandbox_id="nope"), metadata=md, timeout=5))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "sandbox_id" in message
    missing = "0190c8e6-0000-7000-8000-000000000000"
    code, message = await code_of(s.ResumeSandbox(sandboxes_pb2.ResumeSandboxRequest(sandbox_id=missing), metadata=md, timeout=5))
    assert (code, message) == (grpc.StatusCode.NOT_FOUND, f"sandbox {missing} not found")
    code, _ = await code_of(s.ListSandboxes(sandboxes_pb2.ListSandboxesRequest(page=common_pb2.PageRequest(page_token="!!")),
                                            metadata=md, timeout=5))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    code, _ = await code_of(s.GetSandbox(sandboxes_pb2.GetSandboxRequest(sandbox_id=missing), timeout=5))
    assert code == grpc.StatusCode.UNAUTHENTICATED


async def test_list_pages_by_id(api, store, sim):
    await apply_agent(store, sim)
    ids = [(await create(api, f"p{i}")).id for i in range(3)]
    s = stub(api)
    page = await s.ListSandboxes(sandboxes_pb2.ListSandboxesRequest(page=common_pb2.PageRequest(limit=2)),
                                 metadata=api.md(), timeout=5)
    assert [x.id for x in page.sandboxes] == ids[:2] and page.page.next_page_token
    rest = await s.ListSandboxes(sandboxes_pb2.ListSandboxesRequest(
        page=common_pb2.PageRequest(limit=2, page_token=page.page.next_page_token)), metadata=api.md(), timeout=5)
    assert [x.id for x in rest.sandboxes] == ids[2:] and not rest.page.next_page_token


async def test_a_session_share_grants_nothing_on_sandboxes(api, store, sim):
    await apply_agent(store, sim)
    sb = await create(api)
    sessions = sessions_pb2_grpc.SessionServiceStub(api.channel)
    session = (await sessions.CreateSession(sessions_pb2.CreateSessionRequest(request_id="s", agent=TEMPLATE),
                                            metadata=api.md(), timeout=15)).session
    share = await sessions.CreateSessionShare(sessions_pb2.CreateSessionShareRequest(
        session_id=session.id, permission=sessions_pb2.SESSION_SHARE_PERMISSION_READ_WRITE), metadata=api.md(), timeout=5)
    bob = [*api.md("bob"), ("x-kagent-share-token", share.token)]
    # the share works for its Session ...
    await sessions.GetSession(sessions_pb2.GetSessionRequest(session_id=session.id), metadata=bob, timeout=5)
    # ... and for no Sandbox
    code, _ = await code_of(stub(api).GetSandbox(sandboxes_pb2.GetSandboxRequest(sandbox_id=sb.id), metadata=bob,
                                                 timeout=5))
    assert code == grpc.StatusCode.NOT_FOUND
