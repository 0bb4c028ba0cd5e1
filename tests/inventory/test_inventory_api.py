"""InventoryService over gRPC: who sees which Actors and Workers, paging, bad input (INV-*)."""

from __future__ import annotations

import asyncio
import time
from uuid import UUID

import grpc
import pytest
from conftest import apply_agent

from sessionq import metrics
from sessionq._pb.kagent.api.v1alpha1 import common_pb2, runtime_pb2, sessions_pb2, sessions_pb2_grpc
from sessionq._pb.sessionq.v1 import inventory_pb2, inventory_pb2_grpc
from sessionq.api.server import SERVICE_NAMES
from sessionq.runtime.base import Code

AGENT = common_pb2.ResourceReference(namespace="kagent", name="my-first-agent")


def inventory(api):
    return inventory_pb2_grpc.InventoryServiceStub(api.channel)


def sessions(api):
    return sessions_pb2_grpc.SessionServiceStub(api.channel)


async def create(api, request_id: str, user: str) -> sessions_pb2.Session:
    r = await sessions(api).CreateSession(
        sessions_pb2.CreateSessionRequest(request_id=request_id, agent=AGENT),
        metadata=api.md(user), timeout=10,
    )
    assert r.session.state == runtime_pb2.RUNTIME_STATE_READY
    return r.session


async def actors(api, md, atespace: str = "", limit: int = 0, token: str = ""):
    page = common_pb2.PageRequest(limit=limit, page_token=token)
    return await inventory(api).ListActors(
        inventory_pb2.ListActorsRequest(atespace=atespace, page=page), metadata=md, timeout=10
    )


async def workers(api, md, limit: int = 0, token: str = "") -> inventory_pb2.ListWorkersResponse:
    return await inventory(api).ListWorkers(
        inventory_pb2.ListWorkersRequest(page=common_pb2.PageRequest(limit=limit, page_token=token)),
        metadata=md, timeout=10,
    )


async def code_of(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await call
    return e.value.code(), e.value.details()


@pytest.fixture
async def three_sessions(api, store, sim):
    await apply_agent(store, sim)
    a1 = await create(api, "a1", "alice")
    a2 = await create(api, "a2", "alice")
    b1 = await create(api, "b1", "bob")
    return a1, a2, b1


@pytest.mark.clause("INV-1")
async def test_users_see_only_their_sessions_actors_admin_sees_all(api, sim, three_sessions):
    a1, a2, b1 = three_sessions
    # an Actor no Session knows (e.g. left over by hand): only admins see it
    await sim.create_actor_template("other", "tpl", "img")
    await sim.create_actor("other", "stray", "other/tpl")
    alice = await actors(api, api.md("alice"))
    assert sorted(a.name for a in alice.actors) == sorted([f"session-{a1.id}", f"session-{a2.id}"])
    assert alice.page.next_page_token == ""
    assert all(a.uid and a.state == "ACTOR_STATE_SUSPENDED" and a.template for a in alice.actors)
    bob = await actors(api, api.md("bob"))
    assert [a.name for a in bob.actors] == [f"session-{b1.id}"]
    admin = await actors(api, api.md("admin"))
    assert len(admin.actors) == 4 and "stray" in {a.name for a in admin.actors}
    # a share token makes the shared Session's Actor visible to its holder
    share = await sessions(api).CreateSessionShare(
        sessions_pb2.CreateSessionShareRequest(
            session_id=b1.id, permission=sessions_pb2.SESSION_SHARE_PERMISSION_READ_ONLY, ttl={"seconds": 600}
        ),
        metadata=api.md("bob"), timeout=10,
    )
    shared = await actors(api, [*api.md("alice"), ("x-kagent-share-token", share.token)])
    assert len(shared.actors) == 3
    # the request scope
    assert (await actors(api, api.md("admin"), atespace="other")).actors[0].name == "stray"
    assert (await actors(api, api.md("alice"), atespace="other")).actors == []


@pytest.mark.clause("INV-2")
@pytest.mark.clause("INV-3")
async def test_paging_with_tokens_and_cursors_grant_nothing(api, three_sessions):
    a1, a2, b1 = three_sessions
    seen = []
    token = ""
    for _ in range(5):
        page = await actors(api, api.md("admin"), limit=1, token=token)
        seen += [a.name for a in page.actors]
        token = page.page.next_page_token
        if not token:
            break
    assert seen == sorted(f"session-{s.id}" for s in (a1, a2, b1))
    # alice continuing from admin's cursor sees only what she may see
    first = await actors(api, api.md("admin"), limit=1)
    rest = await actors(api, api.md("alice"), limit=100, token=first.page.next_page_token)
    mine = sorted(f"session-{s.id}" for s in (a1, a2))
    assert [a.name for a in rest.actors] == [n for n in mine if n > first.actors[0].name]


@pytest.mark.clause("INV-1")
async def test_workers_admins_see_all_others_only_the_worker_holding_their_actor(
    api, store, sim, three_sessions
):
    a1, _a2, _b1 = three_sessions
    # a READY Session's Actor runs while it works on a turn: run it as a turn would
    row = await store.session_by_id(UUID(a1.id))
    await sim.resume_actor(row.actor_atespace, row.actor_name, row.actor_uid)
    admin = await workers(api, api.md("admin"), limit=50)
    assert len(admin.workers) == 50 and admin.page.next_page_token
    more = await workers(api, api.md("admin"), limit=100, token=admin.page.next_page_token)
    assert len(more.workers) == 14 and more.page.next_page_token == ""  # runtime.simulator.workers: 64
    alice = await workers(api, api.md("alice"))
    assert len(alice.workers) == 1 and alice.workers[0].actor.endswith(f"/session-{a1.id}")
    assert (await workers(api, api.md("bob"))).workers == []


async def test_bad_requests(api, sim, three_sessions):
    st = inventory(api)
    for req in (
        inventory_pb2.ListActorsRequest(page=common_pb2.PageRequest(limit=101)),
        inventory_pb2.ListActorsRequest(page=common_pb2.PageRequest(limit=-1)),
        inventory_pb2.ListActorsRequest(atespace="Bad_NS"),
        inventory_pb2.ListActorsRequest(page=common_pb2.PageRequest(page_token="not-a-token")),
    ):
        code, details = await code_of(st.ListActors(req, metadata=api.md(), timeout=10))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (req, details)
    # a cursor of one scope used with another
    page = await actors(api, api.md("admin"), limit=1)
    token = page.page.next_page_token
    code, _ = await code_of(actors(api, api.md("admin"), atespace="kagent", limit=1, token=token))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    code, _ = await code_of(workers(api, api.md("admin"), limit=1, token=page.page.next_page_token))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    code, _ = await code_of(st.ListActors(inventory_pb2.ListActorsRequest(), timeout=10))
    assert code == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.clause("INV-6")
async def test_runtime_failure_is_unavailable_without_details(api, sim, three_sessions):
    await sim.inject("list_actors", "fail_before", code=Code.INTERNAL)
    code, details = await code_of(actors(api, api.md("admin")))
    assert code == grpc.StatusCode.UNAVAILABLE
    assert "injected" not in details and "INTERNAL" not in details
    await sim.inject("list_actors", "stuck_token", times=2)
    code, _ = await code_of(actors(api, api.md("admin")))
    assert code == grpc.StatusCode.UNAVAILABLE


def _server_count(code: str) -> float:
    return metrics.GRPC_REQUESTS.labels(method="InventoryService/ListActors", code=code)._value.get()


@pytest.mark.clause("INV-5")
async def test_callers_deadline_bounds_the_listing(api, sim, three_sessions):
    await sim.inject("list_actors", "delay", delay=5.0)
    before = _server_count("DEADLINE_EXCEEDED")
    started = time.monotonic()
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await inventory(api).ListActors(
            inventory_pb2.ListActorsRequest(), metadata=api.md("admin"), timeout=1.0
        )
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    # the server itself gave up at the caller's deadline (not at its own 10 s, nor after the delay)
    for _ in range(100):
        if _server_count("DEADLINE_EXCEEDED") > before:
            break
        await asyncio.sleep(0.02)
    assert _server_count("DEADLINE_EXCEEDED") == before + 1
    assert time.monotonic() - started < 3.0


def test_inventory_service_is_registered_for_reflection():
    assert "sessionq.v1.InventoryService" in SERVICE_NAMES
