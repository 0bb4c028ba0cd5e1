"""Resource limits of a sandboxed Actor (`runtime.process.memoryLimit`, `cpuLimit`, `maxProcesses`):
what one Actor's sandbox may take of the machine, so that a memory hog, a busy loop or a fork bomb
in one sandbox leaves the host and the other Actors alone.

Where the machine has a writable cgroup hierarchy (`ControlGroups.detect`) every sandbox (a warm one
too) gets a control group of its own below the runtime's own group, ``sessionq-<tag>/<id>`` (cgroup
v1: one directory in each of the memory, cpu and pids hierarchies; cgroup v2: one directory whose
controllers the runtime enables), and the sandbox's first process joins it before it execs anything
(`ActorGroup.join`: a shell writes its own pid to ``cgroup.procs``, then execs the sandbox), so
everything the sandbox runs, gVisor's own processes included, is inside:

- memory: ``memory.limit_in_bytes`` (v1, and ``memory.memsw.limit_in_bytes`` the same: no swap) or
  ``memory.max`` (v2, ``memory.swap.max`` 0). Past it the kernel's OOM killer ends the largest
  process of the group, the Actor's program (or under gVisor the sandbox itself); the runtime reads
  the group's ``oom_kill`` count and says so in the crash message (`oom_killed`).
- CPU: the CFS quota, ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (v1) or ``cpu.max`` (v2):
  `cpus` cores' worth of time per period; a busy sandbox is throttled, not killed.
- processes: ``pids.max``; beside it the sandbox's user always has RLIMIT_NPROC (sandbox.py). Under
  gVisor the group has no ``pids.max``: it holds gVisor's own host threads and its ptrace platform's
  stub processes, many more than the Actor's processes (a fork storm of 512 inside passed 4,000 host
  tasks here), and gVisor's kernel dies when it cannot make one; the Actor's own count is bounded
  by RLIMIT_NPROC, which gVisor's kernel enforces inside.

Without one (no cgroup hierarchy the runtime may write, e.g. in an unprivileged container): the
memory limit becomes RLIMIT_AS of the Actor's processes (address space, not resident memory: an
allocation past it fails inside the program, ENOMEM / MemoryError), there is no CPU limit, and the
process limit is RLIMIT_NPROC only. `ControlGroups.detect` says which applies; `sessionq` logs it
at start.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import shlex
import signal
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_CPUS", "DEFAULT_MEMORY", "DEFAULT_PROCESSES", "ActorGroup", "ControlGroups", "Limits"]

DEFAULT_MEMORY = 2 << 30  # bytes
DEFAULT_CPUS = 2.0  # gVisor's kernel runs in the group too: its overhead counts against the quota
DEFAULT_PROCESSES = 512  # processes (threads included): a fork bomb stops there
CFS_PERIOD = 100_000  # microseconds
SHELL = "/bin/sh"
REMOVE_WAIT = 5.0  # seconds a removed group's processes are given to be gone
REMOVE_FIRST_PAUSE = 0.001  # seconds before a busy group's removal is tried again (doubled each time)
REMOVE_MAX_PAUSE = 0.05
V1_CONTROLLERS = ("memory", "cpu", "cpuacct", "pids")  # cpuacct: what the group used (`cpu_seconds`)


@dataclass(frozen=True)
class Limits:
    """One sandbox's limits; 0 means none."""

    memory: int = DEFAULT_MEMORY  # bytes
    cpus: float = DEFAULT_CPUS  # cores
    processes: int = DEFAULT_PROCESSES

    def describe_memory(self) -> str:
        return f"{self.memory} bytes (runtime.process.memoryLimit)"


def _own_groups() -> dict[str, str]:
    """The runtime's own group per v1 controller, and under "" its v2 group (/proc/self/cgroup)."""
    own: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _id, controllers, path = line.split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                own[name] = path
    return own


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, type, options) of the cgroup file systems (/proc/self/mounts)."""
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            fields = line.split()
            if len(fields) >= 4 and fields[2] in ("cgroup", "cgroup2"):
                found.append((fields[1], fields[2], set(fields[3].split(","))))
    return found


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


@dataclass(frozen=True)
class ControlGroups:
    """The directories under which this runtime makes its sandboxes' groups: one per v1 controller
    (`version` 1) or one (`version` 2)."""

    version: int
    parents: dict[str, Path]  # controller ("memory", "cpu", "pids"; v2: "") -> the runtime's directory

    @classmethod
    def detect(cls, tag: str) -> tuple[ControlGroups | None, str]:
        """The runtime's groups (named after `tag`, e.g. its root, so two runtimes never share one),
        made if need be; (None, why not) when the machine has none the runtime may write."""
        if not os.path.isdir("/proc") or os.geteuid() != 0:
            return None, "control groups need root"
        name = "sessionq-" + hashlib.sha256(tag.encode()).hexdigest()[:12]
        own = _own_groups()
        mounts = _mounts()
        v1: dict[str, Path] = {}
        for point, kind, options in mounts:
            if kind != "cgroup":
                continue
            for controller in V1_CONTROLLERS:
                if controller in options and controller in own and controller not in v1:
                    v1[controller] = Path(point) / own[controller].lstrip("/") / name
        if "memory" in v1:
            try:
                for path in v1.values():
                    path.mkdir(exist_ok=True)
            except OSError as exc:
                return None, f"the cgroup v1 hierarchies are not writable ({exc.strerror or exc})"
            return cls(1, v1), f"cgroup v1 ({', '.join(sorted(v1))})"
        for point, kind, _options in mounts:
            if kind != "cgroup2" or "" not in own:
                continue
            base = Path(point) / own[""].lstrip("/")
            try:
                available = set((base / "cgroup.controllers").read_text().split())
            except OSError:
                continue
            wanted = [c for c in ("memory", "cpu", "pids") if c in available]
            if "memory" not in wanted:
                continue
            try:
                # the runtime's own group hands its controllers down (refused when it holds processes
                # itself and is not the root: cgroup v2 lets only leaves hold processes)
                _write(base / "cgroup.subtree_control", " ".join("+" + c for c in wanted))
                (base / name).mkdir(exist_ok=True)
                _write(base / name / "cgroup.subtree_control", " ".join("+" + c for c in wanted))
            except OSError as exc:
                return None, f"cgroup v2 at {base} cannot delegate its controllers ({exc.strerror or exc})"
            return cls(2, {"": base / name}), f"cgroup v2 ({', '.join(wanted)})"
        return None, "no writable cgroup hierarchy with the memory controller"

    @property
    def cpu(self) -> bool:
        return self.version == 2 or "cpu" in self.parents

    @property
    def pids(self) -> bool:
        return self.version == 2 or "pids" in self.parents

    def close(self) -> None:
        """Remove the runtime's own directories, with any sandbox's group still in them (the runtime
        is closing: nothing of its sandboxes outlives it)."""
        self.remove_stale()
        for parent in set(self.parents.values()):
            with contextlib.suppress(OSError):
                parent.rmdir()

    def remove_stale(self) -> None:
        """Remove the groups an earlier server left (their processes died with it)."""
        for parent in self.parents.values():
            with contextlib.suppress(OSError):
                for entry in parent.iterdir():
                    if entry.is_dir():
                        ActorGroup(self.version, (entry,)).remove()

    def create(self, name: str, limits: Limits, *, gvisor: bool = False) -> ActorGroup:
        """A group `name` with `limits` (OSError when it cannot be made: nothing is left); `gvisor`:
        the group holds a gVisor sandbox (no pids.max: the module docstring)."""
        # (one directory where two controllers share a hierarchy, e.g. cpu,cpuacct)
        dirs = tuple(dict.fromkeys(parent / name for parent in self.parents.values()))
        group = ActorGroup(self.version, dirs)
        try:
            for d in dirs:
                d.mkdir()
            if gvisor and limits.processes:
                limits = dataclasses.replace(limits, processes=0)
            group.apply(limits)
        except BaseException:
            group.remove()
            raise
        return group


@dataclass(frozen=True)
class ActorGroup:
    """One sandbox's control group (a directory per v1 hierarchy, or one v2 directory)."""

    version: int
    dirs: tuple[Path, ...]

    def _file(self, name: str) -> Path | None:
        """The directory's file `name` (the hierarchy that has it), None when none has it."""
        for d in self.dirs:
            if (d / name).exists():
                return d / name
        return None

    def apply(self, limits: Limits) -> None:
        def put(name: str, value: str) -> None:
            path = self._file(name)
            if path is not None:
                _write(path, value)

        if self.version == 1:
            if limits.memory:
                put("memory.limit_in_bytes", str(limits.memory))
                with contextlib.suppress(OSError):  # no swap accounting: nothing to limit
                    put("memory.memsw.limit_in_bytes", str(limits.memory))
            if limits.cpus:
                put("cpu.cfs_period_us", str(CFS_PERIOD))
                put("cpu.cfs_quota_us", str(max(int(limits.cpus * CFS_PERIOD), 1000)))
        else:
            if limits.memory:
                put("memory.max", str(limits.memory))
                with contextlib.suppress(OSError):
                    put("memory.swap.max", "0")
            if limits.cpus:
                put("cpu.max", f"{max(int(limits.cpus * CFS_PERIOD), 1000)} {CFS_PERIOD}")
        if limits.processes:
            put("pids.max", str(limits.processes))

    def join(self, argv: list[str]) -> list[str]:
        """`argv` run by a shell that first puts itself (and so all it then runs) in this group."""
        writes = " && ".join(f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))}" for d in self.dirs)
        return [SHELL, "-c", f'{writes} && exec "$@"', "sh", *argv]

    def oom_kills(self) -> int:
        """How many of the group's processes the OOM killer ended (its memory limit reached)."""
        path = self._file("memory.oom_control" if self.version == 1 else "memory.events")
        if path is None:
            return 0
        with contextlib.suppress(OSError, ValueError):
            for line in path.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    def cpu_throttled(self) -> int:
        """How many periods the group was throttled for its CPU limit."""
        path = self._file("cpu.stat")
        with contextlib.suppress(OSError, ValueError):
            if path is not None:
                for line in path.read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "nr_throttled":
                        return int(value)
        return 0

    def cpu_seconds(self) -> float | None:
        """The CPU time the group's processes used so far (None: not accounted here)."""
        with contextlib.suppress(OSError, ValueError):
            if self.version == 1:
                path = self._file("cpuacct.usage")
                return int(path.read_text()) / 1e9 if path is not None else None
            path = self._file("cpu.stat")
            if path is not None:
                for line in path.read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "usage_usec":
                        return int(value) / 1e6
        return None

    def pids(self) -> list[int]:
        found: set[int] = set()
        for d in self.dirs:
            with contextlib.suppress(OSError, ValueError):
                found.update(int(x) for x in (d / "cgroup.procs").read_text().split())
        return sorted(found)

    def remove(self) -> None:
        """Kill what is left in the group, then remove its directories (bounded wait; a group that
        stays busy is left for the next start's `remove_stale`)."""
        deadline = time.monotonic() + REMOVE_WAIT
        pause = REMOVE_FIRST_PAUSE
        while True:
            left = self.pids()
            for pid in left:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            busy = False
            for d in self.dirs:
                try:
                    d.rmdir()
                except FileNotFoundError:
                    pass
                except OSError:
                    busy = True
            if not busy or time.monotonic() > deadline:
                if busy:
                    log.warning("process runtime: control group %s is still busy; left for the next start",
                                self.dirs[0])
                return
            # the kernel empties a group a moment after its last process is reaped: ask again soon,
            # then less often
            time.sleep(pause)
            pause = min(pause * 2, REMOVE_MAX_PAUSE)
