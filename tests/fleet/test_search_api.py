"""FleetService's search, count and bulk actions over gRPC: who sees what, bad input, dry runs."""

import grpc
import pytest
from fleet_agent import prepared_agent
from lifecycle import count

from sessionq._pb.kagent.api.v1alpha1 import common_pb2, runtime_pb2, sessions_pb2, sessions_pb2_grpc
from sessionq._pb.sessionq.v1 import fleet_pb2, fleet_pb2_grpc

AGENT = common_pb2.ResourceReference(namespace="kagent", name="my-first-agent")


async def code_of(call):
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await call
    return e.value.code(), e.value.details()


@pytest.mark.clause("FLEET-2")
@pytest.mark.clause("FLEET-4")
async def test_search_count_and_bulk_over_grpc(api, store):
    await prepared_agent(store)
    fleet = fleet_pb2_grpc.FleetServiceStub(api.channel)
    ids = {}
    for user, rid, team in (("alice", "a1", "billing"), ("alice", "a2", "billing"), ("alice", "a3", "search"),
                            ("bob", "b1", "billing")):
        r = await fleet.CreateSession(fleet_pb2.CreateSessionRequest(
            session=sessions_pb2.CreateSessionRequest(request_id=rid, agent=AGENT), labels={"team": team}),
            metadata=api.md(user), timeout=10)
        ids[rid] = r.session.session.id
    billing = fleet_pb2.SessionFilter(selector="team=billing")

    async def search(flt, user="alice", limit=1):
        found, token = [], ""
        while True:
            r = await fleet.SearchSessions(fleet_pb2.SearchSessionsRequest(
                filter=flt, page=common_pb2.PageRequest(limit=limit, page_token=token)), metadata=api.md(user), timeout=10)
            found += [s.session.id for s in r.sessions]
            token = r.page.next_page_token
            if not token:
                return found

    assert await search(billing) == [ids["a1"], ids["a2"]]  # one a page, in id order, the caller's own
    everyone = fleet_pb2.SessionFilter(selector="team=billing", all_creators=True)
    assert await search(everyone, "admin") == [ids["a1"], ids["a2"], ids["b1"]]
    assert (await fleet.CountSessions(fleet_pb2.CountSessionsRequest(filter=everyone), metadata=api.md("admin"),
                                      timeout=10)).count == 3
    ready = fleet_pb2.SessionFilter(states=[runtime_pb2.RUNTIME_STATE_READY], agent=AGENT,
                                    actor_states=[fleet_pb2.ACTOR_STATE_SUSPENDED])
    assert len(await search(ready, limit=50)) == 3
    for flt, user, code in (
        (everyone, "alice", grpc.StatusCode.PERMISSION_DENIED),  # every creator's: administrators only
        (fleet_pb2.SessionFilter(creator="bob"), "alice", grpc.StatusCode.PERMISSION_DENIED),
        (fleet_pb2.SessionFilter(selector="team in (a"), "alice", grpc.StatusCode.INVALID_ARGUMENT),
        (fleet_pb2.SessionFilter(selector="Bad_/x=1"), "alice", grpc.StatusCode.INVALID_ARGUMENT),
        (fleet_pb2.SessionFilter(selector="k=" + "v" * 100), "alice", grpc.StatusCode.INVALID_ARGUMENT),
        (fleet_pb2.SessionFilter(states=[runtime_pb2.RUNTIME_STATE_UNSPECIFIED]), "alice",
         grpc.StatusCode.INVALID_ARGUMENT),
    ):
        got, details = await code_of(fleet.CountSessions(fleet_pb2.CountSessionsRequest(filter=flt),
                                                         metadata=api.md(user), timeout=10))
        assert got == code and len(details) < 300, (flt, details)
    bad_token = fleet_pb2.SearchSessionsRequest(filter=billing, page=common_pb2.PageRequest(page_token="nope"))
    assert (await code_of(fleet.SearchSessions(bad_token, metadata=api.md(), timeout=10)))[0] == \
        grpc.StatusCode.INVALID_ARGUMENT
    # a dry run: the count and the first page, nothing written
    dry = await fleet.StartBulkAction(fleet_pb2.StartBulkActionRequest(
        kind=fleet_pb2.BULK_ACTION_KIND_DELETE, filter=everyone, dry_run=True), metadata=api.md("admin"), timeout=10)
    assert dry.count == 3 and len(dry.first_page) == 3 and not dry.HasField("action")
    assert await count(store, "SELECT count(*) FROM sessionq.bulk_actions") == 0
    for req, code in (
        (fleet_pb2.StartBulkActionRequest(request_id="x", filter=billing), grpc.StatusCode.INVALID_ARGUMENT),
        (fleet_pb2.StartBulkActionRequest(kind=fleet_pb2.BULK_ACTION_KIND_SUSPEND, filter=billing),
         grpc.StatusCode.INVALID_ARGUMENT),  # no request id
        (fleet_pb2.StartBulkActionRequest(request_id="x", kind=fleet_pb2.BULK_ACTION_KIND_SUSPEND, filter=billing,
                                          idle_ttl={"seconds": 5}), grpc.StatusCode.INVALID_ARGUMENT),
        (fleet_pb2.StartBulkActionRequest(request_id="x", kind=fleet_pb2.BULK_ACTION_KIND_SET_IDLE_TTL,
                                          filter=billing, idle_ttl={"seconds": 0}), grpc.StatusCode.INVALID_ARGUMENT),
    ):
        assert (await code_of(fleet.StartBulkAction(req, metadata=api.md(), timeout=10)))[0] == code, req
    assert await count(store, "SELECT count(*) FROM sessionq.bulk_actions") == 0
    # an administrator suspends every creator's billing Sessions
    started = await fleet.StartBulkAction(fleet_pb2.StartBulkActionRequest(
        request_id="suspend-billing", kind=fleet_pb2.BULK_ACTION_KIND_SUSPEND, filter=everyone),
        metadata=api.md("admin"), timeout=10)
    assert started.action.matched == 3
    for _ in range(200):
        got = await fleet.GetBulkAction(fleet_pb2.GetBulkActionRequest(id=started.action.id), metadata=api.md("admin"),
                                        timeout=10)
        if got.action.state == fleet_pb2.BULK_ACTION_STATE_DONE:
            break
        await __import__("asyncio").sleep(0.05)
    assert got.action.processed == 3 and got.action.admitted + got.action.refused == 3
    assert (await code_of(fleet.GetBulkAction(fleet_pb2.GetBulkActionRequest(id=started.action.id),
                                              metadata=api.md("alice"), timeout=10)))[0] == grpc.StatusCode.NOT_FOUND


@pytest.mark.clause("FLEET-2")
async def test_search_and_count_include_what_a_share_grants(api, store):
    """GetSession's rule: a non-administrator's search and count cover its own Sessions and the one
    a share token it presents grants; another user's unshared Session stays invisible, as does a
    revoked share's. A bulk action (and its dry run) stays on the caller's own Sessions."""
    await prepared_agent(store)
    fleet = fleet_pb2_grpc.FleetServiceStub(api.channel)
    kagent = sessions_pb2_grpc.SessionServiceStub(api.channel)
    ids = {}
    for user, rid in (("alice", "shared"), ("alice", "private"), ("bob", "own")):
        r = await fleet.CreateSession(fleet_pb2.CreateSessionRequest(
            session=sessions_pb2.CreateSessionRequest(request_id=rid, agent=AGENT), labels={"team": "billing"}),
            metadata=api.md(user), timeout=10)
        ids[rid] = r.session.session.id
    share = await kagent.CreateSessionShare(sessions_pb2.CreateSessionShareRequest(
        session_id=ids["shared"], permission=sessions_pb2.SESSION_SHARE_PERMISSION_READ_ONLY),
        metadata=api.md("alice"), timeout=10)
    with_share = [*api.md("bob"), ("x-kagent-share-token", share.token)]
    billing = fleet_pb2.SessionFilter(selector="team=billing")

    async def seen(md, flt=billing):
        r = await fleet.SearchSessions(fleet_pb2.SearchSessionsRequest(filter=flt), metadata=md, timeout=10)
        n = await fleet.CountSessions(fleet_pb2.CountSessionsRequest(filter=flt), metadata=md, timeout=10)
        found = [s.session.id for s in r.sessions]
        assert n.count == len(found)
        return found

    # labels, a TTL and a turn's worth of idle clock differ between the Sessions: a page shows each
    # as GetSession does (search_session_views' columns make the same message as the whole row)
    await fleet.SetSessionIdleTtl(fleet_pb2.SetSessionIdleTtlRequest(session_id=ids["own"], idle_ttl={"seconds": 90}),
                                  metadata=api.md("bob"), timeout=10)
    page = await fleet.SearchSessions(fleet_pb2.SearchSessionsRequest(filter=billing), metadata=with_share, timeout=10)
    for found in page.sessions:
        got = await fleet.GetSession(fleet_pb2.GetSessionRequest(session_id=found.session.id), metadata=with_share,
                                     timeout=10)
        assert found == got.session
    assert await seen(api.md("bob")) == [ids["own"]]  # alice's Sessions: not shared with this call
    assert await seen(with_share) == sorted([ids["shared"], ids["own"]])  # never alice's private one
    assert await seen(with_share, fleet_pb2.SessionFilter(selector="team=other")) == []  # the filter still holds
    # a user with no Sessions of its own (an administrator not asking for every creator's): what
    # the token grants, nothing else
    assert await seen([*api.md("admin"), ("x-kagent-share-token", share.token)]) == [ids["shared"]]
    assert await seen([*api.md("admin"), ("x-kagent-share-token", "not-a-token")]) == []
    # a bulk action acts as the owner would: its dry run covers bob's own Session only
    dry = await fleet.StartBulkAction(fleet_pb2.StartBulkActionRequest(
        kind=fleet_pb2.BULK_ACTION_KIND_SUSPEND, filter=billing, dry_run=True), metadata=with_share, timeout=10)
    assert dry.count == 1 and [s.session.id for s in dry.first_page] == [ids["own"]]
    # revoked: invisible again
    await kagent.RevokeSessionShare(sessions_pb2.RevokeSessionShareRequest(share_id=share.share.id),
                                    metadata=api.md("alice"), timeout=10)
    assert await seen(with_share) == [ids["own"]]


async def test_search_session_views_answers_a_session_view_and_the_fleets_fields(aconn):
    """SearchSessions reads its page by column name: search_session_views answers one column per
    field of a SessionView, the fleet's four and `ord`, no more, so a field added to SessionView
    (and to get_session_views, tests/sessions/test_session_proto.py) and not here fails."""
    from sessionq.models import FleetSessionView, SessionView

    cur = await aconn.execute("SELECT proargnames[pronargs + 1:] FROM pg_proc WHERE proname = 'search_session_views'"
                              " AND pronamespace = 'sessionq'::regnamespace")
    [(columns,)] = await cur.fetchall()
    fleet = set(FleetSessionView._fields) - {"view"}
    assert set(columns) == {"ord", *SessionView._fields, *fleet}
