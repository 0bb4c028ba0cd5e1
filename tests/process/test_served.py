"""`sessionq runtime serve --process` as its own process: the gRPC adapter drives real Actor
processes through ateapi.Control (what an Actor runs travels in its template's container; a crash
in ActorCrash), a turn of my-first-agent goes adapter -> served endpoint -> the Actor's process,
and stopping the server leaves no process behind (issue 18 on issue 17's frame)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from a2a.types import a2a_pb2
from conftest import QUICK_RECONNECT, stop_process

from sessionq.db.store import Store
from sessionq.domain.agents import compile_egress, parse_spec, prepare_revision
from sessionq.runtime.ateapi.client import SubstrateClient, SubstrateOptions
from sessionq.runtime.base import ActorState, SnapshotStatus
from tests.conftest import running_worker
from tests.ports import free_port
from tests.process.conftest import FIXTURE, processes_with, wait_for

NS = "kagent"
REPO = Path(__file__).resolve().parents[2]
FIRST_AGENT = REPO / "examples" / "agents" / "first_agent.py"


@pytest.fixture
def served(database_url: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    port, actor_port, api_port = free_port(), free_port(), free_port()
    root = tmp_path / "process-runtime"
    env = {**os.environ, "SESSIONQ_DATABASE__URL": database_url, "SESSIONQ_LOGGING__FORMAT": "text",
           "SESSIONQ_RUNTIME__PROCESS__ROOT": str(root), "SESSIONQ_RUNTIME__PROCESS__SLOTS": "4",
           "SESSIONQ_RUNTIME__SIMULATOR__TASK_STORE_ADDRESS": f"127.0.0.1:{api_port}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sessionq.cli.main", "runtime", "serve", "--process",
         "--address", f"127.0.0.1:{port}", "--actor-address", f"127.0.0.1:{actor_port}"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    info = {"port": port, "actor_port": actor_port, "api_port": api_port, "root": root, "proc": proc}
    yield info
    stop_process(proc, 20)


@pytest.fixture
async def client(served: dict[str, Any]) -> AsyncIterator[SubstrateClient]:
    c = SubstrateClient(SubstrateOptions(
        address=f"127.0.0.1:{served['port']}", uid_preflight=False, call_timeout=30.0,
        extra_channel_options=QUICK_RECONNECT,
        actor_address_pattern=f"http://127.0.0.1:{served['actor_port']}/actors/{{atespace}}/{{name}}"))
    await c.open()
    deadline = time.monotonic() + 60
    while (problem := await c.check_health()) is not None:
        assert time.monotonic() < deadline, problem
        await asyncio.sleep(0.1)
    yield c
    await c.close()


@pytest.mark.timeout(180)
async def test_the_adapter_drives_real_processes_and_stopping_the_server_leaves_none(
    served: dict[str, Any], client: SubstrateClient
) -> None:
    root: Path = served["root"]
    t = await client.create_actor_template(NS, "t1", "local/fixture:1", command=[sys.executable],
                                           args=[FIXTURE, "sleep"], env={"GREETING": "hello"})
    assert t.command == (sys.executable,) and t.args == (FIXTURE, "sleep") and t.env == {"GREETING": "hello"}
    actor = await client.create_actor(NS, "a1", f"{NS}/t1")
    actor, resumed = await client.resume_actor(NS, "a1", actor.uid)
    assert resumed and actor.state == ActorState.RUNNING
    data = root / "actors" / actor.uid / "data"
    await wait_for(lambda: (data / "ready").exists(), timeout=60, what="the process to start")
    (data / "memory.json").write_text("kept")
    actor = await client.suspend_actor(NS, "a1", actor.uid)
    assert actor.state == ActorState.SUSPENDED and actor.snapshots[-1].status == SnapshotStatus.COMPLETED

    await client.create_actor_template(NS, "t2", "local/fixture:1", command=[sys.executable], args=[FIXTURE, "crash"])
    crasher = await client.create_actor(NS, "c1", f"{NS}/t2")
    await client.resume_actor(NS, "c1", crasher.uid)
    deadline = time.monotonic() + 30
    while (got := await client.get_actor(NS, "c1")).state != ActorState.CRASHED:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    assert "exited with status 3" in (got.crash_message or ""), "the crash travels in ActorCrash"

    await client.resume_actor(NS, "a1", actor.uid)
    await wait_for(lambda: processes_with(str(root)) != [], timeout=30, what="the process to run")
    served["proc"].terminate()
    served["proc"].wait(30)
    await wait_for(lambda: processes_with(str(root)) == [], timeout=15, what="no process to outlive the server")


@pytest.mark.timeout(240)
async def test_a_turn_of_my_first_agent_through_the_adapter(
    served: dict[str, Any], client: SubstrateClient, settings: Any, store: Store, database_url: str
) -> None:
    from a2a.types import a2a_pb2_grpc

    from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc
    from sessionq.api.server import ApiServer

    async with running_worker(settings, database_url, store, client):
        server = ApiServer(settings, store, address=f"127.0.0.1:{served['api_port']}", runtime=client)
        await server.start()
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{served['api_port']}")
        md = [("authorization", "Bearer alice-token")]
        try:
            spec = parse_spec({"name": "my-first-agent", "command": [sys.executable, str(FIRST_AGENT)]})
            await store.apply_agent(NS, spec.name, spec.to_json(), spec.spec_hash(), spec.image,
                                    compile_egress(spec), "alice")
            await prepare_revision(store, client, (await store.get_agent(NS, spec.name)).desired_revision_id)
            sid = (await sessions_pb2_grpc.SessionServiceStub(channel).CreateSession(
                sessions_pb2.CreateSessionRequest(request_id="s-1", agent=common_pb2.ResourceReference(
                    namespace=NS, name=spec.name)), metadata=md, timeout=60)).session.id
            a2a = a2a_pb2_grpc.A2AServiceStub(channel)
            for text, expected in (("Remember the number 7.", "remember the number 7"),
                                   ("What number did I ask you to remember?", "7")):
                msg = a2a_pb2.Message(message_id=f"m-{time.monotonic_ns()}", role=a2a_pb2.ROLE_USER, context_id=sid,
                                      parts=[a2a_pb2.Part(text=text)])
                task = (await a2a.SendMessage(a2a_pb2.SendMessageRequest(tenant=f"{NS}/{spec.name}", message=msg),
                                              metadata=md, timeout=120)).task
                assert task.status.state == a2a_pb2.TASK_STATE_COMPLETED, task.status
                assert expected in " ".join(p.text for p in task.status.message.parts)
            # the adapter never hands the credential to the runtime: the Actor got it with each turn
            async with store.pool.connection() as conn:
                envs = [r["env"] for r in await (await conn.execute("SELECT env FROM sessionq_process.actors")).fetchall()]
            assert envs and all("SESSIONQ_WORKLOAD_TOKEN" not in env for env in envs), envs
        finally:
            await channel.close()
            await server.stop(0)
