"""Warm sandboxes (warm.py): under gvisor and namespaces an Actor whose command a warm interpreter
runs is handed a sandbox started ahead, with its restored durable directory at /data, its own
user, its egress policy, exactly its environment; a sandbox serves one Actor once."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sessionq.runtime.base import ActorState
from sessionq.runtime.process import ProcessSubstrate, readiness
from sessionq.runtime.process.sandbox import Isolation, unavailable
from tests.process.conftest import ATESPACE, config, wait_for

PROBE = str(Path(__file__).with_name("probe_process.py"))
ECHO = str(Path(__file__).with_name("echo_agent.py"))
SANDBOXES = [pytest.param(v, id=v.value, marks=[pytest.mark.skipif(unavailable(v) is not None,
                                                                   reason=unavailable(v) or "")])
             for v in (Isolation.GVISOR, Isolation.NAMESPACES)]


@pytest.fixture(params=SANDBOXES)
async def warm_runtime(request: pytest.FixtureRequest, database_url: str, tmp_path: Path,
                       ) -> AsyncIterator[ProcessSubstrate]:
    rt = ProcessSubstrate(database_url, config(tmp_path / "runtime", request.param, slots=4, stop_grace=2.0,
                                               warm_interpreters=1))
    await rt.open()
    yield rt
    await rt.close()


async def _probe(rt: ProcessSubstrate, name: str, tag: str | None = None) -> tuple[str, dict[str, object]]:
    await rt.warm_ready(120)
    waiting = rt.warm_pids()
    assert len(waiting) == 1
    actor = await rt.create_actor(ATESPACE, name, f"{ATESPACE}/probe", env={"FROM_ACTOR": "b"}, from_tag=tag)
    await rt.resume_actor(ATESPACE, name, actor.uid)
    assert rt.started_warm(actor.uid) is True and rt.pid_of(actor.uid) == waiting[0]
    probe = rt.data_dir(actor.uid) / "probe.json"
    await wait_for(lambda: probe.exists() and probe.stat().st_size > 0, 60, what="the probe's report")
    return actor.uid, json.loads(probe.read_text())


async def test_an_actor_is_handed_a_warm_sandbox_with_its_directory_user_and_environment(
    warm_runtime: ProcessSubstrate,
) -> None:
    rt = warm_runtime
    await rt.create_actor_template(ATESPACE, "probe", "local/probe:1", command=[sys.executable, PROBE, "plant"],
                                   env={"FROM_AGENT": "a"})
    uid, seen = await _probe(rt, "p1")
    assert seen["cwd"] == "/data" and seen["argv"] == [PROBE, "plant"]
    env = seen["env"]
    assert isinstance(env, dict)
    assert env["FROM_AGENT"] == "a" and env["FROM_ACTOR"] == "b" and env["SESSIONQ_ACTOR"] == f"{ATESPACE}/p1"
    assert env["SESSIONQ_DATA_DIR"] == "/data" and env["SESSIONQ_READY_PORT"] == "8081"
    assert seen["stdin"] == "/dev/null"
    first_user = rt.sandbox_user(uid)
    assert first_user and first_user >= 200_000
    # the file it planted survives the suspend; a fork from it gets a warm sandbox (a new one) too
    await wait_for(lambda: (rt.data_dir(uid) / "probe_mod.py").exists(), 30, what="the planted module")
    await rt.suspend_actor(ATESPACE, "p1", uid)
    await rt.create_tag(ATESPACE, "planted", "p1", uid)
    fork, seen = await _probe(rt, "p2", tag="planted")
    assert (rt.data_dir(fork) / "probe_mod.py").exists(), "the fork's restored files are in its /data"
    assert rt.sandbox_user(fork) not in (None, first_user), "each sandbox has a user of its own"
    stat = (rt.data_dir(fork) / "probe_mod.py").stat()
    assert stat.st_uid == rt.sandbox_user(fork), "the restored files are given to the sandbox's user"
    await rt.suspend_actor(ATESPACE, "p2", fork)
    assert (await rt.get_actor(ATESPACE, "p2")).state == ActorState.SUSPENDED
    assert not list((rt.root / "warm").glob("*/data/*")), "no warm sandbox holds an Actor's file"


async def test_an_agent_kit_agent_in_a_warm_sandbox_gets_ready(warm_runtime: ProcessSubstrate) -> None:
    rt = warm_runtime
    await rt.create_actor_template(ATESPACE, "echo", "local/echo:1", command=[sys.executable, ECHO])
    await rt.warm_ready(120)
    actor = await rt.create_actor(ATESPACE, "e1", f"{ATESPACE}/echo", env={"SESSIONQ_TASKSTORE_ADDRESS": "127.0.0.1:1"})
    await rt.resume_actor(ATESPACE, "e1", actor.uid)
    assert rt.started_warm(actor.uid) is True
    await wait_for(lambda: rt.actor_ready(actor.uid) is True, 60, what="its /readyz")
    await rt.suspend_actor(ATESPACE, "e1", actor.uid)


@pytest.mark.clause("RT-3")
async def test_a_warm_sandbox_listens_on_the_readiness_port_before_its_hand_over(
    warm_runtime: ProcessSubstrate,
) -> None:
    """The first GET /readyz after a hand-over waits in the backlog of a socket the warm sandbox made
    at its start (and hands to its Actor as SESSIONQ_READY_FD), rather than being refused and asked
    again: connecting to 127.0.0.1:8081 of a waiting warm sandbox's namespace succeeds, and the
    Actor it is then handed to answers that very connection once it serves."""
    rt = warm_runtime
    await rt.create_actor_template(ATESPACE, "echo", "local/echo:1", command=[sys.executable, ECHO])
    await rt.warm_ready(120)
    (box,) = rt._warm_sandboxes.waiting
    loop = asyncio.get_running_loop()
    sock = box.network.netns.socket()
    try:
        await asyncio.wait_for(loop.sock_connect(sock, ("127.0.0.1", readiness.READY_PORT)), 10)
        actor = await rt.create_actor(ATESPACE, "e2", f"{ATESPACE}/echo",
                                      env={"SESSIONQ_TASKSTORE_ADDRESS": "127.0.0.1:1"})
        await rt.resume_actor(ATESPACE, "e2", actor.uid)
        assert rt.started_warm(actor.uid) is True
        await loop.sock_sendall(sock, readiness.REQUEST)
        answer = await asyncio.wait_for(loop.sock_recv(sock, 4096), 60)
        assert answer.startswith(b"HTTP/1.1 200") or answer.startswith(b"HTTP/1.1 503"), answer
    finally:
        sock.close()
    await wait_for(lambda: rt.actor_ready(actor.uid) is True, 60, what="its /readyz")
    await rt.suspend_actor(ATESPACE, "e2", actor.uid)
