"""A pg_auto_failover formation on loopback, for the failover harness (`python -m tests.soak --failover`).

A monitor and two PostgreSQL 15 nodes (Debian's `postgresql-15-auto-failover` and
`pg-auto-failover-cli`), each node run by its own `pg_autoctl run` keeper in its own process
session: one primary and one synchronous standby (pg_auto_failover sets `synchronous_standby_names`
to the standby once it is caught up). sessionq connects with a multi-host URL and
`target_session_attrs=read-write`, so every new connection finds the current primary.

`Formation` has the interface of the soak's `Database` (start, url, restart, version,
install_audit, save_log, stop), so the soak harness runs unchanged on it; its `restart` is a
failover: the primary node dies (SIGKILL of its postmaster, then of its keeper's whole process
group, as if its machine died), the monitor promotes the standby, the time the new primary first
accepts a read-write connection is "up", and `pause` seconds later the old node's keeper is started
again and rejoins as the standby (pg_rewind). The next `restart` first waits for a caught-up
standby, so the second failover goes back to the first node.

The timeouts are shortened for a test run, in the safe order: a primary cut off from the monitor
and its standby demotes itself after `timeout.network_partition_timeout` (3 s), before the monitor
promotes the standby (`pgautofailover.primary_demote_timeout` 5 s after it declared the primary
unhealthy: health checks every second, unhealthy after 3 s).

pg_autoctl refuses to run as root: as root every command runs as `postgres` (setpriv), with its
data directories, its configuration and run files (XDG_*) in one directory that user owns.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

PG_BIN = Path("/usr/lib/postgresql/15/bin")
EXTENSION = Path("/usr/lib/postgresql/15/lib/pgautofailover.so")
DATABASE = "sessionq"
MONITOR_SETTINGS = {  # the monitor's failure detection, shortened for a test run
    "pgautofailover.health_check_period": 1000,
    "pgautofailover.health_check_timeout": 1000,
    "pgautofailover.health_check_max_retries": 1,
    "pgautofailover.health_check_retry_delay": 500,
    "pgautofailover.node_considered_unhealthy_timeout": 3000,
    "pgautofailover.primary_demote_timeout": 5000,
}
KEEPER_SETTINGS = {"timeout.network_partition_timeout": "3"}  # < primary_demote_timeout: demote before promote
RUN_AS = "postgres"


def available() -> str | None:
    """Why a formation cannot be built here, or None."""
    if shutil.which("pg_autoctl") is None:
        return "pg_autoctl is not installed (Debian packages pg-auto-failover-cli, postgresql-15-auto-failover)"
    if not EXTENSION.exists() or not (PG_BIN / "pg_ctl").exists():
        return "PostgreSQL 15 with pg_auto_failover is not installed (postgresql-15-auto-failover)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(RUN_AS)
        except KeyError:
            return f"pg_autoctl refuses to run as root and there is no {RUN_AS!r} user"
        if shutil.which("setpriv") is None:
            return "pg_autoctl refuses to run as root and setpriv (util-linux) is missing"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Node:
    name: str
    port: int
    pgdata: Path
    log: Path
    keeper: subprocess.Popen[bytes] | None = None

    def alive(self) -> bool:
        return self.keeper is not None and self.keeper.poll() is None


class Formation:
    kind = "pg_auto_failover (monitor + primary + synchronous standby)"

    def __init__(self, work: Path | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="sqpaf-"))  # short: unix socket paths
        self.work = work
        self.monitor_port = _free_port()
        self.nodes = [Node(f"node{i}", _free_port(), self.dir / f"node{i}", self.dir / f"node{i}.log") for i in (1, 2)]
        self.monitor: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.admin_monitor = f"postgresql://postgres@127.0.0.1:{self.monitor_port}/pg_auto_failover"
        self.failovers: list[dict[str, Any]] = []
        self._rejoins: list[subprocess.Popen[bytes]] = []

    restartable = True

    # -- running pg_autoctl as its user --------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "XDG_", "SESSIONQ_"))}
        env.update(HOME=str(self.dir), XDG_CONFIG_HOME=str(self.dir / "xdg" / "config"),
                   XDG_DATA_HOME=str(self.dir / "xdg" / "data"), XDG_RUNTIME_DIR=str(self.dir / "xdg" / "run"),
                   PG_CONFIG=str(PG_BIN / "pg_config"), PATH=f"{PG_BIN}:{env.get('PATH', '/usr/bin:/bin')}")
        return env

    def _command(self, *args: str) -> list[str]:
        command = [shutil.which("pg_autoctl") or "pg_autoctl", *args]
        if os.geteuid() == 0:
            entry = pwd.getpwnam(RUN_AS)
            command = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--init-groups", *command]
        return command

    def _run(self, *args: str, timeout: float = 120) -> str:
        r = subprocess.run(self._command(*args), env=self._env(), cwd=self.dir, capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL, check=False)
        if r.returncode != 0:
            raise RuntimeError(f"pg_autoctl {' '.join(args[:2])} exited {r.returncode}: {(r.stderr or r.stdout)[-1500:]}")
        return r.stdout

    def _spawn(self, log: Path, *args: str) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            return subprocess.Popen(self._command(*args), env=self._env(), cwd=self.dir, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    # -- building it --------------------------------------------------------------------------------

    def start(self) -> None:
        for sub in ("xdg/config", "xdg/data", "xdg/run"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            entry = pwd.getpwnam(RUN_AS)
            for root, dirs, files in os.walk(self.dir):
                for name in [*dirs, *files, "."]:
                    os.chown(os.path.join(root, name), entry.pw_uid, entry.pw_gid)
        os.chmod(self.dir, 0o755)
        common = ["--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl", "--pgctl", str(PG_BIN / "pg_ctl")]
        self._run("create", "monitor", "--pgdata", str(self.dir / "monitor"), "--pgport", str(self.monitor_port),
                  *common, timeout=180)
        self._run("config", "set", "--pgdata", str(self.dir / "monitor"), "postgresql.listen_addresses", "127.0.0.1")
        self.monitor = self._spawn(self.dir / "monitor.log", "run", "--pgdata", str(self.dir / "monitor"))
        self._wait(lambda: self._monitor_sql("SELECT 1") is not None, 60, "the monitor to accept connections")
        settings = [f"ALTER SYSTEM SET {k} = {v}" for k, v in MONITOR_SETTINGS.items()]
        self._monitor_sql(*settings, "SELECT pg_reload_conf()")
        monitor_uri = f"postgres://autoctl_node@127.0.0.1:{self.monitor_port}/pg_auto_failover?sslmode=disable"
        self.url = ("postgresql://postgres@" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)
                    + f"/{DATABASE}?target_session_attrs=read-write")
        for i, node in enumerate(self.nodes):
            node.keeper = self._spawn(
                node.log, "create", "postgres", "--pgdata", str(node.pgdata), "--pgport", str(node.port),
                "--listen", "127.0.0.1", "--name", node.name, "--dbname", DATABASE, "--monitor", monitor_uri,
                *common, "--run")
            want = ("single", "primary", "wait_primary") if i == 0 else ("secondary",)
            self._wait(lambda n=node, w=want: self._state(n.name) in w, 240, f"{node.name} to become {want[0]}",
                       hurry=i > 0)
        for node in self.nodes:
            for key, value in KEEPER_SETTINGS.items():
                self._run("config", "set", "--pgdata", str(node.pgdata), key, value)
            if node.alive():
                assert node.keeper is not None
                with contextlib.suppress(ProcessLookupError):
                    os.kill(node.keeper.pid, signal.SIGHUP)  # pg_autoctl reloads its configuration
        self._wait(self._synchronous, 60, "synchronous replication to the standby")

    def _monitor_sql(self, *statements: str) -> list[Any] | None:
        try:
            with psycopg.connect(self.admin_monitor, autocommit=True, connect_timeout=3) as conn:
                rows: list[Any] = []
                for statement in statements:
                    cur = conn.execute(statement)  # type: ignore[arg-type]
                    rows = cur.fetchall() if cur.description else []
                return rows
        except psycopg.Error:
            return None

    def states(self) -> dict[str, tuple[str, str]]:
        """node name -> (reported state, goal state), as the monitor sees them."""
        rows = self._monitor_sql("SELECT nodename, reportedstate::text, goalstate::text FROM pgautofailover.node")
        return {r[0]: (r[1], r[2]) for r in rows or []}

    def _state(self, name: str) -> str | None:
        return self.states().get(name, (None, None))[0]

    def primary(self) -> Node | None:
        states = self.states()
        for node in self.nodes:
            if states.get(node.name, ("", ""))[0] in ("primary", "wait_primary") and \
                    states[node.name][1] in ("primary", "wait_primary"):
                return node
        return None

    def _synchronous(self) -> bool:
        with contextlib.suppress(psycopg.Error), psycopg.connect(self.url, autocommit=True, connect_timeout=3) as conn:
            row = conn.execute("SHOW synchronous_standby_names").fetchone()
            return bool(row and row[0])
        return False

    def _checkpoint_primary(self) -> None:
        """pg_basebackup of a joining standby waits for a checkpoint; an immediate one saves minutes."""
        with contextlib.suppress(psycopg.Error), psycopg.connect(self.url, autocommit=True, connect_timeout=2) as conn:
            conn.execute("CHECKPOINT")

    def _wait(self, ready: Any, timeout: float, what: str, hurry: bool = False) -> None:
        deadline = time.monotonic() + timeout
        last_hurry = 0.0
        while not ready():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}; states: {self.states()}")
            if hurry and time.monotonic() - last_hurry > 3.0:
                self._checkpoint_primary()
                last_hurry = time.monotonic()
            time.sleep(0.25)

    # -- the Database interface ---------------------------------------------------------------------

    def version(self) -> str:
        try:
            with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as conn:
                row = conn.execute("SHOW server_version").fetchone()
            return str(row[0]) if row else "?"
        except psycopg.Error:
            return "?"

    def install_audit(self) -> None:
        from .cluster import AUDIT_SQL

        with psycopg.connect(self.url, autocommit=True, connect_timeout=10) as conn:
            conn.execute(AUDIT_SQL)  # type: ignore[arg-type]

    def restart(self, pause: float) -> tuple[float, float, str]:
        """A failover: wait for a caught-up synchronous standby, kill the primary node, wait until the
        standby is promoted and accepts a read-write connection; `pause` s later restart the old
        node, which rejoins as the standby. Returns (kill time, promoted time, what happened)."""
        self._wait(lambda: self.primary() is not None and any(s[0] == "secondary" for s in self.states().values()),
                   180, "a primary and a caught-up standby", hurry=True)
        self._wait(self._synchronous, 60, "synchronous replication")
        old = self.primary()
        assert old is not None
        new = next(n for n in self.nodes if n is not old)
        postmaster = int((old.pgdata / "postmaster.pid").read_text().split()[0])
        down = time.time()
        with contextlib.suppress(ProcessLookupError):
            os.kill(postmaster, signal.SIGKILL)
        if old.keeper is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(old.keeper.pid, signal.SIGKILL)  # the keeper and all it runs: the node is gone
            with contextlib.suppress(subprocess.TimeoutExpired):
                old.keeper.wait(10)
        direct = f"postgresql://postgres@127.0.0.1:{new.port}/{DATABASE}"
        while True:
            with contextlib.suppress(psycopg.Error), psycopg.connect(direct, autocommit=True, connect_timeout=2) as conn:
                row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
                if row is not None and row[0] is False:
                    break
            if time.time() - down > 120:
                raise RuntimeError(f"{new.name} was not promoted within 120 s; states: {self.states()}")
            time.sleep(0.1)
        up = time.time()
        self.failovers.append({"killed": old.name, "promoted": new.name, "down": down, "up": up})
        time.sleep(pause)
        self._rejoin(old)
        return down, up, (f"failover: SIGKILL of {old.name}'s postmaster and keeper, {new.name} promoted after"
                          f" {up - down:.1f}s; {old.name} restarted {pause:.1f}s later to rejoin as the standby")

    def _rejoin(self, node: Node) -> None:
        run = self.dir / "xdg" / "run" / "pg_autoctl"
        for pidfile in run.rglob("pg_autoctl.pid") if run.exists() else []:
            if node.pgdata.name in str(pidfile.parent):
                pidfile.unlink(missing_ok=True)  # the killed keeper's
        node.keeper = self._spawn(node.log, "run", "--pgdata", str(node.pgdata))

    def save_log(self, dest: Path) -> None:
        with contextlib.suppress(OSError), open(dest, "w", encoding="utf-8") as out:
            for name in ("monitor.log", "node1.log", "node2.log"):
                path = self.dir / name
                if path.exists():
                    out.write(f"==== {name} ====\n{path.read_text(errors='replace')}\n")
            for node in self.nodes:
                for log in sorted((node.pgdata / "log").glob("*.log")) if (node.pgdata / "log").exists() else []:
                    out.write(f"==== {node.name} {log.name} ====\n{log.read_text(errors='replace')[-200_000:]}\n")
            out.write("==== failovers ====\n" + json.dumps(self.failovers) + "\n")

    def stop(self) -> None:
        keepers = [n.keeper for n in self.nodes if n.keeper is not None] + ([self.monitor] if self.monitor else [])
        for p in keepers:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGTERM)  # pg_autoctl stops its Postgres (fast) and exits
        deadline = time.monotonic() + 30
        for p in keepers:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(5)
        for node in [*self.nodes, Node("monitor", 0, self.dir / "monitor", self.dir / "monitor.log")]:
            pidfile = node.pgdata / "postmaster.pid"
            with contextlib.suppress(OSError, ValueError, ProcessLookupError):
                os.kill(int(pidfile.read_text().split()[0]), signal.SIGKILL)  # a postmaster left behind
        for n in self.nodes:
            n.keeper = None
        self.monitor = None
        shutil.rmtree(self.dir, ignore_errors=True)
