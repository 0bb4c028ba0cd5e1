"""`sessionq serve` with several API processes: N processes on one port, supervised.

One API process is one Python interpreter: it can use one core. With `server.processes` N > 1
(`sessionq serve --processes N`; 0, the default, is one per CPU), `serve` becomes a small
supervisor that starts N API processes (`sessionq serve --api-index I`, the same configuration).
Each listens on server.address with SO_REUSEPORT, so the kernel spreads new connections over
them, and each has its own connection pool and its own LISTEN connection: the connection budget
is N x (database.poolSize + 1). The supervisor itself opens no database connection; it keeps the
gRPC port bound (SO_REUSEPORT, not listening) so that no other program takes it while an API
process restarts.

- Process 0 starts alone, the others once it serves: a failure every process would meet is told
  once.
- A process that exits while the supervisor runs is restarted (after RESTART_DELAYS: 0.5 s, then
  longer while it keeps failing; a process that ran STABLE_AFTER seconds starts the count again).
  When process 0 fails at its first start before it served (an address in use, a configuration the
  process refuses: each process writes a file in the supervisor's directory once it serves), that
  ends the supervisor with its status instead: restarting cannot help. The others start on a
  configuration that worked; one of them failing at its start (the database gone for a moment) is
  restarted like any other. A signal that arrives while the supervisor stops on its own is the first
  signal (a graceful stop), not a second one.
- SIGTERM or SIGINT is passed on to every API process: the first makes each stop gracefully (calls
  in flight get their grace, as with one process); a second one forces them, as it does for one
  process. The supervisor exits once all have ended, with status 0 when each ended with 0, else
  the highest status. Should one not end within its own forced-stop budget, it is killed (status 1).
- The metrics (metrics.enabled) of process I are served on the metrics port + I; the web console
  (server.consoleAddress) by process 0 only; the public port (server.address: gRPC, the A2A HTTP
  bindings, health) by every process, with SO_REUSEPORT.
- An API process whose supervisor disappears (killed with SIGKILL) stops gracefully by itself.
  The API processes stay in the supervisor's process group (a kill of the group reaches them) and
  ignore SIGINT, which a terminal's Ctrl-C sends to the whole group: the supervisor passes it on.
- SO_REUSEPORT lets another program of the same user that sets it too (another multi-process
  `serve`, say) share the port; the kernel refuses it to other users and to programs that do not
  set it (the supervisor then fails at start with `cannot listen on ...`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sessionq.app.runtimes import withheld_environment
from sessionq.app.shutdown import FORCE_AFTER, FORCE_BUDGET
from sessionq.app.startup import check_tls_files, listen_error
from sessionq.config import Settings
from sessionq.db.reachable import check_async

log = logging.getLogger("sessionq")

RESTART_DELAYS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)  # seconds before restart n (the last one repeats)
STABLE_AFTER = 30.0  # a process that ran this long restarts after the first delay again
KILL_MARGIN = 10.0  # seconds past a process's own stop budget before it is killed


def process_count(settings: Settings) -> int:
    """How many API processes `serve` runs: server.processes, 0 meaning one per CPU."""
    return settings.server.processes or os.cpu_count() or 1


def up_process_count(settings: Settings) -> int:
    """How many API processes `sessionq up` runs: one unless server.processes says more (its
    default, 0, is one per CPU for `serve` only: a local `up` keeps one API process)."""
    return max(settings.server.processes, 1)


def beside_up(count: int, config_file: str | None) -> Callable[[Settings, dict[str, str]], Supervisor]:
    """What `sessionq up` runs beside its own API process: API processes 1..count-1."""

    def make(settings: Settings, env: dict[str, str]) -> Supervisor:
        return Supervisor(settings, count, config_file, first=1, env=env)

    return make


@dataclass
class ApiProcess:
    index: int
    proc: asyncio.subprocess.Process | None = None
    started: float = 0.0
    starts: int = 0
    failures: int = 0  # consecutive short runs
    exits: list[int] = field(default_factory=list)


def reserve_port(address: str) -> tuple[socket.socket, str]:
    """Bind the gRPC address with SO_REUSEPORT (not listening): an address in use by a program
    that did not set SO_REUSEPORT fails here, in one line; port 0 becomes a concrete port that
    every API process then shares. Returns the socket (kept open) and the concrete address."""
    host, _, port = address.rpartition(":")
    bare = host.strip("[]")
    family = socket.AF_INET6 if ":" in bare else socket.AF_INET
    infos = socket.getaddrinfo(bare or None, int(port), family if bare else socket.AF_UNSPEC, socket.SOCK_STREAM,
                               flags=socket.AI_PASSIVE)
    fam, kind, proto, _, sockaddr = infos[0]
    sock = socket.socket(fam, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(sockaddr)
    except OSError:
        sock.close()
        raise
    actual = sock.getsockname()[1]
    return sock, f"{host}:{actual}"


class Supervisor:
    """`count` API processes; `first` > 0 when the caller is API process 0 itself (`sessionq up`:
    its own process serves beside the others, `run_beside`). `env` is added to each process's
    environment (the settings the caller computed, as SESSIONQ_* variables)."""

    def __init__(self, settings: Settings, count: int, config_file: str | None, *, first: int = 0,
                 env: dict[str, str] | None = None) -> None:
        self.settings = settings
        self.count = count
        self.config_file = config_file
        self.address = settings.server.address
        self.extra_env = dict(env or {})
        self.children = [ApiProcess(i) for i in range(first, count)]
        self.stopping = asyncio.Event()
        self.signals = 0
        self.failed_at_start: int | None = None  # the exit status of a process that could not start
        self._changed = asyncio.Event()
        self.ready_dir = Path(tempfile.mkdtemp(prefix="sessionq-serve-"))

    def ready_file(self, child: ApiProcess) -> Path:
        """Written by the process once it serves (`serve --ready-file`)."""
        return self.ready_dir / f"ready-{child.index}-{child.starts}"

    def command(self, child: ApiProcess) -> list[str]:
        args = [sys.executable, "-m", "sessionq.cli.main", "serve", "--api-index", str(child.index),
                "--ready-file", str(self.ready_file(child))]
        if self.config_file:
            args += ["--config", self.config_file]
        return args

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(withheld_environment())  # what a process running the process runtime took from its own
        env.update(self.extra_env)
        env["SESSIONQ_SERVER__ADDRESS"] = self.address  # a concrete port when the configured one is 0
        return env

    async def start(self, child: ApiProcess) -> None:
        # in the supervisor's process group (a kill of the group reaches it); it ignores SIGINT, which
        # a Ctrl-C in a terminal sends to the whole group: the supervisor passes it on once, as SIGTERM
        child.starts += 1
        child.proc = await asyncio.create_subprocess_exec(
            *self.command(child), env=self.env(), stdin=asyncio.subprocess.DEVNULL
        )
        child.started = time.monotonic()
        log.info("API process %d started (pid %d)", child.index, child.proc.pid)

    def signalled(self, sig: int) -> None:
        self.signals += 1
        name = signal.Signals(sig).name
        if self.signals == 1:
            log.warning("%s: stopping the %d API processes gracefully", name, self.count)
            if self.stopping.is_set():
                return  # the supervisor stops them already (a process failed at its start): not a second signal
        self.stopping.set()
        self._forward(signal.SIGTERM)
        self._changed.set()

    def _forward(self, sig: int) -> None:
        for child in self.children:
            if child.proc is not None and child.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    child.proc.send_signal(sig)

    def _stop_budget(self) -> float:
        # what one API process may take to stop: its graceful stop, then its forced stop
        return self.settings.workers.shutdown_timeout + FORCE_AFTER + FORCE_BUDGET + KILL_MARGIN

    async def _watch(self, child: ApiProcess) -> None:
        assert child.proc is not None
        code = await child.proc.wait()
        child.exits.append(code)
        ran = time.monotonic() - child.started
        if self.stopping.is_set():
            self._changed.set()
            return
        if child.index == 0 and child.starts == 1 and not self.ready_file(child).exists():
            # the first process starts alone: what stopped it would stop every process (a refused value, a
            # port taken). Another one that fails at its start (the database gone for a moment) is
            # restarted like any process that exits
            log.error("API process %d exited with status %d before it served; stopping", child.index, code)
            self.failed_at_start = code or 1
            self.stopping.set()
            self._forward(signal.SIGTERM)
            self._changed.set()
            return
        child.failures = 0 if ran >= STABLE_AFTER else child.failures + 1
        delay = RESTART_DELAYS[min(max(child.failures - 1, 0), len(RESTART_DELAYS) - 1)]
        log.warning("API process %d (pid %d) exited with status %d after %.1fs; restarting it in %gs",
                    child.index, child.proc.pid, code, ran, delay)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), delay)
        if not self.stopping.is_set():
            await self.start(child)
            asyncio.get_running_loop().create_task(self._watch(child))
        self._changed.set()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.signalled, sig)
        log.warning("serving the gRPC API on %s with %d processes (SO_REUSEPORT); database connections: "
                    "up to %d (%d x database.poolSize %d + 1 LISTEN each)", self.address, self.count,
                    self.count * (self.settings.database.pool_size + 1), self.count,
                    self.settings.database.pool_size)
        watchers = []
        for child in self.children:
            if self.stopping.is_set():
                break
            await self.start(child)
            watchers.append(loop.create_task(self._watch(child)))
            if child.index == 0:
                # the first alone until it serves: a failure every process would meet (a port taken, a
                # refused value) is then told once, and the others start on a configuration that works
                while not self.ready_file(child).exists() and not self.stopping.is_set():
                    self._changed.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._changed.wait(), 0.1)
        await self.stopping.wait()
        return await self._wait_all(watchers)

    async def run_beside(self, stop: asyncio.Event) -> int:
        """Run the API processes `first`..count-1 beside the caller's own (process 0, already
        serving) until `stop` is set, then stop them gracefully (SIGTERM) and wait for all; the
        exit status as `run`'s. The caller handles the signals; `kill` is its forced stop."""
        loop = asyncio.get_running_loop()
        watchers = []
        for child in self.children:
            await self.start(child)
            watchers.append(loop.create_task(self._watch(child)))
        await stop.wait()
        self.stopping.set()
        self._forward(signal.SIGTERM)
        self._changed.set()
        return await self._wait_all(watchers)

    def kill(self) -> None:
        """Kill every API process at once (a forced stop of the caller: it must not wait)."""
        self.stopping.set()
        self._forward(signal.SIGKILL)

    async def _wait_all(self, watchers: list[asyncio.Task[None]]) -> int:
        deadline = time.monotonic() + self._stop_budget()
        while any(c.proc is not None and c.proc.returncode is None for c in self.children):
            self._changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                for c in self.children:
                    if c.proc is not None and c.proc.returncode is None:
                        log.error("API process %d (pid %d) did not stop; killing it", c.index, c.proc.pid)
                        with contextlib.suppress(ProcessLookupError):
                            c.proc.kill()
                        await c.proc.wait()
                        c.exits.append(1)
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.5))
        for w in watchers:
            w.cancel()
        shutil.rmtree(self.ready_dir, ignore_errors=True)
        if self.failed_at_start is not None:
            return self.failed_at_start or 1
        # a process still starting when the stop came ends by the SIGTERM itself (its handlers were not
        # installed yet): it never served, so that is a clean stop too
        finals = [0 if code == -signal.SIGTERM else code for code in (c.exits[-1] for c in self.children if c.exits)]
        worst = max((abs(code) for code in finals), default=0)
        return 0 if worst == 0 else max(1, worst)


async def supervise(settings: Settings, count: int, config_file: str | None) -> int:
    """Run `count` API processes until SIGTERM/SIGINT; the exit status (see the module docstring).
    StartupError when the gRPC address cannot be bound, DatabaseUnreachable (one line) when the
    database does not answer: each API process would fail the same way."""
    if not settings.database.url:
        raise SystemExit("database.url is required (set it in the config file or SESSIONQ_DATABASE__URL)")
    check_tls_files(settings)
    await check_async(settings.database.url)
    try:
        reserved, address = reserve_port(settings.server.address)
    except OSError as e:
        raise listen_error("the API", "server.address", settings.server.address, e) from None
    try:
        supervisor = Supervisor(settings.with_overrides(**{"server.address": address}), count, config_file)
        return await supervisor.run()
    finally:
        reserved.close()
