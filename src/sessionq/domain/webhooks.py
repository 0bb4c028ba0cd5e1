"""Webhooks of lifecycle events (docs/events.md): the signing secret, the signed message, and the
delivery of one subscription's events of one Session, in order.

A message is signed as the Standard Webhooks specification says: headers ``webhook-id`` (the event
id, the same on every attempt: the receiver's idempotency key), ``webhook-timestamp`` (seconds since
the epoch, of this attempt) and ``webhook-signature`` (``v1,<base64 HMAC-SHA256 of
"<id>.<timestamp>.<body>" keyed by the secret's bytes>``); the secret is ``whsec_<base64>``, shown
to its creator once.

Delivery follows A2A push's rules (domain/push.py), over connections kept between the job's POSTs
(domain/delivery_http.py): the same target rules (http(s) only; loopback, private
and link-local addresses refused unless configured; checked again before every attempt, connecting
only to the addresses checked), no redirects followed, one deadline for an attempt, at most a few
KiB of the answer read. The deliver_webhooks job (one waiting per subscription: under load it
takes every event that came while it waited) claims the oldest pending deliveries of the
subscription in one statement (a batch, every Session's in order, under a lease; Sessions another
job holds left out), delivers to several Sessions at a time, each Session's one after the other,
and records the batch's outcomes in one statement. A failed attempt stops that Session's stream
(its later events wait: in order) and, once the batch is recorded, the job raises, so
procrastinate retries it with backoff. After
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

from sessionq import errors
from sessionq.db.store import Store
from sessionq.domain import push
from sessionq.domain.delivery_http import KeptConnections
from sessionq.models import LifecycleEvent

log = logging.getLogger(__name__)

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32
LEASE_MARGIN = 30.0  # the claim outlasts one attempt's deadline by at least this much
STREAMS = 8  # Sessions a deliver_webhooks job delivers to at a time (each Session's in order)
BATCH = 256  # deliveries a deliver_webhooks job claims (and records) in one statement


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


async def deliver_subscription(
    store: Store,
    subscription_id: UUID,
    *,
    policy: push.TargetPolicy,
    timeout: float = 10.0,
    max_attempts: int = 8,
    disable_after: int = 50,
    streams: int = STREAMS,
    batch: int = BATCH,
    connections: KeptConnections | None = None,
) -> int:
    """The deliver_webhooks job: the subscription's pending deliveries, claimed `batch` at a time in
    one statement (sessionq.claim_webhook_batch) and recorded in one (record_webhook_attempts);
    `streams` Sessions at a time, each Session's in order, a failed attempt ending its stream.
    Returns how many were delivered. Raises WebhookFailed after a batch with a failed attempt (the
    job is retried with backoff; the rest went through) or when another job held a stream."""
    own = connections is None
    # every POST of the job goes to the subscription's one URL: its connections are kept between
    # POSTs (each attempt still checks the address it connects to)
    http = connections or KeptConnections(keep=streams)
    executor = uuid.uuid4()
    # the claim covers a whole batch: a stream's attempts follow each other, a failure ends it
    lease = LEASE_MARGIN + timeout * max(1, min(batch // max(streams, 1), 8))
    delivered = 0
    failed: list[str] = []
    busy = 0
    gate = asyncio.Semaphore(streams)
    try:
        while True:
            claimed = await store.claim_webhook_batch(subscription_id, executor, lease, batch)
            if claimed is None:  # the subscription is gone
                break
            busy += int(claimed["busy"])
            deliveries = claimed["deliveries"]
            if not deliveries:
                break
            by_session: dict[str, list[dict[str, Any]]] = {}
            for d in deliveries:
                by_session.setdefault(d["session_id"], []).append(d)
            outcomes: list[dict[str, Any]] = []

            async def stream(items: list[dict[str, Any]], url: str, secret: str,
                             outcomes: list[dict[str, Any]]) -> None:
                nonlocal delivered
                async with gate:
                    for d in items:
                        body, headers = message(LifecycleEvent.from_json(d["event"]), secret)
                        ok, code, error = await http.post(url, body, headers, policy, timeout)
                        give_up = not ok and d["attempts"] + 1 >= max_attempts
                        outcomes.append({"id": d["id"], "ok": ok, "status": code, "error": error, "give_up": give_up})
                        if ok:
                            delivered += 1
                        elif give_up:
                            log.warning("webhook delivery %s of subscription %s given up after %s attempts: %s",
                                        d["id"], subscription_id, d["attempts"] + 1, error)
                        else:  # its later events wait for the retry: in order
                            # named by the subscription's id: the URL (often with a secret path) is its owner's
                            failed.append(f"webhook delivery {d['id']} of subscription {subscription_id} failed: "
                                          f"{errors.clip(error, 200)}")
                            return

            await asyncio.gather(*(stream(items, claimed["url"], claimed["secret"], outcomes)
                                   for items in by_session.values()))
            if not await store.record_webhook_attempts(subscription_id, executor, outcomes, disable_after):
                log.warning("webhook subscription %s disabled after %s failed attempts in a row", subscription_id,
                            disable_after)
                return delivered
            if failed or int(claimed["taken"]) < batch:  # a failure waits for the retry's backoff
                break
    finally:
        if own:
            await http.aclose()
    if failed:
        raise WebhookFailed(f"{len(failed)} webhook stream(s) of subscription {subscription_id} will be retried: "
                            f"{failed[0]}")
    if busy:
        raise WebhookFailed(f"{busy} webhook deliveries of subscription {subscription_id} are being delivered by "
                            "another job; retry")
    return delivered


async def check_url(url: str, policy: push.TargetPolicy) -> None:
    """INVALID_ARGUMENT unless `url` is an http(s) URL whose host resolves to addresses the policy
    allows (with private targets allowed, the host is not resolved here)."""
    if policy.allow_private:
        push.parse_target(url)
        return
    await push.resolve_target(url, policy)
