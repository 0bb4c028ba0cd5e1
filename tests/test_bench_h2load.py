"""The `read` benchmark's cheap client (tests/bench/h2load.py) and its socket accounting
(tests/bench/common.py): against the real bare servicer, h2load's calls are counted OK only when
the server really answered them, and the listening and accepted sockets of a port are found."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from sessionq._pb.kagent.api.v1alpha1 import sessions_pb2, sessions_pb2_grpc
from tests.bench import h2load
from tests.bench.bare_server import Bare
from tests.bench.common import connections_by_process, free_port, listening_sockets

REPO = Path(__file__).resolve().parents[1]
SERVICE = "/kagent.api.v1alpha1.SessionService"


@pytest.fixture
def bare() -> Iterator[tuple[int, int]]:
    """The bare servicer in its own process: (port, pid)."""
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "tests.bench.bare_server", str(port)], cwd=REPO)
    try:
        deadline = time.monotonic() + 30
        while listening_sockets(port) < 1:
            assert p.poll() is None, "the bare servicer exited"
            assert time.monotonic() < deadline, "the bare servicer did not listen"
            time.sleep(0.1)
        yield port, p.pid
    finally:
        p.terminate()
        p.wait(10)


def _run(tmp_path: Path, port: int, method: str, body: bytes) -> tuple[str, Path]:
    exe = h2load.binary()
    if exe is None:
        pytest.skip("h2load is not installed (Debian package nghttp2-client)")
    (tmp_path / "body").write_bytes(body)
    log = tmp_path / "log"
    args = h2load.command(exe, f"127.0.0.1:{port}", f"{SERVICE}/{method}", tmp_path / "body", "t", connections=4,
                          streams=2, seconds=1.5, log_file=log)
    r = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout, log


def test_h2load_calls_of_a_real_method_are_all_ok(tmp_path: Path, bare: tuple[int, int]) -> None:
    port, _ = bare
    request = sessions_pb2.GetSessionRequest(session_id="00000000-0000-0000-0000-000000000001")
    frame = h2load.grpc_frame(request)
    assert frame[0] == 0 and int.from_bytes(frame[1:5], "big") == len(frame) - 5
    expected = 5 + len(Bare().get.SerializeToString())
    out, log = _run(tmp_path, port, "GetSession", frame)
    got = h2load.parse(out, log, expected, warmup=0.3, seconds=1.0)
    assert got["h2load"]["every_call_ok"] is True, got["h2load"]
    assert got["calls"] > 0 and got["codes"] == {"OK": got["calls"]}
    assert 0 < got["p50_ms"] <= got["p99_ms"]
    # the window is a part of the run: fewer calls than h2load made in all
    assert got["calls"] < got["h2load"]["done"]


def test_h2load_calls_that_grpc_refuses_are_not_counted_ok(tmp_path: Path, bare: tuple[int, int]) -> None:
    """An unknown method answers HTTP 200 with grpc-status UNIMPLEMENTED in its trailers: h2load
    calls it a success, the bytes say no answer came."""
    port, _ = bare
    out, log = _run(tmp_path, port, "NoSuchMethod", h2load.grpc_frame(sessions_pb2.GetSessionRequest()))
    got = h2load.parse(out, log, 5 + len(Bare().get.SerializeToString()), warmup=0.3, seconds=1.0)
    assert got["h2load"]["succeeded_http"] > 0  # what h2load alone would report
    assert got["h2load"]["every_call_ok"] is False
    assert got["codes"]["not OK"] == got["calls"] > 0


def test_listening_sockets_count_listeners_not_reservations() -> None:
    """As the supervisor's port: one socket only bound (its reservation), then listeners that
    join it with SO_REUSEPORT one by one (the API processes)."""
    socks = [socket.socket() for _ in range(3)]
    try:
        for s in socks:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        socks[0].bind(("127.0.0.1", 0))
        port = socks[0].getsockname()[1]
        assert listening_sockets(port) == 0
        for i, s in enumerate(socks[1:], start=1):
            s.bind(("127.0.0.1", port))
            s.listen()
            assert listening_sockets(port) == i
    finally:
        for s in socks:
            s.close()


def test_accepted_connections_are_counted_by_the_process_holding_them(bare: tuple[int, int]) -> None:
    port, pid = bare
    assert listening_sockets(port) == 1
    channels = [grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in range(3)]
    try:
        for ch in channels:
            sessions_pb2_grpc.SessionServiceStub(ch).GetSession(sessions_pb2.GetSessionRequest(), timeout=10)
        # the clients' ends are this process's sockets, but their local port is not the server's
        assert connections_by_process(port, {"bare": pid, "this": os.getpid()}) == {"bare": 3, "this": 0}
    finally:
        for ch in channels:
            ch.close()
