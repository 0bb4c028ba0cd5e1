"""SessionService over gRPC: status codes, bad input, identity, shares, restarts."""

import asyncio
import uuid

import grpc
import psycopg
import pytest
from conftest import apply_agent, running_worker
from lifecycle import count

from sessionq._pb.kagent.api.v1alpha1 import common_pb2, runtime_pb2, sessions_pb2, sessions_pb2_grpc
from sessionq.api.server import ApiServer
from sessionq.errors import SessionqError

pytestmark = pytest.mark.pooler  # also run through PgBouncer (make test-pooler)

AGENT = common_pb2.ResourceReference(namespace="kagent", name="my-first-agent")


def stub(api):
    return sessions_pb2_grpc.SessionServiceStub(api.channel)


async def code_of(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await call
    return e.value.code(), e.value.details()


async def create(api, request_id="r1", user="alice", name=""):
    r = await stub(api).CreateSession(
        sessions_pb2.CreateSessionRequest(request_id=request_id, agent=AGENT, name=name), metadata=api.md(user), timeout=10
    )
    return r.session


@pytest.mark.clause("CRE-8")
async def test_bad_create_input_is_invalid_argument_and_writes_nothing(api, store, sim):
    await apply_agent(store, sim)
    s = stub(api)
    cases = [
        sessions_pb2.CreateSessionRequest(request_id="", agent=AGENT),
        sessions_pb2.CreateSessionRequest(request_id="x" * 129, agent=AGENT),
        sessions_pb2.CreateSessionRequest(request_id="ok", agent=AGENT, name="n" * 201),
        sessions_pb2.CreateSessionRequest(request_id="ok", agent=AGENT, name="bad\x07name"),
        sessions_pb2.CreateSessionRequest(request_id="ok", agent=AGENT, name=" padded"),
        sessions_pb2.CreateSessionRequest(request_id="ok"),
        sessions_pb2.CreateSessionRequest(request_id="ok", agent=common_pb2.ResourceReference(namespace="Bad_NS", name="a")),
    ]
    for req in cases:
        code, details = await code_of(s.CreateSession(req, metadata=api.md(), timeout=10))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (req, details)
        assert details
    assert await count(store, "SELECT count(*) FROM sessionq.sessions") == 0
    ok = await create(api, "x" * 128, name="n" * 200)
    assert ok.state == runtime_pb2.RUNTIME_STATE_READY


async def test_status_codes_of_create(api, store, sim):
    code, details = await code_of(create(api))
    assert code == grpc.StatusCode.NOT_FOUND and "agent kagent/my-first-agent not found" in details
    await apply_agent(store, sim)
    first = await create(api, "dup")
    code, _ = await code_of(create(api, "dup", name="other"))
    assert code == grpc.StatusCode.ALREADY_EXISTS
    again = await create(api, "dup")
    assert again.id == first.id
    await stub(api).DeleteSession(sessions_pb2.DeleteSessionRequest(session_id=first.id), metadata=api.md(), timeout=10)
    code, details = await code_of(create(api, "dup"))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "deleted" in details


@pytest.mark.clause("DEL-9")
async def test_delete_twice_over_grpc(api, store, sim):
    await apply_agent(store, sim)
    s = await create(api)
    r = await stub(api).DeleteSession(sessions_pb2.DeleteSessionRequest(session_id=s.id), metadata=api.md(), timeout=10)
    assert r.session.state == runtime_pb2.RUNTIME_STATE_DELETED and r.session.operation == runtime_pb2.RUNTIME_OPERATION_NONE
    code, _ = await code_of(stub(api).DeleteSession(sessions_pb2.DeleteSessionRequest(session_id=s.id), metadata=api.md(), timeout=10))
    assert code == grpc.StatusCode.NOT_FOUND


async def test_ids_identity_and_other_users(api, store, sim):
    await apply_agent(store, sim)
    s = await create(api)
    st = stub(api)
    code, details = await code_of(st.GetSession(sessions_pb2.GetSessionRequest(session_id="nope"), metadata=api.md(), timeout=5))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "session_id must be a UUID" in details
    missing = "0198c3d7-4f2a-7b61-9c3e-5d8f7a2b4e10"
    c1, d1 = await code_of(st.GetSession(sessions_pb2.GetSessionRequest(session_id=missing), metadata=api.md(), timeout=5))
    c2, d2 = await code_of(st.GetSession(sessions_pb2.GetSessionRequest(session_id=s.id), metadata=api.md("bob"), timeout=5))
    assert c1 == c2 == grpc.StatusCode.NOT_FOUND
    assert d1.replace(missing, "ID") == d2.replace(s.id, "ID")  # indistinguishable
    for kind in ("SuspendSession", "ResumeSession", "DeleteSession"):
        req = getattr(sessions_pb2, f"{kind}Request")(session_id=s.id)
        code, _ = await code_of(getattr(st, kind)(req, metadata=api.md("bob"), timeout=5))
        assert code == grpc.StatusCode.NOT_FOUND
    code, _ = await code_of(st.GetSession(sessions_pb2.GetSessionRequest(session_id=s.id), timeout=5))
    assert code == grpc.StatusCode.UNAUTHENTICATED
    code, _ = await code_of(st.GetSession(sessions_pb2.GetSessionRequest(session_id=s.id),
                                          metadata=[("authorization", "Bearer wrong")], timeout=5))
    assert code == grpc.StatusCode.UNAUTHENTICATED
    code, _ = await code_of(st.ListSessions(sessions_pb2.ListSessionsRequest(all_creators=True), metadata=api.md(), timeout=5))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    r = await st.ListSessions(sessions_pb2.ListSessionsRequest(all_creators=True), metadata=api.md("admin"), timeout=5)
    assert [x.id for x in r.sessions] == [s.id]


async def test_list_paging_and_limits(api, store, sim):
    await apply_agent(store, sim)
    ids = [(await create(api, f"r{i}")).id for i in range(5)]
    st = stub(api)
    for limit in (-1, 101):
        code, _ = await code_of(st.ListSessions(sessions_pb2.ListSessionsRequest(page=common_pb2.PageRequest(limit=limit)),
                                                metadata=api.md(), timeout=5))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
    code, _ = await code_of(st.ListSessions(sessions_pb2.ListSessionsRequest(page=common_pb2.PageRequest(page_token="@@")),
                                            metadata=api.md(), timeout=5))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    seen, token = [], ""
    while True:
        r = await st.ListSessions(sessions_pb2.ListSessionsRequest(page=common_pb2.PageRequest(limit=2, page_token=token)),
                                  metadata=api.md(), timeout=5)
        seen += [x.id for x in r.sessions]
        token = r.page.next_page_token
        if not token:
            break
    assert seen == sorted(ids)
    r = await st.ListSessions(sessions_pb2.ListSessionsRequest(page=common_pb2.PageRequest(limit=5)), metadata=api.md(), timeout=5)
    assert len(r.sessions) == 5 and r.page.next_page_token == ""


async def test_shares_and_rename(api, store, sim):
    await apply_agent(store, sim)
    s = await create(api)
    st = stub(api)
    r = await st.UpdateSessionName(sessions_pb2.UpdateSessionNameRequest(session_id=s.id, name="renamed"), metadata=api.md(), timeout=5)
    assert r.session.name == "renamed"
    share = await st.CreateSessionShare(
        sessions_pb2.CreateSessionShareRequest(session_id=s.id, permission=sessions_pb2.SESSION_SHARE_PERMISSION_READ_ONLY,
                                              ttl={"seconds": 3600}), metadata=api.md(), timeout=5)
    assert share.token
    bob = [*api.md("bob"), ("x-kagent-share-token", share.token)]
    got = await st.GetSession(sessions_pb2.GetSessionRequest(session_id=s.id), metadata=bob, timeout=5)
    assert got.session.name == "renamed"
    code, _ = await code_of(st.UpdateSessionName(sessions_pb2.UpdateSessionNameRequest(session_id=s.id, name="x"), metadata=bob, timeout=5))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    code, _ = await code_of(st.SuspendSession(sessions_pb2.SuspendSessionRequest(session_id=s.id), metadata=bob, timeout=5))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    for bad in (sessions_pb2.CreateSessionShareRequest(session_id=s.id, ttl={"seconds": 60}),
                sessions_pb2.CreateSessionShareRequest(session_id=s.id, permission=1, ttl={"seconds": 0}),
                sessions_pb2.CreateSessionShareRequest(session_id=s.id, permission=1, ttl={"seconds": -5})):
        code, _ = await code_of(st.CreateSessionShare(bad, metadata=api.md(), timeout=5))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
    listed = await st.ListSessionShares(sessions_pb2.ListSessionSharesRequest(session_id=s.id), metadata=api.md(), timeout=5)
    assert [x.id for x in listed.shares] == [share.share.id]
    await st.RevokeSessionShare(sessions_pb2.RevokeSessionShareRequest(share_id=share.share.id), metadata=api.md(), timeout=5)
    code, _ = await code_of(st.GetSession(sessions_pb2.GetSessionRequest(session_id=s.id), metadata=bob, timeout=5))
    assert code == grpc.StatusCode.NOT_FOUND


@pytest.mark.clause("OP-16")
async def test_pending_operation_survives_api_restart(settings, database_url, store, sim):
    await apply_agent(store, sim)

    async def call(server):
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
        try:
            return await sessions_pb2_grpc.SessionServiceStub(channel).CreateSession(
                sessions_pb2.CreateSessionRequest(request_id="survive", agent=AGENT),
                metadata=[("authorization", "Bearer alice-token")], timeout=1.5)
        finally:
            await channel.close()

    first = ApiServer(settings, store, address="127.0.0.1:0")
    await first.start()
    code, details = await code_of(call(first))  # no worker runs: the creation stays pending
    assert code == grpc.StatusCode.UNAVAILABLE and "retry the same call" in details
    await first.stop(0)
    pending = (await store.list_sessions("alice", False, None, None, None, 10))[0]
    assert pending.operation == "CREATE" and pending.state == "CREATING"

    second = ApiServer(settings, store, address="127.0.0.1:0")
    await second.start()
    try:
        async with running_worker(settings, database_url, store, sim):
            r = await call(second)
        assert r.session.id == str(pending.id) and r.session.state == runtime_pb2.RUNTIME_STATE_READY
        assert (await store.session_by_id(pending.id)).operation_id == pending.operation_id
    finally:
        await second.stop(0)
    assert await sim.mutation_count(method="create_actor") == 1
    await asyncio.sleep(0)


async def test_volume_source_without_admission_and_the_token_never_stored(api, store, sim):
    """Issue 20: a volume source is refused FAILED_PRECONDITION when no volume admission is
    configured (sessionq has none); an admission token alone passes and is never stored."""
    await apply_agent(store, sim)
    st = stub(api)
    volume = sessions_pb2.SessionVolumeSource(
        snapshot=sessions_pb2.SessionVolumeSnapshot(csi_driver="ebs.csi.aws.com", snapshot_handle="snap-0abc"),
        capacity="20Gi")
    code, details = await code_of(st.CreateSession(sessions_pb2.CreateSessionRequest(
        request_id="v1", agent=AGENT, volume_source=volume, admission_token="proof-123"), metadata=api.md(), timeout=10))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "volume admission" in details
    assert "proof-123" not in details
    r = await st.CreateSession(sessions_pb2.CreateSessionRequest(request_id="v2", agent=AGENT, admission_token="proof-456"),
                               metadata=api.md(), timeout=10)
    assert not r.session.HasField("volume_source") and not r.session.HasField("last_quiescence_failure")
    async with store.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) FROM sessionq.sessions WHERE to_jsonb(sessions)::text LIKE '%proof-%'")
        assert (await cur.fetchone())["count"] == 0
        cur = await conn.execute("SELECT count(*) FROM sessionq.sessions WHERE request_id = 'v1'")
        assert (await cur.fetchone())["count"] == 0


async def test_share_without_ttl_lasts_until_revoked(api, store, sim):
    """Issue 20: an unset ttl takes shares.maxTtl; without one (the default) the share never expires."""
    await apply_agent(store, sim)
    s = await create(api, request_id="sh1")
    st = stub(api)
    share = await st.CreateSessionShare(sessions_pb2.CreateSessionShareRequest(session_id=s.id, permission=1),
                                        metadata=api.md(), timeout=10)
    assert share.token and not share.share.HasField("expires_at")
    got = await st.GetSession(sessions_pb2.GetSessionRequest(session_id=s.id),
                              metadata=[*api.md("bob"), ("x-kagent-share-token", share.token)], timeout=10)
    assert got.session.id == s.id
    timed = await st.CreateSessionShare(sessions_pb2.CreateSessionShareRequest(
        session_id=s.id, permission=1, ttl={"seconds": 60}), metadata=api.md(), timeout=10)
    assert timed.share.expires_at.seconds - timed.share.created_at.seconds == 60


async def test_share_ttl_defaults_to_and_is_bounded_by_max_ttl(settings, store):
    from sessionq.api.sessions import share_ttl

    unset = sessions_pb2.CreateSessionShareRequest(session_id=str(uuid.uuid4()), permission=1)
    assert share_ttl(unset, 0.0) is None
    assert share_ttl(unset, 3600.0) == 3600.0
    within = sessions_pb2.CreateSessionShareRequest(permission=1, ttl={"seconds": 60})
    assert share_ttl(within, 3600.0) == 60.0
    over = sessions_pb2.CreateSessionShareRequest(permission=1, ttl={"seconds": 7200})
    with pytest.raises(SessionqError) as e:
        share_ttl(over, 3600.0)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "shares.maxTtl" in e.value.message


async def test_200_concurrent_get_sessions_answer_each_caller_as_alone(api, store, sim, database_url):
    """Coalesced reads (issue 23) over gRPC: 200 concurrent GetSession calls of alice's and bob's
    Sessions, a missing one and a malformed id, by alice and bob, each answered as the same call
    alone (the Session, or the same status and message)."""
    await apply_agent(store, sim)
    ids = [(await create(api, f"r{i}", user)).id for i, user in enumerate(["alice", "alice", "bob"])]
    ids += [str(uuid.uuid4()), "nope"]
    st = stub(api)

    async def call(sid: str, user: str):
        try:
            r = await st.GetSession(sessions_pb2.GetSessionRequest(session_id=sid), metadata=api.md(user), timeout=10)
            return ("ok", r.session.SerializeToString(deterministic=True))
        except grpc.aio.AioRpcError as e:
            return (e.code(), e.details())

    pairs = [(sid, user) for sid in ids for user in ("alice", "bob")]
    alone = {p: await call(*p) for p in pairs}
    assert sum(1 for o in alone.values() if o[0] == "ok") == 3
    assert {o[0] for o in alone.values()} == {"ok", grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT}
    before = store.reads.batches  # GetSession's coalescer (get_session_views)
    racers = [pairs[i % len(pairs)] for i in range(200)]
    # the sessions table locked from another connection holds the first read's statement in flight,
    # so the others queue behind it and go in batches: each caller still answered as alone
    lock = await psycopg.AsyncConnection.connect(database_url)
    await lock.execute("LOCK TABLE sessionq.sessions IN ACCESS EXCLUSIVE MODE")
    racing = asyncio.gather(*(call(*p) for p in racers))
    for _ in range(500):
        if len(store.reads.queue) >= 100:
            break
        await asyncio.sleep(0.01)
    await lock.rollback()
    await lock.close()
    got = await racing
    for p, outcome in zip(racers, got, strict=True):
        assert outcome == alone[p], p
    assert store.reads.batches > before  # some of them shared a statement
    assert store.reads.largest > 1
