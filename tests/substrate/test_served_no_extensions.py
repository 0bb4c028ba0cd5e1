"""`sessionq runtime serve --simulator --no-extensions` as its own process (issue 17): the served
simulator behaves like a real Substrate (no x-sessionq-* headers honoured, no trailers, tags with
their own snapshot copy), and a checkpoint and a fork go through the API, the worker, the adapter
(uidPreflight) and that process; the fork answers from the pinned turns."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any
from uuid import UUID

import grpc
import pytest
from click.testing import CliRunner
from conftest import QUICK_RECONNECT, Api, stop_process
from sessionq.cli.main import main
from test_ateapi_process import free_port, wait_healthy
from test_fork_real_substrate import answer, checkpoint, conversation, fork, send

from sessionq._pb.kagent.api.v1alpha1 import runtime_pb2
from sessionq.runtime.ateapi.client import SubstrateClient, SubstrateOptions
from sessionq.runtime.simulator import PROTOCOL_METHODS, SimulatedSubstrate


class ProcessSim:
    """The runtime as the test sees it: the Substrate methods go to the adapter (gRPC to the served
    process), the test hooks to an in-process simulator on the same database."""

    def __init__(self, local: SimulatedSubstrate, client: SubstrateClient) -> None:
        object.__setattr__(self, "_local", local)
        object.__setattr__(self, "_client", client)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client if name in PROTOCOL_METHODS else self._local, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._local, name, value)  # the served process's Actors report to the API's fixed port


@pytest.fixture
def ports() -> tuple[int, int, int]:
    return free_port(), free_port(), free_port()  # the runtime, its Actors' endpoints, the API


@pytest.fixture
def served_process(database_url: str, ports: tuple[int, int, int]) -> Iterator[subprocess.Popen[str]]:
    port, actor_port, api_port = ports
    env = {**os.environ, "SESSIONQ_DATABASE__URL": database_url, "SESSIONQ_LOGGING__FORMAT": "text",
           "SESSIONQ_RUNTIME__SIMULATOR__WORKERS": "64",
           "SESSIONQ_RUNTIME__SIMULATOR__TASK_STORE_ADDRESS": f"127.0.0.1:{api_port}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sessionq.cli.main", "runtime", "serve", "--simulator", "--no-extensions",
         "--address", f"127.0.0.1:{port}", "--actor-address", f"127.0.0.1:{actor_port}"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    yield proc
    stop_process(proc, 10)


@pytest.fixture
async def sim(database_url: str, ports: tuple[int, int, int], served_process: Any) -> AsyncIterator[Any]:
    port, actor_port, _ = ports
    client = SubstrateClient(SubstrateOptions(
        address=f"127.0.0.1:{port}", uid_preflight=True, call_timeout=120.0, extra_channel_options=QUICK_RECONNECT,
        actor_address_pattern=f"http://127.0.0.1:{actor_port}/actors/{{atespace}}/{{name}}"))
    await client.open()
    local = SimulatedSubstrate(database_url, worker_pool_size=64)
    await local.open()
    try:
        await wait_healthy(client, 60)
        yield ProcessSim(local, client)
    finally:
        await local.close()
        await client.close()


@pytest.fixture
async def api(settings: Any, store: Any, sim: Any, worker: None, ports: tuple[int, int, int]) -> AsyncIterator[Api]:
    from sessionq.api.server import ApiServer

    address = f"127.0.0.1:{ports[2]}"  # where the served process's Actors report
    server = ApiServer(settings, store, address=address, runtime=sim)
    await server.start()
    channel = grpc.aio.insecure_channel(address)
    yield Api(channel, address)
    await channel.close()
    await server.stop(0)


@pytest.mark.timeout(240)
async def test_checkpoint_and_fork_through_the_served_real_substrate(
    api: Any, store: Any, sim: Any, served_process: subprocess.Popen[str]
) -> None:
    sid, t2 = await conversation(api, store, sim)
    session = await store.session_by_id(UUID(sid))
    # a real Substrate's Actor never got the environment (nor the credential): each turn brought it
    assert await sim._local.read_env(session.actor_atespace, session.actor_name) == {}
    cp = await checkpoint(api, sid, t2.id, "cp-served")
    row = await store.checkpoint_by_id(UUID(cp.id))
    tag = await sim.get_tag(row.actor_atespace, row.tag_name)
    assert tag.actor_uid == "", "no x-sessionq-actor-uid trailer"
    assert tag.snapshot_uri.startswith("sim-tag://") and tag.snapshot_uri == row.tag_snapshot_uri != row.snapshot_uri
    f = await fork(api, cp.id, "fork-served")
    assert f.state == runtime_pb2.RUNTIME_STATE_READY, f
    first = await send(api, "What did I ask you first?", f.id)
    assert "What is 2+2?" in answer(first)
    assert served_process.poll() is None, "the served runtime is still up"


def test_no_extensions_is_for_the_simulator_only() -> None:
    result = CliRunner().invoke(main, ["runtime", "serve", "--process", "--no-extensions"])
    assert result.exit_code != 0 and "--no-extensions serves the simulator only" in result.output
    help_text = CliRunner().invoke(main, ["runtime", "serve", "--help"]).output
    assert "--no-extensions" in help_text and "real Substrate" in help_text


