"""`invoke` on a process Actor: one A2A SendMessage (JSON-RPC over HTTP, a2a-sdk client) to the
Actor's private endpoint, answered when the turn ends. The session and dispatch ids ride in the
request's metadata (INVOKE_SESSION_KEY, INVOKE_DISPATCH_KEY), the workload credential in the call's
header (WORKLOAD_TOKEN_HEADER, as the adapter sends it); the Actor reports and settles the task
through the task store itself."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable
from typing import Any

import httpx
from a2a.client import A2AClientError, ClientConfig, ClientFactory, minimal_agent_card
from a2a.types import a2a_pb2
from a2a.utils.constants import TransportProtocol

from sessionq.runtime.ateapi.invoke import call_context
from sessionq.runtime.base import INVOKE_DISPATCH_KEY, INVOKE_SESSION_KEY, Code, InvokeRequest, SubstrateError
from sessionq.runtime.stand_in.message import parse_message

__all__ = ["cancel_actor_turn", "invoke_actor"]

EXIT_GRACE = 3.0  # seconds a failed call waits for the process's recorded exit to explain it


def send_request(request: InvokeRequest) -> a2a_pb2.SendMessageRequest:
    message = parse_message(request.message)
    message.role = a2a_pb2.ROLE_USER
    if not message.message_id:
        message.message_id = str(uuid.uuid4())
    if not message.context_id:
        message.context_id = request.session_id
    if request.task_id is not None:
        message.task_id = request.task_id
    send = a2a_pb2.SendMessageRequest(message=message)
    send.metadata.update({INVOKE_SESSION_KEY: request.session_id, INVOKE_DISPATCH_KEY: request.dispatch_id})
    return send


def loopback_client(timeout: httpx.Timeout) -> httpx.AsyncClient:
    """An HTTP client for an Actor's private endpoint: plain HTTP on loopback, so no TLS context is
    loaded (httpx loads the CA bundle into every client it makes by default: 0.2-0.7 s of CPU on a
    busy machine, the largest part of a turn on a running Actor, blocking the worker's loop) and no
    proxy from the environment applies."""
    return httpx.AsyncClient(timeout=timeout, verify=False, trust_env=False)


async def _send(url: str, send: a2a_pb2.SendMessageRequest, timeout: float, credential: str | None) -> None:
    async with loopback_client(httpx.Timeout(timeout, connect=10.0)) as http:
        factory = ClientFactory(ClientConfig(streaming=False, httpx_client=http))
        client = factory.create(minimal_agent_card(url, [TransportProtocol.JSONRPC]))
        async for _ in client.send_message(send, context=call_context(credential)):
            pass


async def invoke_actor(
    url: str,
    request: InvokeRequest,
    *,
    timeout: float,
    exited: asyncio.Event | None,
    describe: Callable[[], str],
) -> None:
    """Deliver the turn and wait for its answer, or for the process to end (UNAVAILABLE with
    `describe()`), or for `timeout` (DEADLINE_EXCEEDED)."""
    send = send_request(request)
    call: asyncio.Future[Any] = asyncio.ensure_future(_send(url, send, timeout, request.credential))
    waits: set[asyncio.Future[Any]] = {call}
    watcher: asyncio.Future[Any] | None = None
    if exited is not None:
        watcher = asyncio.ensure_future(exited.wait())
        waits.add(watcher)
    try:
        done, _ = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if call in done:
            try:
                call.result()
            except (A2AClientError, httpx.HTTPError) as exc:
                if exited is not None:
                    # a connection cut by the process's end is usually seen just before its exit status
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(exited.wait(), EXIT_GRACE)
                    if exited.is_set():
                        raise SubstrateError(Code.UNAVAILABLE, describe()) from exc
                raise SubstrateError(Code.UNAVAILABLE, f"the actor's A2A endpoint failed: {exc}") from exc
            return
        if watcher is not None and watcher in done:
            raise SubstrateError(Code.UNAVAILABLE, describe())
        raise SubstrateError(Code.DEADLINE_EXCEEDED, f"the actor did not answer within {timeout:g} s")
    finally:
        for f in waits:
            if not f.done():
                f.cancel()
                with contextlib.suppress(BaseException):
                    await f


async def cancel_actor_turn(url: str, session_id: str, task_id: str, timeout: float = 10.0) -> None:
    """Ask the Actor to stop its turn of `task_id` (A2A CancelTask): the SDK cancels the executor's
    work. Best effort: a turn that already ended, or an Actor that cannot be reached, is no error."""
    request = a2a_pb2.CancelTaskRequest(id=task_id)
    request.metadata.update({INVOKE_SESSION_KEY: session_id})
    try:
        async with loopback_client(httpx.Timeout(timeout)) as http:
            factory = ClientFactory(ClientConfig(streaming=False, httpx_client=http))
            client = factory.create(minimal_agent_card(url, [TransportProtocol.JSONRPC]))
            await client.cancel_task(request)
    except (A2AClientError, httpx.HTTPError):
        return
