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
KiB of the answer read. A transition writes no delivery: it makes sure the subscription's
deliver_webhooks job waits (one waiting per subscription: under load it takes every event that
came while it waited). The job takes the subscription's lease and claims, in one statement, its
held deliveries and the events past its cursor up to the horizon (every Session's in order),
delivers to several Sessions at a time, each Session's one after the other, and records the
round in one statement, which moves the cursor. A failed attempt stops that Session's stream (it
and its later events become held deliveries: in order) and, once the round is recorded, the job
raises, so procrastinate retries it with backoff. After `max_attempts` a delivery is given up and
the next one goes; a run of `disable_after` failed attempts disables the subscription.
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
BATCH = 256  # events (and held deliveries) a deliver_webhooks job claims, and records, in one statement
LINGER = 0.05  # seconds a job waits after a round that was not full, before it claims the next
HORIZON_WAIT = 5.0  # how long a job with nothing to send waits for older transactions before it retries


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
    linger: float = LINGER,
) -> int:
    """The deliver_webhooks job: rounds of the subscription's deliveries under its lease, each
    claimed in one statement (sessionq.claim_webhook_round: held deliveries, then up to `batch`
    events past the cursor) and recorded in one (record_webhook_round, which moves the cursor);
    `streams` Sessions at a time, each Session's in order, a failed attempt holding the rest of its
    Session back; after a round that was not full it waits `linger` seconds before the next claim.
    Returns how many were delivered. Ends when a claim finds nothing and every
    transaction that was running when the job began has ended (one of them may have seen this job
    waiting and deferred none), or when another executor holds the lease (it defers a job for when
    that one lets go). Raises WebhookFailed after a round with a failed attempt (the job is retried
    with backoff; the rest went through)."""
    own = connections is None
    # every POST of the job goes to the subscription's one URL: its connections are kept between
    # POSTs (each attempt still checks the address it connects to)
    http = connections or KeptConnections(keep=streams)
    executor = uuid.uuid4()
    # the lease covers a whole round: a stream's attempts follow each other, a failure ends it
    lease = LEASE_MARGIN + timeout * max(1, min(batch // max(streams, 1), 8))
    delivered = 0
    failed: list[str] = []
    gate = asyncio.Semaphore(streams)
    start: str | None = None
    waited, pause = 0.0, 0.002
    try:
        while True:
            claimed = await store.claim_webhook_round(subscription_id, executor, lease, batch, start)
            if claimed is None or "busy" in claimed or "done" in claimed:  # gone, another's, or caught up
                break
            start = claimed["start"]
            items: list[dict[str, Any]] = [*claimed["held"], *claimed["events"]]
            if not items:
                # a transaction older than this job's start has not ended: wait for its events
                if waited >= HORIZON_WAIT:
                    await store.record_webhook_round(subscription_id, executor, None, [], disable_after, True)
                    raise WebhookFailed(f"webhook subscription {subscription_id}: a transaction has been running "
                                        f"for over {HORIZON_WAIT:g}s; its events go out when it ends")
                await asyncio.sleep(pause)
                waited, pause = waited + pause, min(pause * 2, 0.1)
                continue
            waited, pause = 0.0, 0.002
            by_session: dict[str, list[dict[str, Any]]] = {}
            for d in items:  # held ones first: they precede their Session's new events
                by_session.setdefault(d["session_id"], []).append(d)
            outcomes: list[dict[str, Any]] = []
            held_back: list[dict[str, Any]] = []

            async def stream(items: list[dict[str, Any]], url: str, secret: str, outcomes: list[dict[str, Any]],
                             held_back: list[dict[str, Any]]) -> None:
                nonlocal delivered
                async with gate:
                    for i, d in enumerate(items):
                        if d.get("hold"):  # its Session has held deliveries this round did not take
                            held_back.extend(items[i:])
                            return
                        body, headers = message(LifecycleEvent.from_json(d["event"]), secret)
                        ok, code, error = await http.post(url, body, headers, policy, timeout)
                        attempts = d.get("attempts", 0) + 1
                        give_up = not ok and attempts >= max_attempts
                        outcomes.append({**_key(d), "attempted": True, "ok": ok, "status": code, "error": error,
                                         "give_up": give_up})
                        if ok:
                            delivered += 1
                        elif give_up:
                            log.warning("webhook delivery of event %s to subscription %s given up after %s "
                                        "attempts: %s", d["event"]["seq"], subscription_id, attempts, error)
                        else:  # its later events wait for the retry: in order
                            # named by the subscription's id: the URL (often with a secret path) is its owner's
                            failed.append(f"webhook delivery of event {d['event']['seq']} to subscription "
                                          f"{subscription_id} failed: {errors.clip(error, 200)}")
                            held_back.extend(items[i + 1:])
                            return

            await asyncio.gather(*(stream(items, claimed["url"], claimed["secret"], outcomes, held_back)
                                   for items in by_session.values()))
            outcomes.extend({**_key(d), "attempted": False} for d in held_back)
            status = await store.record_webhook_round(subscription_id, executor, claimed["cursor"], outcomes,
                                                      disable_after, bool(failed))
            if status == "disabled":
                log.warning("webhook subscription %s disabled after %s failed attempts in a row", subscription_id,
                            disable_after)
                return delivered
            if status == "lost" or failed:  # another executor took over; a failure waits for the backoff
                break
            if len(items) < batch and linger > 0:
                # a round that was not full: let the events of the next moments gather into one round,
                # where under a steady load each claim would take the few that have just committed
                await asyncio.sleep(linger)
    finally:
        if own:
            await http.aclose()
    if failed:
        raise WebhookFailed(f"{len(failed)} webhook stream(s) of subscription {subscription_id} will be retried: "
                            f"{failed[0]}")
    return delivered


def _key(item: dict[str, Any]) -> dict[str, Any]:
    """What names a round's item to record_webhook_round: a held delivery's id, or a new event."""
    if "id" in item:
        return {"id": item["id"]}
    return {"seq": item["seq"], "xid": item["xid"], "session_id": item["session_id"]}


async def check_url(url: str, policy: push.TargetPolicy) -> None:
    """INVALID_ARGUMENT unless `url` is an http(s) URL whose host resolves to addresses the policy
    allows (with private targets allowed, the host is not resolved here)."""
    if policy.allow_private:
        push.parse_target(url)
        return
    await push.resolve_target(url, policy)
