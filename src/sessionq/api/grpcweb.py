"""gRPC-Web on the public port (api/public.py), over HTTP/1.1 and HTTP/2 (h2c, oneport.py): `application/grpc-web` (binary) and
`application/grpc-web-text` (base64), unary and server-streaming methods (gRPC-Web has no client
streaming).

A gRPC-Web request is served in this process by the API server's own handler of its method (the
table grpcio calls, api/handlers.py), with a servicer context of its own (api/inprocess.py, the
one way the port's HTTP protocols call a handler, MCP's tools too): the
same checks, the same authentication (the `authorization` header is the call's metadata: a bearer
token means the same user, none is UNAUTHENTICATED), the same status codes and messages, the
request decoded once, no second hop through grpcio (that hop, a gRPC client call to the same
process, cost more than half of each call: docs/performance.md). `grpc-timeout` is the call's
deadline; a client that goes away ends a server stream. The answer is framed as gRPC-Web wants it: the messages as data frames
(flag 0), then one trailer frame (flag 0x80) carrying `grpc-status`, `grpc-message` and the
trailing metadata; an error before any message also puts `grpc-status` and `grpc-message` in the
HTTP headers (trailers-only). A body that is not one well-formed frame (a wrong length prefix,
compressed, several messages, bad base64) is INVALID_ARGUMENT before any call.

CORS: a request from a browser page of another origin is allowed only for an origin in
server.corsOrigins (none by default); its preflight (OPTIONS) is answered 204 with what it may
send, else 403.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import re
import struct
from typing import Any
from urllib.parse import quote

import grpc
from starlette.types import Receive, Scope, Send

from sessionq import errors
from sessionq.api.inprocess import CallFailed, DirectContext, Handlers, call_unary, loop_time
from sessionq.webserve import BodyTooLarge, read_body

GRPC_WEB = "application/grpc-web"
GRPC_WEB_TEXT = "application/grpc-web-text"
METHOD = re.compile(r"^/[A-Za-z0-9_.]+/[A-Za-z0-9_]+$")
# request headers that are HTTP's or gRPC-Web's own, not the call's metadata
NOT_METADATA = frozenset({
    "host", "content-type", "content-length", "accept", "accept-encoding", "accept-language", "connection",
    "origin", "referer", "user-agent", "x-grpc-web", "x-user-agent", "te", "cookie", "grpc-timeout",
    "grpc-accept-encoding", "grpc-encoding", "keep-alive", "transfer-encoding", "upgrade", "cache-control",
    "pragma", "dnt", "priority",
})
EXPOSED = "grpc-status, grpc-message, grpc-status-details-bin"
TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
ANSWER_BINARY = (GRPC_WEB + "+proto").encode()
ANSWER_TEXT = (GRPC_WEB_TEXT + "+proto").encode()
log = logging.getLogger("sessionq.api")


def is_grpc_web(scope: Scope) -> bool:
    """A gRPC-Web request, or the CORS preflight of one (an OPTIONS to a method's path)."""
    if scope["type"] != "http":
        return False
    if scope["method"] == "OPTIONS":
        return METHOD.match(scope["path"]) is not None
    for k, v in scope["headers"]:
        if k == b"content-type":
            return bool(v.startswith(GRPC_WEB.encode()))
    return False


def frame(flag: int, data: bytes) -> bytes:
    return bytes([flag]) + struct.pack(">I", len(data)) + data


class Malformed(Exception):
    pass


def one_message(body: bytes) -> bytes:
    """The message of a body that is exactly one uncompressed data frame."""
    if len(body) < 5:
        raise Malformed("the body is not a gRPC-Web frame")
    flag, length = body[0], struct.unpack(">I", body[1:5])[0]
    if flag & 0x01:
        raise Malformed("compressed gRPC-Web messages are not accepted")
    if flag != 0:
        raise Malformed("the body's first frame is not a data frame")
    if length != len(body) - 5:
        raise Malformed("the frame's length prefix does not match the body (one message per call)")
    return body[5:]


def decode_text(body: bytes) -> bytes:
    """grpc-web-text: base64, possibly several padded chunks one after another."""
    out = b""
    data = b"".join(body.split())
    try:
        while data:
            end = data.find(b"=")
            if end < 0:
                chunk, data = data, b""
            else:
                end += 1
                while end < len(data) and data[end:end + 1] == b"=":
                    end += 1
                chunk, data = data[:end], data[end:]
            out += base64.b64decode(chunk, validate=True)
    except (binascii.Error, ValueError):
        raise Malformed("the body is not base64") from None
    return out


def _timeout(value: str | None) -> float | None:
    if not value:
        return None
    m = re.fullmatch(r"(\d{1,8})([HMSmun])", value)
    if m is None:
        raise Malformed("grpc-timeout is malformed")
    return int(m.group(1)) * TIMEOUT_UNITS[m.group(2)]


def _metadata(headers: list[tuple[bytes, bytes]]) -> list[tuple[str, str | bytes]]:
    md: list[tuple[str, str | bytes]] = []
    for k, v in headers:
        name = k.decode("latin-1").lower()
        if name in NOT_METADATA or name.startswith((":", "access-control-", "sec-")):
            continue
        if not re.fullmatch(r"[0-9a-z_.-]+", name) or name.startswith("grpc-"):
            raise Malformed(f"header {name[:40]!r} cannot be gRPC metadata")
        if name.endswith("-bin"):
            try:
                md.append((name, base64.b64decode(v + b"=" * (-len(v) % 4))))
            except (binascii.Error, ValueError):
                raise Malformed(f"header {name[:40]!r} is not base64") from None
        else:
            text = v.decode("latin-1")
            if any(not (0x20 <= ord(c) < 0x7f) for c in text):
                raise Malformed(f"header {name[:40]!r} is not printable ASCII")
            md.append((name, text))
    return md


def _trailer(code: grpc.StatusCode, message: str, trailing: Any) -> bytes:
    lines = [f"grpc-status:{code.value[0]}", f"grpc-message:{quote(message, safe='')}"]
    for key, value in trailing or ():
        if key.endswith("-bin") and isinstance(value, bytes):
            lines.append(f"{key}:{base64.b64encode(value).decode()}")
        elif isinstance(value, str):
            lines.append(f"{key}:{value}")
    return ("\r\n".join(lines) + "\r\n").encode()


class GrpcWeb:
    """The gRPC-Web ASGI app: a call is served in this process by the handler `handlers` has for
    its method (the API server's table: the same wrapped handlers grpcio calls, so the same checks,
    authentication, errors and metrics); bodies above `max_body` are refused (the public port's
    body limit applies first).

    The request is decoded once (the handler's own deserializer), the answer encoded once (its
    serializer) and framed; no second HTTP/2 hop to grpcio, no gRPC client call."""

    def __init__(self, handlers: Handlers, max_body: int, origins: list[str]) -> None:
        self.handlers = handlers
        self.max_body = max_body
        self.origins = origins
        self.streams: set[DirectContext] = set()  # the server streams being answered

    async def close(self) -> None:
        pass

    def _cors(self, scope: Scope) -> tuple[bool, list[tuple[bytes, bytes]]]:
        """Whether the request's origin may call (no Origin: not a cross-origin browser call), and
        the CORS headers of the answer."""
        origin = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"origin"), None)
        if origin is None:
            return True, []
        if "*" in self.origins or origin.rstrip("/") in self.origins:
            return True, [(b"access-control-allow-origin", origin.encode("latin-1")),
                          (b"access-control-expose-headers", EXPOSED.encode()), (b"vary", b"Origin")]
        return False, [(b"vary", b"Origin")]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        allowed, cors = self._cors(scope)
        if not allowed:
            await _plain(send, 403, b"this origin may not call the API (server.corsOrigins)\n", cors)
            return
        if scope["method"] == "OPTIONS":
            requested = next((v for k, v in scope["headers"] if k == b"access-control-request-headers"), b"")
            await _plain(send, 204, b"", [*cors, (b"access-control-allow-methods", b"POST"),
                                          (b"access-control-allow-headers", requested[:1000]),
                                          (b"access-control-max-age", b"600")])
            return
        if scope["method"] != "POST":
            await _plain(send, 405, b"gRPC-Web calls are POSTs\n", cors)
            return
        content_type = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"content-type"), "")
        text = content_type.startswith(GRPC_WEB_TEXT)
        reply = _Reply(send, ANSWER_TEXT if text else ANSWER_BINARY, cors, text)
        method = scope["path"]
        handler = self.handlers.handler(method) if METHOD.match(method) else None
        if handler is None:
            self.handlers.unknown(method)
            await reply.status(grpc.StatusCode.UNIMPLEMENTED, f"unknown method {method[:200]}", ())
            return
        if handler.request_streaming:
            await reply.status(grpc.StatusCode.UNIMPLEMENTED, "gRPC-Web has no client streaming", ())
            return
        try:
            body = await read_body(receive, self.max_body)
        except BodyTooLarge:
            await reply.status(grpc.StatusCode.RESOURCE_EXHAUSTED, "the request is too large", ())
            return
        if body is None:
            return
        try:
            message = one_message(decode_text(body) if text else body)
            metadata = _metadata(scope["headers"])
            timeout = _timeout(next((v.decode("latin-1") for k, v in scope["headers"] if k == b"grpc-timeout"), None))
        except Malformed as e:
            await reply.status(grpc.StatusCode.INVALID_ARGUMENT, str(e), ())
            return
        client = scope.get("client")
        context = DirectContext(tuple(metadata), timeout, f"ipv4:{client[0]}:{client[1]}" if client else "")
        try:
            if handler.response_streaming:
                await self._stream(handler, message, context, reply, receive)
            else:
                await self._unary(method, handler, message, context, reply)
        finally:
            context._finish()

    async def _unary(self, method: str, handler: grpc.RpcMethodHandler, message: bytes, context: DirectContext,
                     reply: _Reply) -> None:
        request = handler.request_deserializer(message) if handler.request_deserializer else message
        try:
            answer = await call_unary(method, handler, request, context)
        except CallFailed as e:
            await reply.status(e.code, e.details, e.trailing)
            return
        data = handler.response_serializer(answer) if handler.response_serializer else answer
        await reply.message(data, context._initial)
        await reply.status(grpc.StatusCode.OK, "", context._trailing)

    async def _stream(self, handler: grpc.RpcMethodHandler, message: bytes, context: DirectContext,
                      reply: _Reply, receive: Receive) -> None:
        """A server stream; the client going away (or the deadline) ends the handler's iteration."""
        request = handler.request_deserializer(message) if handler.request_deserializer else message
        serialize = handler.response_serializer
        me = asyncio.current_task()
        assert me is not None
        gone = False

        async def watch() -> None:
            nonlocal gone
            while (await receive())["type"] != "http.disconnect":
                pass
            gone = context._cancelled = True
            me.cancel()

        async def write(answer: Any) -> None:
            await reply.message(serialize(answer) if serialize else answer, context._initial)

        context._writer = write
        watcher = asyncio.get_running_loop().create_task(watch())
        self.streams.add(context)
        stream = handler.unary_stream(request, context)
        deadline = None if context._deadline is None else loop_time(context._deadline)
        try:
            async with asyncio.timeout_at(deadline):
                async for answer in stream:
                    await write(answer)
            code = context._code or grpc.StatusCode.OK
            await reply.status(code, context._details, context._trailing)
        except grpc.aio.AbortError:
            await reply.status(context._code or grpc.StatusCode.UNKNOWN, context._details, context._trailing)
        except TimeoutError:
            await reply.status(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", ())
        except asyncio.CancelledError:
            if not gone:
                raise
            me.uncancel()
        except OSError:
            context._cancelled = True  # the client went away while a message was sent
        except Exception as e:
            log.exception("unexpected error in a gRPC-Web stream")
            await reply.status(grpc.StatusCode.UNKNOWN, f"Unexpected {type(e).__name__}", ())
        finally:
            self.streams.discard(context)
            watcher.cancel()
            with contextlib.suppress(BaseException):
                await stream.aclose()


class _Reply:
    """One gRPC-Web answer: headers once (with the call's initial metadata), data frames, the
    trailer frame."""

    def __init__(self, send: Send, content_type: bytes, cors: list[tuple[bytes, bytes]], text: bool) -> None:
        self.send = send
        self.content_type = content_type
        self.cors = cors
        self.text = text
        self.started = False

    def _encode(self, data: bytes) -> bytes:
        return base64.b64encode(data) if self.text else data

    async def _start(self, metadata: Any, status: tuple[grpc.StatusCode, str] | None = None) -> None:
        headers = [(b"content-type", self.content_type), *self.cors]
        for key, value in metadata or ():
            if isinstance(value, str) and not key.startswith(":"):
                headers.append((key.encode(), value.encode("latin-1", "replace")))
        if status is not None:  # trailers-only: the status in the headers too
            headers += [(b"grpc-status", str(status[0].value[0]).encode()),
                        (b"grpc-message", quote(status[1], safe="").encode())]
        await self.send({"type": "http.response.start", "status": 200, "headers": headers})
        self.started = True

    async def message(self, data: bytes, metadata: Any) -> None:
        if not self.started:
            await self._start(metadata)
        await self.send({"type": "http.response.body", "body": self._encode(frame(0, data)), "more_body": True})

    async def status(self, code: grpc.StatusCode, message: str, trailing: Any) -> None:
        message = errors.clip(message, errors.MAX_STATUS_MESSAGE)
        if not self.started:
            await self._start((), (code, message))
        with contextlib.suppress(OSError):
            await self.send({"type": "http.response.body", "body": self._encode(frame(0x80, _trailer(code, message,
                                                                                                    trailing)))})


async def _plain(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})
