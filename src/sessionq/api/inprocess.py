"""A call of the API's own method handlers in this process: what gRPC-Web (api/grpcweb.py) and
MCP's tools (api/mcpserver.py) do instead of a gRPC client call to the same process's grpcio.

The handler is the one grpcio calls (api/handlers.py's table, each wrapped once: the input guard,
the protos' validation, `rpc`'s authentication, errors and metrics), given a servicer context of
its own (`DirectContext`) that carries the caller's metadata (its bearer or share token), the
deadline and the peer, and records the status the handler sets or aborts with. So a call answers
exactly as over native gRPC: the same identity, checks, status codes and messages; and it costs
no HTTP/2 framing, no HPACK, no serialization and no second call object (docs/performance.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, Protocol

import grpc

from sessionq import errors

log = logging.getLogger("sessionq.api")


class Handlers(Protocol):
    """The API server's method handlers (api/handlers.py HandlerTable)."""

    def handler(self, method: str) -> grpc.RpcMethodHandler | None: ...

    def unknown(self, method: str) -> None: ...


class DirectContext(grpc.aio.ServicerContext):
    """The servicer context of a call served in this process: what grpcio's own context
    tells a handler (its metadata, deadline, peer) and records of it (the status it sets or aborts
    with, its initial and trailing metadata)."""

    __slots__ = ("_callbacks", "_cancelled", "_code", "_deadline", "_details", "_done", "_initial", "_metadata",
                 "_peer", "_trailing", "_writer")

    def __init__(self, metadata: tuple[tuple[str, str | bytes], ...], timeout: float | None, peer: str) -> None:
        self._metadata = metadata
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._peer = peer
        self._code: grpc.StatusCode | None = None
        self._details = ""
        self._initial: Any = ()
        self._trailing: Any = ()
        self._cancelled = False
        self._done = False
        self._callbacks: list[Callable[[Any], None]] = []
        self._writer: Callable[[Any], Awaitable[None]] | None = None

    # what handlers read

    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self._metadata

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def peer(self) -> str:
        return self._peer

    def peer_identities(self) -> None:
        return None

    def peer_identity_key(self) -> None:
        return None

    def auth_context(self) -> dict[str, Any]:
        return {}

    def cancelled(self) -> bool:
        return self._cancelled

    def done(self) -> bool:
        return self._done

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        self._callbacks.append(callback)

    # the status and metadata of the answer

    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata: Any = ()) -> NoReturn:
        if code == grpc.StatusCode.OK:  # as grpcio: an abort is an error
            code = grpc.StatusCode.UNKNOWN
        self._code, self._details = code, details
        if trailing_metadata:
            self._trailing = tuple(trailing_metadata)
        raise grpc.aio.AbortError()

    async def abort_with_status(self, status: Any) -> NoReturn:
        await self.abort(status.code, status.details, status.trailing_metadata)

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def set_details(self, details: str) -> None:
        self._details = details

    def code(self) -> grpc.StatusCode | None:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> Any:
        return self._trailing

    def set_trailing_metadata(self, trailing_metadata: Any) -> None:
        self._trailing = tuple(trailing_metadata)

    async def send_initial_metadata(self, initial_metadata: Any) -> None:
        self._initial = tuple(initial_metadata)

    def set_compression(self, compression: Any) -> None:
        pass  # gRPC-Web answers uncompressed

    def disable_next_message_compression(self) -> None:
        pass

    async def read(self) -> Any:
        raise RuntimeError("gRPC-Web calls have no client stream")

    async def write(self, message: Any) -> None:
        """A message of a server stream, for servicers that write rather than yield (grpc.health's Watch)."""
        if self._writer is None:
            raise RuntimeError("write() outside a server stream")
        await self._writer(message)

    def _finish(self) -> None:
        self._done = True
        for callback in self._callbacks:
            with contextlib.suppress(Exception):
                callback(self)


class CallFailed(Exception):
    """A call that ended with a status other than OK: its code, message and trailing metadata."""

    def __init__(self, code: grpc.StatusCode, details: str, trailing: Any = ()) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details
        self.trailing = trailing


def loop_time(deadline: float) -> float:
    """A time.monotonic() deadline on the running loop's clock."""
    return asyncio.get_running_loop().time() + (deadline - time.monotonic())


async def call_unary(method: str, handler: grpc.RpcMethodHandler, request: Any, context: DirectContext) -> Any:
    """The answer of a unary `handler` to `request` (a message), under the context's deadline;
    CallFailed with the status the handler aborted with or set, DEADLINE_EXCEEDED past the deadline,
    or UNKNOWN for a handler that raised (logged, as grpcio does)."""
    try:
        if context._deadline is None:
            answer = await handler.unary_unary(request, context)
        else:
            async with asyncio.timeout_at(loop_time(context._deadline)):
                answer = await handler.unary_unary(request, context)
    except grpc.aio.AbortError:
        raise CallFailed(context._code or grpc.StatusCode.UNKNOWN, context._details, context._trailing) from None
    except TimeoutError:
        raise CallFailed(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None
    except Exception as e:  # as grpcio answers a handler that raised
        log.exception("unexpected error in %s", errors.clip(method, 200))
        raise CallFailed(grpc.StatusCode.UNKNOWN, f"Unexpected {type(e).__name__}") from None
    code = context._code or grpc.StatusCode.OK
    if code != grpc.StatusCode.OK:  # a handler that set its status and returned
        raise CallFailed(code, context._details, context._trailing)
    return answer
