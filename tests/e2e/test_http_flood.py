"""A slowloris against `sessionq serve`: a few thousand half-sent HTTP requests to the one API port
(server.address) and a few hundred to the metrics port while gRPC health and ListSessions, on new
connections to that same port, answer in normal time,
the console answers too, the API process's file descriptors and threads stay bounded and the
server closes the half-sent requests at server.httpHeaderTimeout (metrics: SCRAPE_TIMEOUT). A real `sessionq serve` process (its soft and hard RLIMIT_NOFILE set to
1024, a common default, so that an unbounded listener runs out of descriptors), real sockets on
loopback, a real database."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from test_serve_processes import TOKEN, env_for, free_port

from sessionq import metrics
from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc

FLOOD = 3000  # half-sent requests to server.address
METRICS_FLOOD = 400  # and to metrics.address
FD_LIMIT = 1024  # the API process's RLIMIT_NOFILE (soft and hard)
HEADER_TIMEOUT = 3.0
NORMAL = 5.0  # seconds a gRPC call may take on a loaded 2-core machine


def limit_fds() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


class Serve:
    """`sessionq serve --processes 1` (the API in this one process) with few file descriptors."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sessionq.cli.main", "serve", "--processes", "1"], env=env, cwd=cwd,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True, preexec_fn=limit_fds)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def threads(self) -> int:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)


async def grpc_calls(address: str) -> float:
    """Health and ListSessions on a new connection; the seconds they took."""
    started = time.monotonic()
    async with grpc.aio.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)]) as ch:
        r = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=NORMAL)
        assert r.status == health_pb2.HealthCheckResponse.SERVING
        await sessions_pb2_grpc.SessionServiceStub(ch).ListSessions(
            sessions_pb2.ListSessionsRequest(page=common_pb2.PageRequest(limit=5)),
            metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=NORMAL)
    return time.monotonic() - started


def half_sent_requests(port: int, count: int) -> list[socket.socket]:
    """`count` connections, each with the first line and half a header of a request, never finished."""
    socks = []
    for _ in range(count):
        s = socket.socket()
        s.setblocking(False)
        if s.connect_ex(("127.0.0.1", port)) not in (0, errno.EINPROGRESS):
            s.close()
            continue
        socks.append(s)
    deadline = time.monotonic() + 20
    pending = list(socks)
    while pending and time.monotonic() < deadline:  # send the half head on each once it connected
        still = []
        for s in pending:
            try:
                s.send(b"GET /api/a2a/kagent/x/.well-known/agent-card.json HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            except (BlockingIOError, OSError) as e:
                if isinstance(e, BlockingIOError) or e.errno in (errno.ENOTCONN, errno.EAGAIN):
                    still.append(s)
        pending = still
        if pending:
            time.sleep(0.05)
    return socks


def closed_by_server(socks: list[socket.socket]) -> int:
    """How many of the connections the server has ended (EOF or reset, after an answer or not)."""
    closed = 0
    for s in socks:
        try:
            while True:
                data = s.recv(65536)
                if not data:
                    closed += 1
                    break
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
    return closed


@pytest.mark.timeout(240)
async def test_a_slowloris_on_the_api_port_leaves_grpc_and_the_console_answering(database_url: str,
                                                                                   tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = FLOOD + METRICS_FLOOD + 500
    if hard < need:
        pytest.skip(f"this test needs {need} file descriptors, the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))
    port, console_port, metrics_port = free_port(), free_port(), free_port()
    address = f"127.0.0.1:{port}"
    env = env_for(database_url, port, SESSIONQ_SERVER__CONSOLE_ADDRESS=f"127.0.0.1:{console_port}",
                  SESSIONQ_SERVER__HTTP_HEADER_TIMEOUT=f"{HEADER_TIMEOUT}s", SESSIONQ_LOGGING__LEVEL="warning",
                  SESSIONQ_METRICS__ENABLED="true", SESSIONQ_METRICS__ADDRESS=f"127.0.0.1:{metrics_port}")
    serve = Serve(env, tmp_path)
    socks: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 90
        while True:
            with contextlib.suppress(grpc.aio.AioRpcError, AssertionError):
                await grpc_calls(address)
                break
            assert serve.proc.poll() is None and time.monotonic() < deadline, "\n".join(serve.lines[-40:])
            await asyncio.sleep(0.2)
        baseline, threads = serve.fds(), serve.threads()

        socks = await asyncio.to_thread(half_sent_requests, port, FLOOD)
        assert len(socks) >= FLOOD * 0.9
        socks += await asyncio.to_thread(half_sent_requests, metrics_port, METRICS_FLOOD)
        await asyncio.sleep(0.5)  # let the server accept what it will

        # gRPC on new connections to the flooded port (health, ListSessions on a database
        # connection: at the cap they close the oldest half-sent requests) and the console answer
        for _ in range(3):
            assert await grpc_calls(address) < NORMAL
        async with httpx.AsyncClient(timeout=NORMAL) as http:
            r = await http.get(f"http://127.0.0.1:{console_port}/login")
            assert r.status_code == 200
        # the flood holds a bounded number of the API process's descriptors and threads
        assert serve.fds() < baseline + (FD_LIMIT - 256) // 2 + metrics.MAX_SCRAPES + 16, (baseline, serve.fds())
        assert serve.threads() <= threads + metrics.MAX_SCRAPES + 8, (threads, serve.threads())

        # the half-sent requests are closed at the deadlines
        deadline = time.monotonic() + max(HEADER_TIMEOUT, metrics.SCRAPE_TIMEOUT) + 30
        while (closed := closed_by_server(socks)) < len(socks) * 0.95 and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
        assert closed >= len(socks) * 0.95, (closed, len(socks))
        assert await grpc_calls(address) < NORMAL
        assert serve.proc.poll() is None, "\n".join(serve.lines[-40:])
        # one line says connections were closed or refused at the cap (rate-limited), never one per
        # connection
        refused = [line for line in serve.lines if "refused a connection" in line or "closed the oldest" in line]
        assert 1 <= len(refused) <= 3, serve.lines[-20:]
    finally:
        for s in socks:
            s.close()
        serve.stop()


async def test_grpc_closes_connections_that_never_complete_their_handshake(store, sim) -> None:
    """The gRPC listener's counterpart of the head deadline: silent or half-sent connections are closed."""
    from conftest import make_settings

    from sessionq.api.server import ApiServer

    server = ApiServer(make_settings(**{"server.httpHeaderTimeout": 2.0}), store, address="127.0.0.1:0", runtime=sim)
    await server.start()
    socks = []
    try:
        for i in range(50):
            s = socket.create_connection(("127.0.0.1", server.port))
            s.setblocking(False)
            if i % 2:
                s.send(b"PRI * HTTP/2.0\r\n")  # half the HTTP/2 preface
            socks.append(s)
        deadline = time.monotonic() + 30
        while (closed := closed_by_server(socks)) < len(socks) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert closed == len(socks)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as ch:  # a real client still gets in
            r = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=NORMAL)
            assert r.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        for s in socks:
            s.close()
        await server.stop(0)
