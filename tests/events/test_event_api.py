"""Reading lifecycle events: sessionq.v1.EventService.ListEvents over gRPC and the SSE streams
(api/events.py) over HTTP, resumed with Last-Event-ID across an API restart."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import grpc
import httpx
import pytest
from conftest import apply_agent, make_settings
from lifecycle import ready_session

from sessionq._pb.kagent.api.v1alpha1 import common_pb2
from sessionq._pb.sessionq.v1 import events_pb2, events_pb2_grpc
from sessionq.api.agentcard import AgentCardServer
from sessionq.api.auth import Authenticator
from sessionq.api.events import EventFeed, event_routes
from sessionq.db.store import Store
from sessionq.domain.operations import OperationExecutor
from sessionq.models import OperationKind

# events are readable once no older transaction runs on the server (schema/45_events.sql)
pytestmark = pytest.mark.quiet_horizon


def stub(api: Any) -> events_pb2_grpc.EventServiceStub:
    return events_pb2_grpc.EventServiceStub(api.channel)


async def code_of(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await call
    return e.value.code(), e.value.details()


async def test_list_events_pages_filters_and_hides_others(api, store, sim):
    await apply_agent(store, sim)
    a = await ready_session(store, sim, "a")
    b = await ready_session(store, sim, "b", user="bob")
    s = stub(api)
    r = await s.ListEvents(events_pb2.ListEventsRequest(), metadata=api.md("alice"), timeout=10)
    assert [(e.session_id, e.type) for e in r.events] == [(str(a.id), "created"), (str(a.id), "ready")]
    assert r.events[0].kind == events_pb2.EVENT_KIND_CREATED and r.events[0].payload["request_kind"] == "create"
    assert r.page.next_page_token == "" and r.cursor == r.events[-1].id
    # one at a time: each page resumes exactly after the last
    first = await s.ListEvents(events_pb2.ListEventsRequest(page=common_pb2.PageRequest(limit=1)),
                               metadata=api.md("alice"), timeout=10)
    assert [e.type for e in first.events] == ["created"] and first.page.next_page_token == first.events[0].id
    second = await s.ListEvents(events_pb2.ListEventsRequest(
        page=common_pb2.PageRequest(limit=1, page_token=first.page.next_page_token)), metadata=api.md("alice"), timeout=10)
    assert [e.type for e in second.events] == ["ready"]
    # another user sees nothing of a Session not shared with them; an administrator sees everything
    r = await s.ListEvents(events_pb2.ListEventsRequest(session_id=str(a.id)), metadata=api.md("bob"), timeout=10)
    assert list(r.events) == []
    r = await s.ListEvents(events_pb2.ListEventsRequest(), metadata=api.md("admin"), timeout=10)
    assert {e.session_id for e in r.events} == {str(a.id), str(b.id)}
    r = await s.ListEvents(events_pb2.ListEventsRequest(kinds=[events_pb2.EVENT_KIND_READY]), metadata=api.md("bob"),
                           timeout=10)
    assert [(e.session_id, e.type) for e in r.events] == [(str(b.id), "ready")]


async def test_list_events_bad_input_is_invalid_argument(api, store, sim):
    await apply_agent(store, sim)
    s = await ready_session(store, sim)
    last = (await stub(api).ListEvents(events_pb2.ListEventsRequest(), metadata=api.md(), timeout=10)).events[-1]
    xid, _, seq = last.id.partition("-")
    for request in (
        events_pb2.ListEventsRequest(session_id="not-a-uuid"),
        events_pb2.ListEventsRequest(kinds=[99]),
        events_pb2.ListEventsRequest(kinds=[events_pb2.EVENT_KIND_UNSPECIFIED]),
        events_pb2.ListEventsRequest(kinds=[events_pb2.EVENT_KIND_READY] * 14),
        events_pb2.ListEventsRequest(page=common_pb2.PageRequest(page_token="garbage" * 100)),
        events_pb2.ListEventsRequest(page=common_pb2.PageRequest(page_token=f"{xid}-{int(seq) + 1000}")),
        events_pb2.ListEventsRequest(session_id="x" * 65),
    ):
        code, details = await code_of(stub(api).ListEvents(request, metadata=api.md(), timeout=10))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (request, details)
        assert len(details) < 300
    assert s.id  # nothing was written by the refused calls: still the two events
    r = await stub(api).ListEvents(events_pb2.ListEventsRequest(), metadata=api.md(), timeout=10)
    assert len(r.events) == 2


async def sse(client: httpx.AsyncClient, path: str, token: str, count: int, last_event_id: str | None = None,
              timeout: float = 20) -> list[dict[str, Any]]:
    """Read `count` events of an SSE stream (then hang up)."""
    headers = {"authorization": f"Bearer {token}"}
    if last_event_id:
        headers["last-event-id"] = last_event_id
    got: list[dict[str, Any]] = []

    async def read() -> None:
        async with client.stream("GET", path, headers=headers) as response:
            assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
            event: dict[str, Any] = {}
            async for line in response.aiter_lines():
                if line.startswith("id: "):
                    event["id"] = line[4:]
                elif line.startswith("event: "):
                    event["event"] = line[7:]
                elif line.startswith("data: "):
                    event["data"] = json.loads(line[6:])
                elif line == "" and event:
                    got.append(event)
                    event = {}
                    if len(got) == count:
                        return

    await asyncio.wait_for(read(), timeout)
    return got


async def http_server(store: Store) -> AgentCardServer:
    settings = make_settings()
    auth = Authenticator(settings["auth.tokens"], "", {})
    feed = EventFeed(store, settings["auth.admins"], fallback_poll=0.5)
    cards = AgentCardServer(store, auth, "grpc://127.0.0.1:8083", routes=event_routes(feed, auth))
    await cards.start("127.0.0.1:0")
    return cards


async def transitions(store: Store, sim: Any, session_id: Any) -> None:
    for kind in (OperationKind.SUSPEND, OperationKind.RESUME):
        await store.admit_operation(session_id, "alice", None, kind)
        assert (await OperationExecutor(store, sim, 30).run(session_id)).status == "completed"


async def test_the_stream_resumes_across_an_api_restart_with_nothing_lost_or_repeated(store, sim, database_url,
                                                                                     pooled_url):
    s = await ready_session(store, sim)
    cards = await http_server(store)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{cards.port}", timeout=20) as client:
        first = await sse(client, f"/v1/sessions/{s.id}/events", "alice-token", 2)
        assert [e["event"] for e in first] == ["created", "ready"]
        assert first[0]["data"]["session_id"] == str(s.id) and first[0]["id"] == first[0]["data"]["id"]
    await cards.stop()
    # transitions while no API runs, then a new API process (its own store and LISTEN connection)
    await transitions(store, sim, s.id)
    other = await Store.open(pooled_url, direct_url=database_url, pool_size=2)
    cards = await http_server(other)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{cards.port}", timeout=20) as client:
            following = asyncio.create_task(sse(client, f"/v1/sessions/{s.id}/events", "alice-token", 4,
                                                last_event_id=first[-1]["id"]))
            await asyncio.sleep(0.3)
            await transitions(store, sim, s.id)  # live ones, woken by the notification
            rest = await following
            assert [e["event"] for e in rest] == ["suspended", "resumed", "suspended", "resumed"]
            ids = [e["id"] for e in first + rest]
            assert len(set(ids)) == len(ids)
            # the stream of everything alice may see, from the start, and bob's, which is empty of hers
            everything = await sse(client, "/v1/events", "alice-token", 6)
            assert [e["id"] for e in everything] == ids
    finally:
        await cards.stop()
        await other.close()


async def test_the_stream_refuses_bad_input_with_a_short_message(store, sim):
    s = await ready_session(store, sim)
    cards = await http_server(store)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{cards.port}", timeout=10) as client:
            auth = {"authorization": "Bearer alice-token"}
            cases: list[tuple[str, dict[str, str], int]] = [
                ("/v1/events?type=bogus", auth, 400),
                ("/v1/events?" + "&".join(["type=ready"] * 20), auth, 400),
                ("/v1/events", {**auth, "last-event-id": "1-999999999"}, 400),
                ("/v1/events", {**auth, "last-event-id": "nonsense" * 50}, 400),
                ("/v1/sessions/not-a-uuid/events", auth, 400),
                ("/v1/events", {}, 401),
                ("/v1/events", {"authorization": "Bearer wrong"}, 401),
            ]
            for path, headers, status in cases:
                r = await client.get(path, headers=headers)
                assert r.status_code == status, (path, r.text)
                assert len(r.text) < 300 and "Traceback" not in r.text
            r = await client.post("/v1/events", headers=auth)
            assert r.status_code == 405
            # bob follows his own stream: alice's Session's events never reach it
            bob = asyncio.create_task(sse(client, f"/v1/sessions/{s.id}/events", "bob-token", 1, timeout=1.5))
            with pytest.raises(TimeoutError):
                await bob
    finally:
        await cards.stop()



def test_the_event_service_is_sessionq_v1_and_its_kinds_match_the_store():
    from sessionq.models import EventKind

    assert events_pb2.DESCRIPTOR.package == "sessionq.v1"
    assert events_pb2.DESCRIPTOR.name == "sessionq/v1/events.proto"
    service = events_pb2.DESCRIPTOR.services_by_name["EventService"]
    assert [m.name for m in service.methods] == ["ListEvents"]
    wire = {name.removeprefix("EVENT_KIND_").lower(): number for name, number in events_pb2.EventKind.items()}
    assert wire.pop("unspecified") == 0
    assert wire == {k.value: i for i, k in enumerate(EventKind, start=1)}
    fields = {f.name: f.number for f in events_pb2.Event.DESCRIPTOR.fields}
    assert fields == {"id": 1, "session_id": 2, "kind": 3, "type": 4, "owner": 5, "agent_namespace": 6,
                      "agent_name": 7, "operation_id": 8, "task_id": 9, "payload": 10, "created_at": 11}
