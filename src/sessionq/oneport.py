"""One public port for every protocol (server.address): native gRPC, gRPC-Web, the A2A HTTP
bindings and agent cards, MCP and the HTTP health endpoint.

grpcio cannot serve HTTP/1.1, and an HTTP/2 server written in Python serves gRPC at half
grpcio's rate or less; so the port is a small front that reads the first bytes of each
connection and hands the connection over whole, once:

- a connection that opens with the HTTP/2 client preface (prior knowledge) is sent grpcio's own
  SETTINGS at once (read from grpcio at start, with MAX_CONCURRENT_STREAMS said out loud), so that
  a client that waits for the server's SETTINGS (grpc-go) makes its first request; that request's
  content-type decides (`first_request`: one HPACK decode a connection). gRPC is piped, byte for
  byte, to grpcio listening on a unix socket in a private directory of this process, grpcio's
  own first SETTINGS frame (the same values) left out: the pipe copies what arrives as it
  arrives, in one callback per read and no parsing, so grpcio does all of HTTP/2 (its own limits
  and handshake timeout included). Anything else (gRPC-Web, MCP, the A2A bindings over h2c) is
  served by `_H2`, an HTTP/2 server of the ASGI app on the `h2` library, announcing the same
  SETTINGS. A connection that has made no request by server.httpHeaderTimeout (a gRPC channel
  connected ahead of its first call) or whose first request cannot be read is grpcio's;
- anything else is HTTP/1.1 and becomes, on the same transport (no copy, no second socket), a
  connection of the uvicorn server that serves the ASGI app, with every limit of webserve.py
  (the request head's deadline, the Host check and the counted body limit are the app's and the
  protocol's, as on any listener of ours).

The connection cap (server.httpMaxConnections) counts every connection of the port: those still
being read, the HTTP/1.1 and HTTP/2 ones and the piped gRPC ones. At the cap a new connection closes the
oldest one still waiting for its first bytes or for a request head (what a slowloris holds), so
a flood of half-sent requests never keeps a gRPC client out; only when every connection is busy
is the new one answered 503. A connection that has not said which it is within
server.httpHeaderTimeout is answered 408 and closed.

With server.tls (`tls_context`) the port speaks TLS only, and the same routing runs on what the
TLS layer decrypts: ALPN offers h2 (native gRPC, piped to grpcio decrypted, and the HTTP app over
HTTP/2) and http/1.1 (uvicorn, which then says `https` to the app). The connection's first byte
decides: a TLS handshake record goes to asyncio's TLS protocol with the bytes read so far (its
handshake within the same server.httpHeaderTimeout), anything else is a plaintext client on the
TLS port and is told so in its own protocol (HTTP/2: a GOAWAY INADEQUATE_SECURITY; else an HTTP
400) and closed. Every connection is counted from its accept, its handshake included. A TLS
client on a plaintext port gets the HTTP side's 400, which its TLS library reports as a wrong
version number.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import contextlib
import logging
import os
import shutil
import ssl
import tempfile
from typing import Any, cast
from urllib.parse import unquote

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import hpack
from starlette.types import ASGIApp, Message

from sessionq import webserve
from sessionq.config import ConfigError
from sessionq.webserve import BUSY, REFUSED, TIMED_OUT, TIMEOUTS, Limits, _Every

EVICTED = _Every("closed the oldest connection still waiting for its request to admit a new one"
                 " (server.httpMaxConnections reached)")
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SNIFF_LIMIT = 256 * 1024  # bytes of an HTTP/2 connection read before its first request decides (else grpcio)
MAX_CONCURRENT = 2**31 - 1  # MAX_CONCURRENT_STREAMS announced for grpcio (which has no limit)
MAX_STREAMS = 128  # concurrent streams of one HTTP/2 connection served by the ASGI app
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade"})
GRPC, HTTP, WAIT, BAD = "grpc", "http", "wait", "bad"
TLS_RECORD = 0x16  # the first byte of a TLS handshake record (a ClientHello)
PLAIN_ON_TLS = _Every("refused a plaintext connection to the TLS port (server.tls)")
HTTPS_ONLY = (b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 54\r\n"
              b"Connection: close\r\n\r\nthis port speaks TLS only: connect with https or TLS.\n")
log = logging.getLogger("sessionq.oneport")


def tls_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """The server TLS context of the port (server.tls.certFile, server.tls.keyFile): TLS 1.2 or
    later, ALPN h2 then http/1.1. ConfigError, naming the key and the file, when a file cannot be
    read or is not a certificate and its key."""
    for key, path in (("server.tls.certFile", cert_file), ("server.tls.keyFile", key_file)):
        try:
            with open(path, "rb"):
                pass
        except OSError as e:
            raise ConfigError(f"{key}: cannot read {path[:200]}: {(e.strerror or str(e)).lower()}") from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_file, key_file)
    except ssl.SSLError as e:
        raise ConfigError(f"server.tls: {cert_file[:200]} and {key_file[:200]} are not a PEM certificate and its"
                          f" unencrypted private key ({e.reason or e})") from None
    context.set_alpn_protocols(["h2", "http/1.1"])
    return context


def _goaway_inadequate_security() -> bytes:
    """What an HTTP/2 client that spoke plaintext to the TLS port is sent: a GOAWAY
    INADEQUATE_SECURITY whose debug data says why, without the server's SETTINGS first (so that a
    client fails the connection at once rather than retrying a connection it thinks was made)."""
    debug = b"this port speaks TLS only: connect with TLS"
    goaway = (0).to_bytes(4, "big") + (0xC).to_bytes(4, "big") + debug
    return len(goaway).to_bytes(3, "big") + b"\x07\0\0\0\0\0" + goaway


def first_request(buffer: bytes) -> str:
    """What an HTTP/2 prior-knowledge connection (`buffer` starts with the preface) is for, from
    its first request's content-type: GRPC (application/grpc, application/grpc+proto ...), HTTP
    (anything else: gRPC-Web, MCP, the A2A bindings, health), WAIT (the first request's header
    block is not complete yet) or BAD (not HTTP/2 as a client speaks it: grpcio answers it)."""
    pos, first, block, in_headers = len(PREFACE), True, b"", False
    while True:
        if len(buffer) < pos + 9:
            return WAIT
        length, ftype, flags = int.from_bytes(buffer[pos:pos + 3], "big"), buffer[pos + 3], buffer[pos + 4]
        if length > SNIFF_LIMIT or (first and ftype != 0x4):  # a client's preface is followed by SETTINGS
            return BAD
        first = False
        if len(buffer) < pos + 9 + length:
            return WAIT
        payload = buffer[pos + 9:pos + 9 + length]
        if in_headers:
            if ftype != 0x9:  # only CONTINUATION may follow an unfinished header block
                return BAD
            block += payload
        elif ftype == 0x1:  # HEADERS
            if flags & 0x8:  # PADDED
                if not payload or payload[0] >= len(payload):
                    return BAD
                payload = payload[1:len(payload) - payload[0]]
            if flags & 0x20:  # PRIORITY
                payload = payload[5:]
            block, in_headers = payload, True
        if in_headers and flags & 0x4:  # END_HEADERS
            try:
                headers = hpack.Decoder().decode(block, raw=True)
            except Exception:  # any malformed header block
                return BAD
            ctype = next((v for k, v in headers if k == b"content-type"), b"")
            grpc = ctype.startswith(b"application/grpc") and not ctype.startswith(b"application/grpc-web")
            return GRPC if grpc else HTTP
        pos += 9 + length


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


class _GrpcPipe(_Pipe):
    """grpcio's side of a piped connection whose client was sent grpcio's SETTINGS by the front
    already: grpcio's own first SETTINGS frame (`announced`: the bytes it sends first on every
    connection) is left out, so the client sees one and acknowledges one, as grpcio expects."""

    def __init__(self, front: OnePort, peer: asyncio.Transport, announced: bytes) -> None:
        super().__init__(front, peer)
        self.announced = announced
        self.head = b""

    def data_received(self, data: bytes) -> None:
        if self.announced:
            self.head += data
            if len(self.head) < 9:
                return
            size = 9 + int.from_bytes(self.head[:3], "big")
            if len(self.head) < size:
                return
            first, data = self.head[:size], self.head[size:]
            if first != self.announced:  # not what the client was told: it gets grpcio's too
                log.warning("grpcio's first SETTINGS differ from those announced; sent on")
                data = first + data
            self.announced = self.head = b""
            if not data:
                return
        super().data_received(data)


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
        self.announced = False  # grpcio's SETTINGS sent to an HTTP/2 client
        self.tls = front.tls is not None  # on the TLS port, still undecided: TLS or not
        self.handshaking = False  # in the TLS handshake: nothing decrypted yet

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.handshaking:  # the TLS layer's transport, its handshake done: what arrives is decrypted
            self.transport = cast(asyncio.Transport, transport)
            self.handshaking = False
            return
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

    # -- the TLS port: TLS or not, from the first byte ---------------------------------------------

    def _start_tls(self, data: bytes) -> None:
        """Put asyncio's TLS protocol (the one loop.start_tls uses; it needs only the transport's
        public methods, so it runs on uvloop's transports too) between the connection and this
        protocol, and give it the bytes read so far; its handshake ends in connection_made (the
        decrypted transport) or, failed or past server.httpHeaderTimeout, in _handshake_done."""
        front = self.front
        raw = self.transport
        assert raw is not None and front.tls is not None
        self.tls, self.handshaking, self.buffer = False, True, b""
        waiter = front.loop.create_future()
        waiter.add_done_callback(self._handshake_done)
        layer = asyncio.sslproto.SSLProtocol(  # (typeshed says int seconds; any positive number is taken)
            front.loop, self, front.tls, waiter, server_side=True,
            ssl_handshake_timeout=front.limits.header_timeout)  # type: ignore[arg-type]
        raw.set_protocol(layer)
        layer.connection_made(raw)
        view = memoryview(data)
        while view and not raw.is_closing():
            buffer = layer.get_buffer(len(view))
            n = min(len(buffer), len(view))
            buffer[:n] = view[:n]
            layer.buffer_updated(n)
            view = view[n:]

    def _handshake_done(self, waiter: asyncio.Future[None]) -> None:
        if waiter.cancelled() or waiter.exception() is not None:  # a failed handshake: closed by the TLS layer
            self.handshaking = False
            if self.counted:
                self._decided()

    def _refuse_plaintext(self) -> None:
        if len(self.buffer) < 3 and PREFACE.startswith(self.buffer):
            return  # perhaps an HTTP/2 preface: wait for more
        PLAIN_ON_TLS.note(self.front.limits.name)
        self._decided()
        assert self.transport is not None
        self.transport.write(_goaway_inadequate_security() if self.buffer.startswith(PREFACE[:3]) else HTTPS_ONLY)
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.tls:
            if self.buffer[0] == TLS_RECORD:
                self._start_tls(self.buffer)
            else:
                self._refuse_plaintext()
            return
        if len(self.buffer) < len(PREFACE) and PREFACE.startswith(self.buffer):
            return  # perhaps the preface: wait for the rest of it
        front = self.front
        if not self.buffer.startswith(PREFACE):
            self._decided()
            front.http(self.transport, self.buffer)  # type: ignore[arg-type]
            return
        if front.announce is None:  # grpcio's SETTINGS unknown: every HTTP/2 connection is grpcio's
            self._decided()
            front.pipe(self.transport, self.buffer)  # type: ignore[arg-type]
            return
        if not self.announced:
            # grpcio's SETTINGS at once, as grpcio would: a client that waits for the server's
            # SETTINGS before its first request (grpc-go) sends it
            self.announced = True
            self.transport.write(front.announce)  # type: ignore[union-attr]
        kind = first_request(self.buffer)
        if kind == WAIT and len(self.buffer) <= SNIFF_LIMIT:
            return
        self._decided()
        if kind == HTTP:
            front.h2(self.transport, self.buffer)  # type: ignore[arg-type]
        else:
            front.pipe(self.transport, self.buffer, announced=True)  # type: ignore[arg-type]

    def _decided(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.front.sniffing.pop(self, None)
        self.counted = False

    def _expired(self) -> None:
        self.timer = None
        if self.announced and self.transport is not None and not self.transport.is_closing():
            # an HTTP/2 client that has made no request yet (a gRPC channel connected ahead of
            # its first call, keeping it alive with PINGs): grpcio's, as every idle h2 connection was
            self._decided()
            self.front.pipe(self.transport, self.buffer, announced=True)
            return
        TIMEOUTS.note(self.front.limits.name)
        if self.transport is not None and not self.transport.is_closing():
            if not self.buffer and not self.handshaking and not self.tls:  # (a TLS client would not read it)
                self.transport.write(TIMED_OUT)
            self.transport.close()
        if self.handshaking:  # a handshake not done in time: its transport closed, uncounted now
            self._decided()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self.counted:
            self._decided()


class Disconnected(OSError):
    """A send to an HTTP/2 stream the client reset or whose connection closed (uvicorn raises its
    own OSError then too)."""


class _Stream:
    """One request of an HTTP/2 connection served by the ASGI app."""

    __slots__ = ("body_done", "closed", "ended", "headers", "queue", "received", "started", "task", "wake")

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Message] = asyncio.Queue()
        self.received = 0
        self.body_done = False  # the request's END_STREAM came
        self.started = False  # the response's HEADERS are decided
        self.headers: list[tuple[bytes, bytes]] = []
        self.ended = False  # the response's END_STREAM was sent
        self.closed = False  # reset, or the connection is gone
        self.task: asyncio.Task[None] | None = None
        self.wake = asyncio.Event()  # flow control window opened, or writable again


class _H2(asyncio.Protocol):
    """An HTTP/2 connection served by the front's ASGI app (h2 does the protocol): a stream is an
    ASGI request, its DATA the body (at most the front's `max_body` bytes, a gap between two pieces
    at most server.httpHeaderTimeout), the answer sent within the flow control windows."""

    def __init__(self, front: OnePort, transport: asyncio.Transport, state: dict[str, Any]) -> None:
        self.front = front
        self.transport = transport
        self.state = state
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        self.conn = h2.connection.H2Connection(config)
        # the SETTINGS the client was sent are grpcio's (front.announce): the same values here
        self.conn.local_settings = h2.settings.Settings(client=False, initial_values=front.settings)  # type: ignore[arg-type]
        self.conn.initiate_connection()
        self.conn.data_to_send()  # sent by the front already
        self.streams: dict[int, _Stream] = {}
        self.writable = asyncio.Event()
        self.writable.set()
        sock = transport.get_extra_info("sockname")
        self.server = (sock[0], sock[1]) if isinstance(sock, tuple) else None
        peer = transport.get_extra_info("peername")
        self.client = (peer[0], peer[1]) if isinstance(peer, tuple) else None
        self.scheme = "https" if transport.get_extra_info("sslcontext") is not None else "http"

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data and not self.transport.is_closing():
            self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError:
            self.flush()  # h2's GOAWAY
            self.transport.close()
            return
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                self._request(event)
            elif isinstance(event, h2.events.DataReceived):
                self._data(event)
            elif isinstance(event, h2.events.StreamEnded):
                stream = self.streams.get(event.stream_id)
                if stream is not None and not stream.body_done:
                    stream.body_done = True
                    stream.queue.put_nowait({"type": "http.request", "body": b"", "more_body": False})
            elif isinstance(event, h2.events.StreamReset):
                self._gone(event.stream_id)
            elif isinstance(event, (h2.events.WindowUpdated, h2.events.RemoteSettingsChanged)):
                for stream in self.streams.values():
                    stream.wake.set()
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.transport.close()
        self.flush()

    def _request(self, event: h2.events.RequestReceived) -> None:
        sid = event.stream_id
        if len(self.streams) >= MAX_STREAMS:
            self.conn.reset_stream(sid, h2.errors.ErrorCodes.REFUSED_STREAM)
            return
        pseudo: dict[bytes, bytes] = {}
        headers: list[tuple[bytes, bytes]] = []
        for k, v in event.headers or ():
            name, value = bytes(k), bytes(v)
            if name.startswith(b":"):
                pseudo[name] = value
            else:
                headers.append((name, value))
        if b":authority" in pseudo and not any(k == b"host" for k, _ in headers):
            headers.insert(0, (b"host", pseudo[b":authority"]))
        raw_path, _, query = pseudo.get(b":path", b"/").partition(b"?")
        scope = {
            "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "2",
            "method": pseudo.get(b":method", b"GET").decode("latin-1"), "scheme": self.scheme,
            "path": unquote(raw_path.decode("latin-1")), "raw_path": raw_path, "query_string": query,
            "root_path": "", "headers": headers, "client": self.client, "server": self.server,
            "state": dict(self.state), "extensions": {},
        }
        stream = self.streams[sid] = _Stream()
        if event.stream_ended is not None:
            stream.body_done = True
            stream.queue.put_nowait({"type": "http.request", "body": b"", "more_body": False})
        stream.task = self.front.loop.create_task(self._run(sid, stream, scope))

    def _data(self, event: h2.events.DataReceived) -> None:
        sid = event.stream_id
        self.conn.acknowledge_received_data(event.flow_controlled_length, sid)
        stream = self.streams.get(sid)
        if stream is None or stream.closed:
            return
        stream.received += len(event.data or b"")
        if stream.received > self.front.max_body:  # the app's limit refuses first; this bounds what is kept
            self.conn.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
            self._gone(sid)
            return
        stream.queue.put_nowait({"type": "http.request", "body": bytes(event.data or b""), "more_body": True})

    def _gone(self, sid: int) -> None:
        stream = self.streams.get(sid)
        if stream is not None and not stream.closed:
            stream.closed = True
            stream.queue.put_nowait({"type": "http.disconnect"})
            stream.wake.set()

    async def _run(self, sid: int, stream: _Stream, scope: dict[str, Any]) -> None:
        timeout = self.front.limits.header_timeout

        async def receive() -> Message:
            if stream.body_done or stream.closed:
                return await stream.queue.get()
            try:  # a gap in the body longer than the head's deadline ends the request
                return await asyncio.wait_for(stream.queue.get(), timeout)
            except TimeoutError:
                TIMEOUTS.note(self.front.limits.name)
                self._reset(sid, stream)
                return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            await self._send(sid, stream, message)

        try:
            await self.front.app(scope, receive, send)
        except Exception:
            if not stream.closed:
                log.exception("unexpected error answering an HTTP/2 request")
            if not stream.started:
                with contextlib.suppress(OSError):
                    await self._send(sid, stream, {"type": "http.response.start", "status": 500, "headers": [
                        (b"content-type", b"text/plain")]})
                    await self._send(sid, stream, {"type": "http.response.body", "body": b"internal error\n"})
            if not stream.ended:
                self._reset(sid, stream)
        finally:
            if not stream.ended and not stream.closed:
                if not stream.headers:  # the app answered nothing
                    stream.headers = [(b":status", b"500")]
                with contextlib.suppress(OSError, h2.exceptions.ProtocolError):
                    self._end(sid, stream)
            self.streams.pop(sid, None)

    def _reset(self, sid: int, stream: _Stream) -> None:
        if not stream.closed:
            with contextlib.suppress(h2.exceptions.ProtocolError):
                self.conn.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
                self.flush()
            stream.closed = True
            stream.wake.set()

    def _end(self, sid: int, stream: _Stream) -> None:
        if not stream.started:
            stream.started = True
            self.conn.send_headers(sid, stream.headers, end_stream=True)
        else:
            self.conn.end_stream(sid)
        stream.ended = True
        self.flush()

    async def _send(self, sid: int, stream: _Stream, message: Message) -> None:
        if stream.closed or self.transport.is_closing():
            raise Disconnected("the client went away")
        if message["type"] == "http.response.start":
            stream.headers = [(b":status", str(message["status"]).encode())] + [
                (k.lower(), v) for k, v in message.get("headers", ()) if k.lower() not in HOP_BY_HOP]
            return
        if message["type"] != "http.response.body" or stream.ended:
            return
        data: bytes = message.get("body", b"")
        more = bool(message.get("more_body", False))
        if not stream.started:
            if not stream.headers:
                raise RuntimeError("a response body before its start")
            stream.started = True
            self.conn.send_headers(sid, stream.headers, end_stream=not data and not more)
            if not data and not more:
                stream.ended = True
            self.flush()
        view = memoryview(data)
        while view:
            await self.writable.wait()
            if stream.closed or self.transport.is_closing():
                raise Disconnected("the client went away")
            try:
                window = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
            except h2.exceptions.StreamClosedError:
                self._gone(sid)
                raise Disconnected("the stream closed") from None
            if window <= 0:
                stream.wake.clear()
                await stream.wake.wait()
                continue
            chunk, view = view[:window], view[window:]
            self.conn.send_data(sid, bytes(chunk), end_stream=not view and not more)
            if not view and not more:
                stream.ended = True
            self.flush()
        if not more and not stream.ended:
            self._end(sid, stream)

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def goaway(self) -> None:
        """No new streams (the server stops); those in flight end as the app answers them."""
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self.conn.close_connection()
            self.flush()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.front.h2conns.discard(self)
        self.writable.set()
        for sid in list(self.streams):
            self._gone(sid)


class OnePort:
    """The front of server.address: gRPC piped to grpcio on `grpc_path` (a unix socket), HTTP/1.1
    served by uvicorn with `app` under `limits`; `tls` (tls_context): TLS only. `port` once started."""

    def __init__(self, app: ASGIApp, limits: Limits, grpc_path: str, max_body: int = 64 << 20,
                 tls: ssl.SSLContext | None = None) -> None:
        self.app = app
        self.tls = tls
        self.limits = limits
        self.grpc_path = grpc_path
        self.max_body = max_body  # what an HTTP/2 request may send (the app refuses less, first)
        self.port = 0
        self.sniffing: dict[_Sniff, None] = {}  # oldest first
        self.pipes: set[_ClientPipe] = set()
        self.h2conns: set[_H2] = set()  # HTTP/2 connections served by the ASGI app
        self.grpc_settings = b""  # grpcio's first SETTINGS frame (probed at start)
        self.announce: bytes | None = None  # what an HTTP/2 client is sent for it: the same values
        self.settings: dict[int, int] = {}  # and MAX_CONCURRENT_STREAMS
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
        return len(self.sniffing) + len(self.pipes) + len(self.h2conns) + http

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
        """Listen on `address`; grpcio must be serving on `grpc_path` already (its SETTINGS are read)."""
        self._loop = asyncio.get_running_loop()
        await self._probe()
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

    async def _probe(self) -> None:
        """Read the SETTINGS frame grpcio sends first on every connection (before the client's
        preface), so that the front can send it to an HTTP/2 client before deciding where its
        connection goes. Not read: every HTTP/2 connection is piped to grpcio at once."""
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(self.grpc_path), 5)
        except (OSError, TimeoutError):
            return
        try:
            head = await asyncio.wait_for(reader.readexactly(9), 5)
            body = await asyncio.wait_for(reader.readexactly(int.from_bytes(head[:3], "big")), 5)
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()
        if head[3] != 0x4 or head[4] != 0 or len(body) % 6:
            return
        self.grpc_settings = head + body
        settings = {int.from_bytes(body[i:i + 2], "big"): int.from_bytes(body[i + 2:i + 6], "big")
                    for i in range(0, len(body), 6)}
        # grpcio sets no MAX_CONCURRENT_STREAMS (no limit); said out loud, as some clients (httpx)
        # allow themselves one stream a connection until they are told
        settings.setdefault(0x3, MAX_CONCURRENT)
        self.settings = settings
        payload = b"".join(k.to_bytes(2, "big") + v.to_bytes(4, "big") for k, v in settings.items())
        self.announce = len(payload).to_bytes(3, "big") + b"\x04\x00\x00\x00\x00\x00" + payload

    def h2(self, transport: asyncio.Transport, first: bytes) -> None:
        """Serve `transport`, an HTTP/2 connection whose first request is not gRPC, with the ASGI
        app (it was sent `announce` already)."""
        assert self._http is not None
        protocol = _H2(self, transport, dict(self._http.lifespan.state))
        self.h2conns.add(protocol)
        transport.set_protocol(protocol)
        protocol.data_received(first)

    def pipe(self, transport: asyncio.Transport, first: bytes, *, announced: bool = False) -> None:
        """Pipe `transport` to grpcio; what arrived so far is sent first. `announced`: the client
        was sent grpcio's SETTINGS by the front (grpcio's own are left out)."""
        client = _ClientPipe(self)
        client.transport = transport
        self.pipes.add(client)
        transport.set_protocol(client)
        transport.pause_reading()
        self.loop.create_task(self._connect(client, transport, first, self.grpc_settings if announced else None))

    async def _connect(self, client: _ClientPipe, transport: asyncio.Transport, first: bytes,
                       announced: bytes | None) -> None:
        try:
            # the peer is set before the connection exists: grpcio's SETTINGS may arrive before
            # this coroutine resumes
            upstream, _ = await self.loop.create_unix_connection(
                lambda: _GrpcPipe(self, transport, announced) if announced else _Pipe(self, transport), self.grpc_path)
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
        for conn in list(self.h2conns):
            conn.goaway()
        if self._http is not None and self._http_task is not None:
            await webserve.stop_server(self._http, self._http_task)
        for conn in list(self.h2conns):  # as uvicorn's: what is still answering after its grace ends
            for stream in list(conn.streams.values()):
                if stream.task is not None and not stream.task.done():
                    stream.task.cancel()
            conn.transport.close()

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

