"""The gRPC server: services, reflection and health on one port."""

from __future__ import annotations

import grpc
from a2a.types import a2a_pb2, a2a_pb2_grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc

from sessionq._pb.kagent.api.v1alpha1 import (
    agents_pb2,
    agents_pb2_grpc,
    checkpoints_pb2,
    checkpoints_pb2_grpc,
    sandboxes_pb2,
    sandboxes_pb2_grpc,
    sessions_pb2,
    sessions_pb2_grpc,
    task_store_pb2,
    task_store_pb2_grpc,
)
from sessionq._pb.sessionq.v1 import (
    events_pb2,
    events_pb2_grpc,
    fleet_pb2,
    fleet_pb2_grpc,
    inventory_pb2,
    inventory_pb2_grpc,
    turns_pb2,
    turns_pb2_grpc,
)
from sessionq.api.a2a import A2AHandler, A2AService
from sessionq.api.agents import AgentService
from sessionq.api.auth import Authenticator
from sessionq.api.checkpoints import CheckpointService
from sessionq.api.events import EventFeed, EventService
from sessionq.api.fleet import FleetService
from sessionq.api.guard import InputGuard
from sessionq.api.handlers import HandlerTable
from sessionq.api.inventory import InventoryService
from sessionq.api.sandboxes import SandboxService
from sessionq.api.sessions import SessionService
from sessionq.api.taskstore import TaskStoreService
from sessionq.api.turns import TagService, TurnService
from sessionq.api.validation import RequestValidation
from sessionq.api.webhooks import WebhookService
from sessionq.config import Settings, grpc_message_limit
from sessionq.db.store import Store
from sessionq.domain.push import TargetPolicy
from sessionq.runtime.base import RuntimeReader

SERVICE_NAMES = [
    sessions_pb2.DESCRIPTOR.services_by_name["SessionService"].full_name,
    agents_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name,
    inventory_pb2.DESCRIPTOR.services_by_name["InventoryService"].full_name,
    turns_pb2.DESCRIPTOR.services_by_name["TurnService"].full_name,
    turns_pb2.DESCRIPTOR.services_by_name["TagService"].full_name,
    sandboxes_pb2.DESCRIPTOR.services_by_name["SandboxService"].full_name,
    task_store_pb2.DESCRIPTOR.services_by_name["TaskStoreService"].full_name,
    checkpoints_pb2.DESCRIPTOR.services_by_name["CheckpointService"].full_name,
    a2a_pb2.DESCRIPTOR.services_by_name["A2AService"].full_name,
    events_pb2.DESCRIPTOR.services_by_name["EventService"].full_name,
    events_pb2.DESCRIPTOR.services_by_name["WebhookService"].full_name,
    fleet_pb2.DESCRIPTOR.services_by_name["FleetService"].full_name,
]


class ApiServer:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        *,
        address: str | None = None,
        runtime: RuntimeReader | None = None,
        validate: bool = True,
        reuse_port: bool = False,
    ) -> None:
        self.settings = settings
        self.store = store
        # one limit on what a user sends (a2a.maxMessageBytes, checked by SendMessage); the server
        # receives what a task store update of an admitted message carries (answers stay unlimited,
        # as grpcio's default: a read never fails on the server's side for its size)
        limit = grpc_message_limit(settings.a2a.max_message_bytes)
        self.server = grpc.aio.server(
            # no interceptors: the checks are applied to each handler once (api/handlers.py)
            # reuse_port: one of several API processes of `serve` on one port (app/supervisor.py)
            # a connection that has not completed its HTTP/2 handshake within server.httpHeaderTimeout
            # is closed (grpcio's default is 120 s: a flood of idle connections held descriptors)
            options=[("grpc.so_reuseport", int(reuse_port)), ("grpc.max_receive_message_length", limit),
                     ("grpc.server_handshake_timeout_ms", int(settings.server.http_header_timeout * 1000))],
        )
        # RequestValidation enforces the protos' buf.validate rules before any servicer (and so any
        # database call) runs; it wraps InputGuard's handlers, whose deserializer has turned an
        # undecodable body into a marker InputGuard answers (and which answers unimplemented
        # methods). `validate` is off only in the benchmark that measures what the check costs.
        guard = InputGuard()
        validation = RequestValidation() if validate else None

        def wrap(method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
            guarded = guard.wrap(method, handler)
            return validation.wrap(method, guarded) if validation is not None else guarded

        table = self.handlers = HandlerTable(wrap, guard.unknown_method)
        auth = Authenticator(settings.auth.tokens, settings.auth.anonymous_user, settings.auth.namespaces)
        self.auth = auth
        sessions_pb2_grpc.add_SessionServiceServicer_to_server(
            SessionService(store, auth, settings.auth.admins, settings.shares.max_ttl), table
        )
        agents_pb2_grpc.add_AgentServiceServicer_to_server(
            AgentService(store, auth, settings.global_.cluster_domain, settings.auth.admins), table
        )
        inventory_pb2_grpc.add_InventoryServiceServicer_to_server(
            InventoryService.from_settings(settings, store, auth, runtime), table
        )
        sandboxes_pb2_grpc.add_SandboxServiceServicer_to_server(
            SandboxService(store, auth, settings.sandboxes.default_ttl), table
        )
        task_store_pb2_grpc.add_TaskStoreServiceServicer_to_server(TaskStoreService(store), table)
        checkpoints_pb2_grpc.add_CheckpointServiceServicer_to_server(CheckpointService(store, auth), table)
        # lifecycle events: the paged list here, the SSE streams on the HTTP listener (event_routes)
        self.events = EventFeed(store, settings.auth.admins, settings.a2a.stream.fallback_poll)
        events_pb2_grpc.add_EventServiceServicer_to_server(EventService(self.events, auth), table)
        webhook_targets = TargetPolicy(allow_private=settings.webhooks.allow_private_targets,
                                       allow_loopback=settings.webhooks.allow_loopback)
        events_pb2_grpc.add_WebhookServiceServicer_to_server(
            WebhookService(store, auth, settings.auth.admins, webhook_targets), table
        )
        fleet_pb2_grpc.add_FleetServiceServicer_to_server(
            FleetService(store, auth, settings.auth.admins, settings.sessions.max_idle_ttl,
                         settings.sessions.allow_no_idle_ttl),
            table,
        )
        turns_pb2_grpc.add_TurnServiceServicer_to_server(TurnService(store, auth), table)
        turns_pb2_grpc.add_TagServiceServicer_to_server(
            TagService(store, auth, settings.auth.admins, runtime), table
        )
        # one A2A behaviour behind gRPC here and the HTTP bindings (api/agentcard.py)
        self.a2a = A2AHandler(
            store,
            auth,
            settings.sessions.dispatch_timeout,
            settings.a2a.max_message_bytes,
            allow_private_push=settings.a2a.push.allow_private_targets,
            fallback_poll=settings.a2a.stream.fallback_poll,
            streams_per_user=settings.a2a.stream.max_per_user,
            max_queued_turns=settings.sessions.max_queued_turns,
        )
        a2a_pb2_grpc.add_A2AServiceServicer_to_server(A2AService(self.a2a), table)
        self.health = health.aio.HealthServicer() if hasattr(health, "aio") else health.HealthServicer()
        self.statuses: dict[str, int] = {}
        health_pb2_grpc.add_HealthServicer_to_server(self.health, table)
        reflection_pb2_grpc.add_ServerReflectionServicer_to_server(
            reflection.aio.ReflectionServicer(
                [*SERVICE_NAMES, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME]
            ),
            table,
        )
        table.check()
        self.server.add_generic_rpc_handlers((table,))
        self.port = self.server.add_insecure_port(address or settings.server.address)
        if self.port == 0:
            raise OSError(f"cannot listen on {address or settings.server.address}")

    async def start(self) -> None:
        await self.server.start()
        await self._set_health(health_pb2.HealthCheckResponse.SERVING)

    async def stop(self, grace: float = 5.0) -> None:
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.server.stop(grace)

    async def _set_health(self, status: int) -> None:
        for name in ("", *SERVICE_NAMES):
            await self.set_health(name, status)

    async def set_health(self, service: str, status: int) -> None:
        """The status grpc.health.v1 answers for `service` (and the HTTP health endpoint reads)."""
        self.statuses[service] = status
        result = self.health.set(service, status)
        if hasattr(result, "__await__"):
            await result

    def serving(self, service: str = "") -> bool:
        return self.statuses.get(service) == health_pb2.HealthCheckResponse.SERVING
