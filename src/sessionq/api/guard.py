"""Requests that never reach a servicer method: malformed bodies, unimplemented and unknown methods.

grpcio's aio server decodes a request (the method handler's `request_deserializer`) before the
servicer runs, outside any code of ours: a body that is not the method's message (invalid UTF-8 in
a string field, a truncated message, a bad varint) raises DecodeError there, which grpcio answers
with UNKNOWN "Unexpected <class DecodeError>" and a traceback logged at ERROR - for every call,
before authentication. The generated base servicers answer methods we do not implement by raising
NotImplementedError, which grpcio logs with a traceback too.

`InputGuard` (a server interceptor) wraps every method handler once: its deserializer turns a
decode failure into a `Malformed` marker instead of raising, and its behaviour answers such a
request INVALID_ARGUMENT and an unimplemented method UNIMPLEMENTED, each with one WARNING line at
most every `LOG_INTERVAL` seconds per kind (the line counts the ones suppressed since the last).
Unknown methods are answered UNIMPLEMENTED by grpcio itself; the guard only logs them, the same way.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from enum import Enum
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2

from sessionq import errors, metrics

log = logging.getLogger("sessionq.api")

LOG_INTERVAL = 60.0  # seconds between two WARNING lines of one kind


class Rejection(Enum):
    MALFORMED = "a malformed request"
    UNIMPLEMENTED = "a call of an unimplemented method"
    UNKNOWN_METHOD = "a call of an unknown method"


class RateLimitedLog:
    """At most one WARNING line per kind every `interval` seconds; the next line says how many
    were suppressed in between."""

    def __init__(self, interval: float = LOG_INTERVAL, logger: logging.Logger = log) -> None:
        self.interval = interval
        self.logger = logger
        self._lock = threading.Lock()
        self._last: dict[Rejection, float] = {}
        self._suppressed: dict[Rejection, int] = {}

    def warn(self, kind: Rejection, method: str, detail: str) -> bool:
        """Log one line for this rejection unless one of its kind was logged within the interval.
        Returns whether a line was written."""
        now = time.monotonic()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < self.interval:
                self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
                return False
            self._last[kind] = now
            suppressed = self._suppressed.pop(kind, 0)
        more = f" ({suppressed} more since the last such line were not logged)" if suppressed else ""
        self.logger.warning(
            "rejected %s: %s: %s%s", kind.value, errors.clip(method, 200), errors.clip(detail, 200), more
        )
        return True


class Malformed:
    """What the guarded deserializer returns for a body that is not the method's message."""

    __slots__ = ("error",)

    def __init__(self, error: str) -> None:
        self.error = error


def _guarded_deserializer(deserialize: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserialize is None:
        return None

    def wrapped(data: bytes) -> Any:
        try:
            return deserialize(data)
        except Exception as e:  # DecodeError, and anything else a decoder of client bytes raises
            return Malformed(f"{type(e).__name__}: {e}")

    return wrapped


def _metric_name(method: str) -> str:
    """'/pkg.Service/Method' -> 'Service/Method', as the rpc wrapper labels its requests."""
    service, _, name = method.rpartition("/")
    return f"{service.rpartition('.')[2]}/{name}"


class InputGuard(grpc.aio.ServerInterceptor):
    """See the module docstring. One instance per server; wrapped handlers are cached by method."""

    def __init__(self, logger: RateLimitedLog | None = None) -> None:
        self.log = logger or RateLimitedLog()
        self._cache: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None:
            self.unknown_method(method)
            return None
        cached = self._cache.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self.wrap(method, handler)
        self._cache[method] = (handler, wrapped)
        return wrapped

    def unknown_method(self, method: str) -> None:
        """Log a call of a method no service has (grpcio answers it UNIMPLEMENTED)."""
        self.log.warn(Rejection.UNKNOWN_METHOD, method, "no such service or method")

    async def _reject(self, context: grpc.aio.ServicerContext, method: str, request: Malformed) -> None:
        self.log.warn(Rejection.MALFORMED, method, request.error)
        metrics.GRPC_REQUESTS.labels(method=_metric_name(method), code=grpc.StatusCode.INVALID_ARGUMENT.name).inc()
        message = "the request body is not a valid protobuf message of this method"
        trailing: tuple[tuple[str, bytes], ...] = ()
        if method.startswith(errors.A2A_METHOD_PREFIX):  # the A2A domain, which the a2a-sdk clients recognise
            status = status_pb2.Status(code=grpc.StatusCode.INVALID_ARGUMENT.value[0], message=message)
            status.details.add().Pack(error_details_pb2.ErrorInfo(reason="INVALID_PARAMS", domain=errors.A2A_DOMAIN))
            trailing = (("grpc-status-details-bin", status.SerializeToString()),)
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, message, trailing_metadata=trailing)

    async def _unimplemented(self, context: grpc.aio.ServicerContext, method: str) -> None:
        self.log.warn(Rejection.UNIMPLEMENTED, method, "the server does not implement this method")
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{_metric_name(method)} is not implemented")

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """The handler of `method` with this check in front of its behaviour (what intercept_service
        answers; the API server applies it once, at start: api/handlers.py)."""
        guard = self
        deserializer = _guarded_deserializer(handler.request_deserializer)
        serializer = handler.response_serializer

        async def checked(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            async for request in requests:
                if isinstance(request, Malformed):
                    await guard._reject(context, method, request)
                yield request

        async def call(behavior: Callable[..., Any], request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                result = behavior(request, context)
                return (await result) if inspect.isawaitable(result) else result
            except NotImplementedError:
                await guard._unimplemented(context, method)

        async def stream(behavior: Callable[..., Any], request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                result = behavior(request, context)
            except NotImplementedError:
                await guard._unimplemented(context, method)
                return
            if hasattr(result, "__aiter__"):
                async for item in result:
                    yield item
            elif inspect.isawaitable(result):
                await result  # a servicer that writes with context.write
            elif result is not None:
                for item in result:
                    yield item

        if handler.unary_unary is not None:
            uu = handler.unary_unary
            if inspect.iscoroutinefunction(uu):  # every servicer of ours: one coroutine less per call

                async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
                    if isinstance(request, Malformed):
                        await guard._reject(context, method, request)
                    try:
                        return await uu(request, context)
                    except NotImplementedError:
                        await guard._unimplemented(context, method)

                return grpc.unary_unary_rpc_method_handler(unary_unary, deserializer, serializer)

            async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
                if isinstance(request, Malformed):
                    await guard._reject(context, method, request)
                return await call(uu, request, context)

            return grpc.unary_unary_rpc_method_handler(unary_unary, deserializer, serializer)
        if handler.unary_stream is not None:
            us = handler.unary_stream

            async def unary_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                if isinstance(request, Malformed):
                    await guard._reject(context, method, request)
                async for item in stream(us, request, context):
                    yield item

            return grpc.unary_stream_rpc_method_handler(unary_stream, deserializer, serializer)
        if handler.stream_unary is not None:
            su = handler.stream_unary

            async def stream_unary(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
                return await call(su, checked(requests, context), context)

            return grpc.stream_unary_rpc_method_handler(stream_unary, deserializer, serializer)
        ss = handler.stream_stream

        async def stream_stream(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            async for item in stream(ss, checked(requests, context), context):
                yield item

        return grpc.stream_stream_rpc_method_handler(stream_stream, deserializer, serializer)
