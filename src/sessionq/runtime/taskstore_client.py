"""The Actor's client of `kagent.api.v1alpha1.TaskStoreService` (the runtime's private API).

An Actor reports its turns through this API with its workload credential (``authorization:
Bearer <token>``): the client's own, or the one a call names (``token=``: what the turn's request
brought the Actor). Every call is retried on UNAVAILABLE and DEADLINE_EXCEEDED with the very same
request message (the server makes a retry of the same payload idempotent: CreateTask and
UpdateTask return the committed version), backing off 0.05 s, doubling up to 1 s, for at most
about 10 s in total; any other status code raises `TaskStoreError` at once.

The channel's message limits (`max_message_bytes`, both directions) must hold a task store update
of the largest message the API admits, which carries it several times:
`sessionq.limits.grpc_message_limit(a2a.maxMessageBytes)`, the default.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable
from typing import Any

import grpc
from a2a.types import a2a_pb2

from sessionq._pb.kagent.api.v1alpha1 import task_store_pb2, task_store_pb2_grpc
from sessionq.limits import MIB, grpc_message_limit  # not sessionq.config: an Actor's process loads this
from sessionq.runtime.base import SETTLE_HEADER, SETTLED_TRAILER

__all__ = ["RETRYABLE", "TRACEPARENT", "TaskStoreClient", "TaskStoreError"]

# the W3C traceparent of the turn being reported, when it is traced: sent with every call as
# metadata, so the API's spans of the reports join the turn's trace (set by the worker's traced
# runtime for a simulated Actor, by the agent kit from the turn's A2A request for an Actor process)
TRACEPARENT: contextvars.ContextVar[str | None] = contextvars.ContextVar("sessionq_traceparent", default=None)

RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})

INITIAL_BACKOFF = 0.05
MAX_BACKOFF = 1.0
RETRY_BUDGET = 10.0  # seconds, all attempts of one call together
ATTEMPT_TIMEOUT = 5.0  # seconds, one attempt
DEFAULT_MESSAGE_LIMIT = grpc_message_limit(MIB)  # for the default a2a.maxMessageBytes


class TaskStoreError(Exception):
    """A TaskStoreService call failed with a non-retryable code, or kept failing with a retryable
    one until the retry budget ran out."""

    def __init__(self, method: str, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"TaskStoreService/{method}: {code.name}: {details}")
        self.method = method
        self.code = code
        self.details = details


class TaskStoreClient:
    """Async client (grpc.aio, insecure channel) authenticating as an Actor's workload."""

    def __init__(
        self,
        address: str,
        token: str | None,
        *,
        retry_budget: float = RETRY_BUDGET,
        attempt_timeout: float = ATTEMPT_TIMEOUT,
        max_message_bytes: int = DEFAULT_MESSAGE_LIMIT,
    ) -> None:
        self.address = address
        self._token = token
        self._retry_budget = retry_budget
        self._attempt_timeout = attempt_timeout
        self._channel = grpc.aio.insecure_channel(
            address,
            options=[
                ("grpc.max_send_message_length", max_message_bytes),
                ("grpc.max_receive_message_length", max_message_bytes),
            ],
        )
        self._stub = task_store_pb2_grpc.TaskStoreServiceStub(self._channel)
        # connecting starts now, not at the first call: an Actor's first task store call comes after
        # its server started and a request came in, by when the connection is usually made
        self._channel.get_state(try_to_connect=True)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> TaskStoreClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _call(
        self,
        method: str,
        rpc: Callable[..., Any],
        request: Any,
        token: str | None = None,
        extra: tuple[tuple[str, str], ...] = (),
        trailers: dict[str, str] | None = None,
    ) -> Any:
        """Send `request` (with the `extra` metadata) until it succeeds, a non-retryable code comes
        back or the budget is spent; the answer's text trailers go into `trailers` when given."""
        token = token or self._token
        if not token:
            raise TaskStoreError(method, grpc.StatusCode.UNAUTHENTICATED, "no workload credential to send")
        metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"), *extra)
        if (traceparent := TRACEPARENT.get()) is not None:
            metadata += (("traceparent", traceparent),)
        deadline = time.monotonic() + self._retry_budget
        backoff = INITIAL_BACKOFF
        while True:
            remaining = deadline - time.monotonic()
            try:
                call = rpc(request, metadata=metadata, timeout=max(min(self._attempt_timeout, remaining), 0.01))
                response = await call
                if trailers is not None:
                    trailers.update((k, v) for k, v in (await call.trailing_metadata() or ()) if isinstance(v, str))
                return response
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
                if code not in RETRYABLE or time.monotonic() + backoff > deadline:
                    raise TaskStoreError(method, code, exc.details() or "") from exc
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF)

    async def create_task(
        self, session_id: str, task: a2a_pb2.Task, dispatch_id: str | None, *, token: str | None = None
    ) -> int:
        """Store a new task; returns its version."""
        request = task_store_pb2.TaskStoreServiceCreateTaskRequest(session_id=session_id, task=task)
        if dispatch_id is not None:
            request.dispatch_id = dispatch_id
        response = await self._call("CreateTask", self._stub.CreateTask, request, token)
        return int(response.version)

    async def update_task(
        self,
        session_id: str,
        task: a2a_pb2.Task,
        expected_version: int,
        event: a2a_pb2.StreamResponse | None,
        dispatch_id: str | None,
        *,
        token: str | None = None,
    ) -> int:
        """Replace the task stored at `expected_version`, recording `event`; returns the new version."""
        request = self._update(session_id, task, expected_version, event, dispatch_id)
        response = await self._call("UpdateTask", self._stub.UpdateTask, request, token)
        return int(response.version)

    async def finish_task(
        self,
        session_id: str,
        task: a2a_pb2.Task,
        expected_version: int,
        event: a2a_pb2.StreamResponse | None,
        dispatch_id: str | None,
        *,
        token: str | None = None,
    ) -> tuple[int, bool]:
        """`update_task` to a final or waiting state that also settles the task at the version it
        makes, in the same write (UpdateTask with SETTLE_HEADER): (the new version, whether the task
        store says it settled it, SETTLED_TRAILER). A task store that does not know the header only
        stages the update: the caller then settles it with `settle_task`."""
        request = self._update(session_id, task, expected_version, event, dispatch_id)
        trailers: dict[str, str] = {}
        response = await self._call(
            "UpdateTask", self._stub.UpdateTask, request, token, ((SETTLE_HEADER, "1"),), trailers
        )
        return int(response.version), trailers.get(SETTLED_TRAILER) == "1"

    @staticmethod
    def _update(
        session_id: str,
        task: a2a_pb2.Task,
        expected_version: int,
        event: a2a_pb2.StreamResponse | None,
        dispatch_id: str | None,
    ) -> task_store_pb2.TaskStoreServiceUpdateTaskRequest:
        request = task_store_pb2.TaskStoreServiceUpdateTaskRequest(
            session_id=session_id, task=task, expected_version=expected_version
        )
        if event is not None:
            request.event.CopyFrom(event)
        if dispatch_id is not None:
            request.dispatch_id = dispatch_id
        return request

    async def settle_task(self, session_id: str, task_id: str, version: int, *, token: str | None = None) -> None:
        """Native execution of the task stopped at `version`: publish its state and history."""
        request = task_store_pb2.TaskStoreServiceSettleTaskRequest(
            session_id=session_id, task_id=task_id, version=version
        )
        await self._call("SettleTask", self._stub.SettleTask, request, token)

    async def get_task(
        self, session_id: str, task_id: str, *, token: str | None = None
    ) -> tuple[a2a_pb2.Task, int]:
        """The stored task and its version."""
        request = task_store_pb2.TaskStoreServiceGetTaskRequest(session_id=session_id, task_id=task_id)
        response = await self._call("GetTask", self._stub.GetTask, request, token)
        return response.stored.task, int(response.stored.version)

    async def list_tasks(
        self, session_id: str, request: a2a_pb2.ListTasksRequest | None = None, *, token: str | None = None
    ) -> a2a_pb2.ListTasksResponse:
        """The Session's tasks (an A2A ListTasks request/response)."""
        message = task_store_pb2.TaskStoreServiceListTasksRequest(session_id=session_id)
        if request is not None:
            message.request.CopyFrom(request)
        response = await self._call("ListTasks", self._stub.ListTasks, message, token)
        return response.result
