"""FleetService over gRPC: creation with labels and an idle TTL, label changes and their rules."""

import grpc
import pytest
from conftest import make_settings
from fleet_agent import prepared_agent
from lifecycle import count, ready_checkpoint

from sessionq._pb.kagent.api.v1alpha1 import common_pb2, runtime_pb2, sessions_pb2, sessions_pb2_grpc
from sessionq._pb.sessionq.v1 import fleet_pb2, fleet_pb2_grpc

AGENT = common_pb2.ResourceReference(namespace="kagent", name="my-first-agent")


@pytest.fixture
def settings():
    return make_settings(**{"sessions.maxIdleTtl": 30 * 86400.0})


def fleet(api):
    return fleet_pb2_grpc.FleetServiceStub(api.channel)


async def code_of(call):
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await call
    return e.value.code(), e.value.details()


async def create(api, request_id="r1", labels=None, ttl=None, user="alice"):
    req = fleet_pb2.CreateSessionRequest(
        session=sessions_pb2.CreateSessionRequest(request_id=request_id, agent=AGENT), labels=labels or {}
    )
    if ttl is not None:
        req.idle_ttl.FromSeconds(ttl)
    return (await fleet(api).CreateSession(req, metadata=api.md(user), timeout=10)).session


@pytest.mark.clause("FLEET-1")
async def test_create_with_labels_and_ttl_then_change_them(api, store, sim):
    await prepared_agent(store)
    s = await create(api, labels={"team": "billing", "example.com/tier": "gold"}, ttl=3600)
    assert s.session.state == runtime_pb2.RUNTIME_STATE_READY
    assert dict(s.labels) == {"team": "billing", "example.com/tier": "gold"}
    assert s.idle_ttl.seconds == 3600 and s.actor_state == fleet_pb2.ACTOR_STATE_SUSPENDED
    # kagent's own reads still answer the Session
    got = await sessions_pb2_grpc.SessionServiceStub(api.channel).GetSession(
        sessions_pb2.GetSessionRequest(session_id=s.session.id), metadata=api.md(), timeout=10)
    assert got.session.id == s.session.id
    # a retry with the same request id and labels joins; other labels: ALREADY_EXISTS
    again = await create(api, labels={"team": "billing", "example.com/tier": "gold"}, ttl=3600)
    assert again.session.id == s.session.id
    code, _ = await code_of(create(api, labels={"team": "other"}, ttl=3600))
    assert code == grpc.StatusCode.ALREADY_EXISTS
    up = await fleet(api).UpdateSessionLabels(
        fleet_pb2.UpdateSessionLabelsRequest(session_id=s.session.id, set={"env": "prod"}, remove=["team"]),
        metadata=api.md(), timeout=10)
    assert dict(up.session.labels) == {"example.com/tier": "gold", "env": "prod"}
    ttl = await fleet(api).SetSessionIdleTtl(fleet_pb2.SetSessionIdleTtlRequest(session_id=s.session.id),
                                             metadata=api.md(), timeout=10)
    assert not ttl.session.HasField("idle_ttl")  # back to the default


@pytest.mark.clause("FLEET-1")
async def test_label_rules_and_bad_input_write_nothing(api, store, sim):
    await prepared_agent(store)
    bad_labels = [
        {f"k{i}": "v" for i in range(33)},  # too many
        {"k": "v" * 64},  # value too long
        {"x" * 64: "v"},  # name too long
        {"-bad": "v"},  # invalid key
        {"Bad.Prefix/k": "v"},  # upper case prefix
        {"a/b/c": "v"},
        {"k": "has space"},
        {"k": "nul\x00"},
        {"": "v"},
    ]
    for labels in bad_labels:
        code, details = await code_of(create(api, labels=labels))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (labels, details)
        assert len(details) < 300
    for ttl in (-5, 0, 31 * 86400):  # negative, never (not allowed here), above sessions.maxIdleTtl
        code, details = await code_of(create(api, ttl=ttl))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (ttl, details)
    assert await count(store, "SELECT count(*) FROM sessionq.sessions") == 0
    ok = await create(api, labels={f"k{i}": "v" * 63 for i in range(32)})
    assert len(ok.labels) == 32


@pytest.mark.clause("FLEET-1")
async def test_who_may_change_labels(api, store, sim):
    await prepared_agent(store)
    s = await create(api, labels={"team": "a"})
    kagent = sessions_pb2_grpc.SessionServiceStub(api.channel)
    tokens = {}
    for perm in (sessions_pb2.SESSION_SHARE_PERMISSION_READ_ONLY, sessions_pb2.SESSION_SHARE_PERMISSION_READ_WRITE):
        r = await kagent.CreateSessionShare(sessions_pb2.CreateSessionShareRequest(session_id=s.session.id, permission=perm),
                                            metadata=api.md(), timeout=10)
        tokens[perm] = r.token
    req = fleet_pb2.UpdateSessionLabelsRequest(session_id=s.session.id, set={"team": "b"})
    # another user's Session answers as a missing one
    code, details = await code_of(fleet(api).UpdateSessionLabels(req, metadata=api.md("bob"), timeout=10))
    assert code == grpc.StatusCode.NOT_FOUND
    missing = fleet_pb2.UpdateSessionLabelsRequest(session_id="0190a4b6-0000-7000-8000-000000000000", set={"team": "b"})
    code2, details2 = await code_of(fleet(api).UpdateSessionLabels(missing, metadata=api.md("bob"), timeout=10))
    assert code2 == grpc.StatusCode.NOT_FOUND and details.split()[0] == details2.split()[0]
    ro = [*api.md("bob"), ("x-kagent-share-token", tokens[sessions_pb2.SESSION_SHARE_PERMISSION_READ_ONLY])]
    code, _ = await code_of(fleet(api).UpdateSessionLabels(req, metadata=ro, timeout=10))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    # a reader sees the labels (they are not secrets)
    seen = await fleet(api).GetSession(fleet_pb2.GetSessionRequest(session_id=s.session.id), metadata=ro, timeout=10)
    assert dict(seen.session.labels) == {"team": "a"}
    rw = [*api.md("bob"), ("x-kagent-share-token", tokens[sessions_pb2.SESSION_SHARE_PERMISSION_READ_WRITE])]
    done = await fleet(api).UpdateSessionLabels(req, metadata=rw, timeout=10)
    assert dict(done.session.labels) == {"team": "b"}


@pytest.mark.clause("FLEET-1")
async def test_a_fork_copies_the_labels(store, sim):
    cp = await ready_checkpoint(store, sim)
    src = await store.session_by_id(cp.session_id)
    assert src is not None
    await store.set_session_labels(src.id, "alice", None, {"team": "billing"}, [])
    fork = await store.admit_fork(cp.id, "alice", "fork-1")
    assert fork.session.labels == {"team": "billing"}
