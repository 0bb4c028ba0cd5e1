"""Warm Actor hosts: a Python process started ahead of need with the agent kit imported, handed to the
next Actor whose command it can run. Two kinds, one idea and one pool (`_HostPool`: started in the
background, replaced after each use or early end, given up after MAX_FAILURES early ends in a row):

- warm interpreters (`WarmPool`, under isolation ``none``): plain processes of the runtime's user;
- warm sandboxes (`WarmSandboxPool`, under ``gvisor`` and ``namespaces``): each such interpreter
  inside a sandbox of its own, with its network (egress.py), started before its Actor is known.

Warm interpreters: the process runtime keeps `size` Python processes started ahead of need
(sessionq.agentkit.warm), each having imported the agent kit and a2a-sdk's server, and hands
one to the next Actor whose command runs a script or a module with that same interpreter. The
Actor's start then skips the interpreter's start and the SDK's imports (most of a turn on a
suspended Actor), and the process is the Actor's from then on (its pid, group, exit status, stderr).

What the Actor sees is what a process exec'd for it sees (agentkit/warm.py says how): its environment
exactly, its working directory, argv, sys.path, the listening sockets (A2A, readiness) at the
descriptors its environment names, stdout and stderr on its log files, stdin /dev/null, its own
process group, a SIGKILL when the runtime dies (setpriv --pdeathsig). The differences: the modules the interpreter
imported are already in `sys.modules` (imported under the runtime's base environment, see
`STARTUP_PREFIXES`), its command line (`ps`, /proc/PID/cmdline) and /proc/PID/environ are the
interpreter's, and its process started before the Actor's resume.

A command is run warm only when (`plan`):
- its program resolves (with the Actor's PATH) to the interpreter's interpreter: the same file in the
  same directory (so the same virtual environment), e.g. ``python3`` in the runtime's venv;
- its arguments are ``script [args]`` (a file that is not a directory, zip archive or .pyc) or ``-m
  module [args]``: no interpreter options;
- the variables that shape an interpreter's start or were read while the interpreter imported
  (`STARTUP_PREFIXES`, `STARTUP_NAMES`) are the same in the Actor's environment as in the interpreter's.
Any other command, or no interpreter left, starts cold as before.

Warm sandboxes: under ``gvisor`` and ``namespaces`` the process runtime keeps `size` sandboxes
started ahead of need, each with its network (egress.py) and, inside, a Python interpreter that has
imported the agent kit (sessionq.agentkit.warm.sandbox_main), and hands one to the next Actor whose command a
warm interpreter can run (`warm.plan`). The Actor's start then skips the sandbox's start, the
interpreter's start and the SDK's imports (most of a turn on a suspended Actor).

A warm sandbox is made before its Actor is known, so nothing of an Actor is in it until the hand-over:
- its ``/data`` is an empty directory of its own (``<root>/warm/<id>/data``, the bind's source);
  at the hand-over the Actor's snapshot is restored beside it, its entries moved in, and the
  directory renamed to the Actor's (``<root>/actors/<uid>/data``: the bind follows the directory);
- its user is one of its own (`sandbox.actor_uid` of the warm sandbox's id), given the restored files;
- its egress proxy enforces the policy of the Actor it serves (none before: everything refused);
- its environment until then is the sandbox's base (no variable of an Actor); the assignment
  carries the Actor's, which replaces it (`os.environ`; the process's initial environment block,
  what /proc/PID/environ shows inside, stays the base one);
- its stdout and stderr log files are renamed to the Actor's (the stdout log then holds this start
  only, not the earlier starts' too).
A sandbox is used once: the Actor's stop ends it, and a replacement starts in the background.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import ssl
import time
import uuid
import zipfile
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, ClassVar, Generic, TypeVar

from sessionq.runtime.base import EgressRule
from sessionq.runtime.process import archive, children, sandbox
from sessionq.runtime.process.children import Child
from sessionq.runtime.process.egress import ActorNetwork
from sessionq.runtime.process.limits import ActorGroup, ControlGroups, Limits
from sessionq.runtime.process.sandbox import Isolation, NetNamespace, Sandbox

log = logging.getLogger(__name__)

__all__ = [
    "STARTUP_NAMES",
    "STARTUP_PREFIXES",
    "WARM_SANDBOX_CODE",
    "WARM_SANDBOX_PORT",
    "Plan",
    "WarmPool",
    "WarmSandbox",
    "WarmSandboxPool",
    "plan",
]

WARM_CODE = "__import__('sessionq.agentkit.warm').agentkit.warm.main()"  # binds no name in __main__
# variables an interpreter reads as it starts, or modules read as the interpreter imported them
STARTUP_PREFIXES = ("PYTHON", "LC_", "GRPC_", "PYDANTIC")
STARTUP_NAMES = ("LANG", "LANGUAGE", "TZ", "HOME", "TMPDIR", "SSL_CERT_FILE", "SSL_CERT_DIR")
ACCEPT_TIMEOUT = 60.0  # seconds an assignment waits for the interpreter (its imports, if not yet done)
MAX_FAILURES = 3  # warm interpreters (or sandboxes) in a row that die before they are ready: no more are started
HEADER_SIZE = 8


def _startup_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(STARTUP_PREFIXES) or k in STARTUP_NAMES}


@dataclass(frozen=True)
class Plan:
    """How an interpreter runs a command: ``program -m target args`` or ``program target args``."""

    program: str
    mode: str  # "script" | "module"
    target: str
    args: tuple[str, ...]


def same_interpreter(program: str, interpreter: str) -> bool:
    """`program` is `interpreter` or another name of it in the same directory (python3 for python)."""
    a, b = os.path.abspath(program), os.path.abspath(interpreter)
    return os.path.dirname(a) == os.path.dirname(b) and os.path.realpath(a) == os.path.realpath(b)


def plan(program: str, argv: list[str], env: Mapping[str, str], cwd: Path, interpreter: str,
         warm_env: Mapping[str, str]) -> Plan | None:
    """How a warm interpreter of `interpreter` started with `warm_env` would run `argv` (its first item
    resolved to `program`) in `cwd` with `env`; None when it must start cold (module docstring)."""
    if not same_interpreter(program, interpreter) or _startup_env(env) != _startup_env(warm_env):
        return None
    rest = argv[1:]
    if len(rest) >= 2 and rest[0] == "-m" and rest[1] and not rest[1].startswith("-"):
        return Plan(program, "module", rest[1], tuple(rest[2:]))
    if not rest or not rest[0] or rest[0].startswith("-"):
        return None  # interpreter options, stdin, -c or an interactive interpreter
    script = cwd / rest[0]
    if script.is_dir() or script.suffix == ".pyc" or (script.is_file() and zipfile.is_zipfile(script)):
        return None  # run by the interpreter through runpy with the path as sys.path[0]: not copied
    return Plan(program, "script", rest[0], tuple(rest[1:]))


@dataclass
class _Host:
    """A warm process waiting for its Actor (a warm interpreter or a warm sandbox)."""

    process: asyncio.subprocess.Process
    ready: bool = field(default=False, kw_only=True)  # its imports are done
    taken: bool = field(default=False, kw_only=True)  # handed to an Actor: no longer the pool's
    reader: asyncio.Task[None] | None = field(default=None, kw_only=True)  # the watcher of its readiness

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.returncode is None


H = TypeVar("H", bound=_Host)


@dataclass
class _HostPool(Generic[H]):
    """What both pools do alike: keep `size` warm hosts started in the background (`fill`), each
    replaced after its use or its early end, none started any more once MAX_FAILURES in a row ended
    before they were ready. A pool says how one starts (`_spawn`), when it is ready (`_await_ready`),
    how it is thrown away (`discard`) and where its output went (`_log_of`)."""

    KIND: ClassVar[str]  # what the log calls one
    READY_ONLY: ClassVar[bool]  # `take` hands over ready hosts only (else a live one, a ready one first)

    size: int
    waiting: list[H] = field(default_factory=list, init=False)
    starting: int = field(default=0, init=False)
    failures: int = field(default=0, init=False)
    closed: bool = field(default=False, init=False)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set, init=False)  # hosts being started
    _watchers: set[asyncio.Task[None]] = field(default_factory=set, init=False)  # of each host's readiness and end
    _changed: asyncio.Event = field(default_factory=asyncio.Event, init=False)

    async def _spawn(self) -> H:
        raise NotImplementedError

    async def _await_ready(self, host: H) -> None:
        """Until `host` is ready: then `ready`, `failures` 0, `_signal`."""
        raise NotImplementedError

    async def discard(self, host: H) -> None:
        """End `host` and free what it holds (its process gone when this returns)."""
        raise NotImplementedError

    def _log_of(self, host: H) -> Path:
        raise NotImplementedError

    def fill(self) -> None:
        """Start hosts in the background until there are `size` (none once closed, or after
        MAX_FAILURES hosts in a row ended before they were ready)."""
        while not self.closed and self.failures < MAX_FAILURES and len(self.waiting) + self.starting < self.size:
            self.starting += 1
            self._track(self._tasks, self._start_one())

    def _track(self, tasks: set[asyncio.Task[None]], coro: Coroutine[object, object, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return task

    def _signal(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _start_one(self) -> None:
        try:
            host = await self._spawn()
        except Exception:
            self.failures += 1
            log.exception("process runtime: a %s could not be started", self.KIND)
            return
        finally:
            self.starting -= 1
        if self.closed:  # a start that finishes after the close throws its host away
            await self.discard(host)
            return
        self.waiting.append(host)
        host.reader = self._track(self._watchers, self._await_ready(host))
        self._track(self._watchers, self._await_exit(host))
        self._signal()

    async def _await_exit(self, host: H) -> None:
        returncode = await host.process.wait()
        if host.taken or self.closed:
            return  # an Actor's process now (the runtime's watcher handles its end), or `close` discards it
        if host in self.waiting:
            self.waiting.remove(host)
        await self.discard(host)
        if not host.ready:
            self.failures += 1
        log.warning("process runtime: a %s (pid %d) ended before it was used: %s; see %s",
                    self.KIND, host.pid, children.describe_exit(returncode), self._log_of(host))
        if self.failures >= MAX_FAILURES:
            log.error("process runtime: %d %ss in a row ended before they were ready: no more are started; "
                      "Actors start cold", self.failures, self.KIND)
        self.fill()
        self._signal()

    def take(self) -> H | None:
        """A host for an Actor (a ready one first), no longer the pool's; a replacement starts."""
        hosts = [h for h in self.waiting if h.alive and (h.ready or not self.READY_ONLY)]
        if not hosts:
            return None
        host = next((h for h in hosts if h.ready), hosts[0])
        self.waiting.remove(host)
        host.taken = True
        self.fill()
        return host

    def pids(self) -> list[int]:
        return [h.pid for h in self.waiting if h.alive]

    async def wait_ready(self, timeout: float) -> None:
        """Until every host the pool wants is started and ready (tests, benchmarks)."""
        async def ready() -> None:
            while True:
                if self.closed or self.failures >= MAX_FAILURES:
                    return
                live = [h for h in self.waiting if h.alive]
                if len(live) >= self.size and all(h.ready for h in live):
                    return
                await self._changed.wait()

        await asyncio.wait_for(ready(), timeout)

    async def close(self) -> None:
        self.closed = True
        waiting, self.waiting = self.waiting, []
        await asyncio.gather(*(self.discard(h) for h in waiting), return_exceptions=True)
        # then what is still starting: not cancelled (a start cancelled mid-way could leave a process
        # nobody tracks); one that finishes after the close discards its host (`_start_one`). The
        # watchers end here (a host handed over is an Actor's process, which the runtime stops)
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        for task in list(self._watchers):
            task.cancel()
        await asyncio.gather(*list(self._watchers), return_exceptions=True)

    def kill_all(self) -> None:
        """SIGKILL every waiting host's group at once (any thread)."""
        self.closed = True
        for host in list(self.waiting):
            children.kill_group(host.pid)


@dataclass
class WarmInterpreter(_Host):
    control: socket.socket  # the runtime's end of the socket pair (non-blocking)


@dataclass
class WarmPool(_HostPool[WarmInterpreter]):
    """`size` warm interpreters of `interpreter` with environment `env`, started in the background
    (`fill`) and replaced after each use or death. Their stdout and stderr, before they are handed an
    Actor, go to `logs`/warm.log; `marker` (the runtime's root) is on their command line."""

    KIND: ClassVar[str] = "warm interpreter"
    READY_ONLY: ClassVar[bool] = False  # one still importing is taken too: its start is under way

    interpreter: str
    env: dict[str, str]
    cwd: Path
    logs: Path
    marker: str

    async def _spawn(self) -> WarmInterpreter:
        self.cwd.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            argv = [self.interpreter, "-c", WARM_CODE, str(theirs.fileno()), self.marker]
            if children.SETPRIV is not None:
                argv = [children.SETPRIV, "--pdeathsig", "KILL", "--", *argv]
            with _open_log(self.logs / "warm.log") as out:
                process = await asyncio.create_subprocess_exec(
                    *argv,
                    cwd=self.cwd,
                    env=self.env,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=out,
                    stderr=out,
                    start_new_session=True,
                    pass_fds=(theirs.fileno(),),
                )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        return WarmInterpreter(process=process, control=ours)

    async def _await_ready(self, host: WarmInterpreter) -> None:
        with contextlib.suppress(OSError):
            data = await asyncio.get_running_loop().sock_recv(host.control, 1)
            if data == b"R":
                host.ready = True
                self.failures = 0
                self._signal()

    async def discard(self, host: WarmInterpreter) -> None:
        await _kill(host)

    def _log_of(self, host: WarmInterpreter) -> Path:
        return self.logs / "warm.log"

    # assignment --------------------------------------------------------------------------------

    async def start(
        self,
        uid: str,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        logs: Path,
        secrets: tuple[str, ...] = (),
    ) -> Child | None:
        """`children.start_child` by a warm interpreter: the Actor's process, or None when the command
        is not one a warm interpreter runs (`plan`), none is left, or the one taken failed to take the
        Actor (it is killed); the caller then starts the command cold."""
        if self.closed or self.size <= 0:
            return None
        try:
            program = children.resolve(argv[0], env.get("PATH"))
        except OSError:
            return None  # the cold start reports it as it always has
        how = plan(program, argv, env, cwd, self.interpreter, self.env)
        if how is None:
            return None
        interpreter = self.take()
        if interpreter is None:
            return None
        try:
            return await self._hand_over(interpreter, how, uid, env, cwd, logs, secrets)
        except BaseException:
            children.kill_group(interpreter.pid)  # cancelled mid-way: the interpreter is nobody's
            raise

    async def _hand_over(
        self,
        interpreter: WarmInterpreter,
        how: Plan,
        uid: str,
        env: dict[str, str],
        cwd: Path,
        logs: Path,
        secrets: tuple[str, ...],
    ) -> Child | None:
        if interpreter.reader is not None:
            interpreter.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await interpreter.reader
        with children.prepared(uid, env, logs) as endpoint:
            task = {
                "env": endpoint.env,
                "cwd": str(cwd),
                "program": how.program,
                "mode": how.mode,
                "target": how.target,
                "args": list(how.args),
                "a2a_fd": endpoint.sock.fileno(),
                "ready_fd": endpoint.ready.fileno(),
            }
            fds = [endpoint.sock.fileno(), endpoint.ready.fileno(), endpoint.stdout.fileno(), endpoint.stderr.fileno()]
            problem = await self._assign(interpreter, task, fds)
            port, ready_port = endpoint.port, endpoint.ready_port
        if problem is not None:
            log.warning("process runtime: a warm interpreter (pid %d) did not take actor %s (%s): starting it cold",
                        interpreter.pid, uid, problem)
            await _kill(interpreter)
            return None
        return Child(uid=uid, process=interpreter.process, pid=interpreter.pid, port=port,
                     stderr=logs / f"{uid}.stderr", secrets=secrets, warm=True,
                     ready_at=children.ReadyAddress(port=ready_port))

    async def _assign(self, interpreter: WarmInterpreter, task: dict[str, object], fds: list[int]) -> str | None:
        """Send the assignment; None once the interpreter accepted it, else why not."""
        loop = asyncio.get_running_loop()
        body = json.dumps(task).encode()
        try:
            # the header carries the descriptors; 8 bytes always fit an empty socket buffer
            socket.send_fds(interpreter.control, [len(body).to_bytes(HEADER_SIZE, "big")], fds)
            await loop.sock_sendall(interpreter.control, body)

            async def answer() -> bytes:
                while True:
                    data = await loop.sock_recv(interpreter.control, 4096)
                    if not data:
                        return b"E(the interpreter ended)"
                    data = data.lstrip(b"R")
                    if data:
                        return data

            reply = await asyncio.wait_for(answer(), ACCEPT_TIMEOUT)
        except (OSError, TimeoutError) as exc:
            return f"{type(exc).__name__}: {exc}"
        finally:
            interpreter.control.close()
        if reply.startswith(b"A"):
            return None
        return reply[1:].decode(errors="replace")[:500] or "refused"


def _open_log(path: Path) -> BinaryIO:
    return open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600), "ab")


async def _close_control(interpreter: WarmInterpreter) -> None:
    """Stop reading the interpreter's socket (before closing it: the loop must not watch a reused fd)."""
    if interpreter.reader is not None and not interpreter.reader.done():
        interpreter.reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await interpreter.reader
    interpreter.control.close()


async def _kill(interpreter: WarmInterpreter) -> None:
    children.kill_group(interpreter.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        interpreter.process.kill()
    await _close_control(interpreter)
    await interpreter.process.wait()


# ------------------------------------------------------------------------------- warm sandboxes

WARM_SANDBOX_CODE = "__import__('sessionq.agentkit.warm').agentkit.warm.sandbox_main()"
WARM_SANDBOX_PORT = 8079  # sessionq.agentkit.warm.SANDBOX_PORT (not imported: the agent kit is not the runtime's)
READY_POLL = 0.05  # seconds between two checks of a starting warm sandbox's listener
DISCARD_WAIT = 5.0  # seconds a discarded warm sandbox's group is given to be gone


@dataclass
class WarmSandbox(_Host):
    id: str
    user: int
    data: Path
    network: ActorNetwork
    stdout: Path
    stderr: Path
    bundle: Path
    group: ActorGroup | None = None  # its control group (limits.py), made with it
    actor: str | None = None  # the Actor's UID once handed over (whose egress policy applies)
    started_at: float = field(default_factory=time.time)


@dataclass
class WarmSandboxPool(_HostPool[WarmSandbox]):
    """`size` warm sandboxes of `level`, started in the background (`fill`), one used per Actor."""

    KIND: ClassVar[str] = "warm sandbox"
    READY_ONLY: ClassVar[bool] = True  # one still starting is no quicker than a cold start

    level: Isolation
    root: Path  # the runtime's root
    read_only: Callable[[], Sequence[str]]
    env: Callable[[], dict[str, str]]  # the sandbox's base environment
    rules: Callable[[str], Sequence[EgressRule]]  # an Actor's egress rules, by UID
    taskstore: Callable[[], str | None]
    hosts: dict[str, str]
    interpreter: str
    limits: Limits = field(default_factory=Limits)
    cgroups: Callable[[], ControlGroups | None] = lambda: None  # the runtime's, once it is open
    origination: Callable[[], ssl.SSLContext | None] = lambda: None  # the egress proxy's TLS (egress.py)

    async def _spawn(self) -> WarmSandbox:
        box_id = uuid.uuid4().hex
        top = self.root / "warm" / box_id
        data = top / "data"
        archive.private_dir(self.root / "warm")
        archive.private_dir(top)
        data.mkdir(mode=0o700)
        user = sandbox.actor_uid(str(uuid.UUID(box_id)))
        os.chown(data, user, user)
        network = ActorNetwork(NetNamespace.create(), lambda: (), self.taskstore(), self.hosts, self.origination())
        group: ActorGroup | None = None
        try:
            await network.start()
            cgroups = self.cgroups()
            if cgroups is not None:
                group = await asyncio.to_thread(cgroups.create, box_id, self.limits,
                                                gvisor=self.level == Isolation.GVISOR)
            bundle = self.root / "sandboxes" / f"warm-{box_id}"
            wrapper = Sandbox(level=self.level, uid=user, data=data, read_only=tuple(self.read_only()),
                              netns=network.netns.path, bundle=bundle, runsc_root=self.root / "runsc",
                              limits=self.limits, group=group)
            env = self.env()
            command = wrapper.command([self.interpreter, "-c", WARM_SANDBOX_CODE], env)
            outer = env if self.level == Isolation.NAMESPACES else {"PATH": os.defpath}
            logs = self.root / "logs"
            out, err = children.open_logs(logs, f"warm-{box_id}")
            argv = list(command)
            if children.SETPRIV is not None:
                argv = [children.SETPRIV, "--pdeathsig", "KILL", "--", *argv]
            with out, err:
                process = await asyncio.create_subprocess_exec(
                    *argv, cwd=data, env=outer, stdin=asyncio.subprocess.PIPE, stdout=out, stderr=err,
                    start_new_session=True,
                )
        except BaseException:
            await network.close()
            if group is not None:
                await asyncio.to_thread(group.remove)
            raise
        box = WarmSandbox(id=box_id, user=user, data=data, network=network, process=process,
                          stdout=logs / f"warm-{box_id}.stdout", stderr=logs / f"warm-{box_id}.stderr", bundle=bundle,
                          group=group)
        # the egress policy of the Actor it serves, none before (everything refused)
        network.rules = lambda: self.rules(box.actor) if box.actor else ()
        return box

    async def _await_ready(self, box: WarmSandbox) -> None:
        """Until the interpreter inside listens on WARM_SANDBOX_PORT (its imports are done)."""
        loop = asyncio.get_running_loop()
        while box.alive and not box.taken and not self.closed:
            sock = box.network.netns.socket()
            try:
                await loop.sock_connect(sock, ("127.0.0.1", WARM_SANDBOX_PORT))
            except OSError:
                await asyncio.sleep(READY_POLL)
                continue
            finally:
                sock.close()
            box.ready = True
            self.failures = 0
            self._signal()
            return

    async def discard(self, box: WarmSandbox) -> None:
        children.kill_group(box.process.pid)
        with contextlib.suppress(ProcessLookupError):
            box.process.kill()
        await box.process.wait()
        # and the rest of its group (the sandbox's own processes), bounded: none outlives a close
        deadline = time.monotonic() + DISCARD_WAIT
        while children.group_alive(box.process.pid) and time.monotonic() < deadline:
            children.kill_group(box.process.pid)
            await asyncio.sleep(0.02)
        await box.network.close()
        if box.group is not None:
            await asyncio.to_thread(box.group.remove)
        sandbox.remove_bundle(box.bundle)
        await asyncio.to_thread(archive.remove_tree, box.data.parent)
        for path in (box.stdout, box.stderr):
            path.unlink(missing_ok=True)

    def _log_of(self, box: WarmSandbox) -> Path:
        return box.stderr

    async def hand_over(self, box: WarmSandbox, uid: str, data: Path, logs: Path, task: dict[str, object]) -> None:
        """Make `box` the Actor `uid`'s: its restored directory `data` moved into the warm sandbox's
        /data (which then takes `data`'s place), its files given to the sandbox's user, its logs named
        as the Actor's, then the assignment written. OSError when the interpreter is gone."""

        def adopt() -> None:
            for entry in os.listdir(data):
                os.rename(data / entry, box.data / entry)
            os.rmdir(data)
            os.rename(box.data, data)
            os.rmdir(box.data.parent)
            sandbox.chown_tree(data, box.user)
            os.replace(box.stdout, logs / f"{uid}.stdout")
            os.replace(box.stderr, logs / f"{uid}.stderr")

        await box.network.serve_taskstore(self.taskstore())
        await asyncio.to_thread(adopt)
        box.data = data
        box.actor = uid
        assert box.process.stdin is not None
        box.process.stdin.write(json.dumps(task).encode() + b"\n")
        await box.process.stdin.drain()
        box.process.stdin.close()
