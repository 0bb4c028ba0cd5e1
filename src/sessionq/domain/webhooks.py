"""Webhooks of lifecycle events (docs/events.md): the signing secret, the signed message, and the
delivery of one subscription's events of one Session, in order.

A message is signed as the Standard Webhooks specification says: headers ``webhook-id`` (the event
id, the same on every attempt: the receiver's idempotency key), ``webhook-timestamp`` (seconds since
the epoch, of this attempt) and ``webhook-signature`` (``v1,<base64 HMAC-SHA256 of
"<id>.<timestamp>.<body>" keyed by the secret's bytes>``); the secret is ``whsec_<base64>``, shown
to its creator once.

Delivery is A2A push's (domain/push.py): the same target rules (http(s) only; loopback, private
and link-local addresses refused unless configured; checked again before every attempt, connecting
only to the addresses checked), no redirects followed, one deadline for an attempt, at most a few
KiB of the answer read. The deliver_webhooks job (one waiting per subscription: under load it
takes every event that came while it waited) delivers to several Sessions at a time; for each it
claims the oldest pending delivery under a lease, POSTs it, records the outcome and goes on. A
failed attempt stops that Session's stream (its later events wait: in order) and, at the end, the
job raises, so procrastinate retries it with backoff. After
`max_attempts` a delivery is given up and the next one goes; a run of `disable_after` failed
attempts disables the subscription.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import secrets
import time
import uuid
from typing import Any
from uuid import UUID

import httpx

from sessionq import errors
from sessionq.db.store import Store
from sessionq.domain import push
from sessionq.models import LifecycleEvent, WebhookClaimStatus

log = logging.getLogger(__name__)

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32
LEASE_MARGIN = 30.0  # the claim outlasts one attempt's deadline by at least this much
STREAMS = 8  # Sessions a deliver_webhooks job delivers to at a time (each Session's in order)
STREAM_PAGE = 256  # Sessions with pending deliveries read at a time


class WebhookFailed(Exception):
    """A delivery attempt failed (or another job delivers the stream now); the job is retried."""


def new_secret() -> str:
    """A fresh signing secret, as Standard Webhooks spells it."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


def signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode("ascii")


def event_json(e: LifecycleEvent) -> dict[str, Any]:
    """An event as JSON: the SSE data, the CLI's lines, a webhook's `data`."""
    return {
        "id": e.id,
        "type": e.kind.value,
        "session_id": str(e.session_id),
        "owner": e.owner,
        "agent": {"namespace": e.agent_namespace, "name": e.agent_name},
        "operation_id": str(e.operation_id) if e.operation_id else None,
        "task_id": e.task_id,
        "payload": e.payload,
        "created_at": e.created_at.isoformat(),
    }


def message(event: LifecycleEvent, secret: str, now: float | None = None) -> tuple[bytes, dict[str, str]]:
    """The body and the signature headers of one attempt at delivering `event`."""
    body = json.dumps({"type": event.kind.value, "timestamp": event.created_at.isoformat(),
                       "data": event_json(event)}, separators=(",", ":")).encode()
    timestamp = int(now if now is not None else time.time())
    msg_id = f"evt_{event.id}"
    return body, {"webhook-id": msg_id, "webhook-timestamp": str(timestamp),
                  "webhook-signature": signature(secret, msg_id, timestamp, body)}


async def deliver(
    store: Store,
    subscription_id: UUID,
    session_id: UUID,
    *,
    policy: push.TargetPolicy,
    timeout: float = 10.0,
    max_attempts: int = 8,
    disable_after: int = 50,
    client: httpx.AsyncClient | None = None,
) -> int:
    """Deliver the subscription's pending deliveries of one Session in order; returns how many were
    delivered. Raises WebhookFailed after recording a failed attempt (a retry continues from that
    delivery), or when another job holds the stream."""
    own = client is None
    http = client or push.delivery_client(timeout)
    try:
        return await _stream(store, subscription_id, session_id, uuid.uuid4(), http, policy, timeout, max_attempts,
                             disable_after)
    finally:
        if own:
            await http.aclose()


async def deliver_subscription(
    store: Store,
    subscription_id: UUID,
    *,
    policy: push.TargetPolicy,
    timeout: float = 10.0,
    max_attempts: int = 8,
    disable_after: int = 50,
    streams: int = STREAMS,
    client: httpx.AsyncClient | None = None,
) -> int:
    """The deliver_webhooks job: every Session's pending deliveries of the subscription, `streams`
    Sessions at a time, each Session's in order; returns how many were delivered. Raises
    WebhookFailed at the end when a stream failed or another job held one (the job is retried with
    backoff; the streams that went through are done)."""
    own = client is None
    http = client or push.delivery_client(timeout)
    delivered = 0
    failed: list[str] = []
    gate = asyncio.Semaphore(streams)

    async def one(session_id: UUID) -> None:
        nonlocal delivered
        async with gate:
            try:
                delivered += await _stream(store, subscription_id, session_id, uuid.uuid4(), http, policy, timeout,
                                           max_attempts, disable_after)
            except WebhookFailed as e:
                failed.append(str(e))

    try:
        seen: set[UUID] = set()
        while True:
            pending = [s for s in await store.webhook_streams(subscription_id, STREAM_PAGE) if s not in seen]
            if not pending:
                break
            seen.update(pending)
            await asyncio.gather(*(one(s) for s in pending))
    finally:
        if own:
            await http.aclose()
    if failed:
        raise WebhookFailed(f"{len(failed)} webhook stream(s) of subscription {subscription_id} will be retried: "
                            f"{failed[0]}")
    return delivered


async def _stream(
    store: Store, subscription_id: UUID, session_id: UUID, executor: UUID, http: httpx.AsyncClient,
    policy: push.TargetPolicy, timeout: float, max_attempts: int, disable_after: int,
) -> int:
    lease = timeout + LEASE_MARGIN
    delivered = 0
    while True:
        status, d = await store.claim_webhook_delivery(subscription_id, session_id, executor, lease)
        if status == WebhookClaimStatus.NONE:
            return delivered
        if status == WebhookClaimStatus.BUSY or d is None:
            raise WebhookFailed(f"the webhook deliveries of subscription {subscription_id} for session "
                                f"{session_id} are being delivered by another job; retry")
        event = LifecycleEvent.from_json(d["event"])
        body, headers = message(event, d["secret"])
        ok, code, error = await push.post(http, {"url": d["url"], "body": body, "headers": headers}, policy, timeout)
        give_up = not ok and d["attempts"] + 1 >= max_attempts
        enabled = await store.record_webhook_attempt(d["id"], executor, ok, code, error, give_up, disable_after)
        if ok:
            delivered += 1
            continue
        if not enabled:
            log.warning("webhook subscription %s disabled after %s failed attempts in a row: %s",
                        subscription_id, disable_after, error)
            return delivered
        if not give_up:
            # named by the subscription's id: the URL (often with a secret path) is its owner's alone
            raise WebhookFailed(f"webhook delivery {d['id']} of subscription {subscription_id} failed: "
                                f"{errors.clip(error, 200)}")
        log.warning("webhook delivery %s of subscription %s given up after %s attempts: %s", d["id"],
                    subscription_id, d["attempts"] + 1, error)


async def check_url(url: str, policy: push.TargetPolicy) -> None:
    """INVALID_ARGUMENT unless `url` is an http(s) URL whose host resolves to addresses the policy
    allows (with private targets allowed, the host is not resolved here)."""
    if policy.allow_private:
        push.parse_target(url)
        return
    await push.resolve_target(url, policy)
