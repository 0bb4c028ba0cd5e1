"""A first run that just works: `--version`, shell completion, `agent invoke` exit statuses, the
request id of `session create` in its retry advice (and accepted back), one-line errors for an
unreachable database and a second `up` in one directory, how `up` names the next commands."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import apply_agent
from sessionq.cli.invoke import EXIT_TURN_ENDED_BADLY, EXIT_TURN_STILL_RUNNING
from sessionq.cli.main import main

from sessionq.app import up
from sessionq.app.startup import StartupError

SESSIONQ = str(Path(sys.executable).with_name("sessionq"))
UNREACHABLE = "postgresql://nobody@127.0.0.1:1/nowhere?connect_timeout=2"


async def cli(api, *args, user="alice"):
    return await asyncio.to_thread(CliRunner().invoke, main,
                                   ["--server", api.address, "--token", f"{user}-token", *args])


def run(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONQ_")}
    return subprocess.run([SESSIONQ, *args], cwd=cwd, env={**base, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout)


def test_version_and_shell_completion() -> None:
    version = run("--version")
    assert version.returncode == 0 and re.fullmatch(r"sessionq \d+\.\d+\.\d+\S*\n", version.stdout)
    completion = run(env={"_SESSIONQ_COMPLETE": "bash_source"})
    assert completion.returncode == 0 and "_sessionq_completion" in completion.stdout
    assert "_SESSIONQ_COMPLETE=bash_source sessionq" in run("--help").stdout


async def test_invoke_exits_non_zero_for_a_failed_turn_and_distinctly_for_a_running_one(api, store, sim):
    await apply_agent(store, sim)
    created = await cli(api, "agent", "session", "create", "--agent", "my-first-agent", "-o", "json")
    session_id = json.loads(created.output)["session"]["id"]
    failed = await cli(api, "agent", "invoke", "--session", session_id, "--task", "compute this [fail]")
    assert failed.exit_code == EXIT_TURN_ENDED_BADLY == 3, failed.output
    assert "is FAILED" in failed.stderr
    failed_json = await cli(api, "agent", "invoke", "--session", session_id, "--task", "again [fail]", "-o", "json")
    assert failed_json.exit_code == 3 and json.loads(failed_json.stdout)["task"]["status"]["state"] == "TASK_STATE_FAILED"
    running = await cli(api, "--timeout", "2", "agent", "invoke", "--session", session_id, "--task", "slow [slow:4]")
    assert running.exit_code == EXIT_TURN_STILL_RUNNING == 4, running.output
    # the server answered with the task as it stands, or the deadline came first
    assert "is WORKING" in running.stderr or "still running when --timeout (2s) passed" in running.stderr
    await asyncio.sleep(3)  # let the slow turn end
    ok = await cli(api, "agent", "invoke", "--session", session_id, "--task", "What is 2+2?")
    assert ok.exit_code == 0 and "4" in ok.stdout


async def test_session_create_prints_its_request_id_in_the_retry_advice_and_accepts_it(api, store, sim):
    await apply_agent(store, sim)
    await sim.inject("create_actor", "delay", delay=4.0)
    slow = await cli(api, "--timeout", "1.5", "agent", "session", "create", "--agent", "my-first-agent")
    assert slow.exit_code == 1, slow.output
    (line,) = slow.stderr.splitlines()
    m = re.search(r"run the same command with --request-id (\S+)$", line)
    assert m and "UNAVAILABLE" in line, line
    await asyncio.sleep(3)
    again = await cli(api, "agent", "session", "create", "--agent", "my-first-agent", "--request-id", m.group(1),
                      "-o", "json")
    assert again.exit_code == 0, again.output
    listed = await cli(api, "session", "list", "-o", "json")
    assert [s["id"] for s in json.loads(listed.stdout).get("sessions", [])] == [json.loads(again.stdout)["session"]["id"]]


@pytest.mark.parametrize("command", [["migrate", "--database-url", UNREACHABLE], ["worker"], ["serve"]])
def test_an_unreachable_database_at_start_is_one_line(command: list[str], tmp_path: Path) -> None:
    r = run(*command, cwd=tmp_path, env={"SESSIONQ_DATABASE__URL": UNREACHABLE, "SESSIONQ_LOGGING__FORMAT": "text",
                                         "SESSIONQ_SERVER__ADDRESS": "127.0.0.1:0"})
    assert r.returncode == 1, (r.stdout, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "cannot reach PostgreSQL at 127.0.0.1:1/nowhere" in lines[0] and "check database.url" in lines[0]
    assert "nobody" not in lines[0] or "nobody@" not in lines[0]  # no credentials echoed


def test_a_second_up_in_one_directory_is_one_line(tmp_path: Path) -> None:
    data = tmp_path / ".sessionq"
    holder = up.lock_data_dir(data)  # as a running `up` holds it
    try:
        r = run("up", "--data-dir", str(data), cwd=tmp_path, env={"SESSIONQ_SERVER__ADDRESS": "127.0.0.1:0"})
    finally:
        holder.close()
    assert r.returncode == 1
    assert r.stderr.startswith("error: sessionq is already running here: ") and len(r.stderr.splitlines()) == 1
    assert f"is held by pid {os.getpid()}" in r.stderr


def test_a_data_directory_that_cannot_be_used_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StartupError, match="cannot use the data directory"):
        up.lock_data_dir(blocker / "data")


def test_the_next_commands_are_printed_as_they_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    exe = venv_bin / "sessionq"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert up.command_name(".venv/bin/sessionq") == ".venv/bin/sessionq"  # make up: not on PATH
    monkeypatch.setenv("PATH", f"{venv_bin}:/usr/bin:/bin")
    assert up.command_name(".venv/bin/sessionq") == "sessionq"  # an activated venv
    assert up.command_name("python") == "sessionq"


@pytest.mark.parametrize(
    ("key", "env", "what"),
    [("server.address", "SESSIONQ_SERVER__ADDRESS", "the API"),
     ("metrics.address", "SESSIONQ_METRICS__ADDRESS", "metrics")],
)
def test_an_address_in_use_at_start_is_one_line(key: str, env: str, what: str, database_url: str,
                                                tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        free = {"SESSIONQ_SERVER__ADDRESS": "127.0.0.1:0", "SESSIONQ_METRICS__ADDRESS": "127.0.0.1:0"}
        r = run("serve", cwd=tmp_path, env={**free, env: address, "SESSIONQ_DATABASE__URL": database_url,
                                            "SESSIONQ_LOGGING__FORMAT": "text",
                                            "SESSIONQ_METRICS__ENABLED": "true"})
    assert r.returncode == 1, (r.stdout, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"cannot listen on {address} for {what}: the address is in use" in lines[0], lines[0]
    assert f"set {key} to another HOST:PORT" in lines[0]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand the data directory to another user")
def test_a_data_directory_without_permission_is_one_line(tmp_path: Path) -> None:
    """A real permission denied: `up` run as an unprivileged user on a directory it cannot write."""
    import pwd

    data = tmp_path / "locked"
    data.mkdir(mode=0o700)  # root's, unreadable for nobody
    tmp_path.chmod(0o755)
    nobody = pwd.getpwnam("nobody")
    r = subprocess.run(["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups",
                        SESSIONQ, "up", "--data-dir", str(data / ".sessionq")],
                       cwd=tmp_path, env={k: v for k, v in os.environ.items() if not k.startswith("SESSIONQ_")},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, (r.stdout, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "permission denied" in lines[0].lower(), lines[0]
