"""The Substrate conformance suite's one fixture: `subject`, parametrized over every implementation
of `sessionq.runtime.base.Substrate`. Every test of this folder runs once against each.

| id | what the test calls |
| --- | --- |
| `simulator` | `SimulatedSubstrate` in process |
| `simulator-wire` | the adapter (`SubstrateClient`) -> `ateapi.Control` served from a simulator, with sessionq's extensions (what `sessionq up --runtime simulator` runs) |
| `adapter` | the adapter -> a simulator served as a real Substrate (no `x-sessionq-*` headers or trailers; the adapter checks UIDs itself) |
| `process` | `ProcessSubstrate` in process (real OS processes, archived durable directories), at the default isolation (gvisor where runsc runs, else namespaces) |
| `process-namespaces` | the same at isolation `namespaces` (skipped, saying why, where this machine lacks it) |
| `process-wire` | the adapter -> `ateapi.Control` served from a process runtime (what `sessionq up` runs), isolation `none` (the wire does not depend on the level) |
| `process-adapter` | the adapter -> a process runtime served as a real Substrate (its methods get no UID precondition), isolation `none` |

A new runtime adds one `Kind` and one branch in `open_subject` (docs/runtime.md, "A new runtime").

Each implementation is opened once for this folder (its own database, root, server and adapter), and
every test starts from an empty runtime: after each test the fixture deletes every Actor through
the implementation itself (which stops their processes and frees their workers) and then the rest
of what the test made (templates, tags, snapshots, egress policies, recorded turn cancels) from the
runtime's tables, and checks that no Actor and no held worker is left. A runtime that cannot be
emptied so fails the test that left it so, not the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from sessionq.runtime.ateapi.actor_endpoint import ActorEndpoints
from sessionq.runtime.ateapi.client import SubstrateClient, SubstrateOptions
from sessionq.runtime.ateapi.server import start_server
from sessionq.runtime.base import Substrate
from sessionq.runtime.process import ProcessConfig, ProcessSubstrate
from sessionq.runtime.process.database import SCHEMA as PROCESS
from sessionq.runtime.process.sandbox import Isolation, unavailable
from sessionq.runtime.simulator import SimulatedSubstrate
from sessionq.runtime.simulator.database import SCHEMA as SIMULATOR

# how many Actors may hold a worker at once, the same for every implementation (the process
# runtime's slots, the simulator's worker pool), so that running out of workers is testable
WORKERS = 3
PROCESS_SCHEMA, SIMULATOR_SCHEMA = PROCESS.name, SIMULATOR.name


class Kind(enum.StrEnum):
    SIMULATOR = "simulator"
    SIMULATOR_WIRE = "simulator-wire"
    ADAPTER = "adapter"
    PROCESS = "process"
    PROCESS_WIRE = "process-wire"
    PROCESS_ADAPTER = "process-adapter"
    PROCESS_NAMESPACES = "process-namespaces"


# the process runtime's isolation level of each kind (None: the default) and the in-process kinds
LEVEL = {Kind.PROCESS_NAMESPACES: Isolation.NAMESPACES, Kind.PROCESS_WIRE: Isolation.NONE,
         Kind.PROCESS_ADAPTER: Isolation.NONE}
IN_PROCESS = (Kind.PROCESS, Kind.PROCESS_NAMESPACES)


@dataclass
class Durable:
    """The durable directory of a RUNNING Actor as its agent sees it: files by name, with text
    contents (what suspend snapshots, resume restores and a fork from a tag starts from)."""

    write: Callable[[str, str, str, dict[str, str]], Awaitable[None]]  # (atespace, name, uid, files)
    read: Callable[[str, str, str], Awaitable[dict[str, str]]]  # (atespace, name, uid) -> files


@dataclass
class Subject:
    """One implementation under test. `runtime` is what the tests call; the rest says what the
    implementation offers beyond the Protocol (None / False: the tests that need it skip)."""

    kind: Kind
    runtime: Substrate
    durable: Durable | None = None
    # whether get_actor_template gives back the command, args and env the template was made with
    # (a runtime that runs them; the simulator's agent runs in process and ignores them)
    keeps_command: bool = False
    # what create_actor_template gets besides the image: the process runtime runs this command
    template_options: dict[str, Any] = field(default_factory=dict)
    # ends the process of a RUNNING Actor once a turn's call has reached it (atespace, name, uid)
    end_process: Callable[[str, str, str], Awaitable[None]] | None = None
    # empties the runtime between two tests (see the module's docstring); not for the tests
    reset: Callable[[], Awaitable[None]] | None = None

    async def template(self, atespace: str, name: str) -> str:
        """Create a template the implementation can run; returns its reference "<atespace>/<name>"."""
        await self.runtime.create_actor_template(atespace, name, "registry.local/agent:1", **self.template_options)
        return f"{atespace}/{name}"


def _simulator_durable(sim: SimulatedSubstrate) -> Durable:
    async def write(atespace: str, name: str, uid: str, files: dict[str, str]) -> None:
        current = await sim.read_durable(atespace, name)
        await sim.write_durable(atespace, name, uid, {**current, **files})

    async def read(atespace: str, name: str, uid: str) -> dict[str, str]:
        return {k: v for k, v in (await sim.read_durable(atespace, name)).items() if isinstance(v, str)}

    return Durable(write, read)


def _process_durable(rt: ProcessSubstrate) -> Durable:
    async def write(atespace: str, name: str, uid: str, files: dict[str, str]) -> None:
        data = rt.data_dir(uid)
        for file, text in files.items():
            (data / file).write_text(text)

    async def read(atespace: str, name: str, uid: str) -> dict[str, str]:
        data = rt.data_dir(uid)
        return {p.name: p.read_text() for p in data.iterdir() if p.is_file()} if data.exists() else {}

    return Durable(write, read)


def _accepted_connections(port: int) -> int:
    """The established TCP connections to 127.0.0.1:`port` on this machine (/proc/net/tcp): a call
    the kernel has queued for a listener that has not accepted it yet counts."""
    local = f"0100007F:{port:04X}"
    with open("/proc/net/tcp") as f:
        return sum(1 for line in f.readlines()[1:] if line.split()[1] == local and line.split()[3] == "01")


def _process_end(rt: ProcessSubstrate) -> Callable[[str, str, str], Awaitable[None]]:
    async def end(atespace: str, name: str, uid: str) -> None:
        port = int((await rt.endpoint(atespace, name, uid)).rsplit(":", 1)[1])
        deadline = time.monotonic() + 30
        # the template's `sleep` never answers /readyz (RT-3): the call waits for its readiness in
        # the runtime (or, were it ready, in the endpoint's backlog)
        while _accepted_connections(port) == 0 and rt.turns_in_flight(uid) == 0:
            assert time.monotonic() < deadline, "the turn's call never reached the Actor"
            await asyncio.sleep(0.02)
        pid = rt.pid_of(uid)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)

    return end


@contextlib.asynccontextmanager
async def served(runtime: Substrate, *, extensions: bool) -> AsyncIterator[SubstrateClient]:
    """`runtime` served as ateapi.Control (and its Actors' A2A endpoints), and the adapter talking
    to it. `extensions=False`: the server plays a real Substrate and the adapter checks UIDs itself."""
    server, port, _ = await start_server(runtime, "127.0.0.1:0", extensions=extensions)
    endpoints = ActorEndpoints(runtime)
    await endpoints.start("127.0.0.1:0")
    client = SubstrateClient(SubstrateOptions(
        address=f"127.0.0.1:{port}", call_timeout=60.0, uid_preflight=not extensions,
        actor_address_pattern=endpoints.pattern))
    await client.open()
    try:
        yield client
    finally:
        await client.close()
        await endpoints.stop()
        await server.stop(0)


@contextlib.asynccontextmanager
async def open_subject(kind: Kind, database_url: str, root: Path) -> AsyncIterator[Subject]:
    """The implementation `kind` on a fresh database (and, for the process runtime, a fresh root)."""
    if kind in (Kind.SIMULATOR, Kind.SIMULATOR_WIRE, Kind.ADAPTER):
        async with SimulatedSubstrate(database_url, worker_pool_size=WORKERS) as sim:
            reset = _resetter(sim, database_url, SIMULATOR_SCHEMA)
            if kind == Kind.SIMULATOR:
                yield Subject(kind, sim, _simulator_durable(sim), reset=reset)
                return
            async with served(sim, extensions=kind == Kind.SIMULATOR_WIRE) as client:
                yield Subject(kind, client, _simulator_durable(sim), reset=reset)
        return
    if kind in (Kind.PROCESS, Kind.PROCESS_WIRE, Kind.PROCESS_ADAPTER, Kind.PROCESS_NAMESPACES):
        # a process that only waits: SIGTERM ends it at once, and it writes nothing of its own; it
        # never accepts a call on its endpoint, so a cancel_turn waits its whole (short) timeout
        config = ProcessConfig(root=root, slots=WORKERS, stop_grace=5.0, warm_interpreters=0, isolation=LEVEL.get(kind),
                               cancel_timeout=0.25)
        options = {"command": ["sleep"], "args": ["3600"]}
        async with ProcessSubstrate(database_url, config) as rt:
            reset = _resetter(rt, database_url, PROCESS_SCHEMA)
            if kind in IN_PROCESS:
                yield Subject(kind, rt, _process_durable(rt), keeps_command=True, template_options=options,
                              end_process=_process_end(rt), reset=reset)
                return
            async with served(rt, extensions=kind == Kind.PROCESS_WIRE) as client:
                yield Subject(kind, client, _process_durable(rt), keeps_command=True, template_options=options,
                              end_process=_process_end(rt), reset=reset)
        return
    raise AssertionError(f"no implementation for {kind}")


def _kind(kind: Kind) -> Any:
    reason = unavailable(LEVEL[kind]) if kind in LEVEL else None
    return pytest.param(kind, id=str(kind), marks=[pytest.mark.skipif(reason is not None, reason=reason or "")])


async def _all(list_page: Callable[[str], Awaitable[Any]]) -> list[Any]:
    """Every item of a paged listing."""
    items, token = [], ""
    while True:
        page = await list_page(token)
        items += page.items
        token = page.next_page_token
        if not token:
            return items


def _resetter(local: Substrate, database_url: str, schema: str) -> Callable[[], Awaitable[None]]:
    """Empties the runtime `local` (in process, whatever kind calls it) on `database_url`."""

    async def reset() -> None:
        for actor in await _all(lambda token: local.list_actors(None, 100, token)):
            await local.delete_actor(actor.atespace, actor.name, actor.uid, any_state=True)
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            tables = ["tags", "snapshots", "egress_policies", "templates"]
            if schema == SIMULATOR_SCHEMA:
                tables.append("turn_cancels")
            for table in tables:
                await conn.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(schema, table)))
            cur = await conn.execute(sql.SQL("SELECT (SELECT count(*) FROM {}), (SELECT count(*) FROM {} WHERE"
                                             " holder_uid IS NOT NULL)").format(sql.Identifier(schema, "actors"),
                                                                                 sql.Identifier(schema, "workers")))
            assert await cur.fetchone() == (0, 0), "the runtime kept an Actor or a held worker after the test"

    return reset


@contextlib.asynccontextmanager
async def _database(admin_url: str, template: str) -> AsyncIterator[str]:
    """A fresh database with the whole schema (as the `database_url` fixture makes), for one subject."""
    name = f"sq_conf_{uuid.uuid4().hex[:16]}"
    async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:
        await conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name),
                                                                            sql.Identifier(template)))
    try:
        yield urlunsplit(urlsplit(admin_url)._replace(path="/" + name))
    finally:
        async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:
            await conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(scope="package", params=[_kind(k) for k in Kind])
async def opened_subject(request: pytest.FixtureRequest, pg_admin_url: str, template_database: str,
                         tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Subject]:
    """One implementation, opened once for this folder (opening one is most of a test's time: a database,
    a runtime, for the wire kinds a server and an adapter)."""
    root = tmp_path_factory.mktemp(f"conformance-{request.param}") / "runtime"
    async with _database(pg_admin_url, template_database) as url, open_subject(request.param, url, root) as s:
        yield s


@pytest.fixture
async def subject(opened_subject: Subject) -> AsyncIterator[Subject]:
    """The implementation under test, empty: what the test made is removed after it."""
    try:
        yield opened_subject
    finally:
        assert opened_subject.reset is not None
        await opened_subject.reset()
