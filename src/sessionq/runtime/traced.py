"""A traced Substrate: each runtime call a worker makes is a client span `runtime <method>` of the
trace the worker's job (or quiescence suspend) belongs to, and the call's trace context goes on to
the runtime: `ateapi.Control` calls carry it as gRPC metadata (ateapi/client.py), the Actor's A2A
call as its `traceparent` header (ateapi/invoke.py), the turn reports a simulated Actor makes to
`TaskStoreService` as metadata (`TRACEPARENT`, read by taskstore_client.py).

The composition root wraps the worker's runtime only while tracing is on; a call outside any span
makes none (a job or suspend that carried no trace)."""

from __future__ import annotations

import functools
import inspect
from typing import Any

from sessionq import telemetry
from sessionq.runtime.taskstore_client import TRACEPARENT


class TracedSubstrate:
    """`inner` (any Substrate) with its coroutine methods traced; everything else passes through."""

    def __init__(self, inner: Any) -> None:
        object.__setattr__(self, "_inner", inner)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if name.startswith("_") or not inspect.iscoroutinefunction(value):
            return value

        @functools.wraps(value)
        async def traced(*args: Any, **kwargs: Any) -> Any:
            with telemetry.span(f"runtime {name}", kind=telemetry.CLIENT, root=False,
                                attributes={"rpc.system": "sessionq.runtime", "rpc.method": name}):
                token = TRACEPARENT.set(telemetry.traceparent())
                try:
                    return await value(*args, **kwargs)
                finally:
                    TRACEPARENT.reset(token)

        return traced

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._inner, name, value)
