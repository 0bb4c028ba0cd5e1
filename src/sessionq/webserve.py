"""Serving HTTP in-process to untrusted clients: the A2A HTTP bindings (on the API port, server.address,
api/agentcard.py) and the web console (server.consoleAddress, console/server.py).

Both run uvicorn (its h11 protocol) on a socket of ours in the process that also serves gRPC, so
what one listener's clients can hold is bounded, and the rest of the process keeps working:

- a connection cap per listener (server.httpMaxConnections, lowered to what the process's file
  descriptors allow, see `connection_cap`): a connection beyond it is answered 503 and closed at
  once, so a flood of connections never takes the descriptors gRPC, the database pool and the
  other listener need;
- a deadline for the request head (server.httpHeaderTimeout), counted from the connection (or
  from the first byte of the next request on a kept-alive one): uvicorn has none, so a client that
  sends half a head and waits (slowloris) held its connection forever;
- a deadline between two pieces of a request body (the same value): a body that stops arriving
  ends its connection;
- uvicorn's own keep-alive timeout between requests;
- the Host header checked against the names the server answers to (server.allowedHosts; a DNS
  rebinding page reaches a loopback server under a foreign name): anything else is 400;
- request bodies counted as they arrive, chunked ones too: past the limit the answer is 413 at
  once, and the connection ends without reading the rest (what arrives for LINGER seconds after
  the answer is dropped, so that the client reads the answer rather than a reset).

While tracing is on, the requests an app names a route for are server spans (`TracedHttp`), children
of the trace context of their headers; off, each request checks one flag.

What a client gets wrong is logged as one line a minute at most per kind (logger sessionq.http),
uvicorn's line per unparsable request included.

`raise_fd_limit` lifts the soft RLIMIT_NOFILE to the hard one at start (the soft default of 1024
is what a few hundred idle connections exhaust).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import resource
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import urlsplit

import h11
import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from sessionq import telemetry

log = logging.getLogger("sessionq.http")

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
WILDCARDS = ("", "0.0.0.0", "::")
FD_RESERVE = 256  # descriptors kept for gRPC, the database pools, files and the runtime's channels
LINGER = 2.0  # seconds a connection drops the rest of a refused body before it closes
LOG_INTERVAL = 60.0  # seconds between two lines about refused connections or timed-out requests


def _raw_answer(status: str, text: str) -> bytes:
    """A whole HTTP/1.1 answer that closes its connection, written where no request is parsed."""
    body = text.encode()
    return (f"HTTP/1.1 {status}\r\ncontent-type: text/plain\r\nconnection: close\r\n"
            f"content-length: {len(body)}\r\n\r\n").encode() + body


BUSY = _raw_answer("503 Service Unavailable", "too many connections; retry in a while\n")
TIMED_OUT = _raw_answer("408 Request Timeout", "the request did not arrive in time\n")


# -- file descriptors -----------------------------------------------------------------------------

def raise_fd_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; returns the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def connection_cap(configured: int) -> int:
    """The connection cap of one HTTP listener: `configured`, but at most half of the descriptors
    this process may open beyond FD_RESERVE, so that the two listeners together leave the reserve."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    budget = configured if soft == resource.RLIM_INFINITY else max(16, (soft - FD_RESERVE) // 2)
    return max(1, min(configured, budget))


# -- the names the server answers to --------------------------------------------------------------

def _host_of(value: str) -> str:
    """The host of a Host header, a host:port or a bare host: lower case, without port, brackets
    or a trailing dot ('' when there is none)."""
    value = value.strip().lower()
    if value.startswith("["):
        host = value[1:value.find("]")] if "]" in value else ""
    elif value.count(":") == 1:
        host = value.partition(":")[0]
    else:
        host = value  # a bare name, or an IPv6 address without brackets (not a valid Host)
    return host.rstrip(".")


def _canonical(host: str) -> str:
    """One spelling per IP address (``0:0::1`` is ``::1``); names as they are."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


def default_hosts(listen_address: str, *public_urls: str) -> tuple[str, ...]:
    """The names a listener answers to when server.allowedHosts is empty: on a wildcard address
    any (`*`: the names it is reached by are not known); else the loopback names, its own host
    and the hosts of the public URLs that advertise it."""
    host = _host_of(listen_address.rpartition(":")[0] if not listen_address.startswith("[")
                    else listen_address)
    if host in WILDCARDS:
        return ("*",)
    names = [*LOOPBACK_NAMES, host]
    for url in public_urls:
        if url:
            names.append(_host_of(urlsplit(url if "//" in url else f"//{url}").netloc))
    return tuple(dict.fromkeys(n for n in names if n))


@dataclass(frozen=True)
class AllowedHosts:
    """Host names (`*.example.com` for its subdomains, `*` for any), matched without the port."""

    names: tuple[str, ...]

    @classmethod
    def of(cls, names: Iterable[str]) -> AllowedHosts:
        return cls(tuple(dict.fromkeys(_canonical(_host_of(n)) if n.strip() != "*" else "*"
                                       for n in names if n.strip())))

    def allows(self, header: str) -> bool:
        if "*" in self.names:
            return True
        host = _canonical(_host_of(header))
        if not host:
            return False
        for name in self.names:
            if name.startswith("*."):
                if host.endswith(name[1:]):
                    return True
            elif host == name:
                return True
        return False


# -- rate-limited lines ---------------------------------------------------------------------------

class _Every:
    """One line per `interval` seconds at most; the next says how many were not written."""

    def __init__(self, message: str, interval: float = LOG_INTERVAL) -> None:
        self.message = message
        self.interval = interval
        self._last = -interval
        self._missed = 0
        self._lock = threading.Lock()

    def note(self, listener: str) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._last < self.interval:
                self._missed += 1
                return
            self._last, missed, self._missed = now, self._missed, 0
        log.warning("%s: %s%s", listener, self.message,
                    f" ({missed} more since the last such line)" if missed else "")


class _ClientMistakes(logging.Filter):
    """uvicorn logs a WARNING line for every request it cannot parse (or upgrade): a client's mistake
    each, which an attacker can repeat at will; they become one line a minute."""

    MESSAGES = ("Invalid HTTP request received.", "Unsupported upgrade request.")

    def __init__(self) -> None:
        super().__init__()
        self.lines = _Every("refused requests that are not HTTP/1.1 it can parse")

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg in self.MESSAGES:
            self.lines.note("uvicorn")
            return False
        return True


UVICORN_CLIENT_MISTAKES = _ClientMistakes()
REFUSED = _Every("refused a connection beyond server.httpMaxConnections")
TIMEOUTS = _Every("closed a connection whose request did not arrive within server.httpHeaderTimeout")
HOSTS = _Every("refused a request for a host not in server.allowedHosts")


# -- the protocol: cap and deadlines -----------------------------------------------------------------

@dataclass(frozen=True)
class Limits:
    """What one listener allows: `max_connections` open at once, `header_timeout` seconds for a
    request head (and between two pieces of its body), `keep_alive` seconds between requests."""

    name: str
    max_connections: int
    header_timeout: float
    keep_alive: int = 5


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the connection cap and the request deadlines (see the module
    docstring). `limits` is set on a subclass per listener (`_protocol_for`)."""

    limits: ClassVar[Limits]
    _refused = False
    _timer: asyncio.TimerHandle | None = None
    _timing_head = False
    _lingering = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.server_state.connections) >= self.limits.max_connections:
            self._refused = True
            REFUSED.note(self.limits.name)
            transport.write(BUSY)
            transport.close()
            return
        super().connection_made(transport)
        self._arm(head=True)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if not self._refused:
            super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return  # the rest of a body that was answered without being read: dropped
        super().data_received(data)
        self._watch()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            self._linger()
        else:
            self._watch()

    def _linger(self) -> None:
        """The app answered before reading the body (413): end the connection without reading the
        rest. The answer is sent and the writing side shut, then what still arrives is dropped for
        LINGER seconds before the close, so that a client that sends its whole body before it reads
        gets the answer rather than a reset."""
        self._disarm()
        self._unset_keepalive_if_required()
        self._lingering = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._timer = self.loop.call_later(LINGER, self.transport.close)

    def _watch(self) -> None:
        """Keep the deadline that fits the request's state: the head's (counted from the first byte
        of the head), between two pieces of the body, or none while the app answers."""
        if self._refused or self.transport is None or self.transport.is_closing():
            return
        state = self.conn.their_state
        if state is h11.IDLE:
            if self.timeout_keep_alive_task is not None:
                self._disarm()  # between two requests: uvicorn's keep-alive timeout closes an idle one
            elif not self._timing_head:
                self._arm(head=True)
        elif state is h11.SEND_BODY:
            self._arm(head=False)
        else:
            self._disarm()  # the request is in: the app answers it

    def _arm(self, *, head: bool) -> None:
        self._disarm()
        self._timing_head = head
        self._timer = self.loop.call_later(self.limits.header_timeout, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timing_head = False

    def _expired(self) -> None:
        self._timer = None
        if self.transport is None or self.transport.is_closing():
            return
        TIMEOUTS.note(self.limits.name)
        if self.conn.our_state is h11.IDLE and (self.cycle is None or self.cycle.response_complete):
            self.transport.write(TIMED_OUT)  # nothing answered yet on this request: say why
        self.transport.close()


def _protocol_for(limits: Limits) -> type[GuardedH11Protocol]:
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"limits": limits})


# -- ASGI middleware: Host and body -------------------------------------------------------------------

def _header(scope: Scope, name: bytes) -> str | None:
    for k, v in scope.get("headers", []):
        if k == name:
            return str(v.decode("latin-1"))
    return None


async def _answer(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


class HostCheck:
    """Answer 400 to a request whose Host header does not name this server."""

    def __init__(self, app: ASGIApp, allowed: AllowedHosts, name: str) -> None:
        self.app = app
        self.allowed = allowed
        self.name = name

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self.allowed.allows(_header(scope, b"host") or ""):
            HOSTS.note(self.name)
            await _answer(send, 400, {"error": "the Host header does not name this server (server.allowedHosts)"})
            return
        await self.app(scope, receive, send)


class TracedHttp:
    """A server span per HTTP request whose path `route` names (its route template, e.g.
    ``/api/a2a/{namespace}/{agent}/jsonrpc``; None: not traced), child of the W3C trace context of
    its headers, lasting until the answer's last byte (a stream's too), the answer's status on it.
    While tracing is off a request costs one flag check."""

    def __init__(self, app: ASGIApp, route: Callable[[str], str | None]) -> None:
        self.app = app
        self.route = route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not telemetry.tracing() or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        route = self.route(path)
        if route is None:
            await self.app(scope, receive, send)
            return
        status = 0

        async def answering(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        with telemetry.http_server_span(scope.get("method", ""), route, path, scope.get("headers", ())) as span:
            try:
                await self.app(scope, receive, answering)
            finally:
                telemetry.http_status(span, status or 500)


class BodyTooLarge(Exception):
    pass


async def read_body(receive: Receive, limit: int) -> bytes | None:
    """The request body, counted as it arrives; BodyTooLarge past `limit` (the rest unread); None
    when the client went away."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives `body` whole first, then what the connection says (a disconnect)."""
    given = False

    async def receive_again() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return receive_again


class BodyLimit:
    """Refuse a request body larger than `limit` bytes with 413, before it is read whole: by its
    Content-Length when it has one, else counted as it arrives (chunked). The app gets the body
    whole, at once."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def _too_large(self, send: Send) -> None:
        # the connection then ends without reading the rest (GuardedH11Protocol._linger)
        await _answer(send, 413, {"error": f"the request body is larger than {self.limit} bytes"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = _header(scope, b"content-length")
        if length is not None and length.strip().isdigit() and int(length) > self.limit:
            await self._too_large(send)
            return
        try:
            body = await read_body(receive, self.limit)
        except BodyTooLarge:
            await self._too_large(send)
            return
        if body is None:
            return  # the client went away before its body arrived
        await self.app(scope, replay(body, receive), send)


# -- the server ------------------------------------------------------------------------------------

class _Server(uvicorn.Server):
    """uvicorn's server without its signal handlers: the process owns SIGINT and SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def listen(address: str, *, reuse_port: bool = False, backlog: int = 512) -> socket.socket:
    """A listening, non-blocking socket on HOST:PORT (OSError when it cannot)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, int(port)))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


class HttpServer:
    """An ASGI app served by uvicorn on one socket of ours, with `limits`; `port` once started."""

    def __init__(self, app: ASGIApp, limits: Limits) -> None:
        self.app = app
        self.limits = limits
        self.port = 0
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self, address: str, *, reuse_port: bool = False) -> None:
        sock = listen(address, reuse_port=reuse_port)
        self.port = int(sock.getsockname()[1])
        try:
            self._server, self._task = await _start(self.app, self.limits, [sock])
        except BaseException:
            sock.close()
            raise

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        await stop_server(self._server, self._task)


async def _start(app: ASGIApp, limits: Limits, sockets: list[socket.socket]) -> tuple[_Server, asyncio.Task[None]]:
    logging.getLogger("uvicorn.error").addFilter(UVICORN_CLIENT_MISTAKES)  # once: addFilter skips a filter it has
    config = uvicorn.Config(app, http=_protocol_for(limits), log_level="warning", lifespan="off",
                            access_log=False, timeout_graceful_shutdown=2, timeout_keep_alive=limits.keep_alive)
    server = _Server(config)
    task = asyncio.create_task(server.serve(sockets=sockets), name=limits.name)
    while not server.started and not task.done():  # noqa: ASYNC110 - uvicorn offers no event
        await asyncio.sleep(0.01)
    if task.done():
        task.result()
    return server, task


async def start_without_socket(app: ASGIApp, limits: Limits) -> tuple[_Server, asyncio.Task[None]]:
    """A uvicorn server of `app` under `limits` that listens nowhere: its connections are handed to
    it (oneport.py). Its task ends with `stop_server`."""
    return await _start(app, limits, [])


async def stop_server(server: _Server, task: asyncio.Task[None]) -> None:
    """Stop a server of `_start`: its connections close (in-flight requests get 2 s)."""
    server.should_exit = True
    with contextlib.suppress(Exception):
        await asyncio.wait_for(asyncio.shield(task), 5)
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
