"""The tutorial, verbatim (issue 4; docs/tutorial.md): the whole of it against a real `sessionq up`.

Everything runs as a user would run it: `sessionq up` as a subprocess in a fresh working directory
(so the client config that it writes there is the one the CLI reads: no --server flags), the
`sessionq` CLI for Agents, Sessions, invocations and Actors, and `buf curl` (the grpcurl equivalent
from the npm package @bufbuild/buf, installed here into ~/.cache/sessionq-buf) with server
reflection and the tutorial's JSON bodies for the checkpoint calls. Ctrl-C (SIGINT to the process
group) must stop everything cleanly, and a second `up` on the same data directory reuses its data.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from sessionq.runtime.process.sandbox import default_isolation
from tests.ports import free_port

REPO = Path(__file__).resolve().parents[2]
AGENT_SPEC = REPO / "examples" / "my-first-agent.yaml"
BUF_VERSION = "@bufbuild/buf@1"
SERVICE = "kagent.api.v1alpha1.CheckpointService"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0
CLI_TIMEOUT = 60.0
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")

ADVANCED = "conversation advanced beyond the expected task"
PENDING = "snapshot for the expected task is not ready"


# -- buf, installed once into a cache that survives between runs ----------------------------------

def buf_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sessionq-buf"


def _buf_works(binary: Path) -> bool:
    if not binary.is_file():
        return False
    try:
        r = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    except OSError:
        return False
    return r.returncode == 0


@pytest.fixture(scope="session")
def buf() -> str:
    """The `buf` binary of the npm package @bufbuild/buf (installed with npm when missing).
    A machine without npm or without the registry fails here: CI must prove the tutorial."""
    cache = buf_cache_dir()
    binary = cache / "node_modules" / ".bin" / "buf"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:  # two concurrent runs install once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _buf_works(binary):
            npm = shutil.which("npm")
            if npm is None:
                pytest.fail("the tutorial test needs `buf curl` from the npm package @bufbuild/buf, "
                            "but npm is not installed (install Node.js and npm)")
            r = subprocess.run([npm, "install", "--prefix", str(cache), "--no-audit", "--no-fund", BUF_VERSION],
                               capture_output=True, text=True, timeout=300)
            if r.returncode != 0 or not _buf_works(binary):
                pytest.fail(f"`npm install --prefix {cache} {BUF_VERSION}` did not give a working {binary} "
                            f"(exit {r.returncode}):\n{r.stdout}\n{r.stderr}")
    return str(binary)


# -- the user's shell: a working directory, an environment, the CLI -------------------------------


def sessionq_binary() -> str:
    beside = Path(sys.executable).parent / "sessionq"
    found = str(beside) if beside.is_file() else shutil.which("sessionq")
    assert found, "the `sessionq` command is not installed (pip install -e .)"
    return found


class Shell:
    """A user's terminal: cwd, environment (no SESSIONQ_* from the caller; a private
    XDG_CONFIG_HOME so the user's real client config is untouched) and the commands they type."""

    def __init__(self, home: Path, port: int) -> None:
        self.cwd = home
        self.port = port
        self.sessionq = sessionq_binary()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONQ_")}
        env.update(XDG_CONFIG_HOME=str(home / "config"), PYTHONUNBUFFERED="1")
        self.env = env

    def run(self, *args: str, timeout: float = CLI_TIMEOUT) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(args), cwd=self.cwd, env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def sq(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        r = self.run(self.sessionq, *args)
        if ok:
            assert r.returncode == 0, f"sessionq {' '.join(args)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
        return r

    def sq_json(self, *args: str) -> dict[str, Any]:
        out = json.loads(self.sq(*args, "-o", "json").stdout)
        assert isinstance(out, dict)
        return out

    def popen_sq(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([self.sessionq, *args], cwd=self.cwd, env=self.env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)


class Up:
    """`sessionq up --data-dir .sessionq` in the shell's directory, on its own port (its default
    runtime, the process runtime, unless `runtime` names one: `--runtime simulator`)."""

    def __init__(self, shell: Shell, runtime: str | None = None) -> None:
        self.shell = shell
        self.lines: list[str] = []
        self.user = ""
        self.started = time.monotonic()
        self.ready_after: float | None = None  # seconds from the start to ready
        env = dict(shell.env, SESSIONQ_SERVER__ADDRESS=f"127.0.0.1:{shell.port}")
        # its other ports free ones unless the test chose them: other `up`s may run on this machine
        for key in ("SESSIONQ_SERVER__HTTP_ADDRESS", "SESSIONQ_SERVER__CONSOLE_ADDRESS"):
            env.setdefault(key, f"127.0.0.1:{free_port()}")
        extra = ["--runtime", runtime] if runtime else []
        # its own process group, so that SIGINT reaches it as a terminal's Ctrl-C does
        self.proc = subprocess.Popen(
            [shell.sessionq, "up", "--data-dir", str(shell.cwd / ".sessionq"), *extra], cwd=shell.cwd, env=env,
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
        return "\n".join(self.lines)

    def wait_ready(self) -> None:
        """Until `up` prints its endpoint line and the port accepts connections."""
        deadline = time.monotonic() + START_TIMEOUT
        endpoint = f"API endpoint  : 127.0.0.1:{self.shell.port}"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"sessionq up exited {self.proc.returncode} while starting:\n{self.output}")
            if any(endpoint in line for line in self.lines):
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.shell.port), 1):
                    m = next((re.search(r"sessionq is up \(user (.+)\)", x) for x in self.lines
                              if "sessionq is up" in x), None)
                    self.user = m.group(1) if m else ""
                    self.ready_after = time.monotonic() - self.started
                    return
            time.sleep(0.1)
        pytest.fail(f"sessionq up did not print `{endpoint}` and listen within {START_TIMEOUT:g}s:\n{self.output}")

    def ctrl_c(self) -> int:
        """Ctrl-C: SIGINT to the process group; its exit code (the test fails after STOP_TIMEOUT)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGINT)
        try:
            code = self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"sessionq up did not stop within {STOP_TIMEOUT:g}s of Ctrl-C:\n{self.output}")
        self._reader.join(5)
        return code

    def kill(self) -> None:
        """Last resort (a failed test): the whole group, and the embedded PostgreSQL if it stayed."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        pidfile = self.shell.cwd / ".sessionq" / "pgdata" / "postmaster.pid"
        with contextlib.suppress(OSError, ValueError, ProcessLookupError):
            os.kill(int(pidfile.read_text().split()[0]), signal.SIGQUIT)


@pytest.fixture
def shell() -> Iterator[Shell]:
    # not under pytest's basetemp (pruned while a server may still live) and a short path for the
    # PostgreSQL socket
    home = Path(tempfile.mkdtemp(prefix="sq-tut-"))
    (home / "examples").mkdir()
    shutil.copy(AGENT_SPEC, home / "examples" / AGENT_SPEC.name)
    yield Shell(home, free_port())
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def servers(shell: Shell) -> Iterator[list[Up]]:
    """Every `up` the test starts; any still running at the end is killed."""
    started: list[Up] = []
    yield started
    for up in started:
        if up.proc.poll() is None:
            up.kill()


# -- reading the outputs ----------------------------------------------------------------------------

def processes_with(marker: str) -> list[int]:
    """The live processes whose environment or command line mentions `marker` (the process table,
    /proc): an Actor's process has its durable directory, below the runtime's root, in
    SESSIONQ_DATA_DIR; a warm interpreter (and an Actor started from one) the root on its command line."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            seen = (entry / "environ").read_bytes() + b"\0" + (entry / "cmdline").read_bytes()
            if marker.encode() in seen and (entry / "stat").read_text().split(") ")[1][0] != "Z":
                found.append(int(entry.name))
        except (OSError, IndexError):
            continue
    return found


def archive_text(path: Path, member: str) -> str:
    with tarfile.open(path) as tar:
        f = tar.extractfile(member)
        assert f is not None, f"{member} is not a file of {path}"
        return f.read().decode()


def actor_rows(shell: Shell) -> list[dict[str, str]]:
    """`sessionq actors list --atespace kagent`, the table parsed by its header."""
    out = shell.sq("actors", "list", "--atespace", "kagent").stdout.strip().splitlines()
    assert out and out[0].split() == ["ATESPACE", "NAME", "TEMPLATE", "STATE", "WORKER", "VERSION", "AGE"], out
    return [dict(zip(out[0].split(), line.split(), strict=True)) for line in out[1:]]


def actor(shell: Shell, name: str) -> dict[str, str]:
    rows = [r for r in actor_rows(shell) if r["NAME"] == name]
    assert len(rows) == 1, f"expected one Actor {name}: {rows}"
    return rows[0]


def wait_actor(shell: Shell, name: str, state: str, timeout: float = 10.0) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        row = actor(shell, name)
        if row["STATE"] == state or time.monotonic() > deadline:
            assert row["STATE"] == state, f"Actor {name} is not {state} after {timeout:g}s: {row}"
            return row
        time.sleep(0.1)


def session_states(shell: Shell) -> dict[str, str]:
    """`sessionq agent session list`, the boxed table: ID -> STATE."""
    out = shell.sq("agent", "session", "list").stdout.strip().splitlines()
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in out if line.startswith("|")]
    assert rows and rows[0] == ["ID", "AGENT", "STATE", "CREATED"], out
    return {r[0]: r[2] for r in rows[1:]}


def is_uuid(value: Any) -> bool:
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True


def is_timestamp(value: Any) -> bool:
    if not isinstance(value, str) or not TIMESTAMP.match(value):
        return False
    datetime.fromisoformat(value.replace("Z", "+00:00"))
    return True


class BufCurl:
    """`buf curl --protocol grpc --http2-prior-knowledge -d JSON http://127.0.0.1:PORT/SERVICE/METHOD`:
    the schema comes from server reflection (buf curl's default)."""

    def __init__(self, shell: Shell, buf: str) -> None:
        self.shell = shell
        self.buf = buf

    def __call__(self, method: str, body: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        url = f"http://127.0.0.1:{self.shell.port}/{SERVICE}/{method}"
        return self.shell.run(self.buf, "curl", "--protocol", "grpc", "--http2-prior-knowledge",
                              "-d", json.dumps(body), url)

    def ok(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self(method, body)
        assert r.returncode == 0, f"buf curl {method} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
        out = json.loads(r.stdout)
        assert isinstance(out, dict)
        return out

    @staticmethod
    def error(r: subprocess.CompletedProcess[str]) -> dict[str, Any]:
        """buf curl's error: exit code = gRPC code << 3, `{"code": ..., "message": ...}` on stderr."""
        assert r.returncode >= 8, f"expected an RPC error, got exit {r.returncode}:\n{r.stdout}\n{r.stderr}"
        start = r.stderr.find("{")
        assert start >= 0, r.stderr
        err = json.loads(r.stderr[start:])
        assert isinstance(err, dict)
        return err

    def create_checkpoint(self, body: dict[str, Any], timeout: float = 15.0) -> subprocess.CompletedProcess[str]:
        """CreateCheckpoint, sending the same request again while the snapshot is not ready (as the
        tutorial says); the last answer."""
        deadline = time.monotonic() + timeout
        while True:
            r = self("CreateCheckpoint", body)
            if r.returncode == 0 or PENDING not in r.stderr or time.monotonic() > deadline:
                return r
            time.sleep(0.2)


# -- the tutorial --------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.clause("TUT-1")
@pytest.mark.clause("TUT-2")
@pytest.mark.clause("TUT-3")
@pytest.mark.clause("TUT-4")
@pytest.mark.clause("TUT-5")
@pytest.mark.timeout(420)  # every turn on a suspended Actor starts its sandbox and interpreter cold
def test_the_tutorial_verbatim(buf: str, shell: Shell, servers: list[Up]) -> None:
    curl = BufCurl(shell, buf)

    # -- Before you begin: `sessionq up` (the embedded default), an Agent ------------------------------
    # up's default runtime is the process runtime: the Agent runs in real processes, its memory in
    # real snapshots of its durable directory
    up = Up(shell)
    servers.append(up)
    up.wait_ready()
    assert up.user, up.output
    root = (shell.cwd / ".sessionq" / "process-runtime").resolve()
    level = default_isolation().value  # gvisor where runsc runs, else namespaces
    assert f"runtime       : the process runtime, isolation {level} (each Actor in its own sandbox, egress " \
        f"enforced), in {root}" in up.output, up.output
    assert up.ready_after is not None and up.ready_after < START_TIMEOUT, up.ready_after
    local_config = shell.cwd / ".sessionq" / "client.yaml"
    user_config = shell.cwd / "config" / "sessionq" / "client.yaml"
    for path in (local_config, user_config):
        assert f"server: 127.0.0.1:{shell.port}" in path.read_text(), path
    applied = shell.sq("agent", "apply", "-f", "examples/my-first-agent.yaml")
    assert "agent kagent/my-first-agent applied" in applied.stdout and "READY" in applied.stdout, applied.stdout

    # -- TUT-1: a Session and a first turn, their IDs as `jq -r` reads them --------------------------
    created = shell.sq_json("agent", "session", "create", "--agent", "my-first-agent")
    session_id = created["session"]["id"]
    assert is_uuid(session_id), created
    first = shell.sq_json("agent", "invoke", "--session", session_id, "--task", "What is 2+2?")
    task_id = first["task"]["id"]
    assert is_uuid(task_id) and first["task"]["contextId"] == session_id, first
    assert first["task"]["status"]["state"] == "TASK_STATE_COMPLETED", first

    # -- TUT-2: the Actor suspends between turns ------------------------------------------------------
    actor_name = f"session-{session_id}"
    idle = wait_actor(shell, actor_name, "ACTOR_STATE_SUSPENDED")
    assert idle["ATESPACE"] == "kagent" and idle["WORKER"] == "<none>", idle
    assert idle["TEMPLATE"].startswith("kagent/my-first-agent-"), idle

    # another message; a second terminal lists the Actors while the turn runs
    turn = shell.popen_sq("agent", "invoke", "--session", session_id, "--task",
                          "Summarize this conversation so far. [slow:6]", "-o", "json")
    try:
        running = None
        while turn.poll() is None:
            row = actor(shell, actor_name)
            if row["STATE"] == "ACTOR_STATE_RUNNING":
                running = row
                break
            time.sleep(0.05)
        assert running is not None, "the turn finished before `actors list` showed the Actor RUNNING"
        assert running["WORKER"] not in ("", "<none>"), running
        assert int(running["VERSION"]) > int(idle["VERSION"]), (idle, running)
        # TUT-3: the Session is READY while its Actor runs a turn
        assert session_states(shell).get(session_id) == "READY"
        out, errors = turn.communicate(timeout=CLI_TIMEOUT)
    finally:
        if turn.poll() is None:
            turn.kill()
    assert turn.returncode == 0, f"invoke exited {turn.returncode}:\n{out}\n{errors}"
    second = json.loads(out)
    latest_task_id = second["task"]["id"]
    assert second["task"]["status"]["state"] == "TASK_STATE_COMPLETED" and latest_task_id != task_id, second

    # after the turn: suspended again, at a higher version, the same Actor
    after = wait_actor(shell, actor_name, "ACTOR_STATE_SUSPENDED")
    assert after["WORKER"] == "<none>" and int(after["VERSION"]) > int(running["VERSION"]), (running, after)
    assert [r["NAME"] for r in actor_rows(shell)].count(actor_name) == 1

    # -- TUT-3: the Session reports READY while its Actor is suspended --------------------------------
    assert session_states(shell).get(session_id) == "READY"

    # -- TUT-4: pin the conversation with a checkpoint (buf curl, server reflection) ------------------
    # the tutorial names the first task after a second turn: the conversation has advanced
    r = curl.create_checkpoint({"sessionId": session_id, "expectedHeadTaskId": task_id,
                                "requestId": str(uuid.uuid4())})
    err = BufCurl.error(r)
    assert r.returncode == 9 << 3 and err["code"] == "failed_precondition", (r.returncode, err)
    assert err["message"] == ADVANCED, err
    # "Name the current task ID and send the request again"
    request_id = str(uuid.uuid4())
    body = {"sessionId": session_id, "expectedHeadTaskId": latest_task_id, "requestId": request_id}
    r = curl.create_checkpoint(body)
    assert r.returncode == 0, f"CreateCheckpoint exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    checkpoint = json.loads(r.stdout)["checkpoint"]
    assert {"id", "sessionId", "headTaskId", "historySequence", "state", "createdAt", "name"} <= set(checkpoint)
    assert is_uuid(checkpoint["id"]) and checkpoint["sessionId"] == session_id, checkpoint
    assert checkpoint["headTaskId"] == latest_task_id, checkpoint
    # two turns of three task events each (created WORKING, the artifact, COMPLETED), int64 as a JSON string
    assert checkpoint["historySequence"] == "6", checkpoint
    assert checkpoint["state"] == "CHECKPOINT_STATE_READY" and is_timestamp(checkpoint["createdAt"]), checkpoint
    assert checkpoint["name"] == f"my-first-agent turn {checkpoint['historySequence']}", checkpoint
    checkpoint_id = checkpoint["id"]
    # repeating the requestId returns the checkpoint that the earlier call created
    assert curl.ok("CreateCheckpoint", body)["checkpoint"] == checkpoint

    listed = curl.ok("ListCheckpoints", {"sessionId": session_id, "page": {"limit": 50}})
    assert listed["checkpoints"] == [checkpoint], listed
    assert not listed.get("page", {}).get("nextPageToken"), listed

    # -- fork the checkpoint into a second Session -----------------------------------------------------
    fork_body = {"checkpointId": checkpoint_id, "requestId": str(uuid.uuid4())}
    fork = curl.ok("ForkSession", fork_body)["session"]
    assert {"id", "creator", "agent", "state", "createdAt", "name", "contextId"} <= set(fork), fork
    fork_id = fork["id"]
    assert is_uuid(fork_id) and fork_id != session_id, fork
    assert fork["creator"] == up.user, fork
    assert fork["agent"] == {"namespace": "kagent", "name": "my-first-agent"}, fork
    assert fork["state"] == "RUNTIME_STATE_READY" and is_timestamp(fork["createdAt"]), fork
    assert fork["name"] == checkpoint["name"], fork
    assert fork["contextId"] == fork_id, fork  # its own conversation ID, not the source's
    # it runs the revision that the source Session was created on
    source = shell.sq_json("agent", "session", "get", session_id)["session"]
    assert fork.get("preparedRevision") == source.get("preparedRevision"), (source, fork)
    # repeating the requestId returns the Session that the earlier call created
    assert curl.ok("ForkSession", fork_body)["session"]["id"] == fork_id

    # -- TUT-5: the fork continues the pinned conversation, and then goes its own way ------------------
    # the checkpoint is a copy of the source's snapshot archive: the agent's memory file as it was
    # (beside it, the turn pins of the source's last turns: sessions.turnSnapshots, default 4)
    tags = list((root / "tags" / "kagent").glob("*.tar.gz"))
    assert 1 <= len(tags) <= 1 + 4, tags
    memories = sorted((archive_text(t, "memory.json") for t in tags), key=len)
    pinned = memories[-1]  # the checkpoint's copy: the head turn's memory, the longest
    assert "What is 2+2?" in pinned and all("Remember the number 7" not in m for m in memories), memories
    asked = shell.sq("agent", "invoke", "--session", fork_id, "--task", "What did I ask you first?").stdout
    assert "What is 2+2?" in asked, asked
    told = shell.sq("agent", "invoke", "--session", session_id, "--task", "Remember the number 7.").stdout
    assert "7" in told, told
    recalled = shell.sq("agent", "invoke", "--session", fork_id, "--task",
                        "What number did I ask you to remember?").stdout
    assert "7" not in recalled, recalled
    # (the source does know it: the fork's ignorance is the divergence, not a forgetful agent)
    known = shell.sq("agent", "invoke", "--session", session_id, "--task",
                     "What number did I ask you to remember?").stdout
    assert "7" in known, known
    # a command in the agent's sandbox: its file survives the suspend between the two turns
    ran = shell.sq("agent", "invoke", "--session", session_id, "--task", "run: uname -s > kernel.txt; cat kernel.txt")
    assert "Linux" in ran.stdout, ran.stdout
    again = shell.sq("agent", "invoke", "--session", session_id, "--task", "run: cat kernel.txt; pwd").stdout
    assert "Linux" in again and "/workspace" in again, again
    states = session_states(shell)
    assert states.get(session_id) == "READY" and states.get(fork_id) == "READY", states

    # -- clean up --------------------------------------------------------------------------------------
    deleted = shell.sq("agent", "session", "delete", fork_id)
    assert fork_id in deleted.stdout, deleted.stdout
    assert curl.ok("DeleteCheckpoint", {"checkpointId": checkpoint_id}) == {}
    r = curl("GetCheckpoint", {"checkpointId": checkpoint_id})
    err = BufCurl.error(r)
    assert r.returncode == 5 << 3 and err["code"] == "not_found", (r.returncode, err)

    # -- Ctrl-C stops everything cleanly -----------------------------------------------------------------
    postmaster = shell.cwd / ".sessionq" / "pgdata" / "postmaster.pid"
    assert postmaster.is_file()  # the embedded PostgreSQL runs in the data directory
    code = up.ctrl_c()
    assert code == 0, f"sessionq up exited {code} on Ctrl-C:\n{up.output}"
    assert up.lines and up.lines[-1] == "sessionq stopped", up.output
    assert "Traceback" not in up.output, up.output
    assert not postmaster.exists(), "the embedded PostgreSQL is still running after Ctrl-C"
    assert processes_with(str(root)) == [], "an agent process outlived sessionq up"

    # -- a second `up` on the same data directory reuses the data --------------------------------------
    again = Up(shell)
    servers.append(again)
    again.wait_ready()
    listed_again = shell.sq_json("agent", "session", "list")
    assert session_id in [s["id"] for s in listed_again.get("sessions", [])], listed_again
    assert session_states(shell).get(session_id) == "READY"
    # its Actor's memory survived in the snapshot: a turn on the second `up` starts a process from it
    known = shell.sq("agent", "invoke", "--session", session_id, "--task",
                     "What number did I ask you to remember?").stdout
    assert "7" in known, known
    code = again.ctrl_c()
    assert code == 0, f"the second sessionq up exited {code} on Ctrl-C:\n{again.output}"
    assert "Traceback" not in again.output, again.output
    assert not postmaster.exists(), "the embedded PostgreSQL is still running after Ctrl-C"
    assert processes_with(str(root)) == [], "an agent process outlived sessionq up"
