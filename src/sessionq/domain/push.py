"""A2A push notifications: where they may go, and their delivery.

Targets: an http(s) URL whose host resolves only to public addresses, unless configuration allows
private ones (a2a.push.allowPrivateTargets: loopback, private ranges, link-local). An IPv6 address
that embeds an IPv4 address (IPv4-mapped, NAT64 64:ff9b::/96, 6to4 2002::/16, Teredo) is judged by
the IPv4 address it leads to, and the IPv6 forms that are never globally routable (IPv4-compatible
::/96, IPv4-translated ::ffff:0:0:0/96, local-use NAT64 64:ff9b:1::/48) are refused. The check runs
when a config is created and again before every delivery (a name may resolve elsewhere later).

Delivery (the deliver_push job, one per task at a time through a lease on the task's stream): the
task's pending deliveries in event order, each an HTTP POST of the A2A StreamResponse (JSON) with
the config's token (X-A2A-Notification-Token) and authentication (Authorization: <scheme>
<credentials>). Each POST:

- resolves the host once, checks every address, and connects to an address it checked (the URL's
  host is replaced by that address; the Host header, TLS server name and certificate check keep
  the name), so a name that resolves elsewhere between the check and the connection gains nothing;
- has one deadline for all of it (a2a.push.timeout: resolving, connecting, sending, the answer's
  status line and headers), whatever the receiver does, trickling bytes included;
- reads at most ANSWER_LIMIT bytes of the answer's body (until the same deadline; the status
  decides), then closes the connection.

A 2xx answer is delivered; anything else is recorded and the job fails so that procrastinate
retries it with backoff; after `max_attempts` the delivery is given up (recorded failed) and the
next one is tried. A turn never waits for any of this, and the deliver_push jobs run in a queue of
their own (`push`) of which a worker runs at most a2a.push.concurrency at a time, so slow receivers
hold those slots only.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import logging
import socket
import ssl
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from sessionq import errors, metrics
from sessionq.db.store import Store

log = logging.getLogger(__name__)

TOKEN_HEADER = "X-A2A-Notification-Token"
LEASE = 60.0  # seconds a job holds a task's delivery stream, renewed before each POST
LEASE_MARGIN = 30.0  # the lease outlasts one POST's deadline by at least this much
ANSWER_LIMIT = 4096  # bytes of a receiver's answer read at most; then the connection is closed
URL_LIMIT = 2048
CLOSE_TIMEOUT = 2.0  # seconds closing a delivery's connection may take

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]

# IPv6 ranges that are never globally routable although Python's is_global passes them: refused
# whatever IPv4 address they embed
_UNROUTABLE = (
    ipaddress.IPv6Network("::/96"),  # IPv4-compatible (deprecated, RFC 4291)
    ipaddress.IPv6Network("::ffff:0:0:0/96"),  # IPv4-translated (SIIT, RFC 2765)
    ipaddress.IPv6Network("64:ff9b:1::/48"),  # local-use NAT64 (RFC 8215)
)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # the well-known NAT64 prefix (RFC 6052)


class PushFailed(Exception):
    """A delivery attempt failed; the job is retried (with backoff) to try again."""


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address a connection to `ip` reaches through a translation or tunnel: IPv4-mapped,
    NAT64 (64:ff9b::/96), 6to4 (2002::/16: its gateway) or Teredo (2001::/32: its client)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    return None


def refused(ip: IPAddress) -> bool:
    """Whether a push may not go to `ip` when private targets are not allowed: not globally
    reachable, multicast, an IPv6 form that is never routed, or one that leads to such an IPv4 address."""
    if ip.is_multicast or not ip.is_global:
        return True
    if isinstance(ip, ipaddress.IPv6Address):
        if any(ip in net for net in _UNROUTABLE):
            return True
        v4 = embedded_ipv4(ip)
        return v4 is not None and refused(v4)
    return False


async def resolve_host(host: str, port: int) -> list[IPAddress]:
    """Every address `host` resolves to for a TCP connection, in the resolver's order, once each."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    out: list[IPAddress] = []
    for info in infos:
        ip = ipaddress.ip_address(str(info[4][0]))
        if ip not in out:
            out.append(ip)
    return out


@dataclass(frozen=True)
class TargetPolicy:
    """Where pushes may go: whether private addresses are allowed, and how a host name is resolved."""

    allow_private: bool = False
    resolve: Resolver = field(default=resolve_host)
    # loopback only (webhooks under `sessionq up`), while other private ranges stay refused
    allow_loopback: bool = False

    def refuses(self, ip: IPAddress) -> bool:
        if self.allow_loopback and (ip.is_loopback or (isinstance(ip, ipaddress.IPv6Address)
                                                       and ip.ipv4_mapped is not None and ip.ipv4_mapped.is_loopback)):
            return False
        return not self.allow_private and refused(ip)


@dataclass(frozen=True)
class Target:
    """A checked push target: its URL and the addresses a delivery may connect to (all checked)."""

    url: httpx.URL
    addresses: tuple[IPAddress, ...]

    @property
    def host_is_name(self) -> bool:
        return _literal(self.url.host) is None


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


@functools.lru_cache(maxsize=1024)
def parse_target(url: str) -> httpx.URL:
    """The URL of a push target; SQ400 unless it is an http(s) URL with a host (and a valid port).
    Kept per URL (a URL parses the same every time; a webhook job POSTs to one URL hundreds of
    times): the host is still resolved and checked at every attempt (`resolve_target`)."""
    if len(url) > URL_LIMIT:
        raise errors.invalid(f"the push notification url must be at most {URL_LIMIT} characters")
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError, TypeError):
        raise errors.invalid(f"the push notification url {errors.clip(url)!r} is not valid") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise errors.invalid("the push notification url must be an http or https URL with a host")
    if parsed.port is not None and not 0 < parsed.port < 65536:
        raise errors.invalid(f"the push notification url {errors.clip(url)!r} is not valid")
    return parsed


def _port(url: httpx.URL) -> int:
    return url.port or (443 if url.scheme == "https" else 80)


async def resolve_target(url: str, policy: TargetPolicy) -> Target:
    """Parse `url`, resolve its host once and check every address (SQ400 if it does not resolve or
    one of its addresses is refused). A delivery connects only to the addresses returned."""
    parsed = parse_target(url)
    host = parsed.raw_host.decode("ascii")
    literal = _literal(parsed.host)
    if literal is not None:
        addresses = [literal]
    else:
        try:
            addresses = await policy.resolve(host, _port(parsed))
        except (OSError, UnicodeError, ValueError):  # socket.gaierror is an OSError
            addresses = []
        if not addresses:
            raise errors.invalid(f"the push notification host {errors.clip(host)!r} does not resolve")
    if any(policy.refuses(ip) for ip in addresses):
        raise errors.invalid(
            f"the push notification host {errors.clip(host)!r} is a loopback, private or link-local address; "
            "this server does not send notifications there"
        )
    return Target(parsed, tuple(addresses))


async def check_target(url: str, allow_private: bool) -> None:
    """SQ400 unless `url` is an http(s) URL with a host that resolves (to public addresses only,
    unless `allow_private`: then the host is not resolved here)."""
    if allow_private:
        parse_target(url)
        return
    await resolve_target(url, TargetPolicy(allow_private=False))


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS context of every delivery client, made once per process: loading the CA bundle takes
    tens of milliseconds of CPU, which a client made per job would spend on the worker's event loop
    each time (stalling every other job of the worker)."""
    return httpx.create_ssl_context()


def delivery_client(timeout: float) -> httpx.AsyncClient:
    """The HTTP client of one deliver_push job: no proxies from the environment (a delivery connects
    to the address it checked), no redirects, and no connection kept alive (a connection opened for
    one name's TLS server name is never reused for another name that shares its address). A
    deliver_webhooks job, whose every POST goes to one URL, keeps its connections instead
    (domain/delivery_http.py)."""
    return httpx.AsyncClient(
        timeout=timeout,
        verify=tls_context(),
        follow_redirects=False,
        trust_env=False,
        limits=httpx.Limits(max_keepalive_connections=0),
    )


async def deliver(
    store: Store,
    task_id: str,
    *,
    policy: TargetPolicy,
    timeout: float = 10.0,
    max_attempts: int = 8,
    client: httpx.AsyncClient | None = None,
) -> int:
    """Deliver the task's pending notifications in order; returns how many were delivered. Raises
    PushFailed after recording a failed attempt (the job's retry continues from that delivery).
    Each POST ends within `timeout` seconds, all of it included."""
    executor = uuid.uuid4()
    lease = max(LEASE, timeout + LEASE_MARGIN)
    if not await store.claim_push_stream(task_id, executor, lease):
        raise PushFailed(f"the push stream of task {task_id} is being delivered by another job; retry")
    delivered = 0
    own = client is None
    http = client or delivery_client(timeout)
    try:
        while (d := await store.next_push_delivery(task_id)) is not None:
            await store.claim_push_stream(task_id, executor, lease)
            ok, status, error = await post(http, d, policy, timeout)
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


async def post(
    http: httpx.AsyncClient, d: dict[str, Any], policy: TargetPolicy, timeout: float
) -> tuple[bool, int | None, str | None]:
    """One attempt at delivery `d` (its url, payload, token and authentication), within `timeout`
    seconds in all: (delivered, the HTTP status if one came, the error). The status decides; of the
    answer's body at most ANSWER_LIMIT bytes are read, until the same deadline."""
    deadline = asyncio.get_running_loop().time() + timeout
    try:
        async with asyncio.timeout_at(deadline):
            target = await resolve_target(d["url"], policy)
            opened = await _open(http, target, d)
    except errors.SessionqError as e:
        return False, None, e.message
    except TimeoutError:
        return False, None, f"no answer within {timeout:g}s (a2a.push.timeout)"
    if isinstance(opened, str):
        return False, None, opened
    response = opened
    try:
        async with asyncio.timeout_at(deadline):
            await _read_some(response, ANSWER_LIMIT)
    except (TimeoutError, httpx.HTTPError):
        pass  # the status has come; the rest of the answer is not needed
    finally:
        with contextlib.suppress(TimeoutError, httpx.HTTPError, OSError):
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await response.aclose()  # before the whole answer was read: the connection is closed
    if 200 <= response.status_code < 300:
        return True, response.status_code, None
    return False, response.status_code, f"HTTP {response.status_code}"


async def _open(http: httpx.AsyncClient, target: Target, d: dict[str, Any]) -> httpx.Response | str:
    """POST `d` to the first of the target's (checked) addresses that accepts a connection; the
    answer once its status and headers came (its body not read yet), or what failed."""
    headers = {"Content-Type": "application/json", "Host": target.url.netloc.decode("ascii")}
    headers.update(d.get("headers") or {})  # a webhook's signature headers
    if d.get("token"):
        headers[TOKEN_HEADER] = d["token"]
    if d.get("auth_scheme"):
        headers["Authorization"] = f"{d['auth_scheme']} {d.get('auth_credentials') or ''}".strip()
    extensions: dict[str, Any] = {}
    if target.url.scheme == "https" and target.host_is_name:
        extensions["sni_hostname"] = target.url.raw_host.decode("ascii")  # and the certificate is checked for it
    error = "no address to connect to"
    for ip in target.addresses:
        # a webhook sends the exact bytes it signed (`body`); a push notification its payload as JSON
        body = {"content": d["body"]} if "body" in d else {"json": d["payload"]}
        request = http.build_request(
            "POST", target.url.copy_with(host=str(ip)), headers=headers, extensions=extensions, **body
        )
        try:
            return await http.send(request, stream=True)
        except httpx.ConnectError as e:
            error = _describe(e)  # the next checked address, if any
        except httpx.HTTPError as e:
            return _describe(e)
    return error


async def _read_some(response: httpx.Response, limit: int) -> int:
    """Read at most about `limit` bytes of the answer's body (one network read past it at most)."""
    read = 0
    async for chunk in response.aiter_raw():
        read += len(chunk)
        if read >= limit:
            break
    return read


def _describe(e: httpx.HTTPError) -> str:
    return f"{type(e).__name__}: {errors.clip(e, 200)}"
