"""`sessionq runtime serve --simulator` as its own process: the adapter reaches it over the
network, a test in this process injects faults it honours (their rows are in PostgreSQL), an
unreachable runtime is an UNAVAILABLE that loses nothing, and refused credentials log one line
(issue 17)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import QUICK_RECONNECT, stop_process

from sessionq import config
from sessionq._pb.ateapi import ateapi_pb2_grpc as pb_grpc
from sessionq.app.runtimes import substrate_options
from sessionq.config import ConfigError
from sessionq.runtime.ateapi.client import SubstrateClient, SubstrateOptions
from sessionq.runtime.ateapi.server import ControlService
from sessionq.runtime.base import ActorState, Code, SubstrateError
from sessionq.runtime.simulator import SimulatedSubstrate
from tests.ports import free_port

NS = "team-p"
TEMPLATE = f"{NS}/rev-1"


def start_served(database_url: str, port: int, actor_port: int) -> subprocess.Popen[str]:
    env = {**os.environ, "SESSIONQ_DATABASE__URL": database_url, "SESSIONQ_LOGGING__FORMAT": "text",
           "SESSIONQ_RUNTIME__SIMULATOR__WORKERS": "64"}
    return subprocess.Popen(
        [sys.executable, "-m", "sessionq.cli.main", "runtime", "serve", "--simulator",
         "--address", f"127.0.0.1:{port}", "--actor-address", f"127.0.0.1:{actor_port}"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


@pytest.fixture
def served_process(database_url: str) -> Iterator[tuple[int, int]]:
    port, actor_port = free_port(), free_port()
    proc = start_served(database_url, port, actor_port)
    yield port, actor_port
    stop_process(proc, 10)


@pytest.fixture
async def sim(database_url: str) -> AsyncIterator[SimulatedSubstrate]:
    async with SimulatedSubstrate(database_url) as s:
        yield s


async def wait_healthy(client: SubstrateClient, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while (problem := await client.check_health()) is not None:
        assert asyncio.get_running_loop().time() < deadline, problem
        await asyncio.sleep(0.1)


@pytest.mark.timeout(120)
async def test_served_in_another_process_with_faults_from_here(
    served_process: tuple[int, int], sim: SimulatedSubstrate
) -> None:
    port, actor_port = served_process
    client = SubstrateClient(SubstrateOptions(
        address=f"127.0.0.1:{port}", uid_preflight=False, call_timeout=5.0, extra_channel_options=QUICK_RECONNECT,
        actor_address_pattern=f"http://127.0.0.1:{actor_port}/actors/{{atespace}}/{{name}}"))
    await client.open()
    try:
        await wait_healthy(client)
        await client.create_actor_template(NS, "rev-1", "img:1")
        made = await client.create_actor(NS, "p1", TEMPLATE)
        await sim.inject("resume_actor", "lose_after", actor="p1")
        with pytest.raises(SubstrateError) as e:
            await client.resume_actor(NS, "p1", made.uid)
        assert e.value.code == Code.UNAVAILABLE
        assert (await sim.get_actor(NS, "p1")).state == ActorState.RUNNING  # the effect was applied
        await sim.inject("suspend_actor", "fail_before", actor="p1", code=Code.RESOURCE_EXHAUSTED)
        with pytest.raises(SubstrateError) as e:
            await client.suspend_actor(NS, "p1", made.uid)
        assert e.value.code == Code.RESOURCE_EXHAUSTED
        assert (await client.suspend_actor(NS, "p1", made.uid)).state == ActorState.SUSPENDED
    finally:
        await client.close()


@pytest.mark.timeout(120)
async def test_unreachable_at_start_then_served(database_url: str, sim: SimulatedSubstrate) -> None:
    """Nothing answers yet: health says why and calls are UNAVAILABLE (retryable); once the
    runtime is up the same client works, and nothing was created by the failed calls."""
    port, actor_port = free_port(), free_port()
    client = SubstrateClient(SubstrateOptions(address=f"127.0.0.1:{port}", uid_preflight=False, call_timeout=1.0,
                                              extra_channel_options=QUICK_RECONNECT))
    await client.open()
    proc = None
    try:
        assert await client.check_health(timeout=0.5) is not None
        with pytest.raises(SubstrateError) as e:
            await client.create_actor_template(NS, "rev-1", "img:1")
        assert e.value.code in (Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED)
        proc = start_served(database_url, port, actor_port)
        await wait_healthy(client)
        assert (await client.list_actors(NS, 10, "")).items == []
        await client.create_actor_template(NS, "rev-1", "img:1")
        assert (await client.get_actor_template(NS, "rev-1")).image == "img:1"
    finally:
        await client.close()
        if proc is not None:
            proc.terminate()
            proc.wait(10)


class TokenCheck(grpc.aio.ServerInterceptor):
    def __init__(self, token: str) -> None:
        self.token = token

    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        md = dict(details.invocation_metadata or ())
        if md.get("authorization") != f"Bearer {self.token}":
            async def deny(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad token")
            return grpc.unary_unary_rpc_method_handler(deny)
        return await continuation(details)


async def test_wrong_token_logs_one_line_and_the_file_is_reread(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with SimulatedSubstrate(database_url) as runtime:
        server = grpc.aio.server(interceptors=[TokenCheck("good")])
        pb_grpc.add_ControlServicer_to_server(ControlService(runtime), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        token = tmp_path / "token"
        token.write_text("stale\n")
        client = SubstrateClient(SubstrateOptions(address=f"127.0.0.1:{port}", token_file=str(token)))
        await client.open()
        try:
            with caplog.at_level(logging.ERROR, logger="sessionq.runtime.ateapi.client"):
                for _ in range(3):
                    with pytest.raises(SubstrateError) as e:
                        await client.list_workers(5, "")
                    assert e.value.code == Code.UNAUTHENTICATED
            lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
            assert len(lines) == 1 and "refused our credentials (UNAUTHENTICATED)" in lines[0], lines
            token.write_text("good\n")  # rotated: re-read on the next call
            os.utime(token, ns=(1, 10**18))
            assert len((await client.list_workers(5, "")).items) == 5
            token.unlink()  # gone (a broken projection): the same, named
            caplog.clear()
            with caplog.at_level(logging.ERROR, logger="sessionq.runtime.ateapi.client"):
                for _ in range(2):
                    with pytest.raises(SubstrateError) as e:
                        await client.list_workers(5, "")
                    assert e.value.code == Code.UNAUTHENTICATED and "cannot read the runtime token file" in e.value.message
            assert len([r for r in caplog.records if r.levelno >= logging.ERROR]) == 1
        finally:
            await client.close()
            await server.stop(0)


@pytest.mark.timeout(120)
async def test_readiness_follows_the_runtime(database_url: str) -> None:
    """The API's health service sessionq.runtime (the readiness probe's) is NOT_SERVING while the
    runtime does not answer, SERVING once it does; "" (liveness) is not touched."""
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    from sessionq.app.services import RUNTIME_HEALTH_SERVICE, watch_runtime

    servicer = health.aio.HealthServicer()

    class Api:  # what watch_runtime uses of the ApiServer: setting a service's health
        async def set_health(self, service: str, status: int) -> None:
            await servicer.set(service, status)

    port = free_port()
    client = SubstrateClient(SubstrateOptions(address=f"127.0.0.1:{port}", call_timeout=1.0,
                                              extra_channel_options=QUICK_RECONNECT))
    await client.open()
    stop = asyncio.Event()
    watch = asyncio.create_task(watch_runtime(Api(), client, stop, interval=0.1))  # type: ignore[arg-type]

    probe_server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, probe_server)
    probe_port = probe_server.add_insecure_port("127.0.0.1:0")
    await probe_server.start()
    probe = grpc.aio.insecure_channel(f"127.0.0.1:{probe_port}")

    async def status() -> Any:
        """What a readiness probe sees."""
        try:
            request = health_pb2.HealthCheckRequest(service=RUNTIME_HEALTH_SERVICE)
            return (await health_pb2_grpc.HealthStub(probe).Check(request)).status
        except grpc.aio.AioRpcError:
            return None

    proc = None
    try:
        for _ in range(100):
            if await status() == health_pb2.HealthCheckResponse.NOT_SERVING:
                break
            await asyncio.sleep(0.05)
        assert await status() == health_pb2.HealthCheckResponse.NOT_SERVING
        proc = start_served(database_url, port, free_port())
        for _ in range(300):
            if await status() == health_pb2.HealthCheckResponse.SERVING:
                break
            await asyncio.sleep(0.1)
        assert await status() == health_pb2.HealthCheckResponse.SERVING
    finally:
        stop.set()
        await watch
        await client.close()
        await probe.close()
        await probe_server.stop(0)
        if proc is not None:
            proc.terminate()
            proc.wait(10)


async def test_status_says_whether_the_runtime_answers(served: Any, tmp_path: Path) -> None:
    """`sessionq status` (operator command) names the runtime and whether it answers."""
    from click.testing import CliRunner, Result
    from sessionq.cli.main import main

    empty = tmp_path / "client.yaml"
    empty.write_text("{}\n")
    base = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "SESSIONQ_CLIENT_CONFIG": str(empty),
            "SESSIONQ_DATABASE_URL": served.database_url, "SESSIONQ_DATABASE__URL": None}

    async def cli(*args: str, env: dict[str, str] | None = None) -> Result:
        return await asyncio.to_thread(CliRunner().invoke, main, list(args), env={**base, **(env or {})})

    def ok(result: Result) -> Result:
        assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
        return result

    up = {"SESSIONQ_RUNTIME__KIND": "substrate", "SESSIONQ_RUNTIME__SUBSTRATE__ADDRESS": served.address}
    text = ok(await cli("status", env=up)).stdout
    assert f"RUNTIME             substrate at {served.address}: answers" in text, text
    down = {**up, "SESSIONQ_RUNTIME__SUBSTRATE__ADDRESS": f"127.0.0.1:{free_port()}"}
    text = ok(await cli("status", env=down)).stdout
    assert "DOES NOT ANSWER (UNAVAILABLE" in text, text
    data = json.loads(ok(await cli("status", "-o", "json", env=down)).stdout)
    assert data["runtime"]["answers"] is False and data["runtime"]["kind"] == "substrate"
    text = ok(await cli("status")).stdout
    assert "RUNTIME             simulator: in process" in text, text


@pytest.mark.clause("RT-3")
def test_the_substrate_address_defaults_to_the_substrate_api_service() -> None:
    """Nothing configured: the adapter dials the Substrate API's Service (the seed's default); set
    empty on purpose it is refused (below), never taken as "somewhere"."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONQ_RUNTIME__")}
    options = substrate_options(config.load(env={**env, "SESSIONQ_RUNTIME__KIND": "substrate"}))
    assert options.address == "dns:///api.ate-system.svc:443"


@pytest.mark.clause("RT-3")
@pytest.mark.timeout(120)
async def test_a_dns_target_like_the_default_reaches_the_substrate(served_process: tuple[int, int]) -> None:
    """The default's form, a gRPC name with the dns scheme, is dialled as such (resolved, then
    connected): here dns:/// naming the served runtime."""
    port, _ = served_process
    client = SubstrateClient(SubstrateOptions(address=f"dns:///127.0.0.1:{port}", uid_preflight=False,
                                              call_timeout=5.0, extra_channel_options=QUICK_RECONNECT))
    await client.open()
    try:
        await wait_healthy(client)
        await client.create_actor_template(NS, "rev-dns", "img:1")
        assert (await client.get_actor_template(NS, "rev-dns")).image == "img:1"
    finally:
        await client.close()


_UNUSABLE = [
    ({"SESSIONQ_RUNTIME__SUBSTRATE__ADDRESS": ""}, "runtime.substrate.address: required"),
    ({"SESSIONQ_RUNTIME__SUBSTRATE__TLS__ENABLED": "true", "SESSIONQ_RUNTIME__SUBSTRATE__TLS__CA_FILE": "/nonexistent/ca"},
     "runtime.substrate.tls.caFile: cannot read /nonexistent/ca"),
    ({"SESSIONQ_RUNTIME__SUBSTRATE__TOKEN_FILE": "/nonexistent/token"}, "runtime.substrate.tokenFile: cannot read"),
    ({"SESSIONQ_RUNTIME__SUBSTRATE__ACTOR_ADDRESS_PATTERN": "http://{nope}/"}, "actorAddressPattern"),
]


@pytest.mark.parametrize(("env", "says"), _UNUSABLE)
def test_an_unusable_substrate_configuration_names_its_key(env: dict[str, str], says: str) -> None:
    """What the worker checks at start (`substrate_options`) refuses each unusable value naming its key."""
    full = {**os.environ, "SESSIONQ_RUNTIME__KIND": "substrate", "SESSIONQ_RUNTIME__SUBSTRATE__ADDRESS": "127.0.0.1:1",
            **env}
    with pytest.raises(ConfigError) as refused:
        substrate_options(config.load(env=full))
    assert says in str(refused.value)


def test_worker_refuses_an_unusable_substrate_configuration(database_url: str) -> None:
    """Validated at start: one line naming the key, no traceback (the real entry point, for one of
    the values the test above refuses: each takes the same path out)."""
    env, says = _UNUSABLE[1]
    full = {**os.environ, "SESSIONQ_DATABASE__URL": database_url, "SESSIONQ_RUNTIME__KIND": "substrate",
            "SESSIONQ_RUNTIME__SUBSTRATE__ADDRESS": "127.0.0.1:1", **env}
    r = subprocess.run([sys.executable, "-m", "sessionq.cli.main", "worker"], env=full, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0
    assert says in r.stderr and "Traceback" not in r.stderr, r.stderr
