"""`sessionq serve --processes N` (issue 23): N API processes on one port (SO_REUSEPORT), each
with its own pool, supervised: a killed one comes back, SIGTERM stops them all with status 0, an
address taken by another program is told in one line. Real processes, real gRPC, a real database."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import psycopg
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc
from tests.ports import free_port

TOKEN = "procs-token"
START_TIMEOUT = 90.0


def api_children(parent: int) -> dict[int, int]:
    """API index -> pid of `parent`'s live child API processes (`serve --api-index I`)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == parent and fields[0] != "Z" and b"--api-index" in args:
            out[int(args[args.index(b"--api-index") + 1])] = int(entry.name)
    return out


class Serve:
    """`sessionq serve` in its own session, its output collected by a thread."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sessionq.cli.main", "serve", *args], env=env, cwd=cwd, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines[-60:])

    def children(self) -> dict[int, int]:
        """API index -> pid of the supervisor's live API processes."""
        return api_children(self.proc.pid)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in self.children().values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def env_for(url: str, port: int, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONQ_")}
    env.update(PYTHONUNBUFFERED="1", SESSIONQ_DATABASE__URL=url, SESSIONQ_SERVER__ADDRESS=f"127.0.0.1:{port}",
               SESSIONQ_SERVER__HTTP_ADDRESS=f"127.0.0.1:{free_port()}", SESSIONQ_AUTH__TOKENS=f"{TOKEN}=alice",
               SESSIONQ_LOGGING__FORMAT="text", SESSIONQ_LOGGING__LEVEL="info",
               SESSIONQ_WORKERS__SHUTDOWN_TIMEOUT="3s")
    env.update(extra)
    return env


async def serving(address: str) -> bool:
    async with grpc.aio.insecure_channel(address) as ch:
        try:
            r = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=1)
            return r.status == health_pb2.HealthCheckResponse.SERVING
        except grpc.aio.AioRpcError:
            return False


async def until(what: str, predicate, timeout: float, serve: Serve) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        if serve.proc.poll() is not None:
            pytest.fail(f"serve exited {serve.proc.returncode} while waiting for {what}:\n{serve.output}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}:\n{serve.output}")
        await asyncio.sleep(0.1)


async def list_on_new_connection(address: str) -> None:
    """One ListSessions call on a channel of its own (a new TCP connection, which the kernel gives
    to one of the API processes)."""
    async with grpc.aio.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)]) as ch:
        r = await sessions_pb2_grpc.SessionServiceStub(ch).ListSessions(
            sessions_pb2.ListSessionsRequest(page=common_pb2.PageRequest(limit=5)),
            metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=10)
        assert len(r.sessions) == 0


def established_on(pid: int, port: int, state: str = "01") -> int:
    """TCP sockets of process `pid` whose local port is `port`, in `state` (01: accepted
    connections; 0A: listening)."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                f = line.split()
                if int(f[1].rsplit(":", 1)[1], 16) == port and f[3] == state and f[9] in inodes:
                    count += 1
    return count


async def pool_connections(url: str) -> dict[int, int]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute("SELECT client_port, count(*) FROM pg_stat_activity WHERE datname = current_database()"
                                 " AND application_name = 'sessionq' GROUP BY 1")
        return {r[0]: r[1] for r in await cur.fetchall()}


@pytest.mark.timeout(300)
async def test_processes_share_the_port_a_killed_one_returns_and_sigterm_stops_all(database_url: str,
                                                                                   tmp_path: Path) -> None:
    port = free_port()
    address = f"127.0.0.1:{port}"
    serve = Serve(["--processes", "2"], env_for(database_url, port), tmp_path)
    try:
        await until("two API processes", lambda: len(serve.children()) == 2, START_TIMEOUT, serve)
        await until("SERVING", lambda: serving(address), START_TIMEOUT, serve)
        first = serve.children()
        # the second process starts once the first serves: wait until both listen
        await until("both processes listening", lambda: all(
            established_on(pid, port, "0A") for pid in serve.children().values()), START_TIMEOUT, serve)
        first = serve.children()
        # many new connections: the kernel spreads them over both processes (SO_REUSEPORT), and each
        # process answers from its own pool
        # (a local subchannel pool: channels of one process share one connection otherwise)
        channels = [grpc.aio.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
                    for _ in range(24)]
        try:
            stubs = [sessions_pb2_grpc.SessionServiceStub(c) for c in channels]
            await asyncio.gather(*(s.ListSessions(sessions_pb2.ListSessionsRequest(), timeout=10,
                                                  metadata=(("authorization", f"Bearer {TOKEN}"),)) for s in stubs))
            per_process = {i: established_on(pid, port) for i, pid in first.items()}
            assert all(n > 0 for n in per_process.values()), per_process
            assert sum(per_process.values()) >= 24, per_process
        finally:
            for c in channels:
                await c.close()

        # one dies: the supervisor starts it again; calls keep being answered meanwhile
        victim = first[1]
        os.kill(victim, signal.SIGKILL)
        await until("API process 1 restarted", lambda: serve.children().get(1) not in (None, victim), 30, serve)
        assert serve.children()[0] == first[0]
        await until("SERVING again", lambda: serving(address), START_TIMEOUT, serve)
        for _ in range(6):
            await list_on_new_connection(address)
        assert any("API process 1" in line and "restarting" in line for line in serve.lines), serve.output

        # SIGTERM: every API process stops gracefully, the supervisor exits 0, nothing is left
        children = list(serve.children().values())
        os.kill(serve.proc.pid, signal.SIGTERM)
        code = await asyncio.to_thread(serve.proc.wait, 30)
        assert code == 0, serve.output
        await asyncio.sleep(0.2)
        assert not [pid for pid in children if alive(pid)], serve.output
        assert not await pool_connections(database_url)
    finally:
        serve.kill()


@pytest.mark.timeout(120)
async def test_a_taken_port_is_told_in_one_line(database_url: str, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        serve = Serve(["--processes", "2"], env_for(database_url, port), tmp_path)
        try:
            code = await asyncio.to_thread(serve.proc.wait, 60)
        finally:
            serve.kill()
    assert code != 0
    assert any(line.startswith("error: cannot listen on") and "server.address" in line for line in serve.lines), (
        serve.output)
    assert "Traceback" not in serve.output


@pytest.mark.timeout(120)
async def test_processes_default_and_one(database_url: str, tmp_path: Path) -> None:
    """server.processes 1 is one plain API process (no supervisor); a supervised one started by hand
    with --api-index serves alone too."""
    port = free_port()
    serve = Serve([], env_for(database_url, port, SESSIONQ_SERVER__PROCESSES="1"), tmp_path)
    try:
        await until("SERVING", lambda: serving(f"127.0.0.1:{port}"), START_TIMEOUT, serve)
        assert serve.children() == {}
        os.kill(serve.proc.pid, signal.SIGTERM)
        assert await asyncio.to_thread(serve.proc.wait, 30) == 0
    finally:
        serve.kill()
