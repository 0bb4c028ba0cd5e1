"""`sessionq up` with server.processes (issue 23): one API process unless configured; with
`processes: 2` a second API process (`serve --api-index 1`) serves beside up's own on the one port
(SO_REUSEPORT), each answering calls, and SIGTERM to `up` stops both with status 0, no child left."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import grpc
import pytest
from test_serve_processes import alive, api_children, established_on
from test_tutorial import STOP_TIMEOUT, Shell, Up, free_port, servers, shell  # noqa: F401 (fixtures)

from sessionq import config
from sessionq._pb.kagent.api.v1alpha1 import sessions_pb2, sessions_pb2_grpc
from sessionq.app.supervisor import up_process_count


def wait_for(what: str, predicate, up: Up, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if up.proc.poll() is not None:
            pytest.fail(f"sessionq up exited {up.proc.returncode} while waiting for {what}:\n{up.output}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}:\n{up.output}")
        time.sleep(0.1)


def test_up_keeps_one_api_process_unless_configured() -> None:
    assert up_process_count(config.defaults()) == 1  # serve's default 0 (one per CPU) is one in up
    assert up_process_count(config.defaults().with_overrides(**{"server.processes": 1})) == 1
    assert up_process_count(config.defaults().with_overrides(**{"server.processes": 3})) == 3


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_up_with_two_processes_serves_from_both_and_sigterm_stops_all(shell: Shell, servers: list[Up]) -> None:  # noqa: F811
    shell.env.update(SESSIONQ_SERVER__PROCESSES="2", SESSIONQ_SERVER__HTTP_ADDRESS=f"127.0.0.1:{free_port()}",
                     SESSIONQ_SERVER__CONSOLE_ADDRESS=f"127.0.0.1:{free_port()}")
    up = Up(shell)
    servers.append(up)
    up.wait_ready()
    port = shell.port
    wait_for("API process 1", lambda: 1 in api_children(up.proc.pid), up)
    child = api_children(up.proc.pid)[1]
    wait_for("API process 1 listening", lambda: established_on(child, port, "0A") > 0, up)
    assert f"API processes : 2 on 127.0.0.1:{port}" in up.output, up.output

    # new connections (one per channel, a local subchannel pool each) are spread by the kernel over
    # both processes; every call is answered, so both serve
    address = f"127.0.0.1:{port}"
    channels = [grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)]) for _ in range(24)]
    try:
        for ch in channels:
            sessions_pb2_grpc.SessionServiceStub(ch).ListSessions(sessions_pb2.ListSessionsRequest(), timeout=20)
        answered = {pid: established_on(pid, port) for pid in (up.proc.pid, child)}
        assert all(n > 0 for n in answered.values()), answered
        assert sum(answered.values()) >= 24, answered
    finally:
        for ch in channels:
            ch.close()

    # SIGTERM to up alone: it stops its other API process gracefully, then itself and PostgreSQL
    os.kill(up.proc.pid, signal.SIGTERM)
    try:
        code = up.proc.wait(STOP_TIMEOUT + 30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"sessionq up did not stop after SIGTERM:\n{up.output}")
    assert code == 0, up.output
    assert not alive(child), "the other API process outlived sessionq up"
    assert "sessionq stopped" in up.output
    assert not (shell.cwd / ".sessionq" / "pgdata" / "postmaster.pid").exists(), "PostgreSQL was stopped"
