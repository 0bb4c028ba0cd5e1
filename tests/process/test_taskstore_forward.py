"""The task store's forwarder of a sandboxed Actor (taskstore_forward.py) passes the TaskStoreService
calls the agent kit makes, with their credential, and refuses every other path of the API from
inside the sandbox."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from sessionq.runtime.process import ProcessSubstrate
from sessionq.runtime.process.sandbox import Isolation
from sessionq.runtime.process.taskstore_forward import TaskStoreForwarder
from tests.ports import watched_port
from tests.process.conftest import ATESPACE, config, wait_for
from tests.process.test_isolation import SANDBOXED, WARM

PROBE = str(Path(__file__).with_name("taskstore_probe.py"))


class _Api(grpc.GenericRpcHandler):
    """Stands for sessionq's API: answers every method (so that only the forwarder refuses any)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.settle: list[str] = []  # the x-sessionq-settle header of each call that had one
        self.trailers: tuple[tuple[str, str], ...] = ()  # what every answer carries as its trailers

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        method = handler_call_details.method

        async def answer(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            metadata = dict(context.invocation_metadata() or ())
            self.calls.append((method, str(metadata.get("authorization"))))
            if "x-sessionq-settle" in metadata:
                self.settle.append(str(metadata["x-sessionq-settle"]))
            if self.trailers:
                context.set_trailing_metadata(self.trailers)
            return b"answered " + request

        return grpc.unary_unary_rpc_method_handler(answer)


@pytest.fixture
async def api() -> AsyncIterator[tuple[str, _Api]]:
    handler = _Api()
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield f"127.0.0.1:{port}", handler
    await server.stop(0)


@pytest.mark.clause("RT-9")
@pytest.mark.parametrize("warm", WARM)
@pytest.mark.parametrize("level", SANDBOXED)
async def test_only_the_task_store_paths_are_reachable_from_inside_the_sandbox(
    level: Isolation, warm: int, database_url: str, tmp_path: Path, api: tuple[str, _Api]
) -> None:
    address, handler = api
    rt = ProcessSubstrate(database_url, config(tmp_path / "runtime", level, slots=2, stop_grace=1.0,
                                               warm_interpreters=warm, taskstore_address=address))
    await rt.open()
    try:
        await rt.create_actor_template(ATESPACE, "probe", "local/probe:1", command=[sys.executable, PROBE])
        actor = await rt.create_actor(ATESPACE, "p1", f"{ATESPACE}/probe")
        await rt.warm_ready(120)
        await rt.resume_actor(ATESPACE, "p1", actor.uid)
        assert rt.started_warm(actor.uid) is bool(warm)
        report_file = rt.data_dir(actor.uid) / "forward.json"
        await wait_for(report_file.exists, 60, what="the probe's report")
        report = json.loads(report_file.read_text())
        allowed = report["/kagent.api.v1alpha1.TaskStoreService/GetTask"]
        assert allowed == {"code": "OK", "answer": "answered probe"}, allowed
        for method in ("/kagent.api.v1alpha1.SessionService/GetSession", "/grpc.health.v1.Health/Check",
                       "/a2a.v1.A2AService/SendMessage", "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"):
            assert report[method]["code"] == "UNIMPLEMENTED", (method, report[method])
        assert "HTTP/1.1 200" not in report["http1"], report["http1"]
        # only the task store's call reached the API, with the Actor's credential
        assert handler.calls == [("/kagent.api.v1alpha1.TaskStoreService/GetTask", "Bearer sqw.t.probe")]
    finally:
        await rt.close()


class _Here:
    """Stands for the Actor's network namespace: the forwarder listens in this process's own."""

    def call_inside(self, fn: Any) -> Any:
        return fn()


async def test_the_forwarder_passes_the_metadata_on_and_the_answers_trailers_back(api: tuple[str, _Api]) -> None:
    """The settle header goes up with the call and the task store's x-sessionq-settled trailer comes
    back (the agent kit ends a turn with one write only when it sees that trailer)."""
    address, handler = api
    handler.trailers = (("x-sessionq-settled", "1"),)
    forwarder = TaskStoreForwarder(_Here(), address)  # type: ignore[arg-type]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    await forwarder.start(port)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary("/kagent.api.v1alpha1.TaskStoreService/UpdateTask")(
                b"update", metadata=(("authorization", "Bearer sqw.t.x"), ("x-sessionq-settle", "1")), timeout=10)
            assert await call == b"answered update"
            assert ("x-sessionq-settled", "1") in tuple(await call.trailing_metadata())
    finally:
        await forwarder.close()
    assert handler.calls == [("/kagent.api.v1alpha1.TaskStoreService/UpdateTask", "Bearer sqw.t.x")]
    assert handler.settle == ["1"]


async def test_the_forwarder_connects_to_the_task_store_when_it_is_made() -> None:
    """The forwarder's connection to the task store is made from its creation on, so the Actor's
    first call does not wait for it."""
    async with watched_port() as (address, connected):
        forwarder = TaskStoreForwarder(_Here(), address)  # type: ignore[arg-type]
        try:
            await asyncio.wait_for(connected.wait(), 10)
        finally:
            await forwarder.close()
