"""Issue 15, item 5: when PostgreSQL goes away, calls in flight fail fast and the processes stop.

Every test runs real `sessionq` processes on a PostgreSQL it may kill: its own embedded server
(PostgreSQL 18, in a temporary directory) whatever SESSIONQ_TEST_DATABASE_URL says, because the
suite's shared server must not be killed. "Killed" is SIGKILL to the postmaster: no shutdown, the
clients' connections break and new ones are refused.

- Calls in flight (a CreateSession waiting for its outcome with no worker, a SendMessage waiting
  for its turn) and calls made afterwards (GetSession) answer UNAVAILABLE "retry the same call"
  within about a second, not at their deadline or the pool's timeout.
- `sessionq serve`, `sessionq worker` and `sessionq up` whose PostgreSQL was killed underneath
  exit on one SIGINT/SIGTERM within workers.shutdownTimeout plus a small margin, and a second
  signal forces the stop at once (exit status 1, one line saying what was forced); no process of
  theirs stays behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from conftest import apply_agent
from lifecycle import AGENT, ready_session

from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc
from sessionq.db import embedded, migrate
from sessionq.db.store import Store
from sessionq.runtime.simulator import SimulatedSubstrate, install_schema
from tests.ports import free_port

SHUTDOWN_TIMEOUT = 3.0  # workers.shutdownTimeout of the processes under test
STOP_MARGIN = 5.0  # what a stop may take beyond it (shutdown.FORCE_AFTER + shutdown.FORCE_BUDGET, plus slack)
FAST = 2.0  # "within about a second" of the connection loss, with slack for a loaded 2-core machine
START_TIMEOUT = 90.0
TOKEN = "shutdown-token"


def members(session_id: int) -> list[str]:
    """The processes of a session (its leader's pid), as "pid command" lines."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) == session_id and fields[0] != "Z":  # fields: state ppid pgrp session ...
            found.append(f"{entry.name} {cmdline}")
    return found


def wait_no_members(session_id: int, timeout: float = 10.0) -> list[str]:
    """The session's processes still alive after `timeout` (the postmaster's children notice its
    death within moments)."""
    deadline = time.monotonic() + timeout
    while (left := members(session_id)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def postgres_processes(data_dir: Path) -> list[str]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if "postgres" in cmdline and str(data_dir) in cmdline:
                    out.append(f"{entry.name} {cmdline.strip()}")
    return out


def kill_postmaster(pgdata: Path) -> int:
    pid = int((pgdata / "postmaster.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    return pid


class Process:
    """A `sessionq` command in its own session (so that nothing it starts escapes the check),
    its output collected by a thread."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path) -> None:
        self.args = args
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sessionq.cli.main", *args], env=env, cwd=cwd, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines[-80:])

    def wait_for_line(self, text: str, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            if self.proc.poll() is not None:
                pytest.fail(f"sessionq {self.args[0]} exited {self.proc.returncode} while starting:\n{self.output}")
            if time.monotonic() > deadline:
                pytest.fail(f"sessionq {self.args[0]} did not print {text!r} within {timeout:g}s:\n{self.output}")
            time.sleep(0.05)

    def signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, sig)

    def wait_exit(self, timeout: float) -> int | None:
        """The exit status, or None if it is still running after `timeout`."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self._reader.join(5)
        return code

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)


def base_env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONQ_")}
    env.update(
        PYTHONUNBUFFERED="1",
        SESSIONQ_WORKERS__SHUTDOWN_TIMEOUT=f"{SHUTDOWN_TIMEOUT:g}s",
        SESSIONQ_WORKERS__POLL_INTERVAL="0.5s",
        SESSIONQ_SERVER__ADDRESS=f"127.0.0.1:{free_port()}",
        SESSIONQ_SERVER__HTTP_ADDRESS=f"127.0.0.1:{free_port()}",
        SESSIONQ_SERVER__PROCESSES="1",  # one API process's shutdown (several: tests/e2e/test_serve_processes.py)
        SESSIONQ_LOGGING__LEVEL="info",
        SESSIONQ_LOGGING__FORMAT="text",
    )
    env.update(settings)
    return env


def stop_and_check(process: Process, signals: list[signal.Signals], *, within: float) -> tuple[int, float]:
    """Send `signals` (the next one only if the process is still running a moment later), then
    wait for the exit; returns (exit status, seconds from the first signal). Fails if the process
    is still running `within` seconds after the first signal or leaves a process behind."""
    started = time.monotonic()
    code: int | None = None
    for i, sig in enumerate(signals):
        process.signal(sig)
        code = process.wait_exit(0.5 if i < len(signals) - 1 else within - (time.monotonic() - started))
        if code is not None:
            break
    took = time.monotonic() - started
    if code is None:
        process.kill()
        pytest.fail(f"sessionq {process.args[0]} still ran {took:.1f}s after {'+'.join(s.name for s in signals)}:\n"
                    f"{process.output}")
    left = wait_no_members(process.proc.pid)
    assert not left, f"processes of sessionq {process.args[0]} outlived it: {left}"
    return code, took


# -- a PostgreSQL that may be killed ----------------------------------------------------------------

@dataclass
class Doomed:
    server: embedded.EmbeddedPostgres
    pgdata: Path

    @property
    def url(self) -> str:
        return self.server.url


@pytest.fixture
def doomed_pg() -> Iterator[Doomed]:
    """A dedicated embedded server with the schema (whatever server the rest of the suite uses)."""
    data = Path(tempfile.mkdtemp(prefix="sq-doomed-"))  # short: the socket lives inside
    server = embedded.start(data, cleanup="stop", max_connections=50)  # no restart to raise it
    try:
        migrate.upgrade(server.url)
        asyncio.run(install_schema(server.url))
        yield Doomed(server, data / "pgdata")
    finally:
        with contextlib.suppress(Exception):
            server.stop()
        for line in postgres_processes(data):  # a killed postmaster's children go by themselves
            with contextlib.suppress(ValueError, ProcessLookupError):
                os.kill(int(line.split()[0]), signal.SIGKILL)
        shutil.rmtree(data, ignore_errors=True)


@pytest.fixture
async def doomed_store(doomed_pg: Doomed) -> AsyncIterator[tuple[Store, SimulatedSubstrate]]:
    store = await Store.open(doomed_pg.url, pool_size=2, listen=False)
    sim = SimulatedSubstrate(doomed_pg.url, worker_pool_size=8)
    await sim.open()
    try:
        yield store, sim
    finally:
        await sim.close()
        await store.close(timeout=0)


# -- calls in flight --------------------------------------------------------------------------------

async def until(predicate: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        assert time.monotonic() < deadline, "timed out waiting for the calls to be admitted"
        await asyncio.sleep(0.05)


async def timed(call: Any) -> tuple[grpc.StatusCode, str, float]:
    """Await a gRPC call: (status, details, when it ended as time.monotonic())."""
    try:
        await call
        return grpc.StatusCode.OK, "", time.monotonic()
    except grpc.aio.AioRpcError as e:
        return e.code(), e.details() or "", time.monotonic()


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_calls_in_flight_answer_unavailable_within_a_second_of_postgresql_dying(
    doomed_pg: Doomed, doomed_store: tuple[Store, SimulatedSubstrate], tmp_path: Path
) -> None:
    store, sim = doomed_store
    await apply_agent(store, sim)
    ready = await ready_session(store, sim, "shutdown-ready", user="alice")
    env = base_env(SESSIONQ_DATABASE__URL=doomed_pg.url, SESSIONQ_AUTH__TOKENS=f"{TOKEN}=alice")
    serve = Process(["serve"], env, tmp_path)  # the API only: no worker ever runs the admitted work
    try:
        address = env["SESSIONQ_SERVER__ADDRESS"]
        channel = grpc.aio.insecure_channel(address)
        await asyncio.wait_for(channel.channel_ready(), START_TIMEOUT)
        md = [("authorization", f"Bearer {TOKEN}")]
        sessions = sessions_pb2_grpc.SessionServiceStub(channel)
        a2a = a2a_pb2_grpc.A2AServiceStub(channel)
        request_id = f"in-flight-{uuid.uuid4()}"
        create = asyncio.ensure_future(timed(sessions.CreateSession(
            sessions_pb2.CreateSessionRequest(request_id=request_id, agent=common_pb2.ResourceReference(
                namespace="kagent", name=AGENT)), metadata=md, timeout=60)))
        send = asyncio.ensure_future(timed(a2a.SendMessage(
            a2a_pb2.SendMessageRequest(tenant=f"kagent/{AGENT}", message=a2a_pb2.Message(
                message_id=str(uuid.uuid4()), context_id=str(ready.id), role=a2a_pb2.ROLE_USER,
                parts=[a2a_pb2.Part(text="are you there?")])), metadata=md, timeout=60)))

        async def admitted() -> bool:  # both calls now wait: the creation's generation, the turn's dispatch
            async with await psycopg.AsyncConnection.connect(doomed_pg.url, autocommit=True) as conn:
                cur = await conn.execute(
                    "SELECT (SELECT count(*) FROM sessionq.sessions WHERE request_id = %s AND operation = 'CREATE'),"
                    " (SELECT dispatch_id IS NOT NULL FROM sessionq.sessions WHERE id = %s)", (request_id, ready.id))
                row = await cur.fetchone()
            return row is not None and row[0] == 1 and bool(row[1])

        await until(admitted)
        await asyncio.sleep(0.3)  # past the admissions' own reads: they wait for NOTIFY now
        assert not create.done() and not send.done(), (create, send)

        killed_at = time.monotonic()
        kill_postmaster(doomed_pg.pgdata)
        for name, call in (("CreateSession", create), ("SendMessage", send)):
            code, details, ended = await call
            assert code == grpc.StatusCode.UNAVAILABLE, (name, code, details)
            assert "database is unavailable" in details, (name, details)
            assert ended - killed_at < FAST, f"{name} answered {ended - killed_at:.2f}s after PostgreSQL died"

        # calls made afterwards, one after another and together: none waits out the pool's timeout
        get = sessions_pb2.GetSessionRequest(session_id=str(ready.id))
        for _ in range(3):
            started = time.monotonic()
            code, details, ended = await timed(sessions.GetSession(get, metadata=md, timeout=30))
            assert code == grpc.StatusCode.UNAVAILABLE and "retry the same call" in details, (code, details)
            assert ended - started < FAST, f"GetSession answered after {ended - started:.2f}s"
        started = time.monotonic()
        results = await asyncio.gather(*(timed(sessions.GetSession(get, metadata=md, timeout=30)) for _ in range(8)))
        assert {r[0] for r in results} == {grpc.StatusCode.UNAVAILABLE}, results
        assert max(r[2] for r in results) - started < FAST, [round(r[2] - started, 2) for r in results]
        await channel.close()

        code, _ = stop_and_check(serve, [signal.SIGINT], within=SHUTDOWN_TIMEOUT + STOP_MARGIN)
        assert code == 0, serve.output  # nothing was in flight: a graceful stop
    finally:
        serve.kill()


# -- the store's pool: fail fast when the database is gone, wait when it is merely busy --------------

async def test_a_busy_pool_keeps_its_normal_timeout(database_url: str) -> None:
    """The database accepts connections: a caller waits for a busy pool as long as it takes (well
    beyond FAIL_FAST), and gets its connection."""
    from sessionq.db.connection import FAIL_FAST

    store = await Store.open(database_url, pool_size=2, listen=True)
    release = asyncio.Event()
    held = asyncio.Event()
    holders = 0

    async def hold() -> None:
        nonlocal holders
        async with store.pool.connection():
            holders += 1
            if holders == 2:
                held.set()
            await release.wait()

    try:
        tasks = [asyncio.create_task(hold()) for _ in range(2)]
        await asyncio.wait_for(held.wait(), 10)
        started = time.monotonic()
        waiter = asyncio.create_task(store.get_task("no-such-task"))
        await asyncio.sleep(FAIL_FAST * 3)
        assert not waiter.done()  # still waiting its turn, not failed
        release.set()
        assert await asyncio.wait_for(waiter, 10) is None
        assert time.monotonic() - started >= FAIL_FAST * 3
        assert not store.health.down
        await asyncio.gather(*tasks)
    finally:
        release.set()
        await store.close()


async def test_a_caller_already_waiting_for_a_connection_fails_fast_when_postgresql_dies(
    doomed_pg: Doomed,
) -> None:
    """Every pooled connection is taken and a caller waits for one (with the pool's 30 s timeout)
    when PostgreSQL dies: the LISTEN connection's loss and failed reconnection fail it within about
    a second, as PoolTimeout (which the API answers with UNAVAILABLE)."""
    from psycopg_pool import PoolTimeout

    store = await Store.open(doomed_pg.url, pool_size=2, listen=True)
    release = asyncio.Event()
    taken = 0
    all_taken = asyncio.Event()

    async def hold() -> None:
        nonlocal taken
        with contextlib.suppress(psycopg.Error):
            async with store.pool.connection():
                taken += 1
                if taken == 2:
                    all_taken.set()
                await release.wait()

    holders = [asyncio.create_task(hold()) for _ in range(2)]
    try:
        await asyncio.wait_for(all_taken.wait(), 10)
        waiter = asyncio.create_task(store.get_task("no-such-task"))
        await asyncio.sleep(0.3)
        assert not waiter.done()
        killed_at = time.monotonic()
        kill_postmaster(doomed_pg.pgdata)
        with pytest.raises(PoolTimeout, match="refuses connections"):
            await asyncio.wait_for(waiter, 30)
        assert time.monotonic() - killed_at < FAST
        assert store.health.down
    finally:
        release.set()
        await asyncio.gather(*holders)
        await store.close(timeout=0)


# -- processes: one signal stops them, a second forces the stop ---------------------------------------

@pytest.mark.slow
@pytest.mark.timeout(180)
def test_worker_whose_postgresql_died_stops_on_sigterm(doomed_pg: Doomed, tmp_path: Path) -> None:
    env = base_env(SESSIONQ_DATABASE__URL=doomed_pg.url)
    worker = Process(["worker"], env, tmp_path)
    try:
        worker.wait_for_line("started (procrastinate worker")
        kill_postmaster(doomed_pg.pgdata)
        time.sleep(1.0)  # the worker notices: its connections break, reconnections are refused
        code, _ = stop_and_check(worker, [signal.SIGTERM], within=SHUTDOWN_TIMEOUT + STOP_MARGIN)
        # 0: drained; 1: forced at the timeout, e.g. while a job's end was still being recorded
        # (WorkerJobManager retries that through an outage); a forced stop says so
        assert code == 0 or (code == 1 and "forced stop (the graceful stop was still running" in worker.output), \
            worker.output
    finally:
        worker.kill()


def start_up(home: Path, shutdown_timeout: float = SHUTDOWN_TIMEOUT) -> tuple[Process, Path]:
    """`sessionq up` in `home` (data under home/.sessionq); returns it and its pgdata."""
    env = base_env(XDG_CONFIG_HOME=str(home / "config"),
                   SESSIONQ_WORKERS__SHUTDOWN_TIMEOUT=f"{shutdown_timeout:g}s")
    # the simulator, pinned: the tests inject faults into its runtime calls
    up = Process(["up", "--data-dir", str(home / ".sessionq"), "--runtime", "simulator"], env, home)
    up.wait_for_line("API endpoint")
    return up, home / ".sessionq" / "pgdata"


@pytest.fixture
def up_home() -> Iterator[Path]:
    home = Path(tempfile.mkdtemp(prefix="sq-up-"))  # short: the socket lives in it
    yield home
    for line in postgres_processes(home):
        with contextlib.suppress(ValueError, ProcessLookupError):
            os.kill(int(line.split()[0]), signal.SIGKILL)
    shutil.rmtree(home, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("signals", [[signal.SIGINT], [signal.SIGTERM, signal.SIGTERM]], ids=["SIGINT", "SIGTERMx2"])
def test_up_whose_postgresql_was_killed_stops_on_a_signal(up_home: Path, signals: list[signal.Signals]) -> None:
    up, pgdata = start_up(up_home)
    try:
        kill_postmaster(pgdata)
        time.sleep(1.0)  # its connections break; the workers and the API find the server gone
        code, _ = stop_and_check(up, signals, within=SHUTDOWN_TIMEOUT + STOP_MARGIN)
        assert code == 0 or (code == 1 and "forced stop" in up.output), up.output  # a forced stop says so
        left = wait_for_no_postgres(up_home)
        assert not left, f"PostgreSQL processes outlived sessionq up: {left}"
    finally:
        up.kill()


def wait_for_no_postgres(data_dir: Path, timeout: float = 15.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while (left := postgres_processes(data_dir)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_a_second_signal_forces_the_stop_of_up(up_home: Path) -> None:
    """A job is stuck in a runtime call and workers.shutdownTimeout is long: the first SIGTERM's
    graceful stop waits for it; the second forces the stop at once - exit status 1, one line
    saying what was forced - and the embedded PostgreSQL stops too."""
    import yaml

    up, _pgdata = await asyncio.to_thread(start_up, up_home, 120.0)
    try:
        url = yaml.safe_load((up_home / ".sessionq" / "client.yaml").read_text())["databaseUrl"]
        store = await Store.open(url, pool_size=2, listen=False)
        sim = SimulatedSubstrate(url, worker_pool_size=8)
        await sim.open()
        try:
            block = await sim.inject("create_actor", "block")
            await apply_agent(store, sim)
            await store.admit_create("alice", "stuck-create", "kagent", AGENT, "")
            await sim.wait_blocked(block, timeout=30)  # up's worker runs the creation, stuck in create_actor
        finally:
            await sim.close()
            await store.close()

        started = time.monotonic()
        up.signal(signal.SIGTERM)
        assert await asyncio.to_thread(up.wait_exit, 1.5) is None, f"no graceful wait for the stuck job:\n{up.output}"
        up.signal(signal.SIGTERM)
        code = await asyncio.to_thread(up.wait_exit, 2.0 + STOP_MARGIN)
        took = time.monotonic() - started
        assert code == 1, f"exit {code} {took:.1f}s after the first SIGTERM:\n{up.output}"
        forced = [line for line in up.lines if "forced stop" in line]
        assert len(forced) == 1 and "a second signal (SIGTERM)" in forced[0], up.output
        assert "the embedded PostgreSQL told to stop" in forced[0], forced
        left = await asyncio.to_thread(wait_no_members, up.proc.pid)
        assert not left, f"processes of sessionq up outlived it: {left}"
        left = await asyncio.to_thread(wait_for_no_postgres, up_home)
        assert not left, f"the embedded PostgreSQL outlived a forced stop: {left}"
    finally:
        up.kill()


STUCK = '''
import asyncio, logging, sys, time
from sessionq.app import shutdown as stopping

async def main() -> int:
    shutdown = stopping.Shutdown(float(sys.argv[1]))
    shutdown.install()
    shutdown.on_force("the test's action done", lambda: print("ACTION", flush=True))
    print("READY", flush=True)
    try:
        await shutdown.stop.wait()
        if sys.argv[2] == "loop":
            time.sleep(3600)  # the event loop itself is stuck
        await asyncio.sleep(3600)  # a graceful stop that never ends
    except asyncio.CancelledError:
        if shutdown.forced is None:
            raise
        if sys.argv[2] == "unwind":
            await asyncio.sleep(3600)  # and neither does the forced stop's unwinding
        return stopping.EXIT_FORCED
    return 0

logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(message)s")
sys.exit(asyncio.run(main()))
'''


@pytest.mark.parametrize("stuck", ["stop", "unwind", "loop"])
def test_a_graceful_stop_still_running_after_the_shutdown_timeout_is_forced(tmp_path: Path, stuck: str) -> None:
    """The escalation by time, whatever hangs: the graceful stop (forced after workers.shutdownTimeout
    + FORCE_AFTER), also the forced stop's own unwinding (the process exits FORCE_BUDGET later),
    even an event loop that no longer runs (the same deadline, from a thread)."""
    from sessionq.app.shutdown import FORCE_AFTER, FORCE_BUDGET

    timeout = 1.0
    script = tmp_path / "stuck.py"
    script.write_text(STUCK)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, str(script), str(timeout), stuck], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY"
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        expected = timeout + FORCE_AFTER + (0 if stuck == "stop" else FORCE_BUDGET)
        code = proc.wait(expected + 5)
        took = time.monotonic() - started
        output = proc.stdout.read()
        assert code == 1, output
        assert expected - 0.5 <= took <= expected + 3, (took, output)
        forced = [line for line in output.splitlines() if "forced stop" in line]
        assert len(forced) == 1 and f"still running after {timeout + FORCE_AFTER:g}s" in forced[0], output
        assert "the test's action done" in forced[0] and "ACTION" in output.splitlines(), output
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
