"""`sessionq up` with the process runtime (its default, issue 18): the tutorial's Agent
(examples/my-first-agent.yaml, no command: the runtime's default agent, sessionq.agentkit.first_agent)
and one that names its command (examples/agents/first_agent.py) answer through the CLI from real
processes whose memory is a file; `status` names the isolation level, and Ctrl-C leaves no
agent process behind."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest
from test_tutorial import REPO, Shell, Up, servers, shell  # noqa: F401 (fixtures)
from test_tutorial import processes_with as agent_processes

from sessionq.runtime.process.sandbox import default_isolation

FIRST_AGENT = REPO / "examples" / "agents" / "first_agent.py"


def actor_processes(root: Path) -> list[int]:
    """The live processes working in an Actor's durable directory (cold or from a warm interpreter)."""
    found = []
    for pid in agent_processes(str(root)):
        try:
            if os.readlink(f"/proc/{pid}/cwd").startswith(str(root / "actors")):
                found.append(pid)
        except OSError:
            continue
    return found


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_up_runs_real_agent_processes(shell: Shell, servers: list[Up]) -> None:  # noqa: F811
    # the Agent below runs a script of this repository: a sandbox shows it when configured to
    shell.env["SESSIONQ_RUNTIME__PROCESS__SANDBOX_PATHS"] = str(FIRST_AGENT.parent)
    up = Up(shell)  # the process runtime: up's default
    servers.append(up)
    up.wait_ready()
    root = shell.cwd / ".sessionq" / "process-runtime"
    level = default_isolation().value  # up's default: gvisor where runsc runs, else namespaces
    assert f"the process runtime, isolation {level} (each Actor in its own sandbox, egress enforced), in " \
        f"{root.resolve()}" in up.output

    applied = shell.sq("agent", "apply", "-f", "examples/my-first-agent.yaml")  # the tutorial's, as is
    assert "applied" in applied.stdout and "READY" in applied.stdout, applied.stdout
    spec = shell.cwd / "real-agent.yaml"
    spec.write_text(f"name: named-command\ncommand: [{sys.executable}, {FIRST_AGENT}]\n")
    applied = shell.sq("agent", "apply", "-f", str(spec))
    assert "applied" in applied.stdout and "READY" in applied.stdout, applied.stdout
    other = shell.sq_json("agent", "session", "create", "--agent", "named-command")["session"]["id"]
    answer = shell.sq_json("agent", "invoke", "--session", other, "--task", "What is 6*7?")
    assert answer["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answer
    session_id = shell.sq_json("agent", "session", "create", "--agent", "my-first-agent")["session"]["id"]
    first = shell.sq_json("agent", "invoke", "--session", session_id, "--task", "Remember the number 7.")
    assert first["task"]["status"]["state"] == "TASK_STATE_COMPLETED", first
    # between turns the agent holds no process; its memory is a file of the snapshot
    deadline = time.monotonic() + 60
    while actor_processes(root):  # (the warm interpreter waiting for the next Actor is none)
        assert time.monotonic() < deadline, "the agent's process stayed after its turn"
        time.sleep(0.2)
    assert list(root.glob("snapshots/*/*.tar.gz")), "a snapshot archive was written"
    recalled = shell.sq("agent", "invoke", "--session", session_id, "--task",
                        "What number did I ask you to remember?").stdout
    assert "7" in recalled, recalled
    status = shell.sq("status").stdout
    assert "PROCESS RUNTIME" in status and f"isolation {level}" in status, status
    assert re.search(r"^RUNTIME\s+process \(served\) at 127\.0\.0\.1:\d+: ", status, re.M), status
    assert up.ctrl_c() == 0
    assert agent_processes(str(root)) == [], "no agent process outlives sessionq up"


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_a_forced_stop_of_up_during_a_turn_leaves_no_agent_process(shell: Shell, servers: list[Up]) -> None:  # noqa: F811
    """Ctrl-C twice while an agent's process runs a turn: the forced stop kills the agents' process
    groups (and says so in its line); nothing of them is left in the process table."""
    up = Up(shell)
    servers.append(up)
    up.wait_ready()
    root = shell.cwd / ".sessionq" / "process-runtime"
    shell.sq("agent", "apply", "-f", "examples/my-first-agent.yaml")
    session_id = shell.sq_json("agent", "session", "create", "--agent", "my-first-agent")["session"]["id"]
    turn = shell.popen_sq("agent", "invoke", "--session", session_id, "--task", "What is 1+1? [slow:60]")
    try:
        deadline = time.monotonic() + 60
        while not (running := actor_processes(root)):
            assert time.monotonic() < deadline, f"no agent process started:\n{up.output}"
            time.sleep(0.1)
        os.killpg(up.proc.pid, signal.SIGINT)
        time.sleep(1.0)
        os.killpg(up.proc.pid, signal.SIGINT)  # the graceful stop waits for the running turn's job: force it
        code = up.proc.wait(30)
        up._reader.join(5)
        assert code == 1, up.output
        forced = [line for line in up.lines if "forced stop" in line]
        assert len(forced) == 1 and "the agents' processes killed" in forced[0], up.output
        deadline = time.monotonic() + 10
        while left := [pid for pid in running if pid in agent_processes(str(root))]:
            assert time.monotonic() < deadline, f"agent processes outlived a forced stop of up: {left}"
            time.sleep(0.1)
        assert agent_processes(str(root)) == []
    finally:
        turn.kill()
        turn.communicate(timeout=30)
