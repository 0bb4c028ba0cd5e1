"""sessionq.v1.WebhookService: webhook subscriptions of lifecycle events (docs/events.md).

A subscription is its creator's: it receives the events of the Sessions they own, of the kinds it
names (none: all), of one Agent when it names one. Administrators (auth.admins) may create global
ones (every Session's events), and list and delete anyone's. The URL is checked as an A2A push
target (domain/push.py); the signing secret is made here and answered once."""

from __future__ import annotations

from collections.abc import Iterable

import grpc

from sessionq import errors
from sessionq._pb.kagent.api.v1alpha1 import common_pb2
from sessionq._pb.sessionq.v1 import events_pb2, events_pb2_grpc
from sessionq.api.auth import Authenticator
from sessionq.api.events import kind_of_proto
from sessionq.api.fields import has_control, parse_uuid, ts
from sessionq.api.paging import after_id, next_id_token, page_limit
from sessionq.api.rpc import rpc
from sessionq.db.store import Store
from sessionq.domain import push, webhooks
from sessionq.models import EventKind, WebhookSubscription


def webhook_to_proto(w: WebhookSubscription) -> events_pb2.Webhook:
    return events_pb2.Webhook(
        id=str(w.id),
        owner=w.owner,
        url=w.url,
        event_types=[events_pb2.EventKind.Value(f"EVENT_KIND_{EventKind(t).name}") for t in w.event_types],
        agent_namespace=w.agent_namespace or "",
        agent_name=w.agent_name or "",
        enabled=w.enabled,
        consecutive_failures=w.consecutive_failures,
        last_failure=w.last_failure or "",
        created_at=ts(w.created_at),
        disabled_at=ts(w.disabled_at),
        **{"global": w.is_global},
    )


class WebhookService(events_pb2_grpc.WebhookServiceServicer):
    def __init__(self, store: Store, auth: Authenticator, admins: Iterable[str], policy: push.TargetPolicy) -> None:
        self.store = store
        self.auth = auth
        self.admins = frozenset(admins)
        self.policy = policy

    @rpc
    async def CreateWebhook(
        self, request: events_pb2.CreateWebhookRequest, context: grpc.aio.ServicerContext
    ) -> events_pb2.CreateWebhookResponse:
        who = self.auth.identify(context)
        is_global = getattr(request, "global")
        if is_global and who.user not in self.admins:
            raise errors.permission_denied("only an administrator may create a global webhook")
        if len(request.event_types) > len(EventKind):
            raise errors.invalid(f"at most {len(EventKind)} event types may be named")
        kinds = [kind_of_proto(k) for k in request.event_types]
        if bool(request.agent_namespace) != bool(request.agent_name):
            raise errors.invalid("an Agent filter names both agent_namespace and agent_name")
        for name in (request.agent_namespace, request.agent_name, request.url):
            if has_control(name):
                raise errors.invalid("control characters are not allowed")
        await webhooks.check_url(request.url, self.policy)
        secret = webhooks.new_secret()
        agent = (request.agent_namespace, request.agent_name) if request.agent_name else None
        created = await self.store.create_webhook(who.user, is_global, request.url, kinds, agent, secret)
        return events_pb2.CreateWebhookResponse(webhook=webhook_to_proto(created), secret=secret)

    @rpc
    async def ListWebhooks(
        self, request: events_pb2.ListWebhooksRequest, context: grpc.aio.ServicerContext
    ) -> events_pb2.ListWebhooksResponse:
        who = self.auth.identify(context)
        limit = page_limit(request.page.limit)
        rows = await self.store.list_webhooks(who.user, who.user in self.admins, after_id(request.page), limit + 1)
        return events_pb2.ListWebhooksResponse(
            webhooks=[webhook_to_proto(w) for w in rows[:limit]],
            page=common_pb2.PageResponse(next_page_token=next_id_token(rows, limit)),
        )

    @rpc
    async def DeleteWebhook(
        self, request: events_pb2.DeleteWebhookRequest, context: grpc.aio.ServicerContext
    ) -> events_pb2.DeleteWebhookResponse:
        who = self.auth.identify(context)
        await self.store.delete_webhook(parse_uuid(request.id, "id"), who.user, who.user in self.admins)
        return events_pb2.DeleteWebhookResponse()
