"""Runtime readiness (RT-3): an Actor's agent kit answers ``GET /readyz`` on a private endpoint of
its own, and the process runtime sends a turn only once it answered 200."""

from __future__ import annotations

import asyncio
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from sessionq.agentkit.readiness import HOLD, Readiness
from sessionq.runtime.base import ActorState, Code, InvokeRequest, SubstrateError
from sessionq.runtime.process import ProcessSubstrate
from sessionq.runtime.process.sandbox import Isolation
from tests.process.conftest import ATESPACE, argv, config, wait_for

ECHO = str(Path(__file__).with_name("echo_agent.py"))


@pytest.fixture
async def readiness_server() -> AsyncIterator[tuple[Readiness, str]]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    ready = Readiness()
    await ready.start(sock)
    yield ready, f"http://127.0.0.1:{sock.getsockname()[1]}"
    await ready.close()


@pytest.mark.clause("RT-3")
async def test_readyz_says_starting_then_ready_then_stopping(readiness_server: tuple[Readiness, str]) -> None:
    ready, base = readiness_server
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        r = await http.get("/readyz")
        assert (r.status_code, r.text) == (503, "not ready: starting\n")
        ready.mark_ready()
        r = await http.get("/readyz")
        assert (r.status_code, r.text) == (200, "ready\n")
        assert r.headers["cache-control"] == "no-store"
        head = await http.head("/readyz")
        assert head.status_code == 200 and head.content == b""
        assert (await http.get("/readyz?verbose=1")).status_code == 200
        assert (await http.get("/healthz")).status_code == 404
        assert (await http.get("/")).status_code == 404
        assert (await http.post("/readyz", content=b"x")).status_code == 405
        ready.mark_stopping()
        r = await http.get("/readyz")
        assert (r.status_code, r.text) == (503, "not ready: stopping\n")


@pytest.mark.clause("RT-3")
async def test_a_readyz_asked_while_starting_is_answered_when_the_agent_is_ready(
    readiness_server: tuple[Readiness, str],
) -> None:
    """The runtime's first ask comes as the process starts: it is held and answered 200 the moment
    the agent serves (not 503, to be asked again later); held at most HOLD, then 503 starting."""
    ready, base = readiness_server
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        started = time.monotonic()
        r = await http.get("/readyz")
        assert (r.status_code, r.text) == (503, "not ready: starting\n")
        assert time.monotonic() - started >= HOLD * 0.9, "held while starting"
        asked = asyncio.ensure_future(http.get("/readyz"))
        sent = time.monotonic()
        await asyncio.sleep(0.05)
        assert not asked.done() or time.monotonic() - sent >= HOLD, "held, not answered 503 at once"
        marked = time.monotonic()
        ready.mark_ready()
        r = await asyncio.wait_for(asked, 10)
        if marked - sent < HOLD * 0.8:  # (a machine that stalled the test past HOLD gets 503 starting)
            assert (r.status_code, r.text) == (200, "ready\n")


@pytest.mark.clause("RT-3")
async def test_readyz_refuses_what_is_not_an_http_request(readiness_server: tuple[Readiness, str]) -> None:
    _ready, base = readiness_server
    host, port = base.removeprefix("http://").split(":")
    for raw in (b"hello\r\n\r\n", b"GET /readyz\r\n\r\n", b"GET /readyz SPDY/3\r\n\r\n", b"GET /" + b"x" * 9000):
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(raw)
        if not raw.endswith(b"\r\n\r\n"):
            writer.write_eof()
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n"), (raw[:20], answer[:80])
        assert len(answer) < 300, "a short answer that echoes nothing"


@pytest.fixture
async def runtime_1s(database_url: str, tmp_path: Path, isolation: Isolation) -> AsyncIterator[ProcessSubstrate]:
    """A runtime whose Actors have one second to get ready, and a turn 30 s to be answered."""
    rt = ProcessSubstrate(database_url, config(tmp_path / "runtime", isolation, slots=2, stop_grace=2.0,
                                               warm_interpreters=0, ready_timeout=1.0, turn_timeout=30.0))
    await rt.open()
    yield rt
    await rt.close()


async def _started(rt: ProcessSubstrate, name: str, command: list[str], env: dict[str, str] | None = None) -> str:
    await rt.create_actor_template(ATESPACE, name, "local/agent:1", command=command[:1], args=command[1:])
    actor = await rt.create_actor(ATESPACE, name, f"{ATESPACE}/{name}", env=env or {})
    await rt.resume_actor(ATESPACE, name, actor.uid)
    return actor.uid


def _turn() -> InvokeRequest:
    return InvokeRequest(session_id=str(uuid.uuid4()), dispatch_id=str(uuid.uuid4()),
                         message={"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]})


@pytest.mark.clause("RT-3")
async def test_an_agent_kit_actor_is_ready_once_its_private_readyz_answers(runtime: ProcessSubstrate) -> None:
    """The agent kit serves /readyz on an endpoint of its own, which the runtime asks (and no client
    is given: the Actor's endpoint is its A2A one); the runtime marks the Actor ready from it."""
    rt = runtime
    # no task store is needed to serve (its client connects at the first write)
    uid = await _started(rt, "echo", [sys.executable, ECHO], {"SESSIONQ_TASKSTORE_ADDRESS": "127.0.0.1:1"})
    child = rt._children[uid]
    assert child.ready_at is not None
    await wait_for(lambda: rt.actor_ready(uid) is True, 60, what="the Actor's /readyz to answer 200")
    a2a_port = int((await rt.endpoint(ATESPACE, "echo", uid)).rsplit(":", 1)[1])
    if rt.isolation == Isolation.NONE:
        # a socket the Actor inherited: its own port on the host's loopback, beside its A2A endpoint
        assert child.ready_at.netns is None and child.ready_at.port != a2a_port
        async with httpx.AsyncClient(timeout=10) as http:
            r = await http.get(f"http://127.0.0.1:{child.ready_at.port}/readyz")
            assert (r.status_code, r.text) == (200, "ready\n")
            # the A2A endpoint is another thing: no /readyz there
            assert (await http.get(f"http://127.0.0.1:{a2a_port}/readyz")).status_code == 404
    else:
        # 127.0.0.1:8081 of the Actor's own network namespace: nothing of the host reaches it
        assert child.ready_at.netns is not None and child.ready_at.port == 8081
    await rt.suspend_actor(ATESPACE, "echo", uid)
    assert rt.actor_ready(uid) is None


@pytest.mark.clause("RT-3")
async def test_a_turn_waits_for_readiness_and_fails_when_the_actor_never_gets_ready(
    runtime_1s: ProcessSubstrate,
) -> None:
    """A process that never answers /readyz (it serves nothing) is not sent the turn: the call fails
    UNAVAILABLE once the readiness timeout (1 s) passed, not when the turn's (30 s) would."""
    rt = runtime_1s
    uid = await _started(rt, "mute", argv("sleep"))
    started = time.monotonic()
    with pytest.raises(SubstrateError) as failed:
        await rt.invoke(ATESPACE, "mute", uid, _turn())
    took = time.monotonic() - started
    assert failed.value.code == Code.UNAVAILABLE, failed.value
    assert "did not become ready within 1 s" in failed.value.message, failed.value.message
    assert took < 10, took
    assert rt.actor_ready(uid) is False
    assert (await rt.get_actor(ATESPACE, "mute")).state == ActorState.RUNNING  # the process itself is left be
    # the next turn waits (and fails) the same way: readiness is asked again, not given up
    with pytest.raises(SubstrateError) as again:
        await rt.invoke(ATESPACE, "mute", uid, _turn())
    assert "did not become ready within 1 s" in again.value.message


@pytest.mark.clause("RT-3")
async def test_a_turn_to_an_actor_that_ends_before_it_is_ready_names_the_exit(runtime: ProcessSubstrate) -> None:
    """(60 s to get ready: the process's end, not the timeout, ends the wait)"""
    rt = runtime
    uid = await _started(rt, "crash", argv("crash"))
    with pytest.raises(SubstrateError) as failed:
        await rt.invoke(ATESPACE, "crash", uid, _turn())
    assert failed.value.code in (Code.UNAVAILABLE, Code.FAILED_PRECONDITION), failed.value
    if failed.value.code == Code.UNAVAILABLE:
        assert "exited with status 3" in failed.value.message, failed.value.message
