"""The Actors' OS processes: started in their own process group (a new session) with a private
listening socket they inherit, stopped with SIGTERM then SIGKILL to the whole group, and found in
the process table after a restart.

On Linux each child is also started with PR_SET_PDEATHSIG (SIGKILL when the runtime's thread
that started it dies, set by util-linux's setpriv before it execs the command), so even a runtime
killed with SIGKILL leaves no agent behind; the runtime's restart then kills what is left of each
recorded process group (reconcile)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import re
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

__all__ = [
    "Child",
    "describe_exit",
    "kill_group",
    "listen",
    "open_logs",
    "process_start_time",
    "redact",
    "start_child",
    "stderr_tail",
]

A2A_FD_ENV = "SESSIONQ_A2A_FD"  # the inherited listening socket's descriptor (sessionq.agentkit reads it)
A2A_PORT_ENV = "SESSIONQ_A2A_PORT"
READY_FD_ENV = "SESSIONQ_READY_FD"  # the inherited readiness socket (GET /readyz, sessionq.agentkit.readiness)
READY_PORT_ENV = "SESSIONQ_READY_PORT"
STDERR_TAIL = 2000  # characters of stderr (the end) a crash message quotes, at most
REDACTED = "<redacted>"  # what a crash message shows instead of a secret
MIN_SECRET = 4  # environment values shorter than this are not redacted (they would blank out common text)
WORKLOAD_TOKEN = re.compile(r"sqw\.[0-9A-Za-z-]+\.[0-9A-Za-z]+")  # sessionq.domain.workload's credentials
TOKEN_MARGIN = 128  # characters read beyond the tail so that no secret is cut in two
# Linux: started through util-linux's setpriv, which sets PR_SET_PDEATHSIG and execs the command (no
# Python code runs between fork and exec: the runtime's gRPC threads make that unsafe)
SETPRIV = shutil.which("setpriv") if sys.platform.startswith("linux") else None


def resolve(program: str, path: str | None) -> str:
    """The executable `program` names (searched in `path` when it has no slash); FileNotFoundError
    or PermissionError as the OS would give them to exec."""
    if "/" in program:
        found: str | None = program
    else:
        found = shutil.which(program, path=path or os.defpath)
    if found is None or not os.path.exists(found):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    if os.path.isdir(found) or not os.access(found, os.X_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), program)
    return found


def process_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat), None when
    there is no such process or no /proc. With the pid it names one process, whatever pid reuse."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may contain spaces
    fields = data[data.rfind(")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> bool:
    """Signal every process of the group; False when the group no longer exists."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"the process was killed by {name}"
    return f"the process exited with status {returncode}"


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every workload credential (``sqw.<session>.<mac>``, whoever's) and every value of
    `secrets` of at least MIN_SECRET characters replaced by REDACTED (the longest values first, so a
    value inside another is no hint)."""
    text = WORKLOAD_TOKEN.sub(REDACTED, text)
    for value in sorted({v for v in secrets if len(v) >= MIN_SECRET}, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text


def stderr_tail(path: Path, limit: int = STDERR_TAIL, secrets: Iterable[str] = ()) -> str:
    """The end of the process's stderr for a crash message: decoded leniently, redacted (`redact`:
    the workload credential and the values of the Actor's environment never appear), then cut to
    its last `limit` characters (an ellipsis first when cut). The redaction runs on more than
    `limit` characters, so that no secret is cut in two and half of it kept."""
    values = [v for v in secrets if len(v) >= MIN_SECRET]
    margin = max((len(v.encode()) for v in values), default=0) + TOKEN_MARGIN
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(size - 4 * limit - margin, 0))  # up to 4 bytes a character
            data = f.read()
    except OSError:
        return ""
    text = redact(data.decode("utf-8", errors="replace"), values).strip()
    if len(text) > limit:
        return "\u2026" + text[-limit:].lstrip()
    return text


def open_logs(logs: Path, uid: str) -> tuple[BinaryIO, BinaryIO]:
    """The process's stdout (appended) and stderr (this start's only: its tail explains a crash)."""
    logs.mkdir(parents=True, exist_ok=True, mode=0o700)
    out = os.open(logs / f"{uid}.stdout", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    err = os.open(logs / f"{uid}.stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    return open(out, "ab"), open(err, "wb")


def listen() -> socket.socket:
    """A listening TCP socket on 127.0.0.1 (an ephemeral port), inheritable: an Actor's private A2A
    endpoint, accepting connections before the process that serves it has started."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        sock.set_inheritable(True)
    except BaseException:
        sock.close()
        raise
    return sock


def socket_env(sock: socket.socket, ready: socket.socket) -> dict[str, str]:
    """The variables that name the listening sockets to the process (SESSIONQ_A2A_FD and _PORT, its
    A2A endpoint; SESSIONQ_READY_FD and _PORT, its readiness endpoint)."""
    return {A2A_FD_ENV: str(sock.fileno()), A2A_PORT_ENV: str(sock.getsockname()[1]),
            READY_FD_ENV: str(ready.fileno()), READY_PORT_ENV: str(ready.getsockname()[1])}


@dataclass
class Endpoint:
    """What a starting Actor's process is handed: its listening sockets (A2A, readiness), its
    environment naming them, its open log files (closed, with the runtime's copies of the sockets,
    when `prepared` ends)."""

    sock: socket.socket
    port: int
    ready: socket.socket
    env: dict[str, str]
    stdout: BinaryIO
    stderr: BinaryIO

    @property
    def ready_port(self) -> int:
        return int(self.ready.getsockname()[1])


@contextlib.contextmanager
def prepared(uid: str, env: dict[str, str], logs: Path) -> Iterator[Endpoint]:
    sock = listen()
    try:
        ready = listen()
        try:
            out, err = open_logs(logs, uid)
            with out, err:
                yield Endpoint(sock, sock.getsockname()[1], ready, {**env, **socket_env(sock, ready)}, out, err)
        finally:
            ready.close()
    finally:
        sock.close()


@dataclass(frozen=True)
class ReadyAddress:
    """Where an Actor's readiness endpoint is: 127.0.0.1:`port`, in the network namespace `netns`
    makes sockets of (a sandbox's), else the runtime's own."""

    port: int
    netns: Callable[[], socket.socket] | None = None
    poll: float | None = None  # seconds between two asks (None: readiness.POLL)


@dataclass
class Child:
    """One running Actor process, owned by this runtime server."""

    uid: str
    process: asyncio.subprocess.Process
    pid: int
    port: int
    stderr: Path
    secrets: tuple[str, ...] = ()  # values its crash message never quotes (its environment's)
    # how the runtime reaches its readiness endpoint (GET /readyz, readiness.py): a TCP connection there
    ready_at: ReadyAddress | None = None
    warm: bool = False  # started from a warm interpreter (warm.py) or warm sandbox (warm.py), not exec'd for it
    user: int | None = None  # in a sandbox: the unprivileged user it runs as
    stopping: bool = False  # a stop the runtime asked for: its exit is no crash
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    # set once the runtime has recorded how the process ended (a crash is in its state): what a caller
    # waiting on the process's end waits for, so the Actor it reads next is already CRASHED
    exit_recorded: asyncio.Event = field(default_factory=asyncio.Event)
    # set once its start is recorded (finish_resume): a crash is recorded after it, so that a process
    # ending at once (a warm start is quick) reads as one that ended later does
    start_recorded: asyncio.Event = field(default_factory=asyncio.Event)
    returncode: int | None = None
    note: str | None = None  # what the runtime knows of its end beyond the status (its memory limit)
    started_at: float = field(default_factory=time.time)  # the wall-clock time it was started
    watcher: asyncio.Task[None] | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)  # its /readyz answered 200
    not_ready: str | None = None  # why it will not be: the probe gave up (readiness.py)
    prober: asyncio.Task[None] | None = None


async def start_child(
    uid: str,
    argv: list[str],
    env: dict[str, str],
    cwd: Path,
    logs: Path,
    secrets: tuple[str, ...] = (),
) -> Child:
    """Start `argv` in `cwd` with exactly `env` (plus the socket's variables), in a new session
    (its own process group), stdin from /dev/null, stdout and stderr to files under `logs`. The
    child inherits a listening TCP socket on 127.0.0.1 (SESSIONQ_A2A_FD, SESSIONQ_A2A_PORT): its
    private A2A endpoint accepts connections from the moment it starts; and another, its readiness
    endpoint (SESSIONQ_READY_FD, SESSIONQ_READY_PORT). Raises OSError when the
    command cannot be started (not found, not executable)."""
    program = resolve(argv[0], env.get("PATH"))
    exec_argv = [program, *argv[1:]]
    if SETPRIV is not None:
        exec_argv = [SETPRIV, "--pdeathsig", "KILL", "--", *exec_argv]
    with prepared(uid, env, logs) as endpoint:
        process = await asyncio.create_subprocess_exec(
            *exec_argv,
            cwd=cwd,
            env=endpoint.env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=endpoint.stdout,
            stderr=endpoint.stderr,
            start_new_session=True,
            pass_fds=(endpoint.sock.fileno(), endpoint.ready.fileno()),
        )
        ready_at = ReadyAddress(port=endpoint.ready_port)
    return Child(uid=uid, process=process, pid=process.pid, port=endpoint.port, stderr=logs / f"{uid}.stderr",
                 secrets=secrets, ready_at=ready_at)


async def start_sandboxed(
    uid: str,
    command: list[str],
    env: dict[str, str],
    cwd: Path,
    logs: Path,
    port: int,
    ready_at: ReadyAddress,
    secrets: tuple[str, ...] = (),
) -> Child:
    """Start a sandbox's `command` (sandbox.py: nsenter, then bwrap or runsc) with `env`, in a new
    session, stdin from /dev/null, stdout and stderr to files under `logs`. The Actor's A2A endpoint
    is the runtime's listener at `port` (egress.py), not an inherited socket."""
    exec_argv = list(command)
    if SETPRIV is not None:
        exec_argv = [SETPRIV, "--pdeathsig", "KILL", "--", *exec_argv]
    out, err = open_logs(logs, uid)
    with out, err:
        process = await asyncio.create_subprocess_exec(
            *exec_argv,
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
    return Child(uid=uid, process=process, pid=process.pid, port=port, stderr=logs / f"{uid}.stderr",
                 secrets=secrets, ready_at=ready_at)


def crash_message(child: Child) -> str:
    """Why the child's process ended: what the runtime knows of it (`note`), its exit status and the
    redacted end of its stderr."""
    assert child.returncode is not None
    tail = stderr_tail(child.stderr, secrets=child.secrets)
    note = f"{child.note}: " if child.note else ""
    return note + describe_exit(child.returncode) + (f"; stderr: {tail}" if tail else "")


async def stop_child(child: Child, grace: float, *, paused: bool = False) -> None:
    """Stop the child's process group: SIGTERM (a paused group is continued so it can act on it),
    SIGKILL after `grace` seconds, then SIGKILL whatever of the group is left."""
    child.stopping = True
    if child.prober is not None:
        child.prober.cancel()
    if child.returncode is None:
        kill_group(child.pid, signal.SIGTERM)
        if paused:
            kill_group(child.pid, signal.SIGCONT)
        try:
            await asyncio.wait_for(child.exited.wait(), timeout=grace)
        except TimeoutError:
            kill_group(child.pid, signal.SIGKILL)
            await child.exited.wait()
    kill_group(child.pid, signal.SIGKILL)  # descendants that outlived the leader


def kill_recorded(pid: int, pid_start: int | None) -> bool:
    """Kill the process group a previous runtime server recorded for an Actor, unless the pid now
    names another process (its start time differs). True when something was signalled."""
    start = process_start_time(pid)
    if start is not None and pid_start is not None and start != pid_start:
        return False  # the pid was reused by an unrelated process (which then leads its own group)
    with contextlib.suppress(PermissionError):
        return kill_group(pid, signal.SIGKILL)
    return False
