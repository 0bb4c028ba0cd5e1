"""Reading lifecycle events (docs/events.md): `EventFeed` (pages and a follower), the gRPC
`sessionq.v1.EventService`, and a resumable Server-Sent Events stream as self-contained Starlette
routes (`event_routes`) any HTTP listener can mount:

- ``GET /v1/events``: every event the caller may see;
- ``GET /v1/sessions/{session_id}/events``: one Session's.

Both take ``?type=<kind>`` (repeatable) and resume after ``Last-Event-ID`` (or ``?after=``), exactly
after the last event seen, on any replica and after any restart: an event's id is its position
(`db/stores/events.py`). A follower wakes on the ``sessionq_event`` notifications of the process's
one LISTEN connection (keyed by Session) and reads again every `FALLBACK_POLL` seconds (an event
waits behind an older transaction still open, or the LISTEN connection is being re-established).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterable, Sequence
from uuid import UUID

import grpc
from google.protobuf import struct_pb2
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from sessionq import errors
from sessionq._pb.kagent.api.v1alpha1 import common_pb2
from sessionq._pb.sessionq.v1 import events_pb2, events_pb2_grpc
from sessionq.api.auth import Authenticator, Identity, credential_headers
from sessionq.api.fields import parse_uuid, ts
from sessionq.api.paging import page_limit
from sessionq.api.rpc import rpc
from sessionq.db.notify import Channel
from sessionq.db.store import Store
from sessionq.db.stores.events import Position
from sessionq.domain.webhooks import event_json
from sessionq.errors import SessionqError
from sessionq.models import EventKind, LifecycleEvent

log = logging.getLogger("sessionq.api")

FALLBACK_POLL = 1.0  # seconds between reads of a follower that no notification woke
KEEPALIVE = 15.0  # seconds between SSE comments on an idle stream (proxies close silent ones)
STREAM_PAGE = 100
MAX_KINDS = len(EventKind)
HTTP_CODES = {"SQ400": 400, "SQ401": 401, "SQ403": 403, "SQ404": 404, "SQ503": 503}


def parse_kinds(values: Iterable[str]) -> list[EventKind]:
    """Event kinds by name; INVALID_ARGUMENT for an unknown one or too many."""
    out: list[EventKind] = []
    for i, v in enumerate(values):
        if i >= MAX_KINDS:
            raise errors.invalid(f"at most {MAX_KINDS} event types may be named")
        try:
            out.append(EventKind(v))
        except ValueError:
            raise errors.invalid(f"unknown event type {errors.clip(v)!r}") from None
    return sorted(set(out), key=list(EventKind).index)


class EventFeed:
    """The events a caller may see: one page after a position, or a follower from a position on."""

    def __init__(self, store: Store, admins: Iterable[str] = (), fallback_poll: float = FALLBACK_POLL) -> None:
        self.store = store
        self.admins = frozenset(admins)
        self.fallback_poll = fallback_poll

    async def start_at(self, after: str | None) -> Position | None:
        """The position a reader resumes after; INVALID_ARGUMENT for an id that is malformed or never
        existed (an id of a purged event resumes from the oldest kept)."""
        if not after:
            return None
        position = Position.parse(after)
        if not await self.store.event_position_known(position):
            raise errors.invalid(f"event id {errors.clip(after)!r} names no event")
        return position

    async def page(
        self, who: Identity, *, session_id: UUID | None, kinds: Sequence[EventKind], after: Position | None,
        limit: int,
    ) -> list[LifecycleEvent]:
        return await self.store.event_page(
            who.user, who.share_hash, who.user in self.admins,
            session_id=session_id, kinds=kinds or None, after=after, limit=limit,
        )

    async def follow(
        self, who: Identity, *, session_id: UUID | None, kinds: Sequence[EventKind], after: Position | None,
        idle: float | None = None,
    ) -> AsyncIterator[LifecycleEvent | None]:
        """Every event after `after` as it commits, in position order; None after `idle` seconds
        without one (the caller's keep-alive), for as long as the caller iterates."""
        woken = asyncio.Event()
        listener = self.store.listener
        unsubscribe = None
        if listener is not None:
            def wake(_: str | None) -> None:
                woken.set()
            unsubscribe = (listener.subscribe_key(Channel.EVENT, str(session_id), wake) if session_id is not None
                           else listener.subscribe(Channel.EVENT, wake))
        try:
            quiet = 0.0
            while True:
                woken.clear()
                events = await self.page(who, session_id=session_id, kinds=kinds, after=after, limit=STREAM_PAGE)
                for e in events:
                    yield e
                if events:
                    after = Position(events[-1].xid, events[-1].seq)
                    quiet = 0.0
                    if len(events) == STREAM_PAGE:
                        continue
                try:
                    await asyncio.wait_for(woken.wait(), self.fallback_poll)
                except TimeoutError:
                    quiet += self.fallback_poll
                    if idle is not None and quiet >= idle:
                        quiet = 0.0
                        yield None
        finally:
            if unsubscribe is not None:
                unsubscribe()


def event_to_proto(e: LifecycleEvent) -> events_pb2.Event:
    payload = struct_pb2.Struct()
    payload.update(e.payload)
    return events_pb2.Event(
        id=e.id,
        session_id=str(e.session_id),
        kind=events_pb2.EventKind.Value(f"EVENT_KIND_{e.kind.name}"),
        type=e.kind.value,
        owner=e.owner,
        agent_namespace=e.agent_namespace,
        agent_name=e.agent_name,
        operation_id=str(e.operation_id) if e.operation_id else "",
        task_id=e.task_id or "",
        payload=payload,
        created_at=ts(e.created_at),
    )


def kind_of_proto(value: int) -> EventKind:
    name = events_pb2.EventKind.Name(value) if value in events_pb2.EventKind.values() else ""
    if not name.startswith("EVENT_KIND_") or value == events_pb2.EVENT_KIND_UNSPECIFIED:
        raise errors.invalid(f"unknown event kind {value}")
    return EventKind[name.removeprefix("EVENT_KIND_")]


class EventService(events_pb2_grpc.EventServiceServicer):
    def __init__(self, feed: EventFeed, auth: Authenticator) -> None:
        self.feed = feed
        self.auth = auth

    @rpc
    async def ListEvents(
        self, request: events_pb2.ListEventsRequest, context: grpc.aio.ServicerContext
    ) -> events_pb2.ListEventsResponse:
        who = self.auth.identify(context)
        session_id = parse_uuid(request.session_id, "session_id") if request.session_id else None
        if len(request.kinds) > MAX_KINDS:
            raise errors.invalid(f"at most {MAX_KINDS} event kinds may be named")
        kinds = sorted({kind_of_proto(k) for k in request.kinds}, key=list(EventKind).index)
        limit = page_limit(request.page.limit)
        after = await self.feed.start_at(request.page.page_token)
        events = await self.feed.page(who, session_id=session_id, kinds=kinds, after=after, limit=limit + 1)
        more = len(events) > limit
        events = events[:limit]
        cursor = events[-1].id if events else (str(after) if after else "")
        return events_pb2.ListEventsResponse(
            events=[event_to_proto(e) for e in events],
            page=common_pb2.PageResponse(next_page_token=cursor if more else ""),
            cursor=cursor,
        )


def sse_message(e: LifecycleEvent) -> bytes:
    return f"id: {e.id}\nevent: {e.kind.value}\ndata: {json.dumps(event_json(e), separators=(',', ':'))}\n\n".encode()


def event_routes(feed: EventFeed, auth: Authenticator, keepalive: float = KEEPALIVE) -> list[Route]:
    """The SSE streams, as Starlette routes (GET only), to mount on any HTTP listener."""

    def refuse(e: SessionqError) -> Response:
        return JSONResponse({"error": errors.clip(e.message, errors.MAX_STATUS_MESSAGE)},
                            status_code=HTTP_CODES.get(e.sqlstate, 400),
                            headers={"WWW-Authenticate": "Bearer"} if e.sqlstate == "SQ401" else None)

    async def stream(request: Request) -> Response:
        try:
            who = auth.identify_headers(credential_headers(list(request.headers.items())))
            raw_session = request.path_params.get("session_id")
            session_id = parse_uuid(raw_session, "session_id") if raw_session is not None else None
            kinds = parse_kinds(request.query_params.getlist("type"))
            after = await feed.start_at(request.headers.get("last-event-id") or request.query_params.get("after"))
        except SessionqError as e:
            return refuse(e)

        async def body() -> AsyncIterator[bytes]:
            yield b": sessionq events\n\n"  # the headers go out at once, before the first event
            async for e in feed.follow(who, session_id=session_id, kinds=kinds, after=after, idle=keepalive):
                yield b": keep-alive\n\n" if e is None else sse_message(e)

        return StreamingResponse(body(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    return [
        Route("/v1/events", stream, methods=["GET"]),
        Route("/v1/sessions/{session_id}/events", stream, methods=["GET"]),
    ]


__all__ = ["EventFeed", "EventService", "event_routes", "event_to_proto", "parse_kinds"]
