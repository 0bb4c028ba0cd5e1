"""gRPC-Web on the public port (api/public.py), over HTTP/1.1: `application/grpc-web` (binary) and
`application/grpc-web-text` (base64), unary and server-streaming methods (gRPC-Web has no client
streaming).

A gRPC-Web request is made a native gRPC call to the API's own grpcio server (its private unix
socket): the same handlers, the same checks, the same authentication (the `authorization` header
is the call's metadata: a bearer token means the same user, none is UNAUTHENTICATED), the same
status codes and messages. The answer is framed as gRPC-Web wants it: the messages as data frames
(flag 0), then one trailer frame (flag 0x80) carrying `grpc-status`, `grpc-message` and the
trailing metadata; an error before any message also puts `grpc-status` and `grpc-message` in the
HTTP headers (trailers-only). A body that is not one well-formed frame (a wrong length prefix,
compressed, several messages, bad base64) is INVALID_ARGUMENT before any call.

CORS: a request from a browser page of another origin is allowed only for an origin in
server.corsOrigins (none by default); its preflight (OPTIONS) is answered 204 with what it may
send, else 403.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import re
import struct
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import grpc
from starlette.types import Receive, Scope, Send

from sessionq import errors
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
Streaming = Callable[[str], "tuple[bool, bool] | None"]


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
    """The gRPC-Web ASGI app: calls go to `target` (the API's private grpcio address); `streaming`
    says a method's shape; bodies above `max_body` are refused (the public port's body limit
    applies first)."""

    def __init__(self, target: str, streaming: Streaming, max_body: int, origins: list[str]) -> None:
        self.target = target
        self.streaming = streaming
        self.max_body = max_body
        self.origins = origins
        self._channel: grpc.aio.Channel | None = None

    def channel(self) -> grpc.aio.Channel:
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(self.target, options=[
                ("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)])
        return self._channel

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

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
        answer_type = (GRPC_WEB_TEXT if text else GRPC_WEB) + "+proto"
        reply = _Reply(send, answer_type.encode(), cors, text)
        method = scope["path"]
        shape = self.streaming(method) if METHOD.match(method) else None
        if shape is None:
            await reply.status(grpc.StatusCode.UNIMPLEMENTED, f"unknown method {method[:200]}", ())
            return
        if shape[0]:
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
        channel = self.channel()
        if not shape[1]:
            call = channel.unary_unary(method)(message, metadata=metadata, timeout=timeout)
            try:
                answer = await call
            except grpc.aio.AioRpcError as e:
                await reply.status(e.code(), e.details() or "", e.trailing_metadata())
                return
            await reply.message(answer, await call.initial_metadata())
            await reply.status(grpc.StatusCode.OK, "", await call.trailing_metadata())
            return
        stream = channel.unary_stream(method)(message, metadata=metadata, timeout=timeout)
        try:
            async for answer in stream:
                await reply.message(answer, await stream.initial_metadata())
            await reply.status(grpc.StatusCode.OK, "", await stream.trailing_metadata())
        except grpc.aio.AioRpcError as e:
            await reply.status(e.code(), e.details() or "", e.trailing_metadata())
        except OSError:
            stream.cancel()  # the client went away
        finally:
            if not stream.done():
                stream.cancel()


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
