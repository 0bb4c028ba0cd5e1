"""A real PgBouncer (Debian's `pgbouncer`) in front of a test PostgreSQL, for the pooler tests.

`PgBouncer(server_url).start()` writes a configuration in a fresh directory, starts pgbouncer on a
free loopback port and waits until it answers; `url(direct_url)` is the same database through it.
Every database of the server is reachable (`* = host=... port=...`, the fallback entry), as the
server's user (auth_type=any: the client's user name is ignored, the server authenticates pgbouncer).

pgbouncer refuses to run as root: as root it runs as the owner of the server's socket directory
(the embedded PostgreSQL's system user), or as `postgres` for a TCP server, through `setpriv`, which
execs (the process we started is pgbouncer itself, so SIGTERM stops it).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

POOL_MODE = "transaction"


def available() -> str | None:
    """Why pgbouncer cannot run here, or None when it can."""
    if shutil.which("pgbouncer") is None and not Path("/usr/sbin/pgbouncer").exists():
        return "pgbouncer is not installed (Debian package `pgbouncer`; .ci/run installs it)"
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        return "pgbouncer refuses to run as root and setpriv (util-linux) is missing"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgBouncer:
    def __init__(self, server_url: str, *, pool_size: int = 20, max_client_conn: int = 1000) -> None:
        self.server = conninfo_to_dict(server_url)
        self.pool_size = pool_size
        self.max_client_conn = max_client_conn
        self.port = 0
        self.dir: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None

    def _run_as(self) -> str | None:
        """The user pgbouncer runs as (None: ourselves, not root)."""
        if os.geteuid() != 0:
            return None
        host = str(self.server.get("host") or "")
        if host.startswith("/"):
            return pwd.getpwuid(os.stat(host).st_uid).pw_name
        return "postgres"

    def _config(self) -> str:
        host = self.server.get("host") or "127.0.0.1"
        port = self.server.get("port") or 5432
        user = self.server.get("user") or "postgres"
        target = f"host={host} port={port} user={user}"
        if self.server.get("password"):
            target += f" password={self.server['password']}"
        assert self.dir is not None
        return "\n".join([
            "[databases]",
            f"* = {target}",
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {self.port}",
            "unix_socket_dir =",
            "auth_type = any",
            f"pool_mode = {POOL_MODE}",
            f"default_pool_size = {self.pool_size}",
            f"max_client_conn = {self.max_client_conn}",
            "max_db_connections = 0",
            "server_check_delay = 0",
            "server_login_retry = 1",
            "ignore_startup_parameters = extra_float_digits",
            f"logfile = {self.dir / 'pgbouncer.log'}",
            f"pidfile = {self.dir / 'pgbouncer.pid'}",
            "",
        ])

    def start(self, timeout: float = 15.0) -> PgBouncer:
        self.dir = Path(tempfile.mkdtemp(prefix="sq-pgbouncer-"))
        self.port = _free_port()
        ini = self.dir / "pgbouncer.ini"
        ini.write_text(self._config())
        user = self._run_as()
        command = [shutil.which("pgbouncer") or "/usr/sbin/pgbouncer", str(ini)]
        if user is not None:
            entry = pwd.getpwnam(user)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
            os.chown(ini, entry.pw_uid, entry.pw_gid)
            command = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--init-groups", *command]
        out = open(self.dir / "stdout.log", "wb")
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        out.close()
        deadline = time.monotonic() + timeout
        probe = self.url(make_conninfo("", **{**self.server, "dbname": self.server.get("dbname") or "postgres"}))
        while True:
            try:
                with psycopg.connect(probe, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return self
            except psycopg.OperationalError as e:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    log = self.log_tail()
                    self.stop()
                    raise RuntimeError(f"pgbouncer did not start ({e}); its log: {log}") from None
                time.sleep(0.1)

    def url(self, direct_url: str) -> str:
        """The database of `direct_url` (a URL or conninfo), through this pgbouncer."""
        params = conninfo_to_dict(direct_url)
        params.update(host="127.0.0.1", port=str(self.port))
        params.pop("password", None)
        return make_conninfo("", **params)

    def log_tail(self, chars: int = 2000) -> str:
        if self.dir is None:
            return ""
        text = ""
        for name in ("stdout.log", "pgbouncer.log"):
            with contextlib.suppress(OSError):
                text += (self.dir / name).read_text(errors="replace")
        return text[-chars:]

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(5)
        self.process = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
