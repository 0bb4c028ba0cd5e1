"""Test infrastructure: a real PostgreSQL, the schema built once, a fresh database per test.

By default the suite starts the embedded PostgreSQL 18 in a temporary directory. With
SESSIONQ_TEST_DATABASE_URL set (an admin URL such as postgresql://postgres@127.0.0.1:5432/postgres)
it uses that server instead. The schema (migrations + the simulator's schema) is built once into
a template database; every test gets its own database cloned from it (CREATE DATABASE ...
TEMPLATE, 0.3-1 s: made one test ahead by a thread, see `_Clones`). The tests that only read the
catalog share one read-only clone (`schema_url`); a module whose tests roll back all they do
shares one clone (`module_database_url`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest

from sessionq.db import migrate


def _with_database(url: str, name: str) -> str:
    """The same server URL with another database name (URLs only: postgresql://...)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


# The channel options of an adapter whose runtime the test starts (a process that takes seconds to
# answer): its connection is retried every 0.1 to 0.5 s, where gRPC's own backoff (1 s, growing
# 1.6 times a retry up to 120 s) would see a runtime that answers after 10 s only after 16 s.
QUICK_RECONNECT: tuple[tuple[str, int], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
)


def stop_process(proc: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if `proc` has not exited within `timeout` seconds; reaped either way."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def pg_admin_url() -> Iterator[str]:
    url = os.environ.get("SESSIONQ_TEST_DATABASE_URL")
    if url:
        yield url
        return
    import shutil
    import tempfile

    from sessionq.db import embedded

    # not under pytest's basetemp: pytest prunes old basetemps, which must not touch a live server
    data = Path(tempfile.mkdtemp(prefix="sessionq-test-pg-"))
    server = embedded.start(data, cleanup="stop")
    yield server.admin_url
    server.stop()
    shutil.rmtree(data, ignore_errors=True)


@pytest.fixture(scope="session")
def template_database(pg_admin_url: str) -> Iterator[str]:
    name = f"sq_tpl_{os.getpid()}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    url = _with_database(pg_admin_url, name)
    migrate.upgrade(url)
    from sessionq.runtime.simulator import install_schema

    asyncio.run(install_schema(url))
    yield name
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class _Clones:
    """Fresh databases cloned from the template one test ahead, and the used ones dropped, by one
    thread beside the tests: a clone (CREATE DATABASE ... TEMPLATE) takes 0.3-1 s on a busy machine,
    most of a short test's time, and the server makes it while the previous test runs (a drop waits
    while a clone is wanted). A test gets a database no one has connected to, exactly what the
    template holds, as before.

    A CREATE or DROP DATABASE is a transaction of the server: while it runs it holds back the
    oldest running transaction that every database sees (pg_current_snapshot's xmin), so lifecycle
    events are not yet readable (their positions wait for it, schema/45_events.sql) and row
    versions are not pruned. A test marked `quiet_horizon` asserts on those at once: the thread
    finishes what it is doing before such a test's body runs and starts nothing until it ends."""

    def __init__(self, admin_url: str, template: str) -> None:
        self._admin_url, self._template = admin_url, template
        self._cond = threading.Condition()
        self._wanted = 1  # clones to make: the first test's, at once
        self._ready: list[str | BaseException] = []
        self._drops: list[str] = []
        self._closing = False
        self._quiet = 0  # test bodies running that the thread must not overlap
        self._busy = False  # a CREATE or DROP DATABASE is under way
        self._thread = threading.Thread(target=self._run, name="database-clones", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        while True:
            with self._cond:
                self._cond.wait_for(
                    lambda: self._closing or (not self._quiet and (self._wanted > 0 or bool(self._drops))))
                self._busy = True
                if self._wanted > 0:
                    self._wanted -= 1
                    what, name = "create", f"sq_t_{uuid.uuid4().hex[:16]}"
                elif self._drops:
                    what, name = "drop", self._drops.pop(0)
                else:
                    break
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self._admin_url, autocommit=True)
                if what == "create":
                    conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self._template}"')
                else:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                result: str | BaseException = name
            except BaseException as e:  # the test that takes the clone fails with it
                if conn is not None:
                    conn.close()
                conn, result = None, e
            with self._cond:
                self._busy = False
                if what == "create":
                    self._ready.append(result)
                self._cond.notify_all()
        if conn is not None:
            conn.close()

    def take(self) -> str:
        """A fresh database's name; the next test's clone is started at once."""
        with self._cond:
            self._wanted += 1
            self._cond.notify_all()
            if not self._cond.wait_for(lambda: self._ready, timeout=300):
                raise RuntimeError("no clone of the template database within 300 s")
            got = self._ready.pop(0)
        if isinstance(got, BaseException):
            raise RuntimeError(f"could not clone the template database: {got}") from got
        return got

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """No CREATE or DROP DATABASE of the thread runs inside this block."""
        with self._cond:
            self._quiet += 1
            self._cond.wait_for(lambda: not self._busy)
        try:
            yield
        finally:
            with self._cond:
                self._quiet -= 1
                self._cond.notify_all()

    def drop(self, name: str) -> None:
        with self._cond:
            self._drops.append(name)
            self._cond.notify_all()

    def close(self) -> None:
        """Drop the clones no test took; returns once every drop is done."""
        with self._cond:
            self._wanted, self._closing = 0, True
            self._cond.notify_all()
        self._thread.join(timeout=300)
        leftover = [name for name in self._ready if isinstance(name, str)]
        with psycopg.connect(self._admin_url, autocommit=True) as conn:
            for name in leftover:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def _clones(pg_admin_url: str, template_database: str) -> Iterator[_Clones]:
    global _CLONES
    clones = _CLONES = _Clones(pg_admin_url, template_database)
    yield clones
    _CLONES = None
    clones.close()


_CLONES: _Clones | None = None  # the run's clone thread, for the quiet_horizon tests' bodies


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files that hold a test marked `slow` first, the rest in their order: a parallel run
    (scripts/pytest_parallel.sh, a file at a time per worker) then ends on short files rather than
    on one long one started last."""
    slow = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    if _CLONES is not None and item.get_closest_marker("quiet_horizon") is not None:
        with _CLONES.quiet():
            yield
    else:
        yield


@pytest.fixture
def database_url(pg_admin_url: str, _clones: _Clones) -> Iterator[str]:
    """A fresh database with the whole schema, for this test only."""
    name = _clones.take()
    yield _with_database(pg_admin_url, name)
    _clones.drop(name)


@pytest.fixture(scope="session")
def schema_url(pg_admin_url: str, _clones: _Clones) -> Iterator[str]:
    """One database with the whole schema shared by the tests that only read it (the catalog: columns,
    constraints, function texts), so that they take no clone each. Its sessions are read-only
    (default_transaction_read_only): a test that writes fails, and takes `database_url` instead."""
    name = _clones.take()
    url = _with_database(pg_admin_url, name)
    yield url + ("&" if "?" in url else "?") + "options=-c%20default_transaction_read_only%3Don"
    _clones.drop(name)


@pytest.fixture(scope="module")
def module_database_url(pg_admin_url: str, _clones: _Clones) -> Iterator[str]:
    """One fresh database for a module whose tests each leave nothing behind (every statement in a
    transaction rolled back), so that they take no clone each."""
    name = _clones.take()
    yield _with_database(pg_admin_url, name)
    _clones.drop(name)


@pytest.fixture
def empty_database_url(pg_admin_url: str) -> Iterator[str]:
    """A fresh database with no schema at all (for migration tests)."""
    name = f"sq_e_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield _with_database(pg_admin_url, name)
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pooler(pg_admin_url: str) -> Iterator[Any]:
    """With SESSIONQ_TEST_POOLER=pgbouncer: a real PgBouncer in transaction mode in front of the test
    server (tests/pgbouncer.py), through which the `store` and `worker` fixtures (so the `api`
    fixture) send their transactions; their LISTEN and leadership connections stay direct
    (database.directUrl). None otherwise."""
    mode = os.environ.get("SESSIONQ_TEST_POOLER", "")
    if not mode:
        yield None
        return
    import pgbouncer

    if mode != "pgbouncer":
        pytest.fail(f"SESSIONQ_TEST_POOLER={mode!r}: the only pooler is 'pgbouncer'")
    why = pgbouncer.available()
    if why:
        pytest.fail(f"SESSIONQ_TEST_POOLER=pgbouncer, but {why}")
    bouncer = pgbouncer.PgBouncer(pg_admin_url).start()
    yield bouncer
    bouncer.stop()


@pytest.fixture
def pooled_url(database_url: str, pooler: Any) -> str:
    """The test database as the stores' transactions reach it: through the pooler when there is one
    (then `database_url` is the direct URL), else `database_url` itself."""
    return str(pooler.url(database_url)) if pooler is not None else database_url


@pytest.fixture
async def aconn(database_url: str) -> AsyncIterator[psycopg.AsyncConnection]:
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        yield conn




# -- the running pieces: store, simulated runtime, workers, API -------------------------------------

from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

import grpc  # noqa: E402

from sessionq import config  # noqa: E402
from sessionq.db.store import Store  # noqa: E402


def make_settings(**overrides: Any) -> config.Settings:
    base = {
        "workers.pollInterval": 0.2,
        "workers.shutdownTimeout": 5.0,
        "auth.tokens": {"alice-token": "alice", "bob-token": "bob", "admin-token": "admin"},
        "auth.anonymousUser": "",
        "auth.admins": ["admin"],
        "runtime.simulator.workers": 64,
    }
    base.update(overrides)
    return config.defaults().with_overrides(**base)


@pytest.fixture
def settings() -> config.Settings:
    return make_settings()


@pytest.fixture
async def store(database_url: str, pooled_url: str) -> AsyncIterator[Store]:
    s = await Store.open(pooled_url, pool_size=8, direct_url=database_url)
    yield s
    await s.close()


# Clause areas whose clause-marked tests also run through the wire (issue 17): the `sim` they use
# is then the adapter (runtime.kind: substrate) talking to a served simulator, its test hooks
# going to the same database. By default one wire variant per clause id (the first test naming
# it); SESSIONQ_WIRE_ALL=1 runs every qualifying test through the wire as well.
WIRE_AREAS = ("CRE", "OP", "DEL", "SUS", "Q", "SNAP", "CKPT", "FORK", "TT")
_wire_clauses_seen: set[str] = set()


def _wire_clauses(definition: Any) -> list[str]:
    ids = [m.args[0] for m in definition.iter_markers("clause") if m.args]
    return [c for c in ids if c.split("-")[0] in WIRE_AREAS]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "substrate_kind" not in metafunc.fixturenames or metafunc.definition.get_closest_marker("real_substrate"):
        return
    clauses = _wire_clauses(metafunc.definition)
    if not clauses:
        return
    new = [c for c in clauses if c not in _wire_clauses_seen]
    if not new and not os.environ.get("SESSIONQ_WIRE_ALL"):
        return
    _wire_clauses_seen.update(clauses)
    metafunc.parametrize("substrate_kind", ["inproc", "wire"], indirect=True)


@pytest.fixture
def substrate_kind(request: pytest.FixtureRequest) -> str:
    return str(getattr(request, "param", "inproc"))


class WireSim:
    """The simulator as a test sees it through the wire: the Substrate methods go to the adapter
    (gRPC to a served simulator), the test hooks (inject, mutation_count, read_durable, ...) to
    an in-process simulator on the same database."""

    def __init__(self, local: Any, served: Served) -> None:
        object.__setattr__(self, "_local", local)
        object.__setattr__(self, "_served", served)

    def __getattr__(self, name: str) -> Any:
        from sessionq.runtime.simulator import PROTOCOL_METHODS

        if name in PROTOCOL_METHODS:
            return getattr(self._served.client, name)
        return getattr(self._local, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._local, name, value)
        setattr(self._served.served, name, value)  # e.g. taskstore_address: the served Actors report there


@contextlib.asynccontextmanager
async def simulator(database_url: str, *, wire: bool, extensions: bool = True) -> AsyncIterator[Any]:
    """The in-process simulator, or (`wire`) a WireSim over a served one; `extensions=False`: the
    served simulator plays a real Substrate."""
    from sessionq.runtime.simulator import SimulatedSubstrate

    s = SimulatedSubstrate(database_url, worker_pool_size=64)  # as make_settings: runtime.simulator.workers
    await s.open()
    try:
        if wire:
            # the executor's claim deadline bounds each call, as in process
            async with served_simulator(database_url, extensions=extensions, call_timeout=120.0) as served:
                yield WireSim(s, served)
        else:
            yield s
    finally:
        await s.close()


@pytest.fixture
async def sim(database_url: str, substrate_kind: str, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """The simulator a test drives: in process, or through the wire (`substrate_kind`); a test marked
    `real_substrate` always goes through the wire to a served simulator that plays a real Substrate."""
    real = request.node.get_closest_marker("real_substrate") is not None
    async with simulator(database_url, wire=real or substrate_kind == "wire", extensions=not real) as s:
        yield s


@dataclass
class Served:
    """A simulator served as ateapi.Control (its own SimulatedSubstrate on the same database), and
    the adapter (runtime.kind: substrate) talking to it."""

    client: Any
    served: Any  # the served SimulatedSubstrate (set its taskstore_address)
    address: str
    endpoints: Any
    database_url: str


@contextlib.asynccontextmanager
async def served_simulator(database_url: str, *, extensions: bool = True, **options: Any) -> AsyncIterator[Served]:
    """`extensions=False`: the server plays a real Substrate (no x-sessionq-* headers or trailers);
    the adapter then checks UIDs itself (uid_preflight)."""
    from sessionq.runtime.ateapi.actor_endpoint import ActorEndpoints
    from sessionq.runtime.ateapi.client import SubstrateClient, SubstrateOptions
    from sessionq.runtime.ateapi.server import start_server
    from sessionq.runtime.simulator import SimulatedSubstrate

    served = SimulatedSubstrate(database_url, worker_pool_size=64)
    await served.open()
    server, port, _ = await start_server(served, "127.0.0.1:0", extensions=extensions)
    endpoints = ActorEndpoints(served)
    await endpoints.start("127.0.0.1:0")
    opts = {"address": f"127.0.0.1:{port}", "call_timeout": 10.0, "uid_preflight": not extensions,
            "actor_address_pattern": endpoints.pattern, **options}
    client = SubstrateClient(SubstrateOptions(**opts))
    await client.open()
    try:
        yield Served(client, served, f"127.0.0.1:{port}", endpoints, database_url)
    finally:
        await client.close()
        await endpoints.stop()
        await server.stop(0)
        await served.close()


@pytest.fixture
async def served(database_url: str) -> AsyncIterator[Served]:
    async with served_simulator(database_url) as s:
        yield s


@contextlib.asynccontextmanager
async def running_worker(settings: config.Settings, url: str, store: Store, runtime: Any, name: str = "test-worker",
                         direct_url: str | None = None) -> AsyncIterator[None]:
    from sessionq.app.worker import run_worker

    stop = asyncio.Event()
    task = asyncio.create_task(run_worker(settings, url, store, runtime, stop=stop, name=name, direct_url=direct_url))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=30)


@pytest.fixture
async def worker(settings: config.Settings, database_url: str, pooled_url: str, store: Store, sim: Any
                 ) -> AsyncIterator[None]:
    async with running_worker(settings, pooled_url, store, sim, direct_url=database_url):
        yield


@dataclass
class Api:
    channel: grpc.aio.Channel
    address: str

    def md(self, user: str = "alice") -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {user}-token")]


@pytest.fixture
async def api(settings: config.Settings, store: Store, sim: Any, worker: None) -> AsyncIterator[Api]:
    from sessionq.api.server import ApiServer

    server = ApiServer(settings, store, address="127.0.0.1:0", runtime=sim)
    await server.start()
    address = f"127.0.0.1:{server.port}"
    sim.taskstore_address = address  # the simulated Actors report to this API
    channel = grpc.aio.insecure_channel(address)
    yield Api(channel, address)
    await channel.close()
    await server.stop(0)


async def apply_agent(store: Store, sim: Any, name: str = "my-first-agent", namespace: str = "kagent",
                      egress: list[dict[str, Any]] | None = None) -> Any:
    """Apply an Agent and prepare its revision in-line (no worker needed)."""
    from sessionq.domain.agents import compile_egress, parse_spec, prepare_revision

    spec = parse_spec({"name": name, "namespace": namespace, "egress": egress or []})
    await store.apply_agent(spec.namespace, spec.name, spec.to_json(), spec.spec_hash(), spec.image,
                            compile_egress(spec), "alice")
    agent = await store.get_agent(namespace, name)
    await prepare_revision(store, sim, agent.desired_revision_id)
    return await store.get_agent(namespace, name)
