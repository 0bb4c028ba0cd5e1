"""`sessionq up` as a new user and an operator meet it: it prints the web console and the next
commands as they run; `workers drain --all --wait` drains only its worker (up says so; the API, the
console and PostgreSQL keep running); a second `up` in the same directory is one line."""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator

import pytest
from test_tutorial import Shell, Up, free_port, servers, shell  # noqa: F401 (fixtures)


@pytest.fixture
def console_port(shell: Shell) -> Iterator[int]:  # noqa: F811
    port = free_port()
    shell.env["SESSIONQ_SERVER__HTTP_ADDRESS"] = f"127.0.0.1:{free_port()}"
    shell.env["SESSIONQ_SERVER__CONSOLE_ADDRESS"] = f"127.0.0.1:{port}"
    yield port


def wait_for(check, timeout: float = 30.0, what: str = "condition"):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"{what} not reached within {timeout:g}s")


@pytest.mark.slow
def test_up_prints_next_steps_and_a_drain_stops_only_its_worker(shell: Shell, servers: list[Up],  # noqa: F811
                                                                 console_port: int) -> None:
    up = Up(shell)
    servers.append(up)
    up.wait_ready()
    out = up.output
    assert f"web console   : http://127.0.0.1:{console_port}/" in out
    assert "Next, in another terminal in this directory:" in out
    assert re.search(r"^\s+\S*sessionq agent apply -f examples/my-first-agent\.yaml$", out, re.M), out
    with urllib.request.urlopen(f"http://127.0.0.1:{console_port}/", timeout=10) as page:  # no login for up's user
        assert page.status == 200 and "Sessions by state" in page.read().decode()

    second = shell.sq("up", "--data-dir", str(shell.cwd / ".sessionq"), ok=False)
    assert second.returncode == 1 and second.stderr.startswith("error: sessionq is already running here: ")
    assert len(second.stderr.splitlines()) == 1 and "Traceback" not in second.stderr

    workers = shell.sq_json("workers", "list")["workers"]
    assert len(workers) == 1 and workers[0]["state"] == "running"
    drained = shell.sq("workers", "drain", "--all", "--wait", "--timeout", "5s")
    assert "all 1 drained worker(s) are gone" in drained.stdout
    wait_for(lambda: "sessionq's worker drained" in up.output, what="up saying its worker drained")
    assert "the API, the web console and PostgreSQL keep running" in up.output
    assert up.proc.poll() is None  # still up
    assert shell.sq_json("workers", "list")["workers"] == []
    assert shell.sq_json("session", "list") is not None  # the API and PostgreSQL answer
    assert shell.sq("status").returncode == 0
    with urllib.request.urlopen(f"http://127.0.0.1:{console_port}/workers", timeout=10) as page:
        assert "No worker is running." in page.read().decode()
    assert up.ctrl_c() == 0
    assert "sessionq stopped" in up.output
