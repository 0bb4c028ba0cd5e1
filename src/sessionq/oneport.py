"""One public port for every protocol (server.address): native gRPC, gRPC-Web, the A2A HTTP
bindings and agent cards, MCP and the HTTP health endpoint.

grpcio cannot serve HTTP/1.1, and an HTTP/2 server written in Python serves gRPC at half
grpcio's rate or less; so the port is a small front that reads the first bytes of each
connection and hands the connection over whole, once:

- a connection that opens with the HTTP/2 client preface (prior knowledge: how every native gRPC
  client speaks over plain TCP) is piped, byte for byte, to grpcio listening on a unix socket in
  a private directory of this process. The pipe copies what arrives as it arrives, in one
  callback per read and no parsing, so grpcio does all of HTTP/2 (its own limits and handshake
  timeout included);
- anything else is HTTP/1.1 and becomes, on the same transport (no copy, no second socket), a
  connection of the uvicorn server that serves the ASGI app, with every limit of webserve.py
  (the request head's deadline, the Host check and the counted body limit are the app's and the
  protocol's, as on any listener of ours).

The connection cap (server.httpMaxConnections) counts every connection of the port: those still
being read, the HTTP/1.1 ones and the piped gRPC ones. At the cap a new connection closes the
oldest one still waiting for its first bytes or for a request head (what a slowloris holds), so
a flood of half-sent requests never keeps a gRPC client out; only when every connection is busy
is the new one answered 503. A connection that has not said which it is within
server.httpHeaderTimeout is answered 408 and closed.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from typing import Any, cast

from starlette.types import ASGIApp

from sessionq import webserve
from sessionq.webserve import BUSY, REFUSED, TIMED_OUT, TIMEOUTS, Limits, _Every

EVICTED = _Every("closed the oldest connection still waiting for its request to admit a new one"
                 " (server.httpMaxConnections reached)")
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


class _Pipe(asyncio.Protocol):
    """One side of a piped connection: what arrives is written to the other side; when the other
    side's write buffer is full, this side stops reading (and resumes when it drains)."""

    def __init__(self, front: OnePort, peer: asyncio.Transport | None = None) -> None:
        self.front = front
        self.transport: asyncio.Transport | None = None
        self.peer = peer

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.peer is not None:
            self.peer.write(data)

    def pause_writing(self) -> None:
        if self.peer is not None:
            self.peer.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and not self.peer.is_closing():
            self.peer.resume_reading()

    def eof_received(self) -> bool:
        return False  # the transport closes; connection_lost closes the other side after its writes

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None:
            self.peer.close()


class _ClientPipe(_Pipe):
    """The client's side of a piped connection, counted as one of the port's connections."""

    def connection_lost(self, exc: Exception | None) -> None:
        self.front.pipes.discard(self)
        super().connection_lost(exc)


class _Sniff(asyncio.Protocol):
    """A new connection of the port until its first bytes say which protocol it speaks."""

    def __init__(self, front: OnePort) -> None:
        self.front = front
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.timer: asyncio.TimerHandle | None = None
        self.counted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = t = cast(asyncio.Transport, transport)
        front = self.front
        if front.connections() >= front.limits.max_connections and not front.evict_one():
            REFUSED.note(front.limits.name)
            t.write(BUSY)
            t.close()
            return
        front.sniffing[self] = None
        self.counted = True
        self.timer = front.loop.call_later(front.limits.header_timeout, self._expired)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) < len(PREFACE) and PREFACE.startswith(self.buffer):
            return  # perhaps the preface: wait for the rest of it
        self._decided()
        if self.buffer.startswith(PREFACE):
            self.front.pipe(self.transport, self.buffer)  # type: ignore[arg-type]
        else:
            self.front.http(self.transport, self.buffer)  # type: ignore[arg-type]

    def _decided(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.front.sniffing.pop(self, None)
        self.counted = False

    def _expired(self) -> None:
        self.timer = None
        TIMEOUTS.note(self.front.limits.name)
        if self.transport is not None and not self.transport.is_closing():
            if not self.buffer:
                self.transport.write(TIMED_OUT)
            self.transport.close()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self.counted:
            self._decided()


class OnePort:
    """The front of server.address: gRPC piped to grpcio on `grpc_path` (a unix socket), HTTP/1.1
    served by uvicorn with `app` under `limits`. `port` once started."""

    def __init__(self, app: ASGIApp, limits: Limits, grpc_path: str) -> None:
        self.app = app
        self.limits = limits
        self.grpc_path = grpc_path
        self.port = 0
        self.sniffing: dict[_Sniff, None] = {}  # oldest first
        self.pipes: set[_ClientPipe] = set()
        self.waiting_http: dict[Any, None] = {}  # HTTP/1.1 connections, oldest first (evict_one)
        self._server: asyncio.base_events.Server | None = None
        self._http: webserve._Server | None = None
        self._http_task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None
        return self._loop

    def connections(self) -> int:
        http = len(self._http.server_state.connections) if self._http is not None else 0
        return len(self.sniffing) + len(self.pipes) + http

    def evict_one(self) -> bool:
        """At the cap: close the oldest connection that is still waiting for its first bytes or for
        a request head (what a slowloris holds), so that a new one (a gRPC client's, say) gets in.
        False when every connection is busy with a request or piped."""
        sniff = next(iter(self.sniffing), None)
        if sniff is not None:
            sniff._decided()
            if sniff.transport is not None:
                sniff.transport.close()
            EVICTED.note(self.limits.name)
            return True
        live = self._http.server_state.connections if self._http is not None else set()
        for protocol in list(self.waiting_http):
            del self.waiting_http[protocol]
            if protocol in live and getattr(protocol, "_timing_head", False):
                protocol.transport.close()
                EVICTED.note(self.limits.name)
                return True
        return False

    async def start(self, address: str, *, reuse_port: bool = False) -> None:
        self._loop = asyncio.get_running_loop()
        self._http, self._http_task = await webserve.start_without_socket(self.app, self.limits)
        sock = webserve.listen(address, reuse_port=reuse_port)
        self.port = int(sock.getsockname()[1])
        try:
            self._server = await self.loop.create_server(lambda: _Sniff(self), sock=sock, backlog=512)
        except BaseException:
            sock.close()
            raise

    def http(self, transport: asyncio.Transport, first: bytes) -> None:
        """Hand `transport` to uvicorn: a connection of its own from now on."""
        assert self._http is not None
        config = self._http.config
        protocol: Any = config.http_protocol_class(  # type: ignore[call-arg]
            config=config, server_state=self._http.server_state, app_state=self._http.lifespan.state,
            _loop=self.loop)
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        if not transport.is_closing():
            protocol.data_received(first)
            self.waiting_http[protocol] = None
            if len(self.waiting_http) > 2 * self.limits.max_connections:  # forget the ended ones
                live = self._http.server_state.connections
                self.waiting_http = {p: None for p in self.waiting_http if p in live}

    def pipe(self, transport: asyncio.Transport, first: bytes) -> None:
        """Pipe `transport` to grpcio; what arrived so far is sent first."""
        client = _ClientPipe(self)
        client.transport = transport
        self.pipes.add(client)
        transport.set_protocol(client)
        transport.pause_reading()
        self.loop.create_task(self._connect(client, transport, first))

    async def _connect(self, client: _ClientPipe, transport: asyncio.Transport, first: bytes) -> None:
        try:
            # the peer is set before the connection exists: grpcio's SETTINGS may arrive before
            # this coroutine resumes
            upstream, _ = await self.loop.create_unix_connection(lambda: _Pipe(self, transport), self.grpc_path)
        except OSError:
            transport.close()
            return
        if transport.is_closing():
            upstream.close()
            return
        client.peer = upstream
        upstream.write(first)
        transport.resume_reading()

    async def stop(self) -> None:
        """No new connection; the undecided ones close, the HTTP ones as uvicorn stops (in-flight
        requests get 2 s). Piped gRPC connections stay: they end with grpcio's own stop (its grace
        for calls in flight), or with `close_pipes`."""
        if self._server is not None:
            self._server.close()
        for sniff in list(self.sniffing):
            if sniff.transport is not None:
                sniff.transport.close()
        if self._http is not None and self._http_task is not None:
            await webserve.stop_server(self._http, self._http_task)

    def close_pipes(self) -> None:
        for pipe in list(self.pipes):
            if pipe.transport is not None:
                pipe.transport.close()


class PrivateSocket:
    """A unix socket path in a directory only this process's user may enter (grpcio listens there;
    the front is its only public way in); the directory goes with `close`."""

    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="sessionq-grpc-")
        os.chmod(self.directory, 0o700)
        self.path = os.path.join(self.directory, "grpc.sock")

    @property
    def grpc_address(self) -> str:
        return f"unix:{self.path}"

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

