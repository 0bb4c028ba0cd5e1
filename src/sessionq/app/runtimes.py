"""The runtime, composed: the in-process simulator, the gRPC adapter (runtime.kind: substrate),
the process runtime (runtime.kind: process), and `sessionq runtime serve --simulator|--process`
(either served as ateapi.Control)."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sessionq.config import SECRET_ENV, ConfigError, Settings, grpc_message_limit
from sessionq.runtime.ateapi.actor_endpoint import ActorEndpoints
from sessionq.runtime.ateapi.client import SubstrateClient, SubstrateOptions
from sessionq.runtime.ateapi.server import start_server
from sessionq.runtime.base import Substrate
from sessionq.runtime.process import ProcessConfig, ProcessSubstrate
from sessionq.runtime.simulator import SimulatedSubstrate

log = logging.getLogger(__name__)

PR_SET_DUMPABLE = 4  # prctl(2)
_withheld: dict[str, str] = {}


def withhold_secrets() -> dict[str, str]:
    """Take the credentials of the configuration (the keys marked secret: database URLs, bearer
    tokens, the cursor key) out of this process's environment, once its settings are loaded, in a
    process that runs the process runtime: its Actors run as the same user, and must not read them.

    - they leave `os.environ` (so no child started with the inherited environment gets them);
    - their entries in the environment the process was started with, which /proc/<pid>/environ
      shows to every process of the same user, are overwritten in place (Linux);
    - the process is made non-dumpable (Linux): processes of its user can no longer read its
      memory, file descriptors or environment through /proc, nor ptrace it.

    Returns the variables taken, which `withheld_environment` gives back to sessionq's own processes
    (the API processes `up` supervises)."""
    taken = {name: os.environ[name] for name in SECRET_ENV if name in os.environ}
    for name in taken:
        del os.environ[name]  # also unsetenv: C code's getenv no longer finds them either
    _withheld.update(taken)
    if sys.platform.startswith("linux"):
        _wipe_initial_environment(set(taken))
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            log.warning("could not make the process non-dumpable: %s", os.strerror(ctypes.get_errno()))
    return taken


def withheld_environment() -> dict[str, str]:
    """The variables `withhold_secrets` took, for a child process of sessionq's own."""
    return dict(_withheld)


def _wipe_initial_environment(names: set[str]) -> None:
    """Overwrite with NUL bytes the NAME=value entries of `names` in the environment block this
    process was started with (its address is in /proc/self/stat: env_start, env_end, fields 50
    and 51). Nothing points into them any more once they left the environment."""
    if not names:
        return
    try:
        stat = Path("/proc/self/stat").read_text()
    except OSError:
        return
    fields = stat[stat.rfind(")") + 2:].split()
    start, end = int(fields[47]), int(fields[48])
    if not 0 < start < end:
        return
    block = ctypes.string_at(start, end - start)
    offset = 0
    for entry in block.split(b"\0"):
        if entry.partition(b"=")[0].decode(errors="replace") in names:
            ctypes.memset(start + offset, 0, len(entry))
        offset += len(entry) + 1


def substrate_options(settings: Settings, **overrides: Any) -> SubstrateOptions:
    """runtime.substrate.* as the adapter's options; ConfigError (naming the key) when unusable."""
    s = settings.runtime.substrate
    options = SubstrateOptions(
        address=s.address,
        tls=s.tls.enabled,
        ca_file=s.tls.ca_file,
        cert_file=s.tls.cert_file,
        key_file=s.tls.key_file,
        server_name=s.tls.server_name,
        token_file=s.token_file,
        call_timeout=s.call_timeout,
        keepalive_time=s.keepalive_time,
        actor_address_pattern=s.actor_address_pattern,
        uid_preflight=s.uid_preflight,
        snapshot_storage=s.snapshot_storage,
        sandbox_config=s.sandbox_config,
    )
    if overrides:
        options = SubstrateOptions(**{**options.__dict__, **overrides})
    try:
        options.validate()
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return options


def simulator(settings: Settings, url: str) -> SimulatedSubstrate:
    return SimulatedSubstrate(
        url,
        worker_pool_size=settings.runtime.simulator.workers,
        taskstore_address=settings.runtime.simulator.task_store_address or settings.server.address,
        taskstore_message_limit=grpc_message_limit(settings.a2a.max_message_bytes),
    )


def process_runtime(settings: Settings, url: str) -> ProcessSubstrate:
    """The process runtime of runtime.process.* (its Actors report to the task store at
    runtime.simulator.taskStoreAddress, else server.address; `up` and `serve` point it at their API)."""
    p = settings.runtime.process
    return ProcessSubstrate(
        url,
        ProcessConfig(
            root=Path(p.root or "sessionq-process"),
            slots=p.slots,
            stop_grace=p.stop_grace,
            max_directory_bytes=p.max_directory_bytes,
            warm_interpreters=p.warm_interpreters,
            isolation=p.isolation,
            sandbox_paths=tuple(x for x in p.sandbox_paths.split(":") if x),
            memory_limit=p.memory_limit,
            cpu_limit=p.cpu_limit,
            max_processes=p.max_processes,
            egress_ca_file=p.egress_ca_file or None,
            taskstore_address=settings.runtime.simulator.task_store_address or settings.server.address,
        ),
    )


@contextlib.asynccontextmanager
async def open_runtime(settings: Settings, url: str, **overrides: Any) -> AsyncIterator[Substrate]:
    """The configured runtime, open. A Substrate that does not answer yet is no error here: its
    calls fail UNAVAILABLE (retryable) until it does, and the readiness says so."""
    if settings.runtime.kind == "substrate":
        client = SubstrateClient(substrate_options(settings, **overrides))
        await client.open()
        problem = await client.check_health()
        if problem is not None:
            log.warning("the runtime at %s does not answer yet (%s); operations wait for it",
                        client.options.address, problem)
        try:
            yield client
        finally:
            await client.close()
        return
    if settings.runtime.kind == "process":
        # this process owns the Actors' processes (one per database: a second one is refused)
        proc = process_runtime(settings, url)
        await proc.open()
        try:
            yield proc
        finally:
            await proc.close()
        return
    sim = simulator(settings, url)
    await sim.open()
    try:
        yield sim
    finally:
        await sim.close()


@dataclass
class ServedSimulator:
    """A simulator served as ateapi.Control plus its Actors' A2A endpoints."""

    sim: SimulatedSubstrate
    server: Any
    port: int
    endpoints: ActorEndpoints
    kind = "simulator"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def report_to(self, taskstore_address: str) -> None:
        """Where the simulated Actors reach the task store API (`up`: its API, once it listens)."""
        self.sim.taskstore_address = taskstore_address

    async def stop(self, grace: float = 1.0) -> None:
        await self.server.stop(grace)
        await self.endpoints.stop()
        await self.sim.close()


async def start_served_simulator(settings: Settings, url: str, *, address: str | None = None,
                                 actor_address: str | None = None, extensions: bool = True) -> ServedSimulator:
    """`extensions=False`: the server behaves like a real Substrate (runtime/ateapi/server.py)."""
    sim = simulator(settings, url)
    await sim.open()
    try:
        server, port, _ = await start_server(sim, address or settings.runtime.simulator.serve_address,
                                             extensions=extensions)
        if port == 0:
            raise OSError(f"cannot listen on {address or settings.runtime.simulator.serve_address}")
        endpoints = ActorEndpoints(sim)
        await endpoints.start(actor_address or settings.runtime.simulator.actor_address)
    except BaseException:
        await sim.close()
        raise
    return ServedSimulator(sim, server, port, endpoints)


@dataclass
class ServedProcess:
    """The process runtime served as ateapi.Control plus its Actors' A2A endpoints (each turn is
    relayed to the Actor's process by its `invoke`)."""

    runtime: ProcessSubstrate
    server: Any
    port: int
    endpoints: ActorEndpoints
    kind = "process"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def report_to(self, taskstore_address: str) -> None:
        """Where the Actors' processes reach the task store API (given to the processes it starts)."""
        self.runtime.taskstore_address = taskstore_address

    async def stop(self, grace: float = 1.0) -> None:
        await self.server.stop(grace)
        await self.endpoints.stop()
        await self.runtime.close()  # stops every Actor's process


async def start_served_process(settings: Settings, url: str, *, address: str | None = None,
                               actor_address: str | None = None) -> ServedProcess:
    runtime = process_runtime(settings, url)
    await runtime.open()
    try:
        server, port, _ = await start_server(runtime, address or settings.runtime.simulator.serve_address)
        if port == 0:
            raise OSError(f"cannot listen on {address or settings.runtime.simulator.serve_address}")
        endpoints = ActorEndpoints(runtime)
        await endpoints.start(actor_address or settings.runtime.simulator.actor_address)
    except BaseException:
        await runtime.close()
        raise
    return ServedProcess(runtime, server, port, endpoints)
