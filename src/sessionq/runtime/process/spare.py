"""Warm sandboxes: under ``gvisor`` and ``namespaces`` the process runtime keeps `size` sandboxes
started ahead of need, each with its network (egress.py) and, inside, a Python interpreter that has
imported the agent kit (sessionq.agentkit.spare), and hands one to the next Actor whose command a
warm interpreter can run (`warm.plan`). The Actor's start then skips the sandbox's start, the
interpreter's start and the SDK's imports (most of a turn on a suspended Actor).

A warm sandbox is made before its Actor is known, so nothing of an Actor is in it until the hand-over:
- its ``/data`` is an empty directory of its own (``<root>/spares/<id>/data``, the bind's source);
  at the hand-over the Actor's snapshot is restored beside it, its entries moved in, and the
  directory renamed to the Actor's (``<root>/actors/<uid>/data``: the bind follows the directory);
- its user is one of its own (`sandbox.actor_uid` of the spare's id), given the restored files;
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
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sessionq.runtime.base import EgressRule
from sessionq.runtime.process import archive, children, sandbox
from sessionq.runtime.process.egress import ActorNetwork
from sessionq.runtime.process.sandbox import Isolation, NetNamespace, Sandbox

log = logging.getLogger(__name__)

__all__ = ["SPARE_CODE", "SPARE_PORT", "Spare", "SparePool"]

SPARE_CODE = "__import__('sessionq.agentkit.spare').agentkit.spare.main()"
SPARE_PORT = 8079  # sessionq.agentkit.spare.SPARE_PORT (not imported: the agent kit is not the runtime's)
READY_POLL = 0.05  # seconds between two checks of a starting spare's listener
MAX_FAILURES = 3  # spares in a row that die before they are ready: no more are started
DISCARD_WAIT = 5.0  # seconds a discarded spare's group is given to be gone


@dataclass
class Spare:
    id: str
    user: int
    data: Path
    network: ActorNetwork
    process: asyncio.subprocess.Process
    stdout: Path
    stderr: Path
    bundle: Path
    actor: str | None = None  # the Actor's UID once handed over (whose egress policy applies)
    ready: bool = False
    taken: bool = False
    started_at: float = field(default_factory=time.time)

    @property
    def alive(self) -> bool:
        return self.process.returncode is None


@dataclass
class SparePool:
    """`size` warm sandboxes of `level`, started in the background (`fill`), one used per Actor."""

    size: int
    level: Isolation
    root: Path  # the runtime's root
    read_only: Callable[[], Sequence[str]]
    env: Callable[[], dict[str, str]]  # the sandbox's base environment
    rules: Callable[[str], Sequence[EgressRule]]  # an Actor's egress rules, by UID
    taskstore: Callable[[], str | None]
    hosts: dict[str, str]
    interpreter: str
    waiting: list[Spare] = field(default_factory=list)
    starting: int = 0
    failures: int = 0
    closed: bool = False
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)  # spares being started
    _watchers: set[asyncio.Task[None]] = field(default_factory=set)  # of each spare's readiness and end
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def fill(self) -> None:
        while (not self.closed and self.size > 0 and self.failures < MAX_FAILURES
               and len(self.waiting) + self.starting < self.size):
            self.starting += 1
            task = asyncio.get_running_loop().create_task(self._start_one())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _signal(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _start_one(self) -> None:
        try:
            spare = await self._spawn()
        except Exception:
            self.failures += 1
            log.exception("process runtime: a warm sandbox could not be started")
            return
        finally:
            self.starting -= 1
        if self.closed:
            await self._discard(spare)
            return
        self.waiting.append(spare)
        self._signal()
        loop = asyncio.get_running_loop()
        for coro in (self._await_ready(spare), self._await_exit(spare)):
            task = loop.create_task(coro)
            self._watchers.add(task)
            task.add_done_callback(self._watchers.discard)

    async def _spawn(self) -> Spare:
        spare_id = uuid.uuid4().hex
        top = self.root / "spares" / spare_id
        data = top / "data"
        archive.private_dir(self.root / "spares")
        archive.private_dir(top)
        data.mkdir(mode=0o700)
        user = sandbox.actor_uid(str(uuid.UUID(spare_id)))
        os.chown(data, user, user)
        network = ActorNetwork(NetNamespace.create(), lambda: (), self.taskstore(), self.hosts)
        try:
            await network.start()
            bundle = self.root / "sandboxes" / f"spare-{spare_id}"
            box = Sandbox(level=self.level, uid=user, data=data, read_only=tuple(self.read_only()),
                          netns=network.netns.path, bundle=bundle, runsc_root=self.root / "runsc")
            env = self.env()
            command = box.command([self.interpreter, "-c", SPARE_CODE], env)
            outer = env if self.level == Isolation.NAMESPACES else {"PATH": os.defpath}
            logs = self.root / "logs"
            out, err = children.open_logs(logs, f"spare-{spare_id}")
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
            raise
        spare = Spare(id=spare_id, user=user, data=data, network=network, process=process,
                      stdout=logs / f"spare-{spare_id}.stdout", stderr=logs / f"spare-{spare_id}.stderr", bundle=bundle)
        # the egress policy of the Actor it serves, none before (everything refused)
        network.rules = lambda: self.rules(spare.actor) if spare.actor else ()
        return spare

    async def _await_ready(self, spare: Spare) -> None:
        """Until the interpreter inside listens on SPARE_PORT (its imports are done)."""
        loop = asyncio.get_running_loop()
        while spare.alive and not spare.taken and not self.closed:
            sock = spare.network.netns.socket()
            try:
                await loop.sock_connect(sock, ("127.0.0.1", SPARE_PORT))
            except OSError:
                await asyncio.sleep(READY_POLL)
                continue
            finally:
                sock.close()
            spare.ready = True
            self.failures = 0
            self._signal()
            return

    async def _await_exit(self, spare: Spare) -> None:
        returncode = await spare.process.wait()
        if spare.taken or self.closed:
            return  # an Actor's process now (the runtime's watcher handles its end), or `close` does
        if spare in self.waiting:
            self.waiting.remove(spare)
        await self._discard(spare)
        if not self.closed:
            if not spare.ready:
                self.failures += 1
            log.warning("process runtime: a warm sandbox ended before it was used: %s; see %s",
                        children.describe_exit(returncode), spare.stderr)
            self.fill()
        self._signal()

    async def _discard(self, spare: Spare) -> None:
        children.kill_group(spare.process.pid)
        with contextlib.suppress(ProcessLookupError):
            spare.process.kill()
        await spare.process.wait()
        # and the rest of its group (the sandbox's own processes), bounded: none outlives a close
        deadline = time.monotonic() + DISCARD_WAIT
        while children.group_alive(spare.process.pid) and time.monotonic() < deadline:
            children.kill_group(spare.process.pid)
            await asyncio.sleep(0.02)
        await spare.network.close()
        sandbox.remove_bundle(spare.bundle)
        await asyncio.to_thread(archive.remove_tree, spare.data.parent)
        for path in (spare.stdout, spare.stderr):
            path.unlink(missing_ok=True)

    def take(self) -> Spare | None:
        """A ready spare, no longer the pool's (None: none is ready); a replacement starts."""
        spare = next((s for s in self.waiting if s.alive and s.ready), None)
        if spare is None:
            return None
        self.waiting.remove(spare)
        spare.taken = True
        self.fill()
        return spare

    def pids(self) -> list[int]:
        return [s.process.pid for s in self.waiting if s.alive]

    async def wait_ready(self, timeout: float) -> None:
        async def ready() -> None:
            while True:
                if self.closed or self.failures >= MAX_FAILURES or self.size <= 0:
                    return
                live = [s for s in self.waiting if s.alive]
                if len(live) >= self.size and all(s.ready for s in live):
                    return
                await self._changed.wait()

        await asyncio.wait_for(ready(), timeout)

    async def close(self) -> None:
        self.closed = True
        waiting, self.waiting = self.waiting, []
        await asyncio.gather(*(self._discard(s) for s in waiting), return_exceptions=True)
        # then what is still starting (a start that finishes after the close discards its spare); the
        # watchers end here (a spare handed over is an Actor's process, which the runtime stops)
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        for task in list(self._watchers):
            task.cancel()
        await asyncio.gather(*list(self._watchers), return_exceptions=True)

    def kill_all(self) -> None:
        self.closed = True
        for spare in list(self.waiting):
            children.kill_group(spare.process.pid)

    async def hand_over(self, spare: Spare, uid: str, data: Path, logs: Path, task: dict[str, object]) -> None:
        """Make `spare` the Actor `uid`'s: its restored directory `data` moved into the spare's
        /data (which then takes `data`'s place), its files given to the spare's user, its logs named
        as the Actor's, then the assignment written. OSError when the interpreter is gone."""

        def adopt() -> None:
            for entry in os.listdir(data):
                os.rename(data / entry, spare.data / entry)
            os.rmdir(data)
            os.rename(spare.data, data)
            os.rmdir(spare.data.parent)
            sandbox.chown_tree(data, spare.user)
            os.replace(spare.stdout, logs / f"{uid}.stdout")
            os.replace(spare.stderr, logs / f"{uid}.stderr")

        await spare.network.serve_taskstore(self.taskstore())
        await asyncio.to_thread(adopt)
        spare.data = data
        spare.actor = uid
        assert spare.process.stdin is not None
        spare.process.stdin.write(json.dumps(task).encode() + b"\n")
        await spare.process.stdin.drain()
        spare.process.stdin.close()
