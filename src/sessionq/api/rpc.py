"""What every servicer method runs in: the `rpc` wrapper and `rpc_stream`, its form for
server-streaming methods (the storable check, errors mapped to their gRPC status by one mapping,
`answering`, request metrics), `abort` (an error's status with its ErrorInfo) and the time a
call may wait for its outcome (`wait_budget`)."""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
import psycopg
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2
from psycopg_pool import PoolTimeout

from sessionq import errors, metrics, telemetry
from sessionq.api.storable import check_storable
from sessionq.errors import SessionqError

log = logging.getLogger("sessionq.api")

# how long a mutation waits for its generation when the client set no deadline
DEFAULT_WAIT = 30.0


def wait_budget(context: grpc.aio.ServicerContext) -> float:
    """How long a call may wait for its outcome: the caller's deadline less a margin in which to
    answer (UNAVAILABLE "retry the same call") before the deadline fires on the client."""
    remaining = context.time_remaining()
    if remaining is None:
        return DEFAULT_WAIT
    return max(0.0, remaining - min(1.0, max(0.1, remaining * 0.05)))


F = TypeVar("F", bound=Callable[..., Awaitable[Any]])
S = TypeVar("S")

# the database is unreachable or failing over: a transient condition the client retries
_UNAVAILABLE = (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout)


class Outcome:
    """The status a call answered with, as `answering` records it (OK until an error is mapped)."""

    __slots__ = ("code",)

    def __init__(self) -> None:
        self.code = grpc.StatusCode.OK


@contextlib.asynccontextmanager
async def answering(context: grpc.aio.ServicerContext, name: str, *, retry: str) -> AsyncIterator[Outcome]:
    """The one mapping of what a servicer method raises to the status it answers, for unary and
    streaming methods alike: SessionqError -> its status (with ErrorInfo when it has a reason); a
    value PostgreSQL or JSON cannot represent -> INVALID_ARGUMENT; the database unreachable ->
    UNAVAILABLE with `retry` (what the client does next); a call the method aborted itself keeps its
    status; anything else -> INTERNAL, logged. The status is recorded in the yielded `Outcome`."""
    outcome = Outcome()
    try:
        yield outcome
    except SessionqError as e:
        outcome.code = e.code
        await abort(context, e)
    except (psycopg.DataError, json_format.Error) as e:
        # a value PostgreSQL or JSON cannot represent that validation let through: still the client's
        outcome.code = grpc.StatusCode.INVALID_ARGUMENT
        log.info("unrepresentable value in %s: %s", name, errors.clip(e, 500))
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            errors.clip(f"the request holds a value that cannot be stored: {e}", errors.MAX_STATUS_MESSAGE),
        )
    except _UNAVAILABLE as e:
        outcome.code = grpc.StatusCode.UNAVAILABLE
        log.warning("database unavailable in %s: %s", name, e)
        await context.abort(grpc.StatusCode.UNAVAILABLE, f"the database is unavailable; {retry}")
    except Exception:
        if isinstance(context.code(), grpc.StatusCode) and context.code() != grpc.StatusCode.OK:
            outcome.code = context.code()
            raise
        outcome.code = grpc.StatusCode.INTERNAL
        log.exception("unexpected error in %s", name)
        await context.abort(grpc.StatusCode.INTERNAL, "internal error; see the server log")


def rpc(method: F) -> F:
    """Servicer method wrapper: the storable check, errors mapped by `answering`, requests counted
    by method and code and timed by method."""

    counters: dict[tuple[str, grpc.StatusCode], Any] = {}  # the metrics' children, by label values
    latencies: dict[str, Any] = {}

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        if telemetry.tracing():  # one check when tracing is off
            with telemetry.server_span(f"{type(self).__name__}/{method.__name__}", context.invocation_metadata()):
                return await run(self, request, context)
        return await run(self, request, context)

    async def run(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        name = f"{type(self).__name__}/{method.__name__}"
        started = time.monotonic()
        outcome = Outcome()
        try:
            async with answering(context, name, retry="retry the same call") as outcome:
                check_storable(request)
                return await method(self, request, context)
        finally:
            counter = counters.get((name, outcome.code))
            if counter is None:
                counter = counters[(name, outcome.code)] = metrics.GRPC_REQUESTS.labels(
                    method=name, code=outcome.code.name
                )
            latency = latencies.get(name)
            if latency is None:
                latency = latencies[name] = metrics.GRPC_LATENCY.labels(method=name)
            counter.inc()
            latency.observe(time.monotonic() - started)

    return wrapper  # type: ignore[return-value]


def rpc_stream(method: Callable[..., AsyncIterator[S]]) -> Callable[..., AsyncIterator[S]]:
    """`rpc` for server-streaming methods: errors before or during the stream mapped by `answering`
    (UNAVAILABLE tells the client to subscribe again), requests counted by method and code (a
    stream's length is no latency)."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[S]:
        name = f"{type(self).__name__}/{method.__name__}"
        outcome = Outcome()
        try:
            async with answering(context, name, retry="subscribe again") as outcome:
                check_storable(request)
                async for item in method(self, request, context):
                    yield item
        finally:
            metrics.GRPC_REQUESTS.labels(method=name, code=outcome.code.name).inc()

    return wrapper


async def abort(context: grpc.aio.ServicerContext, e: SessionqError) -> None:
    """Answer the error's status. The message is capped (errors.MAX_STATUS_MESSAGE): every value a
    message quotes is cut by errors.clip already; this is the backstop, as a status travels in a
    header that clients refuse beyond a few kilobytes."""
    message = errors.clip(e.message, errors.MAX_STATUS_MESSAGE)
    trailing: tuple[tuple[str, bytes], ...] = ()
    if e.reason:
        status = status_pb2.Status(code=e.code.value[0], message=message)
        info = error_details_pb2.ErrorInfo(reason=e.reason, domain=errors.error_domain(e.reason), metadata=e.metadata)
        status.details.add().Pack(info)
        trailing = (("grpc-status-details-bin", status.SerializeToString()),)
    await context.abort(e.code, message, trailing_metadata=trailing)
