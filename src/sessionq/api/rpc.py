"""What every servicer method runs in: the `rpc` wrapper (the storable check, our errors mapped to
their gRPC status, request metrics), `abort` (an error's status with its ErrorInfo) and the time a
call may wait for its outcome (`wait_budget`)."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
import psycopg
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2
from psycopg_pool import PoolTimeout

from sessionq import errors, metrics
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


def rpc(method: F) -> F:
    """Servicer method wrapper: SessionqError -> its status (with ErrorInfo when it has a reason);
    anything unexpected -> INTERNAL, logged. Also counts requests by method and code."""

    counters: dict[tuple[str, grpc.StatusCode], Any] = {}  # the metrics' children, by label values
    latencies: dict[str, Any] = {}

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        name = f"{type(self).__name__}/{method.__name__}"
        started = time.monotonic()
        code = grpc.StatusCode.OK
        try:
            check_storable(request)
            return await method(self, request, context)
        except SessionqError as e:
            code = e.code
            await abort(context, e)
        except (psycopg.DataError, json_format.Error) as e:
            # a value PostgreSQL or JSON cannot represent that validation let through: still the client's
            code = grpc.StatusCode.INVALID_ARGUMENT
            log.info("unrepresentable value in %s: %s", name, errors.clip(e, 500))
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                errors.clip(f"the request holds a value that cannot be stored: {e}", errors.MAX_STATUS_MESSAGE),
            )
        except (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout) as e:
            # the database is unreachable or failing over: a transient condition the client retries
            code = grpc.StatusCode.UNAVAILABLE
            log.warning("database unavailable in %s: %s", name, e)
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the database is unavailable; retry the same call")
        except Exception:
            if isinstance(context.code(), grpc.StatusCode) and context.code() != grpc.StatusCode.OK:
                code = context.code()
                raise
            code = grpc.StatusCode.INTERNAL
            log.exception("unexpected error in %s", name)
            await context.abort(grpc.StatusCode.INTERNAL, "internal error; see the server log")
        finally:
            counter = counters.get((name, code))
            if counter is None:
                counter = counters[(name, code)] = metrics.GRPC_REQUESTS.labels(method=name, code=code.name)
            latency = latencies.get(name)
            if latency is None:
                latency = latencies[name] = metrics.GRPC_LATENCY.labels(method=name)
            counter.inc()
            latency.observe(time.monotonic() - started)

    return wrapper  # type: ignore[return-value]


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
