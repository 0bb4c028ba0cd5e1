"""InventoryService: the runtime's Actors and Workers, as the caller may see them (INV-*).

Authorization (evaluated anew on every page, one store query per runtime batch):
- admins (``auth.admins``) see every Actor and every Worker;
- others see an Actor when it is the Actor of a live (not DELETED) Session they own, or that is
  shared with them (the share token of the call), and a Worker only while it holds such an Actor.

Watched atespaces (empty: all) come from the configuration key ``inventory.watchedAtespaces`` and
the cursor secret from ``inventory.cursorSecret`` (empty: a random secret per process, so page
tokens do not survive a restart or move between replicas), when those keys exist.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Iterable, Sequence

import grpc

from sessionq import errors
from sessionq._pb.kagent.api.v1alpha1 import common_pb2
from sessionq._pb.sessionq.v1 import inventory_pb2, inventory_pb2_grpc
from sessionq.api.auth import Authenticator, Identity
from sessionq.api.fields import ts
from sessionq.api.paging import page_limit
from sessionq.api.rpc import rpc
from sessionq.config import Settings
from sessionq.db.store import Store
from sessionq.domain.agents import check_namespace
from sessionq.domain.inventory import (
    MAX_PAGES,
    MAX_ROWS,
    TIMEOUT,
    UNAVAILABLE_MESSAGE,
    ActorAuthorizer,
    ActorKey,
    Inventory,
    WorkerAuthorizer,
)
from sessionq.runtime.base import Actor, RuntimeReader, Worker

log = logging.getLogger("sessionq.api")

DEADLINE_MARGIN = 0.1  # seconds


async def visible_actors(
    store: Store, caller: str, share_hash: str | None, actors: Sequence[tuple[str, str, str | None]]
) -> set[ActorKey]:
    """(atespace, name) of the given Actors the caller may see (sessionq.visible_actors)."""
    return await store.visible_actors(caller, share_hash, actors)


def actor_authorizer(store: Store, who: Identity, admin: bool) -> ActorAuthorizer:
    async def authorize(rows: Sequence[Actor]) -> set[ActorKey]:
        if admin:
            return {(r.atespace, r.name) for r in rows}
        batch = [(r.atespace, r.name, r.uid) for r in rows]
        return await visible_actors(store, who.user, who.share_hash, batch)

    return authorize


def worker_authorizer(store: Store, who: Identity, admin: bool) -> WorkerAuthorizer:
    async def authorize(rows: Sequence[Worker]) -> set[str]:
        if admin:
            return {r.name for r in rows}
        held: dict[ActorKey, list[str]] = {}
        for r in rows:
            atespace, sep, name = (r.actor or "").partition("/")
            if sep and atespace and name:
                held.setdefault((atespace, name), []).append(r.name)
        if not held:
            return set()
        visible = await visible_actors(store, who.user, who.share_hash, [(a, n, None) for a, n in held])
        return {w for key in visible for w in held.get(key, [])}

    return authorize


def actor_to_proto(a: Actor) -> inventory_pb2.Actor:
    return inventory_pb2.Actor(
        atespace=a.atespace,
        name=a.name,
        uid=a.uid,
        template=a.template,
        state=str(a.state),
        worker=a.worker or "",
        worker_ip=a.worker_ip or "",
        version=a.version,
        created_at=ts(a.created_at),
        updated_at=ts(a.updated_at),
    )


def worker_to_proto(w: Worker) -> inventory_pb2.Worker:
    return inventory_pb2.Worker(name=w.name, atespace=w.atespace, ip=w.ip, actor=w.actor or "", state=w.state)


def _time_left(context: grpc.aio.ServicerContext) -> float | None:
    """The caller's remaining time, less a margin so that we answer before gRPC cancels us."""
    remaining = context.time_remaining()
    return None if remaining is None else max(0.0, remaining - DEADLINE_MARGIN)


class InventoryService(inventory_pb2_grpc.InventoryServiceServicer):
    """`runtime`: the process's runtime, read through its read-only port; without one (an API
    server started without a runtime) the inventory answers UNAVAILABLE."""

    def __init__(
        self,
        store: Store,
        auth: Authenticator,
        *,
        admins: Iterable[str] = (),
        watched_atespaces: Iterable[str] = (),
        cursor_secret: bytes | None = None,
        runtime: RuntimeReader | None = None,
        max_rows: int = MAX_ROWS,
        max_pages: int = MAX_PAGES,
        timeout: float = TIMEOUT,
    ) -> None:
        self.store = store
        self.auth = auth
        self.admins = frozenset(admins)
        self.watched = tuple(watched_atespaces)
        self.cursor_secret = cursor_secret or os.urandom(32)
        self.runtime = runtime
        self.max_rows = max_rows
        self.max_pages = max_pages
        self.timeout = timeout

    @classmethod
    def from_settings(
        cls, settings: Settings, store: Store, auth: Authenticator, runtime: RuntimeReader | None = None
    ) -> InventoryService:
        secret = settings.inventory.cursor_secret
        return cls(
            store,
            auth,
            admins=settings.auth.admins,
            watched_atespaces=settings.inventory.watched_atespaces,
            cursor_secret=secret.encode("utf-8") if secret else None,
            runtime=runtime,
        )

    @contextlib.asynccontextmanager
    async def _inventory(self) -> AsyncIterator[Inventory]:
        if self.runtime is None:
            log.warning("inventory: this API server was started without a runtime")
            raise errors.unavailable(UNAVAILABLE_MESSAGE)
        yield Inventory(
            self.runtime,
            cursor_secret=self.cursor_secret,
            watched_atespaces=self.watched,
            max_rows=self.max_rows,
            max_pages=self.max_pages,
            timeout=self.timeout,
        )

    def _request(self, atespace: str, page: common_pb2.PageRequest) -> tuple[str, int]:
        scope = check_namespace(atespace, "atespace") if atespace else ""
        return scope, page_limit(page.limit)

    @rpc
    async def ListActors(
        self, request: inventory_pb2.ListActorsRequest, context: grpc.aio.ServicerContext
    ) -> inventory_pb2.ListActorsResponse:
        who = self.auth.identify(context)
        scope, limit = self._request(request.atespace, request.page)
        async with self._inventory() as inventory:
            page = await inventory.list_actors(
                authorize=actor_authorizer(self.store, who, who.user in self.admins),
                atespace=scope,
                limit=limit,
                page_token=request.page.page_token,
                time_remaining=_time_left(context),
            )
        return inventory_pb2.ListActorsResponse(
            actors=[actor_to_proto(a) for a in page.items],
            page=common_pb2.PageResponse(next_page_token=page.next_page_token),
        )

    @rpc
    async def ListWorkers(
        self, request: inventory_pb2.ListWorkersRequest, context: grpc.aio.ServicerContext
    ) -> inventory_pb2.ListWorkersResponse:
        who = self.auth.identify(context)
        scope, limit = self._request(request.atespace, request.page)
        async with self._inventory() as inventory:
            page = await inventory.list_workers(
                authorize=worker_authorizer(self.store, who, who.user in self.admins),
                atespace=scope,
                limit=limit,
                page_token=request.page.page_token,
                time_remaining=_time_left(context),
            )
        return inventory_pb2.ListWorkersResponse(
            workers=[worker_to_proto(w) for w in page.items],
            page=common_pb2.PageResponse(next_page_token=page.next_page_token),
        )


__all__ = ["InventoryService", "actor_authorizer", "visible_actors", "worker_authorizer"]
