"""A2A push notifications: where they may go, and their delivery.

Targets: an http(s) URL whose host resolves only to public addresses, unless configuration allows
private ones (a2a.push.allowPrivateTargets: loopback, private ranges, link-local). The check runs
when a config is created and again before every delivery (a name may resolve elsewhere later).

Delivery (the deliver_push job, one per task at a time through a lease on the task's stream): the
task's pending deliveries in event order, each an HTTP POST of the A2A StreamResponse (JSON) with
the config's token (X-A2A-Notification-Token) and authentication (Authorization: <scheme>
<credentials>). A 2xx answer is delivered; anything else is recorded and the job fails so that
procrastinate retries it with backoff; after `max_attempts` the delivery is given up (recorded
failed) and the next one is tried. A turn never waits for any of this.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import uuid
from typing import Any
from urllib.parse import urlsplit

import httpx

from sessionq import errors, metrics
from sessionq.db.store import Store

log = logging.getLogger(__name__)

TOKEN_HEADER = "X-A2A-Notification-Token"
LEASE = 60.0


class PushFailed(Exception):
    """A delivery attempt failed; the job is retried (with backoff) to try again."""


def _private(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    return not ip.is_global or ip.is_multicast


async def check_target(url: str, allow_private: bool) -> None:
    """SQ400 unless `url` is an http(s) URL with a host that resolves (to public addresses only,
    unless `allow_private`)."""
    if len(url) > 2048:
        raise errors.invalid("the push notification url must be at most 2048 characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise errors.invalid(f"the push notification url {errors.clip(url)!r} is not valid") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise errors.invalid("the push notification url must be an http or https URL with a host")
    if allow_private:
        return
    host = parts.hostname
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port or 443, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise errors.invalid(f"the push notification host {errors.clip(host)!r} does not resolve") from None
    if any(_private(str(info[4][0])) for info in infos):
        raise errors.invalid(
            f"the push notification host {errors.clip(host)!r} is a loopback, private or link-local address; "
            "this server does not send notifications there"
        )


async def deliver(
    store: Store,
    task_id: str,
    *,
    allow_private: bool,
    timeout: float = 10.0,
    max_attempts: int = 8,
    client: httpx.AsyncClient | None = None,
) -> int:
    """Deliver the task's pending notifications in order; returns how many were delivered. Raises
    PushFailed after recording a failed attempt (the job's retry continues from that delivery)."""
    executor = uuid.uuid4()
    if not await store.claim_push_stream(task_id, executor, LEASE):
        raise PushFailed(f"the push stream of task {task_id} is being delivered by another job; retry")
    delivered = 0
    own = client is None
    http = client or httpx.AsyncClient(timeout=timeout, follow_redirects=False)
    try:
        while (d := await store.next_push_delivery(task_id)) is not None:
            await store.claim_push_stream(task_id, executor, LEASE)
            ok, status, error = await _post(http, d, allow_private)
            give_up = not ok and d["attempts"] + 1 >= max_attempts
            await store.record_push_attempt(d["id"], ok, status, error, give_up)
            metrics.PUSH_DELIVERIES.labels(outcome="delivered" if ok else "failed" if give_up else "retried").inc()
            if ok:
                delivered += 1
            elif not give_up:
                # named by the config's id: the URL (often with a secret path) is its creator's alone
                raise PushFailed(f"push notification {d['id']} of task {errors.clip(task_id)} to config "
                                 f"{errors.clip(d['config_id'])} failed: {error}")
            else:
                log.warning("push notification %s of task %s given up after %s attempts: %s", d["id"], task_id,
                            d["attempts"] + 1, error)
    finally:
        await store.release_push_stream(task_id, executor)
        if own:
            await http.aclose()
    return delivered


async def _post(http: httpx.AsyncClient, d: dict[str, Any], allow_private: bool) -> tuple[bool, int | None, str | None]:
    try:
        await check_target(d["url"], allow_private)
    except errors.SessionqError as e:
        return False, None, e.message
    headers = {"Content-Type": "application/json"}
    if d.get("token"):
        headers[TOKEN_HEADER] = d["token"]
    if d.get("auth_scheme"):
        headers["Authorization"] = f"{d['auth_scheme']} {d.get('auth_credentials') or ''}".strip()
    try:
        r = await http.post(d["url"], json=d["payload"], headers=headers)
    except httpx.HTTPError as e:
        return False, None, f"{type(e).__name__}: {errors.clip(e, 200)}"
    if 200 <= r.status_code < 300:
        return True, r.status_code, None
    return False, r.status_code, f"HTTP {r.status_code}"
