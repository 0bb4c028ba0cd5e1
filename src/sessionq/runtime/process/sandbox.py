"""Isolation of the process runtime's Actors (`runtime.process.isolation`): each Actor's process runs
in its own sandbox, the isolation boundary, unless `none` is asked for.

- ``gvisor``: gVisor's ``runsc run`` with an OCI bundle the runtime writes (the Actor's process under
  gVisor's kernel, with its own pid, mount, ipc and uts namespaces).
- ``namespaces``: bubblewrap (``bwrap``) with new pid, mount, ipc and uts namespaces.
- ``none``: a plain process as the user who runs sessionq (it sees what that user sees).

Both sandboxes give the Actor the same view:
- ``/data``: its durable directory, read-write, owned by its own unprivileged user (a uid derived
  from the Actor's UID, `actor_uid`; the directory is given to it after each restore); ``/tmp`` a
  private tmpfs; read-only binds of what programs need (`read_only_paths`: /usr and the merged-/usr
  links, the runtime's Python prefixes and the agent kit's sources, the CA certificates,
  `runtime.process.sandboxPaths`), never the runtime's own root (its state) or anything above it;
  its own /proc showing only its processes; no capabilities, no new privileges.
- an environment of exactly the Actor's variables (`sandbox_env`), never the runtime's;
- its own network namespace with only a loopback interface (`NetNamespace`): the runtime puts the
  listening sockets of the egress proxy, the task store's forwarder there (egress.py), and reaches
  the Actor's A2A endpoint (127.0.0.1:A2A_PORT inside) from a listener of its own on the host. Under
  gVisor the sandbox uses that namespace's loopback (``--network=host`` inside the Actor's own
  namespace: gVisor's netstack would keep its own loopback, unreachable from the runtime's sockets).

Each sandbox is bounded by its `limits.Limits` (memory, CPU, processes): a control group of its own
where the machine lets the runtime make one, else resource limits of its processes (limits.py).

Both need root (mounts, namespaces) and util-linux's nsenter and setpriv (`unavailable` says why a
level cannot run on this machine).
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import fcntl
import json
import os
import shutil
import socket as sockets
import struct
import sys
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import sessionq
from sessionq.runtime.process.limits import ActorGroup, Limits

__all__ = [
    "A2A_PORT",
    "APPLICATION_NAME",
    "DATA",
    "PROXY_PORT",
    "TASKSTORE_PORT",
    "Isolation",
    "NetNamespace",
    "Sandbox",
    "actor_uid",
    "chown_tree",
    "default_isolation",
    "read_only_paths",
    "resolve_isolation",
    "unavailable",
]

APPLICATION_NAME = "sessionq process runtime, isolation"  # its server's connection, then the level
DATA = "/data"  # where the Actor's durable directory is mounted
A2A_PORT = 8080  # the Actor's private A2A endpoint, on the loopback of its network namespace
TASKSTORE_PORT = 8083  # the task store's forwarder, on that loopback
PROXY_PORT = 3128  # the egress proxy, on that loopback
UID_BASE = 200_000  # the Actors' users: UID_BASE + a number derived from the Actor's UID
UID_SPAN = 100_000
MERGED_USR = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
SYSTEM_READ_ONLY = ("/usr", "/etc/ssl", "/etc/ca-certificates", "/etc/alternatives", "/etc/localtime")

# the first process of a gVisor sandbox, run as a script (the agent kit's sources are always shown)
INIT = str(Path(sessionq.__file__).resolve().parent / "agentkit" / "init.py")
RUNSC = shutil.which("runsc")
BWRAP = shutil.which("bwrap")
NSENTER = shutil.which("nsenter")
SETPRIV = shutil.which("setpriv")
PRLIMIT = shutil.which("prlimit")

CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1


class Isolation(enum.StrEnum):
    GVISOR = "gvisor"
    NAMESPACES = "namespaces"
    NONE = "none"


# ---------------------------------------------------------------------------------- availability

_probe: dict[Isolation, str | None] = {}


def unavailable(level: Isolation) -> str | None:
    """Why `level` cannot run on this machine (None: it can). Probed once per process."""
    if level == Isolation.NONE:
        return None
    if level not in _probe:
        _probe[level] = _why_not(level)
    return _probe[level]


def _why_not(level: Isolation) -> str | None:
    if not sys.platform.startswith("linux"):
        return f"isolation {level.value} needs Linux"
    if os.geteuid() != 0:
        return f"isolation {level.value} needs the runtime to run as root (mounts and namespaces)"
    for tool, name in ((NSENTER, "nsenter"), (SETPRIV, "setpriv")):
        if tool is None:
            return f"isolation {level.value} needs util-linux's {name}"
    if level == Isolation.GVISOR and RUNSC is None:
        return "isolation gvisor needs gVisor's runsc (apt install runsc)"
    if level == Isolation.NAMESPACES and BWRAP is None:
        return "isolation namespaces needs bubblewrap (apt install bubblewrap)"
    try:
        NetNamespace.create().close()
    except OSError as exc:
        return f"isolation {level.value}: a network namespace cannot be made here ({exc.strerror or exc})"
    return None


def default_isolation() -> Isolation:
    """gvisor where runsc can run, else namespaces (`none` is never chosen for the caller)."""
    return Isolation.GVISOR if unavailable(Isolation.GVISOR) is None else Isolation.NAMESPACES


def resolve_isolation(value: str | Isolation | None) -> Isolation:
    """The level a setting names ("auto", "" or None: `default_isolation`)."""
    if value is None or value in ("", "auto"):
        return default_isolation()
    return Isolation(value)


# ---------------------------------------------------------------------------- network namespaces

_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
T = TypeVar("T")


def _in_thread(fn: Callable[[], T]) -> T:
    """Run `fn` on a thread of its own, which ends with it: namespace changes of a thread never
    reach another of the runtime's threads."""
    result: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(fn())
        except BaseException as exc:
            error.append(exc)

    thread = threading.Thread(target=run, name="sessionq-netns")
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


def _check(ret: int) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


class NetNamespace:
    """A network namespace of the runtime's making, with only its loopback up, kept alive by an
    open descriptor (`close` lets it go once no process is in it)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    @classmethod
    def create(cls) -> NetNamespace:
        def make() -> int:
            assert _libc is not None
            _check(_libc.unshare(CLONE_NEWNET))
            fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            try:
                with sockets.socket(sockets.AF_INET, sockets.SOCK_DGRAM) as s:
                    flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sH22x", b"lo", 0))[:18])
                    fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags[1] | IFF_UP))
            except BaseException:
                os.close(fd)
                raise
            return fd

        return cls(_in_thread(make))

    @property
    def path(self) -> str:
        """A path naming the namespace to other processes (nsenter --net=PATH)."""
        return f"/proc/{os.getpid()}/fd/{self.fd}"

    def socket(self) -> sockets.socket:
        """A TCP socket of this namespace (non-blocking): what it binds or connects to is there."""

        def make() -> sockets.socket:
            assert _libc is not None
            _check(_libc.setns(self.fd, CLONE_NEWNET))
            s = sockets.socket(sockets.AF_INET, sockets.SOCK_STREAM)
            s.setblocking(False)
            return s

        return _in_thread(make)

    def call_inside(self, fn: Callable[[], T]) -> T:
        """`fn()` on a thread that entered this namespace: the sockets it makes are there."""

        def run() -> T:
            assert _libc is not None
            _check(_libc.setns(self.fd, CLONE_NEWNET))
            return fn()

        return _in_thread(run)

    def listen(self, port: int) -> sockets.socket:
        """A listening socket at 127.0.0.1:`port` of this namespace."""
        s = self.socket()
        try:
            s.setsockopt(sockets.SOL_SOCKET, sockets.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen(128)
        except BaseException:
            s.close()
            raise
        return s

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


# ------------------------------------------------------------------------------------ the view


def actor_uid(uid: str) -> int:
    """The unprivileged user an Actor runs as: its own, derived from its UID (another Actor's files,
    were they visible, are not its own)."""
    try:
        number = uuid.UUID(uid).int
    except ValueError:
        number = int.from_bytes(uid.encode()[:16].ljust(16, b"\0"), "big")
    return UID_BASE + number % UID_SPAN


def chown_tree(top: Path, uid: int) -> None:
    """Give `top` and everything in it to `uid` (symbolic links themselves, never their targets)."""
    os.chown(top, uid, uid, follow_symlinks=False)
    for dirpath, dirnames, filenames in os.walk(top):
        for name in (*dirnames, *filenames):
            os.chown(os.path.join(dirpath, name), uid, uid, follow_symlinks=False)


def _inside(path: str, other: str) -> bool:
    return path == other or path.startswith(other.rstrip("/") + "/")


def read_only_paths(private: Iterable[Path], extra: Iterable[str] = ()) -> list[str]:
    """What a sandbox shows read-only at the same paths: the system's programs and libraries, this
    interpreter's prefixes, the agent kit's sources, the existing entries of sys.path, and `extra`;
    never a path inside one of `private` (the runtime's root, its configuration) nor one above it,
    which would show it."""

    hidden = [os.path.realpath(p) for p in private]
    candidates = [
        *SYSTEM_READ_ONLY,
        sys.prefix,
        sys.base_prefix,
        os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))),
        str(Path(sessionq.__file__).resolve().parent.parent),
        *(p for p in sys.path if p),
        *extra,
    ]
    chosen: list[str] = []
    for raw in candidates:
        path = os.path.realpath(raw)
        if path == "/" or not os.path.exists(path) or any(_inside(path, h) or _inside(h, path) for h in hidden):
            continue
        if any(_inside(path, c) for c in chosen):
            continue
        chosen = [c for c in chosen if not _inside(c, path)] + [path]
    # the logical (unresolved) names too, when they differ (the venv's bin/python links elsewhere)
    for raw in (sys.prefix, sys.base_prefix):
        if os.path.exists(raw) and not any(_inside(os.path.abspath(raw), c) for c in chosen):
            if not any(_inside(os.path.abspath(raw), h) or _inside(h, os.path.abspath(raw)) for h in hidden):
                chosen.append(os.path.abspath(raw))
    return sorted(chosen)


def visible(program: str, paths: Iterable[str]) -> bool:
    """Whether `program` (an absolute path) is inside one of the sandbox's read-only `paths`."""
    real = os.path.realpath(program)
    logical = os.path.abspath(program)
    merged = ["/" + m for m in MERGED_USR if os.path.islink("/" + m)]
    return any(_inside(real, p) or _inside(logical, p) for p in [*paths, *merged])


@dataclass(frozen=True)
class Sandbox:
    """How one Actor's process is wrapped: `argv` (already resolved) becomes `command` to exec."""

    level: Isolation
    uid: int
    data: Path  # the durable directory on the host, mounted at DATA
    read_only: tuple[str, ...]
    netns: str  # NetNamespace.path
    bundle: Path  # gvisor: where the OCI bundle is written
    runsc_root: Path  # gvisor: runsc's state directory
    limits: Limits = field(default_factory=Limits)
    group: ActorGroup | None = None  # its control group (None: limits by rlimits only, limits.py)

    def command(self, argv: list[str], env: Mapping[str, str]) -> list[str]:
        wrapped = self._gvisor(argv, env) if self.level == Isolation.GVISOR else self._bwrap(argv)
        # the whole sandbox (bwrap, or runsc and gVisor's own processes) in the Actor's control group
        return self.group.join(wrapped) if self.group is not None else wrapped

    def _rlimits(self) -> dict[str, int]:
        """The rlimits of the Actor's processes: its user's process count, and its address space
        when no control group bounds its memory."""
        found = {}
        if self.limits.processes:
            found["RLIMIT_NPROC"] = self.limits.processes
        if self.limits.memory and self.group is None:
            found["RLIMIT_AS"] = self.limits.memory
        return found

    def _prefix(self) -> list[str]:
        assert NSENTER is not None
        return [NSENTER, f"--net={self.netns}", "--"]

    def _bwrap(self, argv: list[str]) -> list[str]:
        assert BWRAP is not None and SETPRIV is not None
        cmd = [
            *self._prefix(),
            BWRAP,
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--hostname", "actor",
        ]
        made: set[str] = set()
        for path in self.read_only:
            # the directories above a bind, traversable by the Actor's user (bwrap makes them 0700)
            for parent in reversed(Path(path).parents[:-1] if len(Path(path).parents) > 1 else ()):
                if str(parent) not in made:
                    made.add(str(parent))
                    cmd += ["--perms", "0755", "--dir", str(parent)]
            cmd += ["--ro-bind", path, path]
        for name in MERGED_USR:
            link = "/" + name
            if os.path.islink(link):
                cmd += ["--symlink", os.readlink(link), link]
        cmd += [
            "--proc", "/proc", "--dev", "/dev",
            "--perms", "1777", "--tmpfs", "/tmp",
            "--bind", str(self.data), DATA,
            "--chdir", DATA,
        ]
        rlimits = self._rlimits()
        if PRLIMIT is not None and rlimits:
            flags = {"RLIMIT_NPROC": "--nproc", "RLIMIT_AS": "--as"}
            cmd += [PRLIMIT, *(f"{flags[k]}={v}:{v}" for k, v in rlimits.items()), "--"]
        cmd += [
            SETPRIV, f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--",
        ]
        return cmd + argv

    def _gvisor(self, argv: list[str], env: Mapping[str, str]) -> list[str]:
        assert RUNSC is not None
        rootfs = self.bundle / "rootfs"
        rootfs.mkdir(parents=True, exist_ok=True)
        for name in ("data", "tmp", "proc", "dev", "etc"):
            (rootfs / name).mkdir(exist_ok=True)
        mounts: list[dict[str, object]] = [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]},
        ]
        for name in MERGED_USR:
            link = rootfs / name
            if os.path.islink("/" + name) and not link.is_symlink():
                link.symlink_to(os.readlink("/" + name))
        for path in self.read_only:
            mounts.append({"destination": path, "type": "bind", "source": path, "options": ["rbind", "ro"]})
        mounts.append({"destination": DATA, "type": "bind", "source": str(self.data), "options": ["rbind", "rw"]})
        no_caps: list[str] = []
        spec = {
            "ociVersion": "1.0.0",
            "process": {
                "user": {"uid": self.uid, "gid": self.uid},
                # the agent kit's init first, run as a script (no package import, nothing in the
                # environment): it reaps what is orphaned inside (agentkit/init.py)
                "args": [sys.executable, "-I", "-S", INIT, *argv],
                "env": [f"{k}={v}" for k, v in env.items()],
                "cwd": DATA,
                "capabilities": {k: no_caps for k in ("bounding", "effective", "inheritable", "permitted", "ambient")},
                "noNewPrivileges": True,
                "rlimits": [
                    *({"type": k, "hard": v, "soft": v} for k, v in self._rlimits().items()),
                    {"type": "RLIMIT_NOFILE", "hard": 4096, "soft": 4096},
                ],
            },
            "root": {"path": str(rootfs), "readonly": True},
            "hostname": "actor",
            "mounts": mounts,
            "linux": {"namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount")]},
        }
        # the Actor's environment is in it: the runtime's alone, like the rest of its root
        config = self.bundle / "config.json"
        fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with open(fd, "w") as f:
            json.dump(spec, f)
        self.runsc_root.mkdir(parents=True, exist_ok=True, mode=0o700)
        container = f"sq-{uuid.uuid4().hex}"
        return [
            *self._prefix(),
            RUNSC, "--root", str(self.runsc_root), "--network=host", "--ignore-cgroups",
            "run", "--bundle", str(self.bundle), container,
        ]


def remove_bundle(bundle: Path) -> None:
    with contextlib.suppress(OSError):
        (bundle / "config.json").unlink()
