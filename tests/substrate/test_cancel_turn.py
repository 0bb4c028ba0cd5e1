"""Substrate.cancel_turn over the gRPC adapter's A2A path: the gateway's A2A CancelTask reaches the
Actor endpoint (the served simulator's), which calls the runtime's cancel_turn; errors keep their code."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from sessionq.runtime.ateapi.actor_endpoint import build_app
from sessionq.runtime.ateapi.invoke import A2AInvoker
from sessionq.runtime.base import Code, SubstrateError


class Recorder:
    def __init__(self, error: SubstrateError | None = None) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.error = error

    async def cancel_turn(
        self, atespace: str, name: str, uid: str, session_id: str, task_id: str, *, credential: str | None = None
    ) -> None:
        self.calls.append((atespace, name, uid, session_id, task_id))
        if self.error:
            raise self.error


def invoker_for(runtime: Any) -> A2AInvoker:
    invoker = A2AInvoker("http://actors.test/actors/{atespace}/{name}")
    invoker._http = httpx.AsyncClient(transport=httpx.ASGITransport(app=build_app(runtime)))
    return invoker


async def test_cancel_turn_reaches_the_actor_endpoint() -> None:
    runtime = Recorder()
    invoker = invoker_for(runtime)
    try:
        await invoker.cancel("kagent", "session-1", "uid-1", "0190b2c4-8f5e-7a10-9b2d-3c4d5e6f7a8b", "task-1")
    finally:
        await invoker.close()
    assert runtime.calls == [("kagent", "session-1", "uid-1", "0190b2c4-8f5e-7a10-9b2d-3c4d5e6f7a8b", "task-1")]


async def test_cancel_turn_errors_keep_their_code() -> None:
    invoker = invoker_for(Recorder(SubstrateError(Code.FAILED_PRECONDITION, "actor uid mismatch")))
    try:
        with pytest.raises(SubstrateError) as e:
            await invoker.cancel("kagent", "session-1", "uid-2", "s", "task-1")
    finally:
        await invoker.close()
    assert e.value.code == Code.FAILED_PRECONDITION


@pytest.mark.parametrize("code", [-32001, -32002])  # TaskNotFound, TaskNotCancelable
async def test_an_actor_with_nothing_to_stop_is_a_success(code: int) -> None:
    """A real Actor answers a CancelTask of a turn it does not run with TaskNotFound (or
    TaskNotCancelable when it already ended): nothing to stop, not an error the job would retry."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def endpoint(request: Request) -> JSONResponse:
        body = await request.json()
        return JSONResponse({"jsonrpc": "2.0", "id": body.get("id"), "error": {"code": code, "message": "no such task"}})

    invoker = A2AInvoker("http://actors.test/actors/{atespace}/{name}")
    app = Starlette(routes=[Route("/actors/{atespace}/{name}", endpoint, methods=["POST"])])
    invoker._http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app))
    try:
        await invoker.cancel("kagent", "session-1", "uid-1", "s", "task-1")
    finally:
        await invoker.close()
